package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// usageError marks bad command-line input: exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// IsUsage reports whether err is a command-line usage error: bad flags,
// or a setup that cannot apply to the model or the GPU (predict.SetupError).
func IsUsage(err error) bool {
	var u usageError
	return errors.As(err, &u) || predict.IsSetupError(err)
}

// jobFlags are the flags that describe a training job, shared by estimate,
// sweep and maxbatch.
type jobFlags struct {
	e             *env
	model         string
	batch         string
	seq           int64
	layers        int64
	hidden        int64
	image         int64
	gpu           string
	like          string
	precision     string
	optimizer     string
	momentum      float64
	weightDecay   float64
	foreach       bool
	fused         bool
	forloop       bool
	accumulate    int
	checkpointing bool
	checkpoint    setString
	attention     string
	torch         string
	steps         int
	allocConf     string
	context       string
	cuda          string
	ncclBuffsize  string
	emptyCache    bool
	keepOutput    bool
	cudnnBench    bool
	noCastCache   bool
	castLoop      bool
	memFormat     string
	loopOverhead  time.Duration
	cublasConf    string
	json          bool
	lora          int64
	loraTargets   string
	loraAlpha     float64
	loraDropout   float64
	freeze        string
	amsgrad       bool
	// data parallelism
	gpus          int
	strategy      string
	sharding      string
	nodeGPUs      int
	offload       bool
	noSync        bool
	fsdpWrap      string
	fsdpLoad      string
	offloadParams bool
	bucketMB      float64
	bucketView    bool
	reduceBucket  float64
	prefetch      float64
	// model parallelism
	tp           int64
	sp           bool
	pp           int64
	stage        int64
	stageLayers  string
	quant        string
	doubleQuant  bool
	quantCompute string
	quantBlock   int64
	bnbVersion   string
	quantVia     string
	loraImpl     string
	peftVersion  string
	transformers string
	mode         string
	prompt       int64
	newTokens    int64
	cache        string
	beams        int64
	// inference: the command answers for --mode eval and generate too
	inferOK bool
	// zooOnly: the model is looked up in the zoo, never opened as a path
	// (a model named inside a recording)
	zooOnly bool
}

