package predict

import (
	"context"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

func zooSource(t *testing.T, name string) Zoo {
	t.Helper()
	m, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return Zoo{M: m}
}

func catalogGPU(t *testing.T, name string) gpu.GPU {
	t.Helper()
	g, err := gpu.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func noteOf(res *Result, code string) (Note, bool) {
	for _, n := range res.Notes {
		if n.Code == code {
			return n, true
		}
	}
	return Note{}, false
}

// --attention auto names the kernel PyTorch's SDPA dispatcher picks, by
// sdp_utils.cpp's order (priority_order: cuDNN attention first on
// compute capability 9.x and 10.x under 2.11, whose wheels bundle cuDNN
// 9.19; then flash, memory-efficient, math) and its checks. gpt2's heads
// are 768/12 = 64 wide: a multiple of 8 up to 128, so the head dimension
// rules nothing out.
//   - h100 (9.0), bf16-mixed: autocast runs SDPA in bfloat16; cuDNN
//     attention takes it on sm90 (check_dtypes_low_precision), GPT-2's
//     dropout of 0.1 too: cuDNN attention.
//   - a100 (8.0), bf16-mixed: cuDNN attention is not preferred below
//     sm90 (check_prefer_cudnn_attention); flash takes it on sm80+: flash.
//   - h100 under the 2.5 profile: flash first: flash.
//   - h100, 32-true: cuDNN attention and flash take float16 and bfloat16
//     only (check_tensor_dtype); memory-efficient takes float32 with a
//     head dimension that is a multiple of 4: efficient.
//   - t4 (7.5), 16-mixed: flash needs sm80 (check_flash_attention_
//     hardware_support); memory-efficient takes float16 below sm80:
//     efficient.
//   - t4, bf16-mixed: below sm80 memory-efficient takes float16 and
//     float32 only (less_than_sm80_mem_efficient_dtypes): math.
//   - PyTorch 1.13's rules: nn.MultiheadAttention and Hugging Face's
//     default attention are explicit ops: eager.
func TestAttentionAutoNote(t *testing.T) {
	p113, err := profile.Lookup("1.13")
	if err != nil {
		t.Fatal(err)
	}
	p25, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		gpu       string
		precision train.Precision
		profile   *profile.Profile
		kernel    string
		why       string
	}{
		{"h100 bf16-mixed", "h100-80gb", train.MixedBF16, nil, "the cuDNN attention kernel", "tries cuDNN attention, then flash"},
		{"a100 bf16-mixed", "a100-80gb", train.MixedBF16, nil, "the flash kernel", "tries flash, then memory-efficient"},
		{"h100 bf16-mixed 2.5", "h100-80gb", train.MixedBF16, p25, "the flash kernel", "tries flash, then memory-efficient"},
		{"h100 32-true", "h100-80gb", train.FP32, nil, "the efficient kernel", "cuDNN attention and flash take float16 and bfloat16 only, and the attention runs in float32"},
		{"t4 16-mixed", "t4", train.Mixed16, nil, "the efficient kernel", "flash needs compute capability 8.0, t4 has 7.5"},
		{"t4 bf16-mixed", "t4", train.MixedBF16, nil, "the math kernel", "the memory-efficient kernel takes bfloat16 only from 8.0"},
		{"1.13", "h100-80gb", train.MixedBF16, p113, "(eager)", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(context.Background(), Request{Source: zooSource(t, "gpt2"), Config: models.Config{Batch: 1, Seq: 64},
				Setup: train.Setup{Precision: c.precision, Profile: c.profile, Steps: 1}, GPU: catalogGPU(t, c.gpu), Context: -1})
			if err != nil {
				t.Fatal(err)
			}
			n, ok := noteOf(res, "attention-kernel")
			if !ok {
				t.Fatalf("no attention-kernel note in %v", res.Notes)
			}
			if !strings.Contains(n.Text, c.kernel) || !strings.Contains(n.Text, c.why) {
				t.Errorf("note %q, want %q and %q", n.Text, c.kernel, c.why)
			}
		})
	}
	// a named kernel is the user's choice: no note
	res, err := Run(context.Background(), Request{Source: zooSource(t, "gpt2"), Config: models.Config{Batch: 1, Seq: 64},
		Setup: train.Setup{Precision: train.MixedBF16, Attention: train.AttentionMath, Steps: 1}, GPU: catalogGPU(t, "h100-80gb"), Context: -1})
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := noteOf(res, "attention-kernel"); ok {
		t.Errorf("--attention math: note %q", n.Text)
	}
}

