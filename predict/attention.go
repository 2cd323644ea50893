package predict

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// SetupError is a request whose setup cannot apply to its model or its GPU
// (an attention kernel for a model without attention, flash attention on a
// GPU or in a dtype PyTorch refuses it): bad input, not a failure of the
// prediction.
type SetupError struct{ Err error }

func (e SetupError) Error() string { return e.Err.Error() }
func (e SetupError) Unwrap() error { return e.Err }

// IsSetupError reports whether err is, or wraps, a SetupError.
func IsSetupError(err error) bool {
	var s SetupError
	return errors.As(err, &s)
}

// attentionDType is the dtype scaled_dot_product_attention computes in
// under the setup: autocast's lower-precision dtype under a mixed
// precision (scaled_dot_product_attention is on CUDA autocast's
// lower_precision_fp list, autocast_mode.cpp), else the parameters'.
func attentionDType(s train.Setup) graph.DType {
	if dt, ok := s.Precision.Autocast(); ok {
		return dt
	}
	return s.Precision.ParamDType()
}

// headDims are the head dimensions of g's attention ops (q is [B, H, L,
// D]).
func headDims(g *graph.Graph) []int64 {
	var out []int64
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Kind != graph.Attention || len(op.Inputs) == 0 {
			continue
		}
		if sh := g.Tensors[op.Inputs[0]].Shape; len(sh) == 4 && !slices.Contains(out, sh[3]) {
			out = append(out, sh[3])
		}
	}
	return out
}

// checkAttention refuses a kernel named for a model or GPU it cannot run
// on, by the constraints of PyTorch's SDPA dispatcher on CUDA
// (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp): where
// sdpa_kernel() allows only a kernel whose checks fail, PyTorch raises "No
// available kernel" rather than falling back, so the job would not run.
func checkAttention(r Request, s train.Setup, g *graph.Graph) error {
	k := s.Attention
	if k == train.AttentionAuto || k == "" || s.CPU {
		return nil
	}
	dims := headDims(g)
	if len(dims) == 0 {
		// an ONNX file's attention, or a captured model's written out by
		// hand, is its own matmuls and softmax: no kernel to choose
		return SetupError{fmt.Errorf("the attention kernel %s applies to scaled_dot_product_attention, and %s has none (a model without attention, or one whose attention is its own matmuls and softmax)", k, r.Source.Name())}
	}
	major, minor := r.GPU.Major, r.GPU.Minor
	dt := attentionDType(s)
	switch k {
	case train.AttentionFlash:
		// check_flash_attention_hardware_support: sm80 and above
		if major > 0 && major < 8 {
			return SetupError{fmt.Errorf("flash attention needs compute capability 8.0 or higher (PyTorch's sdp_utils check_flash_attention_hardware_support), and %s has %d.%d: use efficient or math", r.GPU.Name, major, minor)}
		}
		// check_tensor_dtype: flash takes float16 and bfloat16 only
		if dt != graph.F16 && dt != graph.BF16 {
			return SetupError{fmt.Errorf("flash attention takes float16 or bfloat16 inputs only (PyTorch's sdp_utils check_tensor_dtype), and %s computes attention in %s: use a 16-bit precision, or efficient or math", s.Precision, dt)}
		}
		// check_head_dim_size_flash: a multiple of 8, at most 256
		for _, d := range dims {
			if d%8 != 0 || d > 256 {
				return SetupError{fmt.Errorf("flash attention needs a head dimension that is a multiple of 8 and at most 256 (PyTorch's sdp_utils check_head_dim_size_flash), and %s's is %d", r.Source.Name(), d)}
			}
		}
	case train.AttentionCudnn:
		// can_use_cudnn_attention: check_cudnn_hardware_support (sm80 to
		// sm121), check_dtypes_low_precision, check_cudnn_tensor_shapes
		// (head dims multiples of 8, at most 128; 192 with a value head
		// of 128 on sm90 and sm100)
		if major > 0 && major < 8 {
			return SetupError{fmt.Errorf("cuDNN attention needs compute capability 8.0 or higher (PyTorch's sdp_utils check_cudnn_hardware_support), and %s has %d.%d: use efficient or math", r.GPU.Name, major, minor)}
		}
		if dt != graph.F16 && dt != graph.BF16 {
			return SetupError{fmt.Errorf("cuDNN attention takes float16 or bfloat16 inputs only (PyTorch's sdp_utils check_dtypes_low_precision), and %s computes attention in %s: use a 16-bit precision, or efficient or math", s.Precision, dt)}
		}
		for _, d := range dims {
			if d%8 != 0 || (d > 128 && !(d == 192 && (major == 9 || major == 10))) {
				return SetupError{fmt.Errorf("cuDNN attention needs a head dimension that is a multiple of 8 and at most 128 (PyTorch's sdp_utils check_cudnn_tensor_shapes), and %s's is %d", r.Source.Name(), d)}
			}
		}
	case train.AttentionEfficient:
		// can_use_mem_efficient_attention: bfloat16 only from sm80
		// (less_than_sm80_mem_efficient_dtypes is float16 and float32)
		if dt == graph.BF16 && major > 0 && major < 8 {
			return SetupError{fmt.Errorf("the memory-efficient attention kernel takes bfloat16 only from compute capability 8.0 (PyTorch's sdp_utils less_than_sm80_mem_efficient_dtypes), and %s has %d.%d: use math, or 16-mixed", r.GPU.Name, major, minor)}
		}
	}
	return checkGrouped(r, k, g)
}