func (j *jobFlags) register(fs *flag.FlagSet, batchDefault string) {
	fs.StringVar(&j.model, "model", "", "the model: a zoo name, a .yaml spec, a Hugging Face config.json or model directory, or a .onnx file")
	fs.StringVar(&j.batch, "batch", batchDefault, "micro-batch size")
	fs.Int64Var(&j.seq, "seq", 0, "sequence length (default: the model's)")
	fs.Int64Var(&j.layers, "layers", 0, "override the model's depth (models that allow it; at most 4096, and a graph of at most 65,536 ops)")
	fs.Int64Var(&j.hidden, "hidden", 0, "override the model's width (models that allow it)")
	fs.Int64Var(&j.image, "image", 0, "image side for vision models (default: the model's, 224 for torchvision)")
	fs.StringVar(&j.gpu, "gpu", "h100-80gb", "GPU from 'batchfit gpus', or a size such as 24GB (nvidia-smi's total; no step time unless --like names a GPU)")
	fs.StringVar(&j.like, "like", "", "with a size for --gpu: the catalog GPU it is, whose speed, compute capability, CUDA context and share of nvidia-smi's total that PyTorch can use it takes")
	fs.StringVar(&j.precision, "precision", "32-true", "Lightning's 32-true, 16-mixed, bf16-mixed, 16-true or bf16-true; "+train.PrecisionAliases())
	fs.StringVar(&j.optimizer, "optimizer", "adam", "sgd, adam, adamw, adafactor, none, or bitsandbytes' adam8bit, adamw8bit, paged_adam8bit, paged_adamw8bit, paged_adam, paged_adamw")
	fs.Float64Var(&j.momentum, "momentum", 0, "SGD momentum (nonzero keeps a momentum buffer)")
	fs.Float64Var(&j.weightDecay, "weight-decay", -1, "weight decay (default: torch.optim's: 0, AdamW 0.01)")
	fs.BoolVar(&j.foreach, "foreach", false, "use the foreach optimizer implementation")
	fs.BoolVar(&j.fused, "fused", false, "use the fused optimizer implementation")
	fs.BoolVar(&j.forloop, "forloop", false, "use the per-parameter for-loop implementation")
	fs.BoolVar(&j.amsgrad, "amsgrad", false, "Adam's AMSGrad variant (one more state)")
	fs.IntVar(&j.accumulate, "accumulate", 1, "micro-batches per optimizer step (gradient accumulation; at most 65,536, 1,024 with --pp)")
	fs.BoolVar(&j.checkpointing, "checkpointing", false, "activation checkpointing of every block (non-reentrant); the same as --checkpoint full")
	j.checkpoint.v = "none"
	fs.Var(&j.checkpoint, "checkpoint", "activation checkpointing: none, full (every block), every-K (every K-th block), attention (each attention core), or every-K+attention")
	fs.StringVar(&j.attention, "attention", "auto", "attention kernel: auto, eager, flash, efficient or math (sdpa: auto)")
	fs.StringVar(&j.torch, "torch", "", "PyTorch version whose rules apply (default: current; known profiles: "+strings.Join(profile.Versions(), ", ")+")")
	fs.IntVar(&j.steps, "steps", 3, "optimizer steps to simulate (at most 1000)")
	fs.StringVar(&j.allocConf, "alloc-conf", "", "PYTORCH_CUDA_ALLOC_CONF (default: the environment variable)")
	fs.StringVar(&j.context, "context", "", "CUDA context size (default: the GPU family's estimate)")
	fs.StringVar(&j.cuda, "cuda", "", "the CUDA runtime PyTorch was built for (torch.version.cuda, e.g. 11.3): before 11.7 every kernel loads at start-up, and the CUDA context is the eager one measured on a GPU (1343 MiB) unless --context gives it")
	fs.StringVar(&j.ncclBuffsize, "nccl-buffsize", "", "NCCL_BUFFSIZE, the Simple protocol's buffer per NCCL connection (default: NCCL's 4 MiB)")
	fs.BoolVar(&j.emptyCache, "empty-cache", false, "call torch.cuda.empty_cache() after every step")
	fs.BoolVar(&j.keepOutput, "keep-output", false, "the training loop holds the model's output (a transformers model's logits) through backward and the step, until the next forward: output = model(...); output.loss.backward(), as Answer.AI's fsdp_qlora does (default: dropped at its last use, as transformers' Trainer does)")
	fs.BoolVar(&j.cudnnBench, "cudnn-benchmark", false, "torch.backends.cudnn.benchmark = True: the first step searches cuDNN's convolution algorithms")
	fs.BoolVar(&j.noCastCache, "no-autocast-cache", false, "torch.autocast(..., cache_enabled=False): the mixed precisions cast a weight anew at every use and free the copy with the op, instead of keeping one copy per weight until the autocast region ends")
	fs.BoolVar(&j.castLoop, "autocast-around-loop", false, "eval: one autocast region encloses the whole loop of forwards (autocast entered before the loop), so the weight copies the first forward makes stay until the loop ends (default: autocast around each forward)")
	fs.StringVar(&j.memFormat, "memory-format", "contiguous", "the model's and batch's memory format: contiguous (NCHW, PyTorch's default) or channels_last (NHWC: no transposes around cuDNN's tensor-core convolutions; step time only)")
	fs.DurationVar(&j.loopOverhead, "loop-overhead", 0, "the training loop's own work per micro-batch that the GPU waits for, outside the model's ops (a framework's hooks, an input pipeline copying on the training stream), as measured, e.g. 8ms; step time only (default 0: a plain eager loop with its batches ready)")
	fs.StringVar(&j.cublasConf, "cublas-workspace-config", "", "CUBLAS_WORKSPACE_CONFIG, e.g. :4096:8 (default: the environment variable)")
	fs.BoolVar(&j.json, "json", false, "print JSON")
	fs.Int64Var(&j.lora, "lora", 0, "fine-tune with LoRA adapters of this rank (PEFT's r); every other parameter is frozen")
	fs.StringVar(&j.loraTargets, "lora-targets", "", "Linear layers that get adapters, as PEFT's target_modules: names or name endings, comma-separated (q_proj,v_proj)")
	fs.Float64Var(&j.loraAlpha, "lora-alpha", 8, "LoRA's alpha (scaling = alpha / r)")
	fs.Float64Var(&j.loraDropout, "lora-dropout", 0, "LoRA's dropout on the adapters' input (PEFT's lora_dropout)")
	fs.StringVar(&j.mode, "mode", "train", "train (a training step), eval (forward under torch.no_grad in eval mode) or generate (transformers' generate with a key/value cache)")
	fs.Int64Var(&j.prompt, "prompt", 0, "generate: prompt length in tokens (the same as --seq; default the model's sequence length)")
	fs.Int64Var(&j.newTokens, "new-tokens", 0, "generate: tokens to generate (max_new_tokens; at most 32,768)")
	fs.StringVar(&j.cache, "cache", "dynamic", "generate: the key/value cache, dynamic (DynamicCache, grown by torch.cat) or static (StaticCache, preallocated)")
	fs.Int64Var(&j.beams, "beams", 1, "generate: beam width (num_beams)")
	fs.StringVar(&j.freeze, "freeze", "", "freeze the parameters of these modules (names or name endings, comma-separated; a module freezes all inside it)")
	fs.IntVar(&j.gpus, "gpus", 1, "data-parallel GPUs; the prediction is one rank's, --batch its own micro-batch")
	fs.StringVar(&j.strategy, "strategy", "", "how the ranks hold the model: "+strategyNames()+" (default: single on 1 GPU, ddp on more)")
	fs.StringVar(&j.sharding, "sharding", "full", "FSDP's sharding strategy: full, grad-op (FSDP2: reshard_after_forward=False), hybrid or none")
	fs.IntVar(&j.nodeGPUs, "node-gpus", 8, "GPUs per node (hybrid sharding shards within a node)")
	fs.BoolVar(&j.offload, "offload", false, "FSDP's CPU offload of parameters, gradients and the step, or ZeRO's offload_optimizer")
	fs.BoolVar(&j.offloadParams, "offload-params", false, "ZeRO-3's offload_param")
	fs.BoolVar(&j.noSync, "no-sync", false, "FSDP: every accumulating micro-batch runs inside no_sync() (Fabric's no_backward_sync, Accelerate's accumulate), keeping the whole unsharded gradients until the last")
	fs.StringVar(&j.fsdpWrap, "fsdp-wrap", "", "FSDP's wrap policy: block (one unit per block; with LoRA, use_orig_params=True and the whole flat gradient), lora (PEFT's fsdp_auto_wrap_policy: adapters in units of their own, frozen weights get no gradient) or param (fsdp2's per-parameter sharding); default: lora for PEFT adapters under fsdp, as transformers' Trainer sets it, block otherwise, param under fsdp2")
	fs.StringVar(&j.fsdpLoad, "fsdp-load", "none", "how FSDP builds its sharded units before the first step, which decides what stays cached when the script resets its peaks: none (the shards alone, nothing cached), sync (rank 0 of sync_module_states=True from a model on the CPU, unit by unit: moved to the GPU, broadcast in 250 MiB buckets, flattened, sharded; Answer.AI's fsdp_qlora low_memory, accelerate's cpu_ram_efficient_loading) or meta (each unit materialized on the GPU from the meta device, flattened, sharded); sync and meta reset the peaks after loading, as those scripts do")
	fs.Float64Var(&j.bucketMB, "bucket-mb", train.DDPBucketMB, "DDP's bucket_cap_mb")
	fs.BoolVar(&j.bucketView, "bucket-view", false, "DDP's gradient_as_bucket_view")
	fs.Float64Var(&j.reduceBucket, "reduce-bucket", train.ZeROReduceBucket, "ZeRO's reduce_bucket_size (elements)")
	fs.Float64Var(&j.prefetch, "prefetch-bucket", train.ZeROPrefetchBucket, "ZeRO-3's stage3_prefetch_bucket_size (elements; 0: no prefetch)")
	fs.Int64Var(&j.tp, "tp", 1, "tensor parallelism (Megatron's column and row splits; Llama-family models)")
	fs.BoolVar(&j.sp, "sp", false, "sequence parallelism over the tensor-parallel ranks (Megatron's; needs --tp)")
	fs.Int64Var(&j.pp, "pp", 1, "pipeline stages (1F1B; --accumulate is the micro-batches of a step)")
	fs.Int64Var(&j.stage, "stage", -1, "the pipeline stage to predict (default: every stage, answering with the one that fits worst)")
	fs.StringVar(&j.stageLayers, "stage-layers", "", "each stage's number of layers, comma-separated (an uneven split; default: even)")
	fs.StringVar(&j.quant, "quant", "", "store the base model's Linear weights quantized by bitsandbytes: nf4, fp4 (QLoRA's 4-bit) or int8 (LLM.int8); training needs --lora")
	fs.BoolVar(&j.doubleQuant, "double-quant", false, "4-bit double quantization of the absmax constants (bnb_4bit_use_double_quant)")
	fs.StringVar(&j.quantCompute, "quant-compute", "", "dtype a 4-bit weight is dequantized to (bnb_4bit_compute_dtype): bf16, fp16 or fp32 (default: the precision's compute dtype)")
	fs.Int64Var(&j.quantBlock, "quant-blocksize", 64, "4-bit quantization block: one absmax per this many elements (bitsandbytes' default 64)")
	fs.StringVar(&j.bnbVersion, "bnb-version", "", "the bitsandbytes release whose 4-bit rules apply (default: current; before 0.43.2 each 4-bit layer also keeps its input for backward, before 0.43.0 dequantizes through float16)")
	fs.StringVar(&j.quantVia, "quant-via", "transformers", "what quantizes the Linear layers (--quant): transformers (BitsAndBytesConfig; lm_head kept), fabric (Lightning Fabric's BitsandbytesPrecision, LitGPT's --quantize: every Linear, the head too, quantized from a float16 copy) or torchao (torchao's NF4Tensor, torchtune's QLoRA; --quant nf4)")
	fs.StringVar(&j.peftVersion, "peft-version", "", "the PEFT release whose adapter dtype applies (default: current; from 0.12 autocast_adapter_dtype keeps adapters float32 on a half-precision base, before it they take the base weight's dtype when that is floating)")
	fs.StringVar(&j.transformers, "transformers", "", "the Hugging Face transformers release whose modeling code runs the model, for the zoo's transformers models and Hugging Face configs (default: current; 4.36 or later): before 4.46 the Llama family's forward upcasts every position's logits to float32 and returns them, before 4.49 the loss copies logits[..., :-1, :] (a float32 copy at batch > 1); the attention's copies differ too (docs/accuracy.md)")
	fs.StringVar(&j.loraImpl, "lora-impl", "peft", "whose LoRA layers: peft, or litgpt or torchtune (on a quantized base: adapters in the model's dtype, no casts and no clone)")
}

