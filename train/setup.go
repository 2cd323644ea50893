package train

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
)

// Precision uses Lightning's names.
type Precision string

const (
	FP32      Precision = "32-true"
	Mixed16   Precision = "16-mixed"
	MixedBF16 Precision = "bf16-mixed"
	True16    Precision = "16-true"
	TrueBF16  Precision = "bf16-true"
)

// Precisions are the precisions simulated, by Lightning's names: the
// flags' choices and the page's options.
var Precisions = []Precision{FP32, Mixed16, MixedBF16, True16, TrueBF16}

// Lightning's precision names (lightning/fabric/plugins/precision/precision.py,
// _PRECISION_INPUT_STR, Lightning 2.x, Apache-2.0) and the short forms its
// connector converts (_PRECISION_INPUT_STR_ALIAS_CONVERSION: "64" is
// 64-true, "32" 32-true, "16" 16-mixed, "bf16" bf16-mixed; the integers 64,
// 32 and 16 are read as those strings). fp32 and float32 are unambiguous and
// kept. Bare dtype names that Lightning does not define — fp16, float16,
// bfloat16 — could mean the mixed or the true setting, so they are refused
// with both choices named.
var precisionAliases = map[string]Precision{
	"32-true": FP32, "16-mixed": Mixed16, "bf16-mixed": MixedBF16, "16-true": True16, "bf16-true": TrueBF16,
	"32": FP32, "16": Mixed16, "bf16": MixedBF16,
	"fp32": FP32, "float32": FP32,
}

// PrecisionAliases lists the short forms Lightning converts, as "bf16 =
// bf16-mixed", for help texts.
func PrecisionAliases() string {
	return "32 = 32-true, 16 = 16-mixed, bf16 = bf16-mixed (Lightning's aliases)"
}

// unsupportedPrecision names Lightning's precisions that no rule here
// simulates, with why.
var unsupportedPrecision = map[string]string{
	"64-true":                    "float64 training (Lightning's 64-true) is not simulated",
	"64":                         "float64 training (Lightning's 64, that is 64-true) is not simulated",
	"transformer-engine":         "Transformer Engine's FP8 training (Lightning's transformer-engine) is not simulated",
	"transformer-engine-float16": "Transformer Engine's FP8 training (Lightning's transformer-engine-float16) is not simulated",
}

// ambiguousPrecision are dtype names that are not Lightning's and name no
// single setting.
var ambiguousPrecision = map[string][2]Precision{
	"fp16": {Mixed16, True16}, "float16": {Mixed16, True16}, "half": {Mixed16, True16},
	"bfloat16": {MixedBF16, TrueBF16},
}

// ParsePrecision accepts Lightning's precision names and the aliases
// Lightning itself converts.
func ParsePrecision(s string) (Precision, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	if p, ok := precisionAliases[k]; ok {
		return p, nil
	}
	if why, ok := unsupportedPrecision[k]; ok {
		return "", fmt.Errorf("precision %q: %s (want 32-true, 16-mixed, bf16-mixed, 16-true or bf16-true)", s, why)
	}
	if two, ok := ambiguousPrecision[k]; ok {
		return "", fmt.Errorf("precision %q is ambiguous: say %s (autocast, float32 weights) or %s (the weights themselves in 16 bits)", s, two[0], two[1])
	}
	return "", fmt.Errorf("unknown precision %q (want 32-true, 16-mixed, bf16-mixed, 16-true or bf16-true; %s)", s, PrecisionAliases())
}

// Autocast reports whether the precision runs the forward under autocast,
// and the lower-precision dtype.
func (p Precision) Autocast() (graph.DType, bool) {
	switch p {
	case Mixed16:
		return graph.F16, true
	case MixedBF16:
		return graph.BF16, true
	}
	return graph.F32, false
}

// ParamDType is the dtype the model's parameters are stored in.
func (p Precision) ParamDType() graph.DType {
	switch p {
	case True16:
		return graph.F16
	case TrueBF16:
		return graph.BF16
	}
	return graph.F32
}

