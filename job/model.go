package job

import (
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// The flags that change what the model is: pipeline and tensor
// parallelism, data-parallel strategies, quantized base weights and LoRA
// adapters, each read into the types of packages train and graph.

// modelParallel reads --tp, --pp, --stage and --stage-layers into c.
func (j *Job) modelParallel(c *models.Config) error {
	switch {
	case j.TP < 1 || j.TP > 1<<10:
		return Usagef("--tp must be between 1 and 1024, got %d", j.TP)
	case j.PP < 1 || j.PP > 1<<10:
		return Usagef("--pp must be between 1 and 1024, got %d", j.PP)
	case j.PP == 1 && (j.Stage > 0 || j.StageLayers != ""):
		return Usagef("--stage and --stage-layers need --pp")
	case j.Stage >= j.PP || j.Stage < -1:
		return Usagef("--stage %d: the stages are 0 to %d", j.Stage, j.PP-1)
	}
	if j.SP && j.TP == 1 {
		return Usagef("--sp splits the sequence over the tensor-parallel ranks: it needs --tp")
	}
	c.TP, c.SP, c.PP, c.Stage = j.TP, j.SP, j.PP, j.Stage
	if j.PP == 1 {
		c.Stage = 0
	}
	for _, f := range strings.Split(j.StageLayers, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 || n > 1<<20 {
			return Usagef("--stage-layers: %q is not a number of layers", f)
		}
		if n == 0 {
			// a stage of no layers holds no block to run: the even split
			// refuses more stages than layers (models.Config.StageRange)
			return Usagef("--stage-layers %s: stage %d has no layers; each pipeline stage holds at least one", j.StageLayers, len(c.StageLayers))
		}
		c.StageLayers = append(c.StageLayers, n)
	}
	if len(c.StageLayers) > 0 && int64(len(c.StageLayers)) != j.PP {
		return Usagef("--stage-layers gives %d stages, --pp %d", len(c.StageLayers), j.PP)
	}
	return nil
}

// parallel reads the data-parallel flags.
func (j *Job) parallel() (train.Parallel, error) {
	var p train.Parallel
	if j.GPUs < 1 {
		return p, Usagef("--gpus must be at least 1, got %d", j.GPUs)
	}
	strat, err := train.ParseStrategy(j.Strategy)
	if err != nil {
		return p, Usagef("--strategy: %v", err)
	}
	if j.Strategy == "" && j.GPUs > 1 {
		strat = train.DDP
	}
	sh, err := train.ParseSharding(j.Sharding)
	if err != nil {
		return p, Usagef("--sharding: %v", err)
	}
	if sh != train.FullShard && strat != train.FSDP && strat != train.FSDP2 {
		return p, Usagef("--sharding is FSDP's; --strategy %s does not take it", strat)
	}
	if j.NodeGPUs < 1 {
		return p, Usagef("--node-gpus must be at least 1, got %d", j.NodeGPUs)
	}
	if sh == train.HybridShard && j.GPUs > j.NodeGPUs && j.GPUs%j.NodeGPUs != 0 {
		// HYBRID_SHARD shards within groups of a node's GPUs
		// (dist.new_subgroups), which raises "The world size must be
		// divisible by 'group_size'"
		return p, Usagef("--node-gpus %d does not divide --gpus %d: hybrid sharding shards within whole nodes", j.NodeGPUs, j.GPUs)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--bucket-mb", j.BucketMB}, {"--reduce-bucket", j.ReduceBucket}, {"--prefetch-bucket", j.PrefetchBucket}} {
		if f.v < 0 || f.v > 1e15 || f.v != f.v {
			return p, Usagef("%s must be between 0 and 1e15, got %g", f.name, f.v)
		}
	}
	if j.BucketMB == 0 {
		return p, Usagef("--bucket-mb must be positive")
	}
	wrap, err := train.ParseWrap(j.FSDPWrap)
	if err != nil {
		return p, Usagef("--fsdp-wrap: %v", err)
	}
	if wrap == "" && strat == train.FSDP && j.LoRA > 0 && j.LoRAImpl == "peft" {
		// transformers' Trainer replaces accelerate's policy with PEFT's
		// fsdp_auto_wrap_policy for a PEFT model
		// (Trainer._fsdp_qlora_plugin_updates), as the PEFT FSDP guide
		// and Answer.AI's fsdp_qlora do; LitGPT's Fabric wraps each Block
		wrap = train.WrapLoRA
	}
	if wrap == train.WrapLoRA && j.LoRA == 0 {
		return p, Usagef("--fsdp-wrap lora wraps LoRA adapters: it needs --lora R")
	}
	load, err := train.ParseLoad(j.FSDPLoad)
	if err != nil {
		return p, Usagef("--fsdp-load: %v", err)
	}
	p = train.Parallel{Strategy: strat, GPUs: j.GPUs, NodeGPUs: j.NodeGPUs, Sharding: sh, Offload: j.Offload,
		OffloadParams: j.OffloadParams, NoSync: j.NoSync, BucketMB: j.BucketMB, BucketView: j.BucketView,
		ReduceBucket: int64(j.ReduceBucket), PrefetchBucket: int64(j.PrefetchBucket), Wrap: wrap, Load: load}
	if j.PrefetchBucket == 0 {
		p.PrefetchBucket = -1
	}
	if _, err := (train.Setup{Parallel: p}).Normalize(); err != nil {
		return p, UsageError{err}
	}
	return p, nil
}

// quantization is --quant and its companions as a graph.Quant (nil: no
// --quant). The compute dtype defaults to the precision's: bf16 for
// bf16-mixed and bf16-true, fp16 for 16-mixed and 16-true, fp32 for
// 32-true (BitsAndBytesConfig's own default is float32: say --quant-compute
// fp32 for it).
func (j *Job) quantization(prec train.Precision) (*graph.Quant, error) {
	if j.QuantVia != "transformers" && j.QuantVia != "fabric" && j.QuantVia != "torchao" {
		return nil, Usagef("--quant-via %q: want transformers, fabric or torchao", j.QuantVia)
	}
	if j.Quant == "" {
		if j.QuantVia != "transformers" {
			return nil, Usagef("--quant-via needs --quant nf4, fp4 or int8")
		}
		if j.DoubleQuant || j.QuantCompute != "" || j.QuantBlocksize != 64 {
			return nil, Usagef("--double-quant, --quant-compute and --quant-blocksize need --quant nf4 or fp4")
		}
		return nil, nil
	}
	f, err := graph.ParseQuantFormat(j.Quant)
	if err != nil {
		return nil, Usagef("--quant: %v", err)
	}
	if f != graph.NF4 && f != graph.FP4 && f != graph.Int8 {
		return nil, Usagef("--quant %s: GPTQ and AWQ weights come from a checkpoint's quantization_config; give its model directory or config.json", f)
	}
	if f == graph.Int8 && (j.DoubleQuant || j.QuantCompute != "" || j.QuantBlocksize != 64) {
		return nil, Usagef("--double-quant, --quant-compute and --quant-blocksize are the 4-bit formats' (nf4, fp4), not int8's")
	}
	low, amp := prec.Autocast()
	q := &graph.Quant{Format: f, Bits: 4, BlockSize: j.QuantBlocksize, DoubleQuant: j.DoubleQuant, Compute: prec.ParamDType(), ComputeFollowsPrecision: true}
	if amp {
		q.Compute = low
	}
	if f == graph.Int8 {
		q.Bits, q.BlockSize, q.Compute, q.ComputeFollowsPrecision = 8, 0, graph.F16, false
	}
	if j.QuantVia == "torchao" {
		// torchtune's QLoRA: torchao's to_nf4 with its defaults (block 64,
		// scalers double-quantized per 256), nf4 only
		if f != graph.NF4 || j.QuantBlocksize != 64 || j.QuantCompute != "" {
			return nil, Usagef("--quant-via torchao is torchao's NF4Tensor: --quant nf4 with its block of 64 and the input's dtype")
		}
		q.Torchao, q.DoubleQuant = true, true
	}
	if j.QuantVia == "fabric" {
		// lightning/fabric/plugins/precision/bitsandbytes.py: every
		// torch.nn.Linear is replaced, and _Linear4bit.quantize /
		// _Linear8bitLt.quantize cast the weight to float16 first
		q.Head = true
		q.HalfState = f != graph.Int8
	}
	if j.QuantCompute != "" {
		d, err := graph.ParseDType(j.QuantCompute)
		if err != nil || !d.IsFloat() || d == graph.F64 || d == graph.F8E4M3 || d == graph.F8E5M2 {
			return nil, Usagef("--quant-compute %q: want bf16, fp16 or fp32", j.QuantCompute)
		}
		q.Compute, q.ComputeFollowsPrecision = d, false
	}
	if err := q.Check(); err != nil {
		return nil, Usagef("--quant: %v", err)
	}
	return q, nil
}

// adapters are the fine-tuning flags as graph.Adapters (nil: train every
// parameter).
func (j *Job) adapters() (*graph.Adapters, error) {
	list := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	if j.LoRAImpl != "peft" && j.LoRAImpl != "litgpt" && j.LoRAImpl != "torchtune" {
		return nil, Usagef("--lora-impl %q: want peft, litgpt or torchtune", j.LoRAImpl)
	}
	if j.LoRA == 0 && j.Freeze == "" {
		if j.LoRATargets != "" || j.LoRADropout != 0 || j.LoRAAlpha != 8 || j.LoRAImpl != "peft" || j.PeftVersion != "" {
			return nil, Usagef("--lora-targets, --lora-alpha, --lora-dropout, --lora-impl and --peft-version need --lora R")
		}
		return nil, nil
	}
	f32, err := graph.PeftFloat32Adapters(j.PeftVersion)
	if err != nil {
		return nil, Usagef("--peft-version: %v", err)
	}
	if j.PeftVersion != "" && (j.LoRA == 0 || j.LoRAImpl != "peft") {
		return nil, Usagef("--peft-version applies to PEFT's LoRA adapters (--lora R with --lora-impl peft)")
	}
	a := &graph.Adapters{Rank: j.LoRA, Alpha: j.LoRAAlpha, Dropout: j.LoRADropout, Targets: list(j.LoRATargets), Freeze: list(j.Freeze), Native: j.LoRAImpl != "peft",
		Float32: f32 && j.LoRAImpl == "peft" && j.LoRA > 0}
	if err := a.Check(); err != nil {
		return nil, UsageError{err}
	}
	return a, nil
}