// setString is a string flag that knows whether it was given: an explicit
// value that contradicts another flag is refused, its default is not.
type setString struct {
	v   string
	set bool
}

func (s *setString) String() string { return s.v }
func (s *setString) Set(v string) error {
	s.v, s.set = v, true
	return nil
}

// parseArgs parses flags that may come before or after the positional
// arguments, as people type them ("estimate resnet50 --batch 64"). -h
// prints the command's help; a bad flag is a one-line error that names
// the nearest flag and points to -h, not the whole help.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseQuiet(fs, args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, checkBounds(fs)
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseQuiet runs fs.Parse with the flag package's own printing (the
// error, then the whole help) held back: the help is printed only when it
// was asked for.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	var held bytes.Buffer
	fs.SetOutput(&held)
	err := fs.Parse(args)
	fs.SetOutput(out)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		out.Write(held.Bytes())
		return usageError{err}
	}
	return usageError{flagError{cmd: fs.Name(), err: err, near: nearFlags(fs, err)}}
}

// flagError is the flag package's complaint about a flag, with the nearest
// flags when the name is unknown.
type flagError struct {
	cmd  string
	err  error
	near []string
}

func (f flagError) Error() string {
	msg := f.err.Error()
	if name, ok := undefinedFlag(f.err); ok {
		msg = "unknown flag --" + strings.TrimLeft(name, "-")
	}
	if len(f.near) > 0 {
		msg += "; did you mean --" + strings.Join(f.near, " or --") + "?"
	}
	return msg + fmt.Sprintf(" (see 'batchfit %s -h')", f.cmd)
}