// OptimizerKind is a torch.optim class.
type OptimizerKind string

const (
	SGD   OptimizerKind = "sgd"
	Adam  OptimizerKind = "adam"
	AdamW OptimizerKind = "adamw"
	// Adafactor is transformers.optimization.Adafactor with its defaults
	// (no first moment: beta1=None).
	Adafactor OptimizerKind = "adafactor"
	// NoOptimizer simulates forward and backward only.
	NoOptimizer OptimizerKind = "none"
)

// ParseOptimizer accepts torch.optim's names, case-insensitively.
func ParseOptimizer(s string) (OptimizerKind, error) {
	switch k := OptimizerKind(strings.ToLower(s)); k {
	case SGD, Adam, AdamW, Adafactor, NoOptimizer:
		return k, nil
	}
	return "", fmt.Errorf("unknown optimizer %q (want sgd, adam, adamw, adafactor or none)", s)
}

// Impl is the optimizer implementation: torch.optim's foreach and fused
// flags, or the per-parameter for-loop.
type Impl string

const (
	ImplDefault Impl = "" // what the runtime profile says torch.optim picks
	ForLoop     Impl = "forloop"
	Foreach     Impl = "foreach"
	Fused       Impl = "fused"
)

// Optimizer describes the optimizer and its arguments that change memory.
type Optimizer struct {
	Kind     OptimizerKind
	Momentum float64 // SGD: a nonzero momentum keeps a momentum buffer per parameter
	Nesterov bool
	Impl     Impl
	// WeightDecay: for Adam and SGD, L2 decay is added to the gradient out of
	// place (one extra copy of the gradients under foreach); AdamW decays
	// the parameters in place.
	WeightDecay float64
	AMSGrad     bool
	Maximize    bool
	// Bits8 is bitsandbytes' 8-bit Adam (Adam8bit, AdamW8bit): block-wise
	// quantized uint8 states; Paged keeps the large states in CUDA unified
	// memory (PagedAdamW8bit), outside PyTorch's allocator. Paged alone is
	// bitsandbytes' 32-bit PagedAdam / PagedAdamW (optim_bits=32).
	Bits8, Paged bool
}

// Bnb reports whether the optimizer is bitsandbytes' (Optimizer2State)
// rather than torch.optim's.
func (o Optimizer) Bnb() bool { return o.Bits8 || o.Paged }

// Name is the optimizer's class name as the user gives it.
func (o Optimizer) Name() string {
	n := string(o.Kind)
	if o.Bits8 {
		n += "8bit"
	}
	if o.Paged {
		n = "paged_" + n
	}
	return n
}

// OptimizerEntry is one optimizer batchfit simulates: the name a user
// gives (--optimizer), the Python class a training run reports, and the
// optimizer it is.
type OptimizerEntry struct {
	Name  string
	Class string
	Optimizer
}

// Optimizers is the one table of the optimizers batchfit simulates:
// torch.optim's and transformers' first, then bitsandbytes' Adams. The
// flags' help, the page's options, the server's accepted values and a
// recorded run's optimizer are all read from it, so an optimizer added
// here appears in each.
var Optimizers = []OptimizerEntry{
	{"sgd", "SGD", Optimizer{Kind: SGD}},
	{"adam", "Adam", Optimizer{Kind: Adam}},
	{"adamw", "AdamW", Optimizer{Kind: AdamW}},
	{"adafactor", "Adafactor", Optimizer{Kind: Adafactor}},
	{"none", "", Optimizer{Kind: NoOptimizer}},
	{"adam8bit", "Adam8bit", Optimizer{Kind: Adam, Bits8: true}},
	{"adamw8bit", "AdamW8bit", Optimizer{Kind: AdamW, Bits8: true}},
	{"paged_adam8bit", "PagedAdam8bit", Optimizer{Kind: Adam, Bits8: true, Paged: true}},
	{"paged_adamw8bit", "PagedAdamW8bit", Optimizer{Kind: AdamW, Bits8: true, Paged: true}},
	{"paged_adam", "PagedAdam", Optimizer{Kind: Adam, Paged: true}},
	{"paged_adamw", "PagedAdamW", Optimizer{Kind: AdamW, Paged: true}},
}

