package predict

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// Note is a caveat of a prediction: what it assumes, cannot know, or
// decided on the job's behalf. Every output (text, JSON, the page) shows
// the same notes, so a caveat is data on the Result, never a line only one
// output prints.
type Note struct {
	// Code is a stable kebab-case id ("attention-kernel",
	// "partial-rotary-factor") that programs can match on.
	Code string
	// Text is the caveat in words.
	Text string
}

// Noter is a Source that knows facts about itself its graph does not
// model: a Hugging Face config's fields (partial_rotary_factor,
// quantization_config), what an ONNX conversion had to assume. Its notes
// reach the Result's Notes.
type Noter interface {
	Notes() []string
}

// configKey is a config.json key at the start of a source's note
// ("partial_rotary_factor 0.5: …"): Hugging Face's notes open with the key
// they are about.
var configKey = regexp.MustCompile(`^([a-z][a-z0-9]*(?:_[a-z0-9]+)+)[ :]`)

// sourceNote types a source's note: one that opens with the config key it
// concerns takes that key, kebab-cased, as its code; any other is
// "source".
func sourceNote(text string) Note {
	if m := configKey.FindStringSubmatch(text); m != nil {
		return Note{Code: strings.ReplaceAll(m[1], "_", "-"), Text: text}
	}
	return Note{Code: "source", Text: text}
}

// Codes of the notes whose place in the text output is the step time's.
const CommNoteCode = "communication"

// notesOf gathers the caveats of a finished prediction: the source's, the
// parallel layout's, the GPU-only rules', the quantization's, the
// attention kernel's and the precision's.
func notesOf(r Request, res *Result, g0 *graph.Graph) []Note {
	var out []Note
	add := func(code, text string) { out = append(out, Note{Code: code, Text: text}) }
	if n, ok := r.Source.(Noter); ok {
		for _, t := range n.Notes() {
			out = append(out, sourceNote(t))
		}
	}
	s := res.Setup
	if res.Infer == nil {
		out = append(out, parallelNotes(res)...)
	}
	out = append(out, gpuRuleNotes(res)...)
	out = append(out, quantNotes(res.Config.Quant)...)
	if n, ok := attentionNote(res, g0); ok {
		out = append(out, n)
	}
	if n, ok := rnnNote(res, g0); ok {
		out = append(out, n)
	}
	if n, ok := cutOffNote(res, g0); ok {
		out = append(out, n)
	}
	if n, ok := bf16Note(res); ok {
		out = append(out, n)
	}
	if in := r.Infer; in != nil && in.Mode == ModeGenerate && in.Static {
		// never under-predict silently
		gen := in.Generation(r.Config)
		mask := gen.Rows() * gen.Prompt * gen.MaxLen() * s.Precision.ParamDType().Size()
		add("static-cache-mask", fmt.Sprintf("with a static cache transformers passes SDPA a 4-D attention mask, [rows, 1, new positions, %d] (up to %s in the prefill: bool from 4.53, the model's dtype before), which is not modelled and rules out the flash kernel",
			gen.MaxLen(), alloc.FormatSize(mask)))
	}
	if c := res.Comm; c != nil {
		for _, t := range c.Notes {
			add(CommNoteCode, t)
		}
	}
	return out
}