func (f flagError) Unwrap() error { return f.err }

// undefinedFlag is the name in the flag package's "flag provided but not
// defined: -NAME".
func undefinedFlag(err error) (string, bool) {
	var fe flagError
	if errors.As(err, &fe) {
		err = fe.err
	}
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	return name, ok && name != "" && !strings.ContainsAny(name, " \n")
}

func nearFlags(fs *flag.FlagSet, err error) []string {
	name, ok := undefinedFlag(err)
	if !ok {
		return nil
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return models.Nearest(strings.TrimLeft(name, "-"), names, 2)
}

func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// maxBatchSizes bounds the batch sizes one --batch gives: a sweep of more
// is refused in one line rather than cut short without a word.
const maxBatchSizes = 4096

// parseBatches reads "64", "64,8,32,4" or a range "1:64" (powers of two)
// or "8:64:8" (a step).
func parseBatches(s string) ([]int64, error) {
	if s == "" {
		return nil, usagef("--batch is required")
	}
	if strings.Contains(s, ":") {
		parts := strings.Split(s, ":")
		if len(parts) > 3 {
			return nil, usagef("--batch %q: want FROM:TO or FROM:TO:STEP", s)
		}
		var v [3]int64
		for i, p := range parts {
			n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
			if err != nil || n <= 0 {
				return nil, usagef("--batch %q: %q is not a positive integer", s, p)
			}
			v[i] = n
		}
		from, to := v[0], v[1]
		if to < from {
			return nil, usagef("--batch %q: the range ends before it starts", s)
		}
		// how many sizes, counted before any is made (to-from cannot
		// overflow: both are positive)
		n := int64(1)
		if len(parts) == 3 {
			n = (to-from)/v[2] + 1
		} else {
			for b := from; b <= to/2; b *= 2 {
				n++
			}
		}
		if n > maxBatchSizes {
			return nil, usagef("--batch %q gives %s batch sizes, more than %s: take a larger step, or FROM:TO (doubling)", s, commas(n), commas(maxBatchSizes))
		}
		out := make([]int64, 0, n)
		for b, ok := from, true; ok && b <= to && int64(len(out)) < n; {
			out = append(out, b)
			// a step past int64's largest ends the range, not wraps it
			if len(parts) == 3 {
				b, ok = graph.AddSize(b, v[2])
			} else {
				b, ok = graph.MulSize(b, 2)
			}
		}
		return out, nil
	}
	if n := strings.Count(s, ",") + 1; n > maxBatchSizes {
		return nil, usagef("--batch gives %s batch sizes, more than %s", commas(int64(n)), commas(maxBatchSizes))
	}
	var out []int64
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(p), 10, 64)
		if err != nil || n <= 0 {
			return nil, usagef("batch size %q is not a positive integer", strings.TrimSpace(p))
		}
		out = append(out, n)
	}
	return out, nil
}