// OptimizerNames are the names of Optimizers, in the table's order.
func OptimizerNames() []string {
	out := make([]string, len(Optimizers))
	for i, o := range Optimizers {
		out[i] = o.Name
	}
	return out
}

// OptimizerList says the optimizers' names for a help text or an error:
// torch.optim's (and transformers') first, then bitsandbytes'.
func OptimizerList() string {
	var torch, bnb []string
	for _, o := range Optimizers {
		if o.Bnb() {
			bnb = append(bnb, o.Name)
		} else {
			torch = append(torch, o.Name)
		}
	}
	s := strings.Join(torch, ", ")
	if len(bnb) > 0 {
		s += ", or bitsandbytes' " + strings.Join(bnb, ", ")
	}
	return s
}

// OptimizerByClass is the optimizer of a Python class name a training run
// reports (torch.optim.AdamW is "AdamW"), false for one not simulated.
func OptimizerByClass(class string) (OptimizerEntry, bool) {
	for _, o := range Optimizers {
		if o.Class != "" && o.Class == class {
			return o, true
		}
	}
	return OptimizerEntry{}, false
}

// ParseOptimizerName reads the names of Optimizers case-insensitively,
// with or without underscores (paged_adamw8bit, PagedAdamW8bit).
func ParseOptimizerName(s string) (Optimizer, error) {
	squash := func(s string) string { return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "_", "") }
	k := squash(s)
	for _, o := range Optimizers {
		if squash(o.Name) == k {
			return o.Optimizer, nil
		}
	}
	if strings.HasPrefix(k, "paged") || strings.HasSuffix(k, "8bit") {
		var bnb []string
		for _, o := range Optimizers {
			if o.Bnb() {
				bnb = append(bnb, o.Name)
			}
		}
		if kind, err := ParseOptimizer(strings.TrimSuffix(strings.TrimPrefix(k, "paged"), "8bit")); err == nil && kind != Adam && kind != AdamW {
			return Optimizer{}, fmt.Errorf("optimizer %q: batchfit knows bitsandbytes' Adam and AdamW (%s)", s, strings.Join(bnb, ", "))
		}
	}
	return Optimizer{}, fmt.Errorf("unknown optimizer %q (want %s)", s, OptimizerList())
}

// Attention names the attention kernel.
type Attention string

const (
	AttentionAuto      Attention = "auto"  // what PyTorch's dispatcher picks (runtime profile + dtype)
	AttentionEager     Attention = "eager" // explicit matmul, softmax, matmul as Python-level ops (autocast applies to each)
	AttentionMath      Attention = "math"  // SDPA's math kernel (one op to autocast)
	AttentionFlash     Attention = "flash"
	AttentionEfficient Attention = "efficient"
	// AttentionCudnn is cuDNN's fused attention
	// (_scaled_dot_product_cudnn_attention, aten/src/ATen/native/cudnn/MHA.cpp).
	AttentionCudnn Attention = "cudnn"
)

// Attentions are the attention kernels by the names ParseAttention
// gives: the flags' choices and the page's options.
var Attentions = []Attention{AttentionAuto, AttentionEager, AttentionCudnn, AttentionFlash, AttentionEfficient, AttentionMath}