// A kernel named where PyTorch would refuse it is a SetupError (the
// command line's usage error): with sdpa_kernel() allowing only that
// kernel, sdp_utils.cpp finds no kernel and the job raises.
func TestAttentionRefused(t *testing.T) {
	cases := []struct {
		name      string
		model     string
		gpu       string
		precision train.Precision
		kernel    train.Attention
		want      string // "" accepted
	}{
		{"resnet50 has no attention", "resnet50", "h100-80gb", train.MixedBF16, train.AttentionFlash, "resnet50 has none"},
		{"resnet50 math", "resnet50", "h100-80gb", train.MixedBF16, train.AttentionMath, "resnet50 has none"},
		{"flash on a t4", "gpt2", "t4", train.Mixed16, train.AttentionFlash, "compute capability 8.0 or higher"},
		{"flash on a v100", "gpt2", "v100-16gb", train.Mixed16, train.AttentionFlash, "v100-16gb has 7.0"},
		{"flash in float32", "gpt2", "h100-80gb", train.FP32, train.AttentionFlash, "computes attention in float32"},
		{"efficient bf16 on a t4", "gpt2", "t4", train.MixedBF16, train.AttentionEfficient, "bfloat16 only from compute capability 8.0"},
		{"flash bf16 on an a100", "gpt2", "a100-40gb", train.MixedBF16, train.AttentionFlash, ""},
		{"flash bf16-true on an h100", "gpt2", "h100-80gb", train.TrueBF16, train.AttentionFlash, ""},
		{"efficient float32 on a t4", "gpt2", "t4", train.FP32, train.AttentionEfficient, ""},
		{"math anywhere", "gpt2", "t4", train.FP32, train.AttentionMath, ""},
		{"cudnn on a t4", "gpt2", "t4", train.Mixed16, train.AttentionCudnn, "check_cudnn_hardware_support"},
		{"cudnn in float32", "gpt2", "h100-80gb", train.FP32, train.AttentionCudnn, "computes attention in float32"},
		{"cudnn bf16 on an a100", "gpt2", "a100-40gb", train.MixedBF16, train.AttentionCudnn, ""},
		{"cudnn bf16 on an h100", "gpt2", "h100-80gb", train.MixedBF16, train.AttentionCudnn, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Run(context.Background(), Request{Source: zooSource(t, c.model), Config: models.Config{Batch: 1, Seq: 64},
				Setup: train.Setup{Precision: c.precision, Attention: c.kernel, Steps: 1}, GPU: catalogGPU(t, c.gpu), Context: -1})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("accepted, want an error with %q", c.want)
			case !IsSetupError(err) || !strings.Contains(err.Error(), c.want):
				t.Errorf("error %q (setup error %v), want a setup error with %q", err, IsSetupError(err), c.want)
			}
		})
	}
}

// Grouped-query attention (Qwen2.5-0.5B: 14 query heads, 2 key/value
// heads) under a named kernel: transformers from 4.54 hands SDPA the
// unrepeated key and value with enable_gqa=True, which flash and cuDNN
// attention take and the memory-efficient kernel refuses
// (check_batch_size_and_num_heads_dense<false>: on the H200 under 2.11
// the pinned kernel raised "No available kernel"); before 4.54 repeat_kv
// gives SDPA as many key/value heads as query heads and every kernel runs.
func TestAttentionRefusedGrouped(t *testing.T) {
	cases := []struct {
		transformers string
		kernel       train.Attention
		want         string // "" accepted
	}{
		{"", train.AttentionEfficient, "check_batch_size_and_num_heads_dense<false>"},
		{"", train.AttentionFlash, ""},
		{"", train.AttentionCudnn, ""},
		{"", train.AttentionMath, ""},
		{"4.44.2", train.AttentionEfficient, ""},
		{"4.44.2", train.AttentionFlash, ""},
	}
	for _, c := range cases {
		t.Run(string(c.kernel)+"-"+c.transformers, func(t *testing.T) {
			_, err := Run(context.Background(), Request{Source: zooSource(t, "Qwen2.5-0.5B"),
				Config: models.Config{Batch: 1, Seq: 64, Transformers: c.transformers},
				Setup:  train.Setup{Precision: train.MixedBF16, Attention: c.kernel, Steps: 1}, GPU: catalogGPU(t, "h100-80gb"), Context: -1})
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatalf("accepted, want an error with %q", c.want)
			case !IsSetupError(err) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "14 query heads and 2 key/value heads"):
				t.Errorf("error %q (setup error %v), want a setup error with %q", err, IsSetupError(err), c.want)
			}
		})
	}
}