// request builds a prediction request from the flags and the model
// argument.
func (j *jobFlags) request(model string) (predict.Request, error) {
	if model == "" {
		return predict.Request{}, usagef("no model given: name one from 'batchfit models' or give a path (.yaml, config.json, model directory)")
	}
	var src predict.Source
	if j.web() || j.zooOnly {
		// A web request names a zoo model or uploads one; it never names a
		// file of the server's. Nor does a recording validate reads.
		m, err := models.Lookup(model)
		if err != nil {
			return predict.Request{}, usageError{err}
		}
		src = predict.Zoo{M: m}
	} else {
		var err error
		if src, err = resolveSource(model); err != nil {
			return predict.Request{}, err
		}
	}
	return j.requestFor(src)
}

func (j *jobFlags) web() bool { return j.e != nil && j.e.web }

// checkDims refuses --layers, --hidden and --seq for a model that cannot
// vary them (its Dims): a vision model has no sequence, a torchvision
// ResNet no depth to override, and taking the flag silently would show
// a figure for a model that was not built.
func (j *jobFlags) checkDims(src predict.Source) error {
	dims := src.Dims()
	for _, f := range []struct {
		name, what string
		n          int64
		dim        models.Dim
	}{{"--layers", "its depth", j.layers, models.DimLayers}, {"--hidden", "its width", j.hidden, models.DimHidden}, {"--seq", "its sequence length", j.seq, models.DimSeq}} {
		if f.n == 0 || slices.Contains(dims, f.dim) || (f.dim == models.DimSeq && f.n == src.DefaultSeq()) {
			continue
		}
		can := []string{"--batch"}
		for _, d := range dims {
			can = append(can, "--"+string(d))
		}
		what := "cannot vary " + f.what
		if f.dim == models.DimSeq && src.DefaultSeq() == 0 {
			what = "has no sequence"
		}
		return usagef("%s: %s %s (what it can vary: %s)", f.name, src.Name(), what, strings.Join(can, ", "))
	}
	if j.image != 0 && !takesImage(src) {
		return usagef("--image: %s takes no image (the image side is for torchvision's models and ViTs)", src.Name())
	}
	return nil
}

// takesImage reports whether src builds its input from Config.Image:
// torchvision's models (models/torchvision.go) and the transformers
// vision models (ViT), which have no sequence to vary.
func takesImage(src predict.Source) bool {
	switch s := src.(type) {
	case predict.Zoo:
		return s.M.Family == "torchvision" || (s.M.Family == "transformers" && !slices.Contains(s.M.Dims, models.DimSeq))
	case *hf.Model:
		return s.Config.ModelType == "vit"
	}
	return false
}

// builtByTransformers reports whether src is built by
// models.BuildTransformer, which follows a transformers release
// (Config.Transformers).
func builtByTransformers(src predict.Source) bool {
	switch s := src.(type) {
	case predict.Zoo:
		return s.M.Family == "transformers"
	case *hf.Model:
		return true
	}
	return false
}