// ParseAttention accepts the kernel names, and "eager"/"sdpa" as Hugging
// Face spells attn_implementation.
func ParseAttention(s string) (Attention, error) {
	switch strings.ToLower(s) {
	case "", "auto", "sdpa":
		return AttentionAuto, nil
	case "eager":
		return AttentionEager, nil
	case "math", "sdpa-math", "sdpa_math":
		return AttentionMath, nil
	case "flash", "flash_attention", "flash-attention":
		return AttentionFlash, nil
	case "efficient", "mem-efficient", "memory-efficient", "mem_efficient":
		return AttentionEfficient, nil
	case "cudnn", "cudnn_attention", "cudnn-attention":
		return AttentionCudnn, nil
	}
	return "", fmt.Errorf("unknown attention kernel %q (want auto, eager, cudnn, flash, efficient or math)", s)
}

// Checkpoint is an activation-checkpointing policy: which regions of the
// forward pass torch.utils.checkpoint(use_reentrant=False) wraps. A wrapped
// region keeps only the tensors it reads from outside and recomputes its
// forward when backward reaches it.
type Checkpoint struct {
	// Every wraps every Every-th block of the graph (blocks 0, Every,
	// 2·Every, …): 1 is the usual per-block checkpointing, 0 wraps none.
	Every int
	// Attention wraps each attention core on its own, in blocks not
	// already wrapped: the scores, softmax and dropout of the eager and
	// math kernels are recomputed instead of kept — Megatron-LM's
	// "selective" recomputation (Korthikanti et al., 2022, "Reducing
	// Activation Recomputation in Large Transformer Models").
	Attention bool
	// Reentrant is torch.utils.checkpoint(use_reentrant=True)
	// (CheckpointFunction): the region's forward runs under no_grad and
	// its backward reruns it whole before a nested backward. Off, the
	// saved-tensor hooks of _checkpoint_without_reentrant_generator.
	Reentrant bool
	// Library is the model library's own checkpointing, transformers'
	// model.gradient_checkpointing_enable(): every layer of the model's
	// stacks through torch.utils.checkpoint (Every is 1), and use_cache
	// off in training (GPT2Model.forward, T5Stack.forward, LlamaModel.
	// forward in modeling_*.py: "`use_cache=True` is incompatible with
	// gradient checkpointing"), so the output keeps no past_key_values:
	// the graph is built with graph.Config.NoCache.
	Library bool
	// Timm is timm's model.set_grad_checkpointing(True) (timm 1.0):
	// checkpoint_seq (timm/models/_manipulate.py) calls
	// torch.utils.checkpoint.checkpoint(run_function(j, j), x) for each
	// block of each stage, with no use_reentrant, which PyTorch 2.x
	// takes as True (torch/utils/checkpoint.py, checkpoint). Every is 1
	// and a captured model's blocks are the innermost repeated modules
	// (graph.Config.InnerBlocks); "timm-non-reentrant" is the same calls
	// with use_reentrant=False.
	Timm bool
}

// FullCheckpoint wraps every block.
var FullCheckpoint = Checkpoint{Every: 1}

// On reports whether anything is wrapped.
func (c Checkpoint) On() bool { return c.Every > 0 || c.Attention }