// bfloat16 on a GPU below compute capability 8.0 runs without tensor
// cores: said, with the step time's assumption; not said where the GPU
// has them, for float16, or for a GPU given by its size alone (its
// capability unknown).
func TestBF16Note(t *testing.T) {
	sized := gpu.GPU{Name: "16GiB", Capacity: 16 << 30}
	cases := []struct {
		name      string
		g         gpu.GPU
		precision train.Precision
		want      bool
	}{
		{"t4 bf16-mixed", catalogGPU(t, "t4"), train.MixedBF16, true},
		{"v100 bf16-true", catalogGPU(t, "v100-32gb"), train.TrueBF16, true},
		{"t4 16-mixed", catalogGPU(t, "t4"), train.Mixed16, false},
		{"a100 bf16-mixed", catalogGPU(t, "a100-40gb"), train.MixedBF16, false},
		{"a size alone", sized, train.MixedBF16, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Run(context.Background(), Request{Source: zooSource(t, "mlp"), Config: models.Config{Batch: 4},
				Setup: train.Setup{Precision: c.precision, Steps: 1}, GPU: c.g, Context: -1})
			if err != nil {
				t.Fatal(err)
			}
			n, ok := noteOf(res, "bf16-no-tensor-cores")
			if ok != c.want {
				t.Fatalf("note %v (%q), want %v", ok, n.Text, c.want)
			}
			if ok && (!strings.Contains(n.Text, "float32 rate") || !strings.Contains(n.Text, string(c.precision))) {
				t.Errorf("note %q should name %s and the step time's float32 rate", n.Text, c.precision)
			}
		})
	}
}

// notedSource is a source with notes of its own (Noter).
type notedSource struct {
	Zoo
	notes []string
}

func (s notedSource) Notes() []string { return s.notes }

// A source's notes reach the result first, typed by the config key they
// open with.
func TestSourceNotes(t *testing.T) {
	src := notedSource{Zoo: zooSource(t, "mlp"), notes: []string{
		"partial_rotary_factor 0.5: the graph rotates whole heads",
		"quantization_config: the Linear weights are stored as nf4",
		"the file has a fixed batch size (1, no dynamic batch axis)",
		"rope: not a config key",
	}}
	res, err := Run(context.Background(), Request{Source: src, Config: models.Config{Batch: 4}, GPU: catalogGPU(t, "a100-40gb"), Context: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"partial-rotary-factor", "quantization-config", "source", "source"}
	if len(res.Notes) < len(want) {
		t.Fatalf("notes %v", res.Notes)
	}
	for i, code := range want {
		if n := res.Notes[i]; n.Code != code || n.Text != src.notes[i] {
			t.Errorf("note %d: %+v, want code %q and text %q", i, n, code, src.notes[i])
		}
	}
}

// Reentrant checkpointing of blocks whose first reads the batch trains
// none of them (train.CutOff): said, with PyTorch's warning, for the zoo's
// MLP (every block a Linear and ReLU from the batch on), not without
// reentrance, and not for GPT-2, whose first block reads the trained
// embeddings' sum.
func TestCutOffNote(t *testing.T) {
	for _, c := range []struct {
		model, policy string
		want          bool
	}{
		{"mlp", "full-reentrant", true},
		{"mlp", "full", false},
		{"gpt2", "full-reentrant", false},
	} {
		t.Run(c.model+" "+c.policy, func(t *testing.T) {
			ck, err := train.ParseCheckpoint(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), Request{Source: zooSource(t, c.model), Config: models.Config{Batch: 2, Seq: 64},
				Setup: train.Setup{Checkpoint: ck, Steps: 1}, GPU: catalogGPU(t, "a100-40gb"), Context: -1})
			if err != nil {
				t.Fatal(err)
			}
			n, ok := noteOf(res, "checkpoint-no-grad")
			if ok != c.want {
				t.Fatalf("note %v (%q), want %v", ok, n.Text, c.want)
			}
			if ok && !strings.Contains(n.Text, "Gradients will be None") {
				t.Errorf("note %q should quote PyTorch's warning", n.Text)
			}
			if c.want && res.Summary.TrainableParamCount >= res.Summary.ParamCount {
				t.Errorf("%d of %d parameters trained: the cut-off blocks' should not be", res.Summary.TrainableParamCount, res.Summary.ParamCount)
			}
		})
	}
}