// requestFor builds a prediction request for src from the flags.
func (j *jobFlags) requestFor(src predict.Source) (predict.Request, error) {
	var r predict.Request
	r.Source = src
	for _, v := range []struct {
		name string
		n    int64
	}{{"--seq", j.seq}, {"--layers", j.layers}, {"--hidden", j.hidden}, {"--image", j.image}} {
		if v.n < 0 {
			return r, usagef("%s must be positive, got %d", v.name, v.n)
		}
	}
	if err := j.checkDims(src); err != nil {
		return r, err
	}
	ad, err := j.adapters()
	if err != nil {
		return r, err
	}
	r.Config = models.Config{Seq: j.seq, Layers: j.layers, Hidden: j.hidden, Image: j.image, Adapters: ad}
	if j.transformers != "" {
		if !builtByTransformers(src) {
			return r, usagef("--transformers applies to models run by transformers' modeling code (the zoo's transformers models, Hugging Face configs); %s is not one", src.Name())
		}
		if err := models.CheckTransformersRelease(j.transformers); err != nil {
			return r, usagef("--transformers: %v", err)
		}
		r.Config.Transformers = j.transformers
	}
	if err := j.modelParallel(&r.Config); err != nil {
		return r, err
	}
	prec, err := train.ParsePrecision(j.precision)
	if err != nil {
		return r, usageError{err}
	}
	q, err := j.quantization(prec)
	if err != nil {
		return r, err
	}
	if sq := sourceQuant(src); sq != nil {
		if q != nil {
			return r, usagef("%s stores %s weights (its quantization_config): drop --quant", src.Name(), sq)
		}
		q = sq
	}
	if r.Infer, err = j.inference(); err != nil {
		return r, err
	}
	if q != nil && q.Torchao && j.bnbVersion != "" {
		return r, usagef("--bnb-version is bitsandbytes'; --quant-via torchao is torchao's NF4Tensor")
	}
	if q != nil && (q.Format == graph.NF4 || q.Format == graph.FP4) && !q.Torchao {
		keeps, err := graph.BnbKeepsInput(j.bnbVersion)
		if err != nil {
			return r, usagef("--bnb-version: %v", err)
		}
		q.KeepsInput = keeps
		// a pre-quantized checkpoint's QuantState keeps the dtype it
		// was saved with (QuantState.from_dict)
		half, _ := graph.BnbHalfState(j.bnbVersion)
		q.HalfState = q.HalfState || half && !q.Prequantized
		if st, _ := train.ParseStrategy(j.strategy); st == train.FSDP || st == train.FSDP2 {
			// FSDP flattens float tensors only: FSDP-QLoRA stores the
			// codes in the model's dtype (bnb_4bit_quant_storage,
			// bitsandbytes 0.43.0 and later)
			if old, _ := graph.BnbHalfState(j.bnbVersion); old && j.bnbVersion != "" {
				return r, usagef("--bnb-version %s: FSDP with 4-bit weights needs bnb_4bit_quant_storage, bitsandbytes 0.43.0 or later", j.bnbVersion)
			}
			q.FloatStorage = true
		}
	} else if j.bnbVersion != "" {
		return r, usagef("--bnb-version applies to bitsandbytes' 4-bit weights (--quant nf4 or fp4, or such a checkpoint)")
	}
	if q != nil && (ad == nil || ad.Rank == 0) && r.Infer == nil {
		// transformers' Trainer: "You cannot perform fine-tuning on purely
		// quantized models. Please attach trainable adapters"
		return r, usagef("quantized weights (%s) are never trained: fine-tune with adapters on top (--lora R --lora-targets ...), as transformers' Trainer requires, or predict inference (--mode eval or generate)", q.Format)
	}
	r.Config.Quant = q
	if j.prompt > 0 {
		r.Config.Seq = j.prompt
	}
	// --like names the catalog GPU a size is: another size says nothing
	// of speed or of the share PyTorch can use
	if _, err := gpu.ParseSize(j.like); j.like != "" && err == nil {
		return r, usagef("--like %q: name a GPU from 'batchfit gpus' (the size goes in --gpu)", j.like)
	}
	g, err := gpu.LookupLike(j.gpu, j.like)
	if err != nil {
		return r, usageError{err}
	}
	r.GPU = g
	r.Context = -1
	if j.context != "" {
		n, err := gpu.ParseSize(j.context)
		if err != nil {
			return r, usagef("--context: %v", err)
		}
		r.Context = n
	}
	if j.ncclBuffsize != "" {
		n, err := gpu.ParseSize(j.ncclBuffsize)
		if err != nil {
			return r, usagef("--nccl-buffsize: %v", err)
		}
		if n <= 0 {
			return r, usagef("--nccl-buffsize: NCCL_BUFFSIZE must be positive, got %q", j.ncclBuffsize)
		}
		if err := checkNCCLBuffsize(n, g); err != nil {
			return r, err
		}
		r.NCCLBuffSize = n
	}
	on, err := train.ParseOptimizerName(j.optimizer)
	if err != nil {
		return r, usageError{err}
	}
	opt := on.Kind
	impl := train.ImplDefault
	n := 0
	for _, f := range []struct {
		on bool
		i  train.Impl
	}{{j.foreach, train.Foreach}, {j.fused, train.Fused}, {j.forloop, train.ForLoop}} {
		if f.on {
			impl = f.i
			n++
		}
	}
	if n > 1 {
		return r, usagef("--foreach, --fused and --forloop exclude each other")
	}
	wd := j.weightDecay
	if wd < 0 {
		wd = 0
		if opt == train.AdamW {
			wd = 0.01
		}
	}
	att, err := train.ParseAttention(j.attention)
	if err != nil {
		return r, usageError{err}
	}
	prof, err := profile.Lookup(j.torch)
	if err != nil {
		return r, usageError{err}
	}
	if j.cuda != "" {
		eager, err := profile.EagerModuleLoading(j.cuda)
		if err != nil {
			return r, usagef("--cuda: %v", err)
		}
		if eager && prof.CudaModuleLoading == "lazy" {
			return r, usagef("--cuda %s: PyTorch %s was built for CUDA 11.7 or later only", j.cuda, prof.Version)
		}
		r.EagerModules = eager
	}
	if j.accumulate < 1 {
		return r, usagef("--accumulate must be at least 1, got %d", j.accumulate)
	}
	if j.steps < 1 || j.steps > 1000 {
		return r, usagef("--steps must be between 1 and 1000, got %d", j.steps)
	}
	ck, err := train.ParseCheckpoint(j.checkpoint.v)
	if err != nil {
		return r, usagef("--checkpoint: %v", err)
	}
	if j.checkpointing {
		if ck.On() && ck != train.FullCheckpoint {
			return r, usagef("--checkpointing (every block) and --checkpoint %s exclude each other", ck)
		}
		if j.checkpoint.set && !ck.On() {
			return r, usagef("--checkpointing turns checkpointing on and --checkpoint %s turns it off: give one", j.checkpoint.v)
		}
		ck = train.FullCheckpoint
	}
	if j.amsgrad && opt != train.Adam && opt != train.AdamW {
		return r, usagef("--amsgrad is Adam's and AdamW's")
	}
	if on.Bnb() && n > 0 {
		return r, usagef("--foreach, --fused and --forloop are torch.optim's; bitsandbytes' %s has one implementation", on.Name())
	}
	if opt == train.Adafactor {
		if n > 0 {
			return r, usagef("--foreach, --fused and --forloop are torch.optim's; transformers' Adafactor loops over the parameters")
		}
		impl = train.ForLoop
	}
	par, err := j.parallel()
	if err != nil {
		return r, err
	}
	r.Setup = train.Setup{Precision: prec, Optimizer: train.Optimizer{Kind: opt, Momentum: j.momentum, Impl: impl, WeightDecay: wd, Bits8: on.Bits8, Paged: on.Paged, AMSGrad: j.amsgrad},
		Accumulate: j.accumulate, Checkpoint: ck, Attention: att, Steps: j.steps, EmptyCache: j.emptyCache, Profile: prof, Parallel: par}
	r.Setup.CudnnBenchmark = j.cudnnBench
	if j.keepOutput && r.Infer != nil {
		return r, usagef("--keep-output is for training: in eval and generate the loop always holds the output until the next forward")
	}
	r.Setup.KeepOutput = j.keepOutput
	if _, amp := prec.Autocast(); !amp && (j.noCastCache || j.castLoop) {
		return r, usagef("--no-autocast-cache and --autocast-around-loop are for the mixed precisions (16-mixed, bf16-mixed), which run under autocast")
	}
	r.Setup.Autocast = train.Autocast{CacheOff: j.noCastCache, AroundLoop: j.castLoop}
	switch strings.ReplaceAll(strings.ToLower(j.memFormat), "-", "_") {
	case "contiguous", "nchw", "contiguous_format", "":
	case "channels_last", "nhwc":
		r.Setup.ChannelsLast = true
	default:
		return r, usagef("--memory-format %q: want contiguous or channels_last", j.memFormat)
	}
	if j.loopOverhead < 0 || j.loopOverhead > time.Minute {
		return r, usagef("--loop-overhead %v: want a duration from 0 to 1m", j.loopOverhead)
	}
	r.Setup.LoopOverhead = j.loopOverhead
	if r.Setup.CublasWorkspaceConfig = j.cublasConf; j.cublasConf == "" && !j.web() {
		r.Setup.CublasWorkspaceConfig = os.Getenv("CUBLAS_WORKSPACE_CONFIG")
	}
	if _, _, err := profile.ParseCublasWorkspaceConfig(r.Setup.CublasWorkspaceConfig); err != nil {
		return r, usageError{err}
	}
	conf := j.allocConf
	if conf == "" && !j.web() {
		conf = os.Getenv("PYTORCH_CUDA_ALLOC_CONF")
		if conf == "" {
			conf = os.Getenv("PYTORCH_ALLOC_CONF")
		}
	}
	ac, err := alloc.ParseConfig(conf)
	if err != nil {
		return r, usagef("allocator configuration %q: %v", conf, err)
	}
	r.Alloc = ac
	return r, nil
}