// checkGrouped refuses a fused kernel named for grouped-query attention
// (key and value with fewer heads than the query) that the kernel cannot
// take. check_batch_size_and_num_heads_dense<supports_gqa>
// (aten/src/ATen/native/transformers/sdp_utils_cpp.h) accepts differing
// head counts only when the call passes enable_gqa and the kernel's
// constraints instantiate it with supports_gqa = true: flash and cuDNN
// attention do (can_use_flash_attention, can_use_cudnn_attention in
// cuda/sdp_utils.cpp), the memory-efficient kernel does not
// (can_use_mem_efficient_attention's dense_constraints:
// check_batch_size_and_num_heads_dense<false>), whatever enable_gqa says.
// With sdpa_kernel() allowing only the refused kernel, select_sdp_backend
// raises "No available kernel. Aborting execution." (measured on an H200
// under PyTorch 2.11 with transformers 5.17, which pass enable_gqa:
// testdata/measured/h200-torch2.11-gqa.json). The math kernel runs any
// grouped call (under enable_gqa it repeats key and value itself).
func checkGrouped(r Request, k train.Attention, g *graph.Graph) error {
	if k != train.AttentionEfficient && k != train.AttentionFlash && k != train.AttentionCudnn {
		return nil
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Kind != graph.Attention || len(op.Inputs) < 3 {
			continue
		}
		qs, ks := g.Tensors[op.Inputs[0]].Shape, g.Tensors[op.Inputs[1]].Shape
		if len(qs) != 4 || len(ks) != 4 || qs[1] == ks[1] {
			continue
		}
		if k == train.AttentionEfficient {
			how, use := "without enable_gqa", "math"
			if op.Attr.GQA {
				how, use = "with enable_gqa=True, which it does not support", "flash, cudnn or math"
			}
			return SetupError{fmt.Errorf("the memory-efficient attention kernel refuses key and value with fewer heads than the query (PyTorch's sdp_utils check_batch_size_and_num_heads_dense<false> in can_use_mem_efficient_attention), and %s's attention has %d query heads and %d key/value heads, called %s: PyTorch raises \"No available kernel\"; use %s", r.Source.Name(), qs[1], ks[1], how, use)}
		}
		if !op.Attr.GQA {
			return SetupError{fmt.Errorf("%s attention takes key and value with fewer heads than the query only under enable_gqa=True (PyTorch's sdp_utils check_batch_size_and_num_heads_dense), and %s's attention has %d query heads and %d key/value heads without it: PyTorch raises \"No available kernel\"; use math", k, r.Source.Name(), qs[1], ks[1])}
		}
	}
	return nil
}