// parallelNotes are the caveats of data, tensor and pipeline parallelism:
// never under-predict silently.
func parallelNotes(res *Result) []Note {
	s := res.Setup
	if !s.Parallel.On() && res.Config.TP <= 1 && res.Config.PP <= 1 {
		return nil
	}
	var out []Note
	add := func(code, text string) { out = append(out, Note{Code: code, Text: text}) }
	if res.NCCL > 0 {
		add("nccl-upper-bound", "NCCL buffers are an upper bound from NCCL's source constants (MAXCHANNELS 64 channels × ring and tree connections × the Simple, LL and LL128 buffers, per communicator); NCCL picks fewer channels from the topology at run time, so nvidia-smi usually shows less; --nccl-buffsize sets NCCL_BUFFSIZE")
	}
	if s.Parallel.On() && s.Parallel.Strategy != train.DDP {
		add("record-stream", "a block freed while a collective on another stream still reads it is taken as free at once (record_stream delays that): reserved memory may run somewhat higher")
		add("sharded-load", "this is the sharded training step; a model built or loaded whole on each GPU before it is sharded (model.cuda() before wrapping, a full state dict loaded on the device) needs its whole parameters there first, which is not counted")
	}
	if p := s.Parallel; p.NoSync && s.Accumulate <= 1 {
		// accepted, but said: the only micro-batch is the syncing one
		add("no-sync-unused", "--no-sync changes nothing without --accumulate: the step's only micro-batch is the one that synchronises")
	}
	if p := s.Parallel; p.Strategy == train.FSDP && s.Accumulate > 1 && !p.NoSync {
		// Fabric and Accelerate accumulate inside no_sync() by default
		add("fsdp-accumulate", "each micro-batch is taken to reduce-scatter its gradients; accumulating inside FSDP's no_sync() (Lightning Fabric's no_backward_sync, Accelerate's accumulate) keeps the whole unsharded gradients on every GPU instead: add --no-sync")
	}
	return out
}

// gpuRuleNotes are what the GPU-only rules (cuDNN workspaces, the cuBLAS
// workspace, the context) cannot know without the device: said, never
// hidden.
func gpuRuleNotes(res *Result) []Note {
	var out []Note
	add := func(code, text string) { out = append(out, Note{Code: code, Text: text}) }
	s, sum := res.Setup, res.Summary
	if sum.ConvWorkspaceBytes > 0 {
		const fallback = "A workspace never fails a step: where the allocator cannot supply one even after freeing its cache, PyTorch catches the out-of-memory error and takes the next algorithm, down to one that needs none (Conv_v7.cpp try_all, Conv_v8.cpp try_configs); batchfit, not knowing the sizes in between, takes the one that needs none"
		if sum.ConvWorkspaceNHWC {
			add("cudnn-workspace", fmt.Sprintf("cuDNN convolution workspaces are taken as PyTorch %s's cuDNN 9 tensor-core engines ask for them: the NCHW input, output and weight transposed to NHWC (the largest here %s). The engine cuDNN's heuristic picks is not known without the GPU: backward-filter kernels add a split-K buffer of a few times the weight, and small convolutions can pick engines that need several times the copies (docs/accuracy.md §3.1), so a step whose peak is a convolution's can be higher than shown. %s", s.Profile.Version, alloc.FormatSize(sum.ConvWorkspaceBytes), fallback))
		} else {
			add("cudnn-workspace", fmt.Sprintf("cuDNN convolution workspaces are taken at an upper bound, the explicit-GEMM algorithm's unfolded input (the largest here %s), because the algorithm cuDNN's heuristic picks is not known without the GPU: it usually needs less; FFT algorithms, seldom picked, can need more. %s", alloc.FormatSize(sum.ConvWorkspaceBytes), fallback))
		}
	}
	if n := res.Timeline.FellBack; n > 0 {
		add("cudnn-fallback", fmt.Sprintf("%d cuDNN workspace allocations did not fit even after the allocator freed its cache, so those convolutions ran another algorithm, taken to need no workspace (cuDNN's cache keeps the choice for the configuration); this step is near the device's limit", n))
	}
	if sum.CudnnSearches > 0 {
		n := fmt.Sprintf("--cudnn-benchmark: %d cuDNN algorithm searches in the first step, each taken at the largest workspace known among its candidates (the explicit-GEMM algorithm's and the kernel's); a search may use up to the largest free block (CUDACachingAllocator::cacheInfo), so the first step's peak reserved can be higher than shown, though a search alone never runs out of memory", sum.CudnnSearches)
		switch s.Profile.CudnnBenchmarkEmptyCache {
		case "during_search":
			n += fmt.Sprintf("; PyTorch %s empties the cache during each search and keeps the search workspace reserved after it (Conv_v7.cpp)", s.Profile.Version)
		case "after_search":
			n += fmt.Sprintf("; PyTorch %s empties the cache after each search (Conv_v8.cpp)", s.Profile.Version)
		default:
			n += fmt.Sprintf("; the search workspace is kept reserved after each search (not read from PyTorch %s's source: the larger figure)", s.Profile.Version)
		}
		add("cudnn-benchmark", n)
	}
	if s.CudnnBenchmark && sum.CudnnSearches == 0 {
		// accepted, but said: a flag that changes nothing is not taken
		// silently
		add("cudnn-benchmark-unused", "--cudnn-benchmark changes nothing here: no cuDNN convolution runs, so nothing is searched")
	}
	if s.Profile.CudaModuleLoading == "lazy_from_cuda_11_7" && res.Context == res.GPU.ContextSize+res.Libraries {
		add("lazy-loading", fmt.Sprintf("the CUDA context (%s) assumes lazy kernel loading, which PyTorch %s's CUDA 11.7 build has; its CUDA 11.6 build loads every kernel at start-up, over 1 GiB by public measurements (docs/accuracy.md §3.1): give --context then", alloc.FormatSize(res.GPU.ContextSize), s.Profile.Version))
	}
	if c := s.CublasWorkspaceConfig; c != "" {
		if _, ok, _ := profile.ParseCublasWorkspaceConfig(c); !ok {
			add("cublas-workspace-config", fmt.Sprintf("CUBLAS_WORKSPACE_CONFIG %q has no :SIZE:COUNT pair: PyTorch warns and keeps the default cuBLAS workspace, %s", c, alloc.FormatSize(s.Profile.CublasWorkspace(res.GPU.Major))))
		}
	}
	return out
}