// job parses a job command's arguments: flags anywhere, exactly one model,
// and the batch sizes of --batch. It returns the prediction request for
// that model with the flags applied, and the batch sizes.
func (j *jobFlags) job(fs *flag.FlagSet, cmd string, args []string) (predict.Request, []int64, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return predict.Request{}, nil, err
	}
	if j.model != "" {
		pos = append([]string{j.model}, pos...)
	}
	uploaded := j.e != nil && j.e.source != nil
	switch {
	case uploaded && len(pos) > 0:
		return predict.Request{}, nil, usagef("a model was uploaded and %q named too: give one", pos[0])
	case !uploaded && len(pos) != 1:
		return predict.Request{}, nil, usagef("%s takes one model, got %d (see 'batchfit %s -h')", cmd, len(pos), cmd)
	}
	batches, err := parseBatches(j.batch)
	if err != nil {
		return predict.Request{}, nil, err
	}
	var r predict.Request
	if uploaded {
		r, err = j.requestFor(j.e.source)
	} else {
		r, err = j.request(pos[0])
	}
	if err != nil {
		return predict.Request{}, nil, err
	}
	r.Config.Batch = batches[0]
	return r, batches, nil
}

// inference reads --mode and the generation flags (nil: training).
func (j *jobFlags) inference() (*predict.Inference, error) {
	mode, err := predict.ParseMode(j.mode)
	if err != nil {
		if near := models.Nearest(j.mode, []string{"train", "eval", "generate"}, 1); len(near) > 0 {
			return nil, usagef("--mode: %v; did you mean %s?", err, near[0])
		}
		return nil, usagef("--mode: %v", err)
	}
	gen := mode == predict.ModeGenerate
	for _, f := range []struct {
		name string
		set  bool
	}{{"--prompt", j.prompt != 0}, {"--new-tokens", j.newTokens != 0}, {"--cache", j.cache != "dynamic"}, {"--beams", j.beams != 1}} {
		if f.set && !gen {
			return nil, usagef("%s is for --mode generate", f.name)
		}
	}
	if mode == predict.ModeTrain {
		if j.castLoop {
			return nil, usagef("--autocast-around-loop is for --mode eval")
		}
		return nil, nil
	}
	if !j.inferOK {
		return nil, usagef("--mode %s is for estimate, sweep and maxbatch", mode)
	}
	if j.accumulate != 1 || j.checkpointing || j.checkpoint.v != "none" {
		return nil, usagef("--accumulate and activation checkpointing are for training, not --mode %s", mode)
	}
	if j.castLoop && gen {
		return nil, usagef("--autocast-around-loop is for --mode eval: generate() is one autocast region already")
	}
	in := &predict.Inference{Mode: mode}
	if !gen {
		return in, nil
	}
	switch {
	case j.prompt < 0:
		return nil, usagef("--prompt must be positive, got %d", j.prompt)
	case j.prompt > 0 && j.seq > 0 && j.prompt != j.seq:
		return nil, usagef("--prompt %d and --seq %d disagree: the prompt is the sequence", j.prompt, j.seq)
	case j.newTokens <= 0:
		return nil, usagef("--mode generate needs --new-tokens, a positive number of tokens to generate")
	case j.beams < 1:
		return nil, usagef("--beams must be at least 1, got %d", j.beams)
	}
	switch j.cache {
	case "dynamic":
	case "static":
		in.Static = true
	default:
		return nil, usagef("--cache %q: want dynamic or static", j.cache)
	}
	in.NewTokens, in.Beams = j.newTokens, j.beams
	return in, nil
}