// attentionNote names the kernel PyTorch's dispatcher picks for --attention
// auto, from what the simulation ran (train.OpRun.Kernel), and why not the
// ones before it in sdp_utils.cpp's priority order (flash, then
// memory-efficient, then math).
func attentionNote(res *Result, g *graph.Graph) (Note, bool) {
	s := res.Setup
	if s.Attention != train.AttentionAuto || g == nil {
		return Note{}, false
	}
	var kernels []train.Attention
	var dt graph.DType
	for i := range g.Ops {
		if g.Ops[i].Kind != graph.Attention || i >= len(res.Summary.Ops) {
			continue
		}
		run := res.Summary.Ops[i]
		if !slices.Contains(kernels, run.Kernel) {
			kernels = append(kernels, run.Kernel)
		}
		dt = run.In
	}
	if len(kernels) == 0 {
		return Note{}, false
	}
	var names []string
	for _, k := range kernels {
		if k == train.AttentionCudnn {
			names = append(names, "cuDNN attention")
			continue
		}
		names = append(names, string(k))
	}
	text := fmt.Sprintf("attention: PyTorch's scaled_dot_product_attention picks the %s kernel here", strings.Join(names, " and "))
	cudnnFirst := train.CudnnAttentionFirst(s.Profile, res.GPU.Major)
	switch {
	case len(kernels) == 1 && kernels[0] == train.AttentionEager:
		text = fmt.Sprintf("attention: under PyTorch %s's rules nn.MultiheadAttention and Hugging Face's default attention are explicit matmul and softmax ops (eager), not scaled_dot_product_attention", s.Profile.Version)
	case len(kernels) == 1 && kernels[0] == train.AttentionFlash && cudnnFirst:
		for _, d := range headDims(g) {
			if d%8 != 0 || d > 128 {
				text += fmt.Sprintf(" (cuDNN attention takes head dimensions that are multiples of 8 up to 128, and this one is %d)", d)
				break
			}
		}
	case len(kernels) == 1 && kernels[0] != train.AttentionFlash && kernels[0] != train.AttentionCudnn:
		var why []string
		if dt != graph.F16 && dt != graph.BF16 {
			who := "flash takes"
			if cudnnFirst {
				who = "cuDNN attention and flash take"
			}
			why = append(why, fmt.Sprintf("%s float16 and bfloat16 only, and the attention runs in %s", who, dt))
		}
		if res.GPU.Major > 0 && res.GPU.Major < 8 {
			why = append(why, fmt.Sprintf("flash needs compute capability 8.0, %s has %d.%d", res.GPU.Name, res.GPU.Major, res.GPU.Minor))
		}
		if kernels[0] == train.AttentionMath && dt == graph.BF16 && res.GPU.Major > 0 && res.GPU.Major < 8 {
			why = append(why, "the memory-efficient kernel takes bfloat16 only from 8.0")
		}
		for _, d := range headDims(g) {
			if d%8 != 0 || d > 256 {
				why = append(why, fmt.Sprintf("head dimension %d is not a multiple of 8 up to 256", d))
				break
			}
		}
		if len(why) > 0 {
			text += " (" + strings.Join(why, "; ") + ")"
		}
	}
	if cudnnFirst {
		text += fmt.Sprintf("; sdp_utils.cpp tries cuDNN attention, then flash, then memory-efficient, then math (PyTorch %s puts cuDNN attention first on compute capability %d.x: priority_order); --attention names one", s.Profile.Version, res.GPU.Major)
	} else {
		text += "; sdp_utils.cpp tries flash, then memory-efficient, then math; --attention names one"
	}
	return Note{Code: "attention-kernel", Text: text}, true
}