// quantNotes are the uncertain rules of a quantized prediction, said where
// the figure may be off (see docs/accuracy.md).
func quantNotes(q *graph.Quant) []Note {
	if q == nil {
		return nil
	}
	var out []Note
	add := func(code, text string) { out = append(out, Note{Code: code, Text: text}) }
	switch q.Format {
	case graph.NF4, graph.FP4:
		if q.Torchao {
			add("quant-torchao-nf4", "nf4 follows torchao v0.1's NF4Tensor, as torchtune's QLoRA builds it on the device: to_nf4 compares each element with the 16 codes at once ([n, 16] temporaries while each weight is quantized), and every use rebuilds the bfloat16 weight through int64 codes; later torchao releases may hold less")
			break
		}
		if q.Head {
			add("quant-fabric-head", graph.FabricExcessNote)
		}
		if q.HalfState {
			add("quant-half-state", "the 4-bit weights were quantized from a float16 copy (bitsandbytes before 0.43.0, or Lightning Fabric's BitsandbytesPrecision): each dequantized copy is float16, then cast to the compute dtype")
		}
		if q.KeepsInput {
			add("quant-keeps-input", "each 4-bit weight is dequantized whole for every forward and backward use, and each quantized layer keeps its input for backward, as bitsandbytes before 0.43.2 does")
			break
		}
		add("quant-dequantize", "each 4-bit weight is dequantized whole for every forward and backward use, as bitsandbytes 0.49's MatMul4Bit does; 0.50's fused gemm_4bit skips that copy for some shapes (less); releases before 0.43.2 also keep every quantized layer's input for backward: say --bnb-version")
	case graph.Int8:
		add("quant-int8-outliers", "LLM.int8's outlier columns (llm_int8_threshold) depend on the data and are not modelled: each adds a float16 slice of the input and of the weight")
	case graph.GPTQ:
		add("quant-gptq", "gptq follows auto-gptq's torch path (exllama off, as for fine-tuning): the float16 weight is rebuilt in each forward and saved for backward; gptqmodel's and marlin's kernels may hold less")
	case graph.AWQ:
		add("quant-awq", "awq follows autoawq 0.2.9's WQLinearMMFunction: the weight is dequantized in backward and repeated per sample of the batch")
	}
	if q.Compute != graph.F32 && !q.Torchao && !q.Head {
		add("quant-kbit-prep", "PEFT's prepare_model_for_kbit_training casts the unquantized parameters to float32 and turns on gradient checkpointing; batchfit keeps them in the precision's dtype: use --precision bf16-mixed and --checkpoint full to follow it")
	}
	return out
}

