package job

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// Choices are the sets that fields take a value of, each from the
// package that owns it.
type Choices struct {
	Optimizers []string
	Precisions []string
	Attention  []string
	Strategies []string
	Modes      []string
}

// DefaultChoices are the owning packages' sets: train's optimizers,
// precisions, attention kernels and strategies, predict's modes.
func DefaultChoices() Choices {
	var c Choices
	c.Optimizers = train.OptimizerNames()
	for _, p := range train.Precisions {
		c.Precisions = append(c.Precisions, string(p))
	}
	for _, a := range train.Attentions {
		c.Attention = append(c.Attention, string(a))
	}
	for _, s := range train.Strategies {
		c.Strategies = append(c.Strategies, string(s))
	}
	for _, m := range []predict.Mode{predict.ModeTrain, predict.ModeEval, predict.ModeGenerate} {
		c.Modes = append(c.Modes, string(m))
	}
	return c
}

// NewTable is the table of a Job's fields with the given choices: a test
// adds one (an optimizer) and sees it in the flags' help, the server's
// accepted values and the page's options, which are all made from it.
func NewTable(c Choices) Table {
	errOnly := func(f func(string) error) func(string) error { return f }
	t := Table{
		{Name: "model", Help: "the model: a zoo name, a .yaml spec, a Hugging Face config.json or model directory, or a .onnx file"},
		{Name: "batch", Help: "micro-batch size", Defaults: map[string]string{"estimate": "32", "snapshot": "32", "sweep": "1:256", "maxbatch": "1", "plan": "1", "oom": "1"}},
		{Name: "seq", Help: "sequence length (default: the model's)"},
		{Name: "layers", Help: "override the model's depth (models that allow it; at most 4096, and a graph of at most 65,536 ops)"},
		{Name: "hidden", Help: "override the model's width (models that allow it)"},
		{Name: "image", Help: "image side for vision models (default: the model's, 224 for torchvision)"},
		{Name: "gpu", Default: "h100-80gb", Help: "GPU from 'batchfit gpus', or a size such as 24GB (nvidia-smi's total; no step time unless --like names a GPU)"},
		{Name: "like", Help: "with a size for --gpu: the catalog GPU it is, whose speed, compute capability, CUDA context and share of nvidia-smi's total that PyTorch can use it takes"},
		{Name: "precision", Default: "32-true", Choices: c.Precisions, Help: "Lightning's {choices}; " + train.PrecisionAliases(),
			parse: errOnly(func(s string) error { _, err := train.ParsePrecision(s); return err })},
		{Name: "optimizer", Default: "adam", Choices: c.Optimizers, Help: "{choices} (the 8bit and paged ones are bitsandbytes')",
			parse: errOnly(func(s string) error { _, err := train.ParseOptimizerName(s); return err })},
		{Name: "momentum", Help: "SGD momentum (nonzero keeps a momentum buffer)"},
		{Name: "weight-decay", Help: "weight `decay` (default: torch.optim's: 0, AdamW 0.01)"},
		{Name: "foreach", Help: "use the foreach optimizer implementation"},
		{Name: "fused", Help: "use the fused optimizer implementation"},
		{Name: "forloop", Help: "use the per-parameter for-loop implementation"},
		{Name: "amsgrad", Help: "Adam's AMSGrad variant (one more state)"},
		{Name: "accumulate", Default: "1", Help: "micro-batches per optimizer step (gradient accumulation; at most 65,536, 1,024 with --pp)"},
		{Name: "checkpointing", Help: "activation checkpointing of every block (non-reentrant); the same as --checkpoint full"},
		{Name: "checkpoint", Default: "none", Help: "activation checkpointing: none, full (every block), every-K (every K-th block), attention (each attention core), or every-K+attention; torch.utils.checkpoint non-reentrant, reentrant with -reentrant (full-reentrant); hf, hf-non-reentrant: transformers' own gradient_checkpointing_enable() (reentrant by default; turns use_cache off); timm, timm-non-reentrant: timm's set_grad_checkpointing() (each stage's blocks; reentrant under torch 2.x's default)",
			parse: errOnly(func(s string) error { _, err := train.ParseCheckpoint(s); return err })},
		{Name: "attention", Default: "auto", Choices: c.Attention, Help: "attention kernel: {choices} (sdpa: auto, what PyTorch's dispatcher picks; cudnn: cuDNN's fused attention, which 2.11 tries first on compute capability 9.x and 10.x)",
			parse: errOnly(func(s string) error { _, err := train.ParseAttention(s); return err })},
		{Name: "torch", Help: "PyTorch version whose rules apply (default: current; known profiles: " + strings.Join(profile.Versions(), ", ") + ")"},
		{Name: "steps", Default: "3", Help: "optimizer steps to simulate (at most 1000)"},
		{Name: "alloc-conf", Env: []string{"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}, Help: "PYTORCH_CUDA_ALLOC_CONF (default: the environment variable)"},
		{Name: "context", Help: "the CUDA context: what the process holds outside PyTorch's allocator while it trains, nvidia-smi's figure less torch.cuda.memory_reserved() (default: the GPU family's context after torch.cuda.init, plus the kernels the step loads where the --torch profile measured them)"},
		{Name: "cuda", Help: "the CUDA runtime PyTorch was built for (torch.version.cuda, e.g. 11.3): before 11.7 every kernel loads at start-up, and the CUDA context is the eager one measured on a GPU (1343 MiB) unless --context gives it"},
		{Name: "nccl-buffsize", Help: "NCCL_BUFFSIZE, the Simple protocol's buffer per NCCL connection (default: NCCL's 4 MiB)"},
		{Name: "empty-cache", Help: "call torch.cuda.empty_cache() after every step"},
		{Name: "loss-from-logits", Help: "the training loop calls a language model without labels and takes F.cross_entropy(logits.view(-1, V), labels) of the logits it returns, with no float32 upcast of its own (default: the model's own loss, labels passed to forward, as transformers' Trainer does)"},
		{Name: "keep-output", Help: "the training loop holds the model's output (a transformers model's logits) through backward and the step, until the next forward: output = model(...); output.loss.backward(), as Answer.AI's fsdp_qlora does (default: dropped at its last use, as transformers' Trainer does)"},
		{Name: "cudnn-benchmark", Help: "torch.backends.cudnn.benchmark = True: the first step searches cuDNN's convolution algorithms"},
		{Name: "no-autocast-cache", Help: "torch.autocast(..., cache_enabled=False): the mixed precisions cast a weight anew at every use and free the copy with the op, instead of keeping one copy per weight until the autocast region ends"},
		{Name: "autocast-around-loop", Help: "eval: one autocast region encloses the whole loop of forwards (autocast entered before the loop), so the weight copies the first forward makes stay until the loop ends (default: autocast around each forward)"},
		{Name: "memory-format", Default: "contiguous", Choices: []string{"contiguous", "channels_last"}, Help: "the model's and batch's memory format: contiguous (NCHW, PyTorch's default) or channels_last (NHWC: no transposes around cuDNN's tensor-core convolutions; step time only)",
			parse: errOnly(func(s string) error { _, err := channelsLast(s); return err })},
		{Name: "loop-overhead", Default: "0s", Help: "the training loop's own work per micro-batch that the GPU waits for, outside the model's ops (a framework's hooks, an input pipeline copying on the training stream), as measured, e.g. 8ms; step time only (default 0: a plain eager loop with its batches ready)"},
		{Name: "cublas-workspace-config", Env: []string{"CUBLAS_WORKSPACE_CONFIG"}, Help: "CUBLAS_WORKSPACE_CONFIG, e.g. :4096:8 (default: the environment variable)"},
		{Name: "lora", Help: "fine-tune with LoRA adapters of this rank (PEFT's r); every other parameter is frozen"},
		{Name: "lora-targets", Help: "Linear layers that get adapters, as PEFT's target_modules: names or name endings, comma-separated (q_proj,v_proj)"},
		{Name: "lora-alpha", Default: "8", Help: "LoRA's alpha (scaling = alpha / r)"},
		{Name: "lora-dropout", Help: "LoRA's dropout on the adapters' input (PEFT's lora_dropout)"},
		{Name: "mode", Default: "train", Choices: c.Modes, Help: "train (a training step), eval (forward under torch.no_grad in eval mode) or generate (transformers' generate with a key/value cache)"},
		{Name: "prompt", Help: "generate: prompt length in tokens (the same as --seq; default the model's sequence length)"},
		{Name: "new-tokens", Help: "generate: tokens to generate (max_new_tokens; at most 32,768)"},
		{Name: "cache", Default: "dynamic", Choices: []string{"dynamic", "static"}, Help: "generate: the key/value cache, dynamic (DynamicCache, grown by torch.cat) or static (StaticCache, preallocated)"},
		{Name: "beams", Default: "1", Help: "generate: beam width (num_beams)"},
		{Name: "freeze", Help: "freeze the parameters of these modules (names or name endings, comma-separated; a module freezes all inside it)"},
		{Name: "gpus", Default: "1", Help: "data-parallel GPUs; the prediction is one rank's, --batch its own micro-batch"},
		{Name: "strategy", Choices: c.Strategies, Help: "how the ranks hold the model: {choices} (default: single on 1 GPU, ddp on more)",
			parse: errOnly(func(s string) error { _, err := train.ParseStrategy(s); return err })},
		{Name: "sharding", Default: "full", Choices: []string{"full", "grad-op", "hybrid", "none"}, Help: "FSDP's sharding strategy: full, grad-op (FSDP2: reshard_after_forward=False), hybrid or none",
			parse: errOnly(func(s string) error { _, err := train.ParseSharding(s); return err })},
		{Name: "node-gpus", Default: "8", Help: "GPUs per node (hybrid sharding shards within a node)"},
		{Name: "offload", Help: "FSDP's CPU offload of parameters, gradients and the step, or ZeRO's offload_optimizer"},
		{Name: "offload-params", Help: "ZeRO-3's offload_param"},
		{Name: "no-sync", Help: "FSDP: every accumulating micro-batch runs inside no_sync() (Fabric's no_backward_sync, Accelerate's accumulate), keeping the whole unsharded gradients until the last"},
		{Name: "fsdp-wrap", Choices: []string{string(train.WrapBlock), string(train.WrapLoRA), string(train.WrapParam)}, Help: "FSDP's wrap policy: block (one unit per block; with LoRA, use_orig_params=True and the whole flat gradient), lora (PEFT's fsdp_auto_wrap_policy: adapters in units of their own, frozen weights get no gradient) or param (fsdp2's per-parameter sharding); default: lora for PEFT adapters under fsdp, as transformers' Trainer sets it, block otherwise, param under fsdp2",
			parse: errOnly(func(s string) error { _, err := train.ParseWrap(s); return err })},
		{Name: "fsdp-load", Default: "none", Choices: []string{"none", "sync", "meta"}, Help: "how FSDP builds its sharded units before the first step, which decides what stays cached when the script resets its peaks: none (the shards alone, nothing cached), sync (rank 0 of sync_module_states=True from a model on the CPU, unit by unit: moved to the GPU, broadcast in 250 MiB buckets, flattened, sharded; Answer.AI's fsdp_qlora low_memory, accelerate's cpu_ram_efficient_loading) or meta (each unit materialized on the GPU from the meta device, flattened, sharded); sync and meta reset the peaks after loading, as those scripts do",
			parse: errOnly(func(s string) error { _, err := train.ParseLoad(s); return err })},
		{Name: "bucket-mb", Default: fmt.Sprint(train.DDPBucketMB), Help: "DDP's bucket_cap_mb"},
		{Name: "bucket-view", Help: "DDP's gradient_as_bucket_view"},
		{Name: "reduce-bucket", Default: fmt.Sprint(train.ZeROReduceBucket), Help: "ZeRO's reduce_bucket_size (elements)"},
		{Name: "prefetch-bucket", Default: fmt.Sprint(train.ZeROPrefetchBucket), Help: "ZeRO-3's stage3_prefetch_bucket_size (elements; 0: no prefetch)"},
		{Name: "tp", Default: "1", Help: "tensor parallelism (Megatron's column and row splits; Llama-family models)"},
		{Name: "sp", Help: "sequence parallelism over the tensor-parallel ranks (Megatron's; needs --tp)"},
		{Name: "pp", Default: "1", Help: "pipeline stages (1F1B; --accumulate is the micro-batches of a step)"},
		{Name: "stage", Default: "-1", Help: "the pipeline stage to predict (default: every stage, answering with the one that fits worst)"},
		{Name: "stage-layers", Help: "each stage's number of layers, comma-separated (an uneven split; default: even)"},
		{Name: "quant", Choices: []string{"nf4", "fp4", "int8"}, Help: "store the base model's Linear weights quantized by bitsandbytes: nf4, fp4 (QLoRA's 4-bit) or int8 (LLM.int8); training needs --lora"},
		{Name: "double-quant", Help: "4-bit double quantization of the absmax constants (bnb_4bit_use_double_quant)"},
		{Name: "quant-compute", Choices: []string{"bf16", "fp16", "fp32"}, Help: "dtype a 4-bit weight is dequantized to (bnb_4bit_compute_dtype): bf16, fp16 or fp32 (default: the precision's compute dtype)"},
		{Name: "quant-blocksize", Default: "64", Help: "4-bit quantization block: one absmax per this many elements (bitsandbytes' default 64)"},
		{Name: "bnb-version", Help: "the bitsandbytes release whose 4-bit rules apply (default: current; before 0.43.2 each 4-bit layer also keeps its input for backward, before 0.43.0 dequantizes through float16)"},
		{Name: "quant-via", Default: "transformers", Choices: []string{"transformers", "fabric", "torchao"}, Help: "what quantizes the Linear layers (--quant): transformers (BitsAndBytesConfig; lm_head kept), fabric (Lightning Fabric's BitsandbytesPrecision, LitGPT's --quantize: every Linear, the head too, quantized from a float16 copy) or torchao (torchao's NF4Tensor, torchtune's QLoRA; --quant nf4)"},
		{Name: "peft-version", Help: "the PEFT release whose adapter dtype applies (default: current; from 0.12 autocast_adapter_dtype keeps adapters float32 on a half-precision base, before it they take the base weight's dtype when that is floating)"},
		{Name: "transformers", Help: "the Hugging Face transformers release whose modeling code runs the model, for the zoo's transformers models and Hugging Face configs (default: current; 4.36 or later): before 4.46 the Llama family's forward upcasts every position's logits to float32 and returns them, before 4.49 the loss copies logits[..., :-1, :] (a float32 copy at batch > 1); the attention's copies differ too (docs/accuracy.md)"},
		{Name: "lora-impl", Default: "peft", Choices: []string{"peft", "litgpt", "torchtune"}, Help: "whose LoRA layers: peft, or litgpt or torchtune (on a quantized base: adapters in the model's dtype, no casts and no clone)"},
	}
	for i := range t {
		f := &t[i]
		idx, ok := fieldIndex(f.Name)
		if !ok {
			panic("job: field " + f.Name + " has no Job field")
		}
		f.index = idx
		f.Kind = kindOf(jobType.Field(idx).Type)
		f.Help = strings.ReplaceAll(f.Help, "{choices}", orList(f.Choices))
	}
	return t
}
