package job

import (
	"fmt"
	"slices"
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

// checkDims refuses --layers, --hidden and --seq for a model that cannot
// vary them (its Dims): a vision model has no sequence, a torchvision
// ResNet no depth to override, and taking the flag silently would show
// a figure for a model that was not built.
func (j *Job) checkDims(src predict.Source) error {
	dims := src.Dims()
	for _, f := range []struct {
		name, what string
		n          int64
		dim        models.Dim
	}{{"--layers", "its depth", j.Layers, models.DimLayers}, {"--hidden", "its width", j.Hidden, models.DimHidden}, {"--seq", "its sequence length", j.Seq, models.DimSeq}} {
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
		return Usagef("%s: %s %s (what it can vary: %s)", f.name, src.Name(), what, strings.Join(can, ", "))
	}
	if j.Image != 0 && !takesImage(src) {
		return Usagef("--image: %s takes no image (the image side is for torchvision's models and ViTs)", src.Name())
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

// Options are what a job's request is made with besides its fields.
type Options struct {
	// Env are the environment's values of the fields that fall back to
	// one; none on the web and in tests.
	Env Env
	// Sources says where the model may come from.
	Sources Sources
	// Inference: the command answers for --mode eval and generate too.
	Inference bool
}

// RequestFor builds the prediction request for the model the job names
// (opened as o.Sources allows). The batch is left for the caller, which
// may run several (ParseBatches).
func (j Job) RequestFor(model string, o Options) (predict.Request, error) {
	src, err := Open(model, o.Sources)
	if err != nil {
		return predict.Request{}, err
	}
	return j.Request(src, o)
}

// Request builds the prediction request for src from the job's fields:
// the fields are checked against each other (what needs adapters, which
// optimizers have a single implementation, ...) and their defaults
// resolved. A field left empty that falls back to the environment takes
// o.Env's value.
func (j Job) Request(src predict.Source, o Options) (predict.Request, error) {
	var r predict.Request
	r.Source = src
	for _, v := range []struct {
		name string
		n    int64
	}{{"--seq", j.Seq}, {"--layers", j.Layers}, {"--hidden", j.Hidden}, {"--image", j.Image}} {
		if v.n < 0 {
			return r, Usagef("%s must be positive, got %d", v.name, v.n)
		}
	}
	if err := j.checkDims(src); err != nil {
		return r, err
	}
	ad, err := j.adapters()
	if err != nil {
		return r, err
	}
	r.Config = models.Config{Seq: j.Seq, Layers: j.Layers, Hidden: j.Hidden, Image: j.Image, Adapters: ad}
	if j.Transformers != "" {
		if !builtByTransformers(src) {
			return r, Usagef("--transformers applies to models run by transformers' modeling code (the zoo's transformers models, Hugging Face configs); %s is not one", src.Name())
		}
		if err := models.CheckTransformersRelease(j.Transformers); err != nil {
			return r, Usagef("--transformers: %v", err)
		}
		r.Config.Transformers = j.Transformers
	}
	if j.LossFromLogits && !builtByTransformers(src) {
		return r, Usagef("--loss-from-logits applies to language models run by transformers' modeling code (the zoo's transformers models, Hugging Face configs); %s is not one", src.Name())
	}
	if err := j.modelParallel(&r.Config); err != nil {
		return r, err
	}
	prec, err := train.ParsePrecision(j.Precision)
	if err != nil {
		return r, UsageError{err}
	}
	q, err := j.quantization(prec)
	if err != nil {
		return r, err
	}
	if sq := sourceQuant(src); sq != nil {
		if q != nil {
			return r, Usagef("%s stores %s weights (its quantization_config): drop --quant", src.Name(), sq)
		}
		q = sq
	}
	if r.Infer, err = j.inference(o.Inference); err != nil {
		return r, err
	}
	if q != nil && q.Torchao && j.BnbVersion != "" {
		return r, Usagef("--bnb-version is bitsandbytes'; --quant-via torchao is torchao's NF4Tensor")
	}
	if q != nil && (q.Format == graph.NF4 || q.Format == graph.FP4) && !q.Torchao {
		keeps, err := graph.BnbKeepsInput(j.BnbVersion)
		if err != nil {
			return r, Usagef("--bnb-version: %v", err)
		}
		q.KeepsInput = keeps
		// a pre-quantized checkpoint's QuantState keeps the dtype it
		// was saved with (QuantState.from_dict)
		half, _ := graph.BnbHalfState(j.BnbVersion)
		q.HalfState = q.HalfState || half && !q.Prequantized
		if st, _ := train.ParseStrategy(j.Strategy); st == train.FSDP || st == train.FSDP2 {
			// FSDP flattens float tensors only: FSDP-QLoRA stores the
			// codes in the model's dtype (bnb_4bit_quant_storage,
			// bitsandbytes 0.43.0 and later)
			if old, _ := graph.BnbHalfState(j.BnbVersion); old && j.BnbVersion != "" {
				return r, Usagef("--bnb-version %s: FSDP with 4-bit weights needs bnb_4bit_quant_storage, bitsandbytes 0.43.0 or later", j.BnbVersion)
			}
			q.FloatStorage = true
		}
	} else if j.BnbVersion != "" {
		return r, Usagef("--bnb-version applies to bitsandbytes' 4-bit weights (--quant nf4 or fp4, or such a checkpoint)")
	}
	if q != nil && (ad == nil || ad.Rank == 0) && r.Infer == nil {
		// transformers' Trainer: "You cannot perform fine-tuning on purely
		// quantized models. Please attach trainable adapters"
		return r, Usagef("quantized weights (%s) are never trained: fine-tune with adapters on top (--lora R --lora-targets ...), as transformers' Trainer requires, or predict inference (--mode eval or generate)", q.Format)
	}
	r.Config.Quant = q
	if j.Prompt > 0 {
		r.Config.Seq = j.Prompt
	}
	// --like names the catalog GPU a size is: another size says nothing
	// of speed or of the share PyTorch can use
	if _, err := gpu.ParseSize(j.Like); j.Like != "" && err == nil {
		return r, Usagef("--like %q: name a GPU from 'batchfit gpus' (the size goes in --gpu)", j.Like)
	}
	g, err := gpu.LookupLike(j.GPU, j.Like)
	if err != nil {
		return r, UsageError{err}
	}
	r.GPU = g
	r.Context = -1
	if j.Context != "" {
		n, err := gpu.ParseSize(j.Context)
		if err != nil {
			return r, Usagef("--context: %v", err)
		}
		r.Context = n
	}
	if j.NCCLBuffsize != "" {
		n, err := gpu.ParseSize(j.NCCLBuffsize)
		if err != nil {
			return r, Usagef("--nccl-buffsize: %v", err)
		}
		if n <= 0 {
			return r, Usagef("--nccl-buffsize: NCCL_BUFFSIZE must be positive, got %q", j.NCCLBuffsize)
		}
		if err := checkNCCLBuffsize(n, g); err != nil {
			return r, err
		}
		r.NCCLBuffSize = n
	}
	on, err := train.ParseOptimizerName(j.Optimizer)
	if err != nil {
		return r, UsageError{err}
	}
	opt := on.Kind
	impl := train.ImplDefault
	n := 0
	for _, f := range []struct {
		on bool
		i  train.Impl
	}{{j.Foreach, train.Foreach}, {j.Fused, train.Fused}, {j.ForLoop, train.ForLoop}} {
		if f.on {
			impl = f.i
			n++
		}
	}
	if n > 1 {
		return r, Usagef("--foreach, --fused and --forloop exclude each other")
	}
	// torch.optim's defaults: 0, AdamW's 0.01
	wd := 0.0
	if opt == train.AdamW {
		wd = 0.01
	}
	if j.WeightDecay != nil {
		wd = *j.WeightDecay
	}
	att, err := train.ParseAttention(j.Attention)
	if err != nil {
		return r, UsageError{err}
	}
	prof, err := profile.Lookup(j.Torch)
	if err != nil {
		return r, UsageError{err}
	}
	if j.CUDA != "" {
		eager, err := profile.EagerModuleLoading(j.CUDA)
		if err != nil {
			return r, Usagef("--cuda: %v", err)
		}
		if eager && prof.CudaModuleLoading == "lazy" {
			return r, Usagef("--cuda %s: PyTorch %s was built for CUDA 11.7 or later only", j.CUDA, prof.Version)
		}
		r.EagerModules = eager
	}
	if j.Accumulate < 1 {
		return r, Usagef("--accumulate must be at least 1, got %d", j.Accumulate)
	}
	if j.Steps < 1 || j.Steps > 1000 {
		return r, Usagef("--steps must be between 1 and 1000, got %d", j.Steps)
	}
	ck, err := train.ParseCheckpoint(j.checkpoint())
	if err != nil {
		return r, Usagef("--checkpoint: %v", err)
	}
	if j.Checkpointing {
		if ck.On() && ck != train.FullCheckpoint {
			return r, Usagef("--checkpointing (every block) and --checkpoint %s exclude each other", ck)
		}
		if j.Checkpoint != "" && !ck.On() {
			return r, Usagef("--checkpointing turns checkpointing on and --checkpoint %s turns it off: give one", j.Checkpoint)
		}
		ck = train.FullCheckpoint
	}
	if j.AMSGrad && opt != train.Adam && opt != train.AdamW {
		return r, Usagef("--amsgrad is Adam's and AdamW's")
	}
	if on.Bnb() && n > 0 {
		return r, Usagef("--foreach, --fused and --forloop are torch.optim's; bitsandbytes' %s has one implementation", on.Name())
	}
	if opt == train.Adafactor {
		if n > 0 {
			return r, Usagef("--foreach, --fused and --forloop are torch.optim's; transformers' Adafactor loops over the parameters")
		}
		impl = train.ForLoop
	}
	par, err := j.parallel()
	if err != nil {
		return r, err
	}
	r.Setup = train.Setup{Precision: prec, Optimizer: train.Optimizer{Kind: opt, Momentum: j.Momentum, Impl: impl, WeightDecay: wd, Bits8: on.Bits8, Paged: on.Paged, AMSGrad: j.AMSGrad},
		Accumulate: j.Accumulate, Checkpoint: ck, Attention: att, Steps: j.Steps, EmptyCache: j.EmptyCache, Profile: prof, Parallel: par}
	r.Setup.CudnnBenchmark = j.CudnnBenchmark
	if j.KeepOutput && r.Infer != nil {
		return r, Usagef("--keep-output is for training: in eval and generate the loop always holds the output until the next forward")
	}
	r.Setup.KeepOutput = j.KeepOutput
	if j.LossFromLogits && r.Infer != nil {
		return r, Usagef("--loss-from-logits is for training: eval and generate compute no loss")
	}
	r.Config.LossFromLogits = j.LossFromLogits
	// transformers' gradient checkpointing turns use_cache off in
	// training (train.Checkpoint.Library)
	r.Config.NoCache = ck.Library
	r.Config.LibraryCheckpointing = ck.Library
	// timm's checkpoint_seq wraps each stage's blocks
	// (train.Checkpoint.Timm)
	r.Config.InnerBlocks = ck.Timm
	if _, amp := prec.Autocast(); !amp && (j.NoAutocastCache || j.AutocastAroundLoop) {
		return r, Usagef("--no-autocast-cache and --autocast-around-loop are for the mixed precisions (16-mixed, bf16-mixed), which run under autocast")
	}
	r.Setup.Autocast = train.Autocast{CacheOff: j.NoAutocastCache, AroundLoop: j.AutocastAroundLoop}
	if r.Setup.ChannelsLast, err = channelsLast(j.MemoryFormat); err != nil {
		return r, UsageError{err}
	}
	if j.LoopOverhead < 0 || j.LoopOverhead > time.Minute {
		return r, Usagef("--loop-overhead %v: want a duration from 0 to 1m", j.LoopOverhead)
	}
	r.Setup.LoopOverhead = j.LoopOverhead
	r.Setup.CublasWorkspaceConfig = o.Env.orEnv("cublas-workspace-config", j.CublasWorkspaceConfig)
	if _, _, err := profile.ParseCublasWorkspaceConfig(r.Setup.CublasWorkspaceConfig); err != nil {
		return r, UsageError{err}
	}
	conf := o.Env.orEnv("alloc-conf", j.AllocConf)
	ac, err := alloc.ParseConfig(conf)
	if err != nil {
		return r, Usagef("allocator configuration %q: %v", conf, err)
	}
	r.Alloc = ac
	return r, nil
}

// inference reads --mode and the generation flags (nil: training).
func (j *Job) inference(ok bool) (*predict.Inference, error) {
	mode, err := predict.ParseMode(j.Mode)
	if err != nil {
		if near := Nearest(j.Mode, []string{"train", "eval", "generate"}, 1); len(near) > 0 {
			return nil, Usagef("--mode: %v; did you mean %s?", err, near[0])
		}
		return nil, Usagef("--mode: %v", err)
	}
	gen := mode == predict.ModeGenerate
	for _, f := range []struct {
		name string
		set  bool
	}{{"--prompt", j.Prompt != 0}, {"--new-tokens", j.NewTokens != 0}, {"--cache", j.Cache != "dynamic"}, {"--beams", j.Beams != 1}} {
		if f.set && !gen {
			return nil, Usagef("%s is for --mode generate", f.name)
		}
	}
	if mode == predict.ModeTrain {
		if j.AutocastAroundLoop {
			return nil, Usagef("--autocast-around-loop is for --mode eval")
		}
		return nil, nil
	}
	if !ok {
		return nil, Usagef("--mode %s is for estimate, sweep and maxbatch", mode)
	}
	if j.Accumulate != 1 || j.Checkpointing || j.checkpoint() != "none" {
		return nil, Usagef("--accumulate and activation checkpointing are for training, not --mode %s", mode)
	}
	if j.AutocastAroundLoop && gen {
		return nil, Usagef("--autocast-around-loop is for --mode eval: generate() is one autocast region already")
	}
	in := &predict.Inference{Mode: mode}
	if !gen {
		return in, nil
	}
	switch {
	case j.Prompt < 0:
		return nil, Usagef("--prompt must be positive, got %d", j.Prompt)
	case j.Prompt > 0 && j.Seq > 0 && j.Prompt != j.Seq:
		return nil, Usagef("--prompt %d and --seq %d disagree: the prompt is the sequence", j.Prompt, j.Seq)
	case j.NewTokens <= 0:
		return nil, Usagef("--mode generate needs --new-tokens, a positive number of tokens to generate")
	case j.Beams < 1:
		return nil, Usagef("--beams must be at least 1, got %d", j.Beams)
	}
	switch j.Cache {
	case "dynamic":
	case "static":
		in.Static = true
	default:
		return nil, Usagef("--cache %q: want dynamic or static", j.Cache)
	}
	in.NewTokens, in.Beams = j.NewTokens, j.Beams
	return in, nil
}

// checkpoint is --checkpoint's policy, none where not given.
func (j *Job) checkpoint() string {
	if j.Checkpoint == "" {
		return "none"
	}
	return j.Checkpoint
}

// channelsLast reads --memory-format: contiguous (false) or channels_last.
func channelsLast(s string) (bool, error) {
	switch strings.ReplaceAll(strings.ToLower(s), "-", "_") {
	case "contiguous", "nchw", "contiguous_format", "":
		return false, nil
	case "channels_last", "nhwc":
		return true, nil
	}
	return false, fmt.Errorf("--memory-format %q: want contiguous or channels_last", s)
}