// bf16Note says what a bfloat16 precision means on a GPU without bfloat16
// tensor cores (compute capability below 8.0: T4, V100). PyTorch runs it:
// torch.cuda.is_bf16_supported() counts emulation by default
// (including_emulation=True) and answers True there, and the kernels
// compute bfloat16 on the CUDA cores. The memory is the same; the speed is
// not the tensor cores'.
func bf16Note(res *Result) (Note, bool) {
	p := res.Setup.Precision
	if p != train.MixedBF16 && p != train.TrueBF16 {
		return Note{}, false
	}
	if g := res.GPU; g.Major == 0 || g.Major >= 8 || res.Setup.CPU {
		return Note{}, false
	}
	time := "batchfit's step time takes its bfloat16 matrix products at the GPU's float32 rate (the catalog gives it no bfloat16 tensor-core rate)"
	if res.GPU.Rates.BF16 > 0 {
		time = "batchfit's step time takes the catalog's bfloat16 rate for it"
	}
	return Note{Code: "bf16-no-tensor-cores", Text: fmt.Sprintf("%s on %s: compute capability %d.%d has no bfloat16 tensor cores (they start at 8.0, Ampere); PyTorch runs it (torch.cuda.is_bf16_supported() says True there, counting emulation) on the CUDA cores, with the same memory but without tensor-core speed; %s; 16-mixed uses the tensor cores",
		p, res.GPU.Name, res.GPU.Major, res.GPU.Minor, time)}, true
}

// rnnNote says what the cuDNN RNN rule (train/rnn_cudnn.go) leaves out:
// never under-predict silently.
func rnnNote(res *Result, g *graph.Graph) (Note, bool) {
	if g == nil || res.Setup.CPU {
		return Note{}, false
	}
	n, dropout := 0, false
	for i := range g.Ops {
		if op := &g.Ops[i]; op.Kind == graph.RNN {
			n++
			dropout = dropout || (op.Attr.RNN.Dropout > 0 && op.Attr.RNN.Layers > 1)
		}
	}
	if n == 0 {
		return Note{}, false
	}
	t := fmt.Sprintf("%d recurrent module(s) (nn.LSTM, nn.GRU, nn.RNN) run as one cuDNN call each (aten::_cudnn_rnn): the training reserve it keeps for backward is counted (a rule that gives every shape of an H200 grid to the byte, docs/accuracy.md §3.1), its workspace is not: 8 to 112 MiB a call in that grid (about 8 MiB a layer and direction, more with sequence × batch), alive only while the call runs, so a peak inside one can be that much higher", n)
	if dropout {
		t += "; dropout between layers also makes cuDNN's dropout state, a little over 2 MB kept for the process, not counted"
	}
	return Note{Code: "cudnn-rnn-workspace", Text: t}, true
}

// cutOffNote says what reentrant checkpointing leaves untrained
// (train.CutOff): the prediction follows PyTorch, which trains those
// parameters not at all, and a user who meant to train them has to know.
func cutOffNote(res *Result, g *graph.Graph) (Note, bool) {
	if g == nil || res.Infer != nil {
		return Note{}, false
	}
	cut, n, params := train.CutOff(g, res.Setup.Checkpoint)
	if cut == 0 {
		return Note{}, false
	}
	return Note{Code: "checkpoint-no-grad", Text: fmt.Sprintf("reentrant checkpointing: %d of the %d checkpointed regions are handed no tensor that requires grad (the first reads the batch), so their calls build no autograd node and %d parameter elements get no gradient; PyTorch warns \"None of the inputs have requires_grad=True. Gradients will be None\" and trains only what lies outside them, as predicted here. To train them, make the input require grad (x.requires_grad_(), transformers' enable_input_require_grads) or checkpoint without reentrance (--checkpoint full)",
		cut, n, params)}, true
}