// String is the policy as ParseCheckpoint reads it.
func (c Checkpoint) String() string {
	var parts []string
	switch {
	case c.Every == 1:
		parts = append(parts, "full")
	case c.Every > 1:
		parts = append(parts, fmt.Sprintf("every-%d", c.Every))
	}
	if c.Library || c.Timm {
		// the library's checkpointing wraps every block
		lib := "hf"
		if c.Timm {
			lib = "timm"
		}
		parts = parts[:0]
		if c.Reentrant {
			parts = append(parts, lib)
		} else {
			parts = append(parts, lib+"-non-reentrant")
		}
	} else if c.Reentrant && len(parts) > 0 {
		parts[0] += "-reentrant"
	}
	if c.Attention {
		parts = append(parts, "attention")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// CheckpointNames are the policy names ParseCheckpoint knows.
var CheckpointNames = []string{"none", "full", "every-K", "attention", "full-reentrant", "hf", "hf-non-reentrant", "timm", "timm-non-reentrant"}

// ParseCheckpoint reads a policy: "none", "full" (every block), "every-K"
// (every K-th block), "attention" (each attention core alone), or a block
// policy and "attention" joined by "+". A block policy ending in
// "-reentrant" uses use_reentrant=True. "hf" is transformers' own
// gradient_checkpointing_enable() with its default kwargs, which in
// transformers 4.44 are {"use_reentrant": True} (modeling_utils.py,
// gradient_checkpointing_enable); "hf-non-reentrant" passes
// gradient_checkpointing_kwargs={"use_reentrant": False}. "timm" is
// timm's set_grad_checkpointing(True) (Checkpoint.Timm), reentrant;
// "timm-non-reentrant" the same calls with use_reentrant=False.
func ParseCheckpoint(s string) (Checkpoint, error) {
	var c Checkpoint
	for _, part := range strings.Split(strings.ToLower(strings.TrimSpace(s)), "+") {
		part = strings.TrimSpace(part)
		switch part {
		case "hf", "hf-reentrant", "hf-non-reentrant", "hf-nonreentrant":
			if strings.Contains(s, "+") {
				return c, fmt.Errorf("checkpointing %q: hf, transformers' own checkpointing of every layer, joins nothing", s)
			}
			c.Every, c.Library, c.Reentrant = 1, true, !strings.Contains(part, "non")
			continue
		case "timm", "timm-reentrant", "timm-non-reentrant", "timm-nonreentrant":
			if strings.Contains(s, "+") {
				return c, fmt.Errorf("checkpointing %q: timm, timm's own checkpointing of every block, joins nothing", s)
			}
			c.Every, c.Timm, c.Reentrant = 1, true, !strings.Contains(part, "non")
			continue
		}
		if p, ok := strings.CutSuffix(part, "-reentrant"); ok {
			// only a block policy: it names the torch.utils.checkpoint
			// call around each block
			if p != "full" && !strings.HasPrefix(p, "every") {
				return c, fmt.Errorf("checkpointing %q: -reentrant follows full or every-K", s)
			}
			c.Reentrant = true
			part = p
		}
		switch part {
		case "none", "off", "false", "no":
			if strings.Contains(s, "+") {
				return c, fmt.Errorf("checkpointing %q: none joins nothing", s)
			}
			continue
		case "full", "all", "blocks", "block", "true", "on", "yes":
			c.Every = 1
			continue
		case "attention", "attn", "selective", "core-attention":
			c.Attention = true
			continue
		}
		num := ""
		for _, pre := range []string{"every-", "every:", "every_", "every"} {
			if strings.HasPrefix(part, pre) {
				num = strings.TrimPrefix(part, pre)
				break
			}
		}
		k, err := strconv.Atoi(num)
		if num == "" || err != nil || k < 1 || k > 1<<20 {
			return c, fmt.Errorf("unknown checkpointing policy %q (want none, full, every-K with K ≥ 1, attention, a block policy+attention, full-reentrant or every-K-reentrant, hf or hf-non-reentrant, timm or timm-non-reentrant)", s)
		}
		c.Every = k
	}
	return c, nil
}

// Setup is how a graph is trained: everything besides the model.
type Setup struct {
	Precision Precision
	Optimizer Optimizer
	// Accumulate is the number of micro-batches per optimizer step (1 = no
	// gradient accumulation).
	Accumulate int
	// Checkpoint says which parts of the forward pass run under
	// torch.utils.checkpoint(use_reentrant=False).
	Checkpoint Checkpoint
	Attention  Attention
	// Steps is the number of optimizer steps to simulate (default 3: the
	// first step creates optimizer state, later ones start with it).
	Steps int
	// CPU runs the CPU kernels (for cross-checks against CPU PyTorch):
	// dropout saves a noise tensor in the input dtype instead of a bool mask,
	// batch norm has no cuDNN reserve, and there is no cuBLAS workspace.
	CPU bool
	// NNPACK says the CPU build has NNPACK (torch._nnpack_available():
	// the package index's wheels do, Debian's python3-torch 1.13 does
	// not). With CPU and oneDNN off, a float32 convolution of a batch of
	// 16 or more then runs NNPACK's kernel (conv_cpu.go).
	NNPACK bool
	// ComputeMajor is the GPU's compute capability major (workspace size).
	ComputeMajor int
	// SMs and ThreadsPerSM are the GPU's multiprocessorCount and
	// maxThreadsPerMultiProcessor, which CUDA's reduction kernel sizes its
	// grid by (reduce_cuda.go); 0 means an H100's or H200's (132 and 2048),
	// the GPU of ComputeMajor's default.
	SMs, ThreadsPerSM int
	// CudnnBenchmark is torch.backends.cudnn.benchmark = True: the first
	// convolution of each configuration searches cuDNN's algorithms
	// (conv_cudnn.go).
	CudnnBenchmark bool
	// ChannelsLast says the model and its batch are in channels-last
	// memory format (model.to(memory_format=torch.channels_last)): cuDNN's
	// tensor-core convolutions then read and write NHWC as they are, with
	// no transposes around them (the step-time model's, and under cuDNN 9's
	// rule no transposed copies in the workspace: conv_cudnn.go).
	ChannelsLast bool
	// LoopOverhead is the training loop's own work for each micro-batch
	// that the GPU waits for, outside the model's ops: a framework's hooks,
	// an input pipeline that copies on the training stream (the
	// step-time model's; the user's measurement, zero by default: a plain
	// eager loop with its batches ready).
	LoopOverhead time.Duration
	// CublasWorkspaceConfig is CUBLAS_WORKSPACE_CONFIG ("" for none): the
	// cuBLAS workspace size (profile.ParseCublasWorkspaceConfig).
	CublasWorkspaceConfig string
	// EmptyCache calls torch.cuda.empty_cache() after every step.
	EmptyCache bool
	// KeepOutput: the training loop holds the forward's output (a
	// ModelOutput beside its loss: the graph's Returned tensors, a Hugging
	// Face model's logits) through backward and the optimizer step, until
	// the next forward's output rebinds the name, as a script does with
	// output = model(...); loss = output.loss; loss.backward() (Answer.AI's
	// fsdp_qlora train.py). transformers' Trainer.compute_loss drops the
	// outputs before it returns the loss, so by default they go at their
	// last use.
	KeepOutput bool
	// Parallel spreads the step over data-parallel ranks (DDP, FSDP,
	// ZeRO); the zero value is one GPU.
	Parallel Parallel
	// Stages and Stage place the graph in a pipeline of Stages stages
	// run with the 1F1B schedule; Accumulate is then the number of
	// micro-batches of a step (0 or 1 stages: no pipeline).
	Stages, Stage int
	// Autocast says how the mixed precisions' autocast region is entered
	// and what its weight-cast cache keeps (the zero value: torch.autocast's
	// defaults around each forward, under torch.no_grad() in eval).
	Autocast Autocast
	Profile  *profile.Profile
}

// Autocast is the autocast region of a forward and its weight-cast cache
// (cached_cast and cached_casts in aten/src/ATen/autocast_mode.cpp).
type Autocast struct {
	// CacheOff is torch.autocast(..., cache_enabled=False): cached_cast's
	// can_try_cache requires cache_enabled, so every use of a parameter
	// makes a new low-precision copy that goes when the op (or, in
	// training, the node that saved it) is done with it.
	CacheOff bool
	// InferenceMode: eval runs under torch.inference_mode() rather than
	// torch.no_grad(). Parameters made outside it keep requires_grad, so
	// cached_cast caches their casts all the same, except in the releases
	// whose profile says AutocastCacheOffInInferenceMode.
	InferenceMode bool
	// AroundLoop: one autocast region encloses the whole eval loop
	// (autocast entered before the loop): the cache is cleared only when
	// the outermost autocast exits (autocast.__exit__ clears it when
	// autocast_decrement_nesting() returns 0, torch/amp/autocast_mode.py),
	// so the copies made in the first forward live to the loop's end.
	AroundLoop bool
}

// Normalize fills defaults and checks values.
func (s Setup) Normalize() (Setup, error) {
	var err error
	if s.LoopOverhead < 0 || s.LoopOverhead > time.Minute {
		return s, fmt.Errorf("the loop's overhead per micro-batch must be between 0 and a minute, got %v", s.LoopOverhead)
	}
	if s.Precision == "" {
		s.Precision = FP32
	}
	if _, err := ParsePrecision(string(s.Precision)); err != nil {
		return s, err
	}
	if s.Optimizer.Kind == "" {
		s.Optimizer.Kind = Adam
	}
	if _, err := ParseOptimizer(string(s.Optimizer.Kind)); err != nil {
		return s, err
	}
	if s.Accumulate == 0 {
		s.Accumulate = 1
	}
	if s.Accumulate < 0 {
		return s, fmt.Errorf("gradient accumulation must be at least 1, got %d", s.Accumulate)
	}
	if s.Steps == 0 {
		s.Steps = 3
	}
	if s.Steps < 0 || s.Steps > 1000 {
		return s, fmt.Errorf("steps must be between 1 and 1000, got %d", s.Steps)
	}
	if s.Checkpoint.Every < 0 {
		return s, fmt.Errorf("checkpointing every %d blocks: want at least 1", s.Checkpoint.Every)
	}
	if s.Attention == "" {
		s.Attention = AttentionAuto
	}
	// torch.optim.SGD raises "Invalid momentum value" and every optimizer
	// "Invalid weight_decay value" below 0; NaN fails both comparisons
	// there and is refused here too
	if !(s.Optimizer.Momentum >= 0) || math.IsInf(s.Optimizer.Momentum, 0) {
		return s, fmt.Errorf("momentum must be a finite number of 0 or more, got %g", s.Optimizer.Momentum)
	}
	if !(s.Optimizer.WeightDecay >= 0) || math.IsInf(s.Optimizer.WeightDecay, 0) {
		return s, fmt.Errorf("weight decay must be a finite number of 0 or more, got %g", s.Optimizer.WeightDecay)
	}
	if s.Profile == nil {
		s.Profile = profile.Default()
	}
	if s.ComputeMajor == 0 {
		s.ComputeMajor = 9
	}
	if _, _, err := profile.ParseCublasWorkspaceConfig(s.CublasWorkspaceConfig); err != nil {
		return s, err
	}
	if s.Optimizer.Impl == ImplDefault {
		s.Optimizer.Impl = Impl(s.Profile.OptimizerDefaultImpl)
	}
	switch s.Optimizer.Impl {
	case ForLoop, Foreach, Fused:
	default:
		return s, fmt.Errorf("unknown optimizer implementation %q (want forloop, foreach or fused)", s.Optimizer.Impl)
	}
	if s.Parallel, err = s.Parallel.normalize(); err != nil {
		return s, err
	}
	if s.Stages < 0 || s.Stages > 1<<12 || s.Stages > 1 && (s.Stage < 0 || s.Stage >= s.Stages) {
		return s, fmt.Errorf("pipeline stage %d of %d: want 0 ≤ stage < stages ≤ 4096", s.Stage, s.Stages)
	}
	if s.Parallel.On() && s.CPU {
		return s, fmt.Errorf("the CPU cross-check runs on one device, not %s", s.Parallel)
	}
	if s.Optimizer.Impl == Fused && s.Optimizer.Kind == SGD && s.Optimizer.Momentum == 0 {
		// fused SGD exists (2.3+) and, like foreach without momentum, is in place.
		s.Optimizer.Impl = Foreach
	}
	return s, nil
}

func (s Setup) smCount() int64 {
	if s.SMs > 0 {
		return int64(s.SMs)
	}
	return 132
}

func (s Setup) threadsPerSM() int64 {
	if s.ThreadsPerSM > 0 {
		return int64(s.ThreadsPerSM)
	}
	return 2048
}
