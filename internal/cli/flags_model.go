package cli

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
func (j *jobFlags) modelParallel(c *models.Config) error {
	switch {
	case j.tp < 1 || j.tp > 1<<10:
		return usagef("--tp must be between 1 and 1024, got %d", j.tp)
	case j.pp < 1 || j.pp > 1<<10:
		return usagef("--pp must be between 1 and 1024, got %d", j.pp)
	case j.pp == 1 && (j.stage > 0 || j.stageLayers != ""):
		return usagef("--stage and --stage-layers need --pp")
	case j.stage >= j.pp || j.stage < -1:
		return usagef("--stage %d: the stages are 0 to %d", j.stage, j.pp-1)
	}
	if j.sp && j.tp == 1 {
		return usagef("--sp splits the sequence over the tensor-parallel ranks: it needs --tp")
	}
	c.TP, c.SP, c.PP, c.Stage = j.tp, j.sp, j.pp, j.stage
	if j.pp == 1 {
		c.Stage = 0
	}
	for _, f := range strings.Split(j.stageLayers, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 || n > 1<<20 {
			return usagef("--stage-layers: %q is not a number of layers", f)
		}
		if n == 0 {
			// a stage of no layers holds no block to run: the even split
			// refuses more stages than layers (models.Config.StageRange)
			return usagef("--stage-layers %s: stage %d has no layers; each pipeline stage holds at least one", j.stageLayers, len(c.StageLayers))
		}
		c.StageLayers = append(c.StageLayers, n)
	}
	if len(c.StageLayers) > 0 && int64(len(c.StageLayers)) != j.pp {
		return usagef("--stage-layers gives %d stages, --pp %d", len(c.StageLayers), j.pp)
	}
	return nil
}

func strategyNames() string {
	var names []string
	for _, s := range train.Strategies {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
}

// parallel reads the data-parallel flags.
func (j *jobFlags) parallel() (train.Parallel, error) {
	var p train.Parallel
	if j.gpus < 1 {
		return p, usagef("--gpus must be at least 1, got %d", j.gpus)
	}
	strat, err := train.ParseStrategy(j.strategy)
	if err != nil {
		return p, usagef("--strategy: %v", err)
	}
	if j.strategy == "" && j.gpus > 1 {
		strat = train.DDP
	}
	sh, err := train.ParseSharding(j.sharding)
	if err != nil {
		return p, usagef("--sharding: %v", err)
	}
	if sh != train.FullShard && strat != train.FSDP && strat != train.FSDP2 {
		return p, usagef("--sharding is FSDP's; --strategy %s does not take it", strat)
	}
	if j.nodeGPUs < 1 {
		return p, usagef("--node-gpus must be at least 1, got %d", j.nodeGPUs)
	}
	if sh == train.HybridShard && j.gpus > j.nodeGPUs && j.gpus%j.nodeGPUs != 0 {
		// HYBRID_SHARD shards within groups of a node's GPUs
		// (dist.new_subgroups), which raises "The world size must be
		// divisible by 'group_size'"
		return p, usagef("--node-gpus %d does not divide --gpus %d: hybrid sharding shards within whole nodes", j.nodeGPUs, j.gpus)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"--bucket-mb", j.bucketMB}, {"--reduce-bucket", j.reduceBucket}, {"--prefetch-bucket", j.prefetch}} {
		if f.v < 0 || f.v > 1e15 || f.v != f.v {
			return p, usagef("%s must be between 0 and 1e15, got %g", f.name, f.v)
		}
	}
	if j.bucketMB == 0 {
		return p, usagef("--bucket-mb must be positive")
	}
	wrap, err := train.ParseWrap(j.fsdpWrap)
	if err != nil {
		return p, usagef("--fsdp-wrap: %v", err)
	}
	if wrap == "" && strat == train.FSDP && j.lora > 0 && j.loraImpl == "peft" {
		// transformers' Trainer replaces accelerate's policy with PEFT's
		// fsdp_auto_wrap_policy for a PEFT model
		// (Trainer._fsdp_qlora_plugin_updates), as the PEFT FSDP guide
		// and Answer.AI's fsdp_qlora do; LitGPT's Fabric wraps each Block
		wrap = train.WrapLoRA
	}
	if wrap == train.WrapLoRA && j.lora == 0 {
		return p, usagef("--fsdp-wrap lora wraps LoRA adapters: it needs --lora R")
	}
	load, err := train.ParseLoad(j.fsdpLoad)
	if err != nil {
		return p, usagef("--fsdp-load: %v", err)
	}
	p = train.Parallel{Strategy: strat, GPUs: j.gpus, NodeGPUs: j.nodeGPUs, Sharding: sh, Offload: j.offload,
		OffloadParams: j.offloadParams, NoSync: j.noSync, BucketMB: j.bucketMB, BucketView: j.bucketView,
		ReduceBucket: int64(j.reduceBucket), PrefetchBucket: int64(j.prefetch), Wrap: wrap, Load: load}
	if j.prefetch == 0 {
		p.PrefetchBucket = -1
	}
	if _, err := (train.Setup{Parallel: p}).Normalize(); err != nil {
		return p, usageError{err}
	}
	return p, nil
}

// quantization is --quant and its companions as a graph.Quant (nil: no
// --quant). The compute dtype defaults to the precision's: bf16 for
// bf16-mixed and bf16-true, fp16 for 16-mixed and 16-true, fp32 for
// 32-true (BitsAndBytesConfig's own default is float32: say --quant-compute
// fp32 for it).
func (j *jobFlags) quantization(prec train.Precision) (*graph.Quant, error) {
	if j.quantVia != "transformers" && j.quantVia != "fabric" && j.quantVia != "torchao" {
		return nil, usagef("--quant-via %q: want transformers, fabric or torchao", j.quantVia)
	}
	if j.quant == "" {
		if j.quantVia != "transformers" {
			return nil, usagef("--quant-via needs --quant nf4, fp4 or int8")
		}
		if j.doubleQuant || j.quantCompute != "" || j.quantBlock != 64 {
			return nil, usagef("--double-quant, --quant-compute and --quant-blocksize need --quant nf4 or fp4")
		}
		return nil, nil
	}
	f, err := graph.ParseQuantFormat(j.quant)
	if err != nil {
		return nil, usagef("--quant: %v", err)
	}
	if f != graph.NF4 && f != graph.FP4 && f != graph.Int8 {
		return nil, usagef("--quant %s: GPTQ and AWQ weights come from a checkpoint's quantization_config; give its model directory or config.json", f)
	}
	if f == graph.Int8 && (j.doubleQuant || j.quantCompute != "" || j.quantBlock != 64) {
		return nil, usagef("--double-quant, --quant-compute and --quant-blocksize are the 4-bit formats' (nf4, fp4), not int8's")
	}
	low, amp := prec.Autocast()
	q := &graph.Quant{Format: f, Bits: 4, BlockSize: j.quantBlock, DoubleQuant: j.doubleQuant, Compute: prec.ParamDType(), ComputeFollowsPrecision: true}
	if amp {
		q.Compute = low
	}
	if f == graph.Int8 {
		q.Bits, q.BlockSize, q.Compute, q.ComputeFollowsPrecision = 8, 0, graph.F16, false
	}
	if j.quantVia == "torchao" {
		// torchtune's QLoRA: torchao's to_nf4 with its defaults (block 64,
		// scalers double-quantized per 256), nf4 only
		if f != graph.NF4 || j.quantBlock != 64 || j.quantCompute != "" {
			return nil, usagef("--quant-via torchao is torchao's NF4Tensor: --quant nf4 with its block of 64 and the input's dtype")
		}
		q.Torchao, q.DoubleQuant = true, true
	}
	if j.quantVia == "fabric" {
		// lightning/fabric/plugins/precision/bitsandbytes.py: every
		// torch.nn.Linear is replaced, and _Linear4bit.quantize /
		// _Linear8bitLt.quantize cast the weight to float16 first
		q.Head = true
		q.HalfState = f != graph.Int8
	}
	if j.quantCompute != "" {
		d, err := graph.ParseDType(j.quantCompute)
		if err != nil || !d.IsFloat() || d == graph.F64 || d == graph.F8E4M3 || d == graph.F8E5M2 {
			return nil, usagef("--quant-compute %q: want bf16, fp16 or fp32", j.quantCompute)
		}
		q.Compute, q.ComputeFollowsPrecision = d, false
	}
	if err := q.Check(); err != nil {
		return nil, usagef("--quant: %v", err)
	}
	return q, nil
}

// adapters are the fine-tuning flags as graph.Adapters (nil: train every
// parameter).
func (j *jobFlags) adapters() (*graph.Adapters, error) {
	list := func(s string) []string {
		var out []string
		for _, f := range strings.Split(s, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, f)
			}
		}
		return out
	}
	if j.loraImpl != "peft" && j.loraImpl != "litgpt" && j.loraImpl != "torchtune" {
		return nil, usagef("--lora-impl %q: want peft, litgpt or torchtune", j.loraImpl)
	}
	if j.lora == 0 && j.freeze == "" {
		if j.loraTargets != "" || j.loraDropout != 0 || j.loraAlpha != 8 || j.loraImpl != "peft" || j.peftVersion != "" {
			return nil, usagef("--lora-targets, --lora-alpha, --lora-dropout, --lora-impl and --peft-version need --lora R")
		}
		return nil, nil
	}
	f32, err := graph.PeftFloat32Adapters(j.peftVersion)
	if err != nil {
		return nil, usagef("--peft-version: %v", err)
	}
	if j.peftVersion != "" && (j.lora == 0 || j.loraImpl != "peft") {
		return nil, usagef("--peft-version applies to PEFT's LoRA adapters (--lora R with --lora-impl peft)")
	}
	a := &graph.Adapters{Rank: j.lora, Alpha: j.loraAlpha, Dropout: j.loraDropout, Targets: list(j.loraTargets), Freeze: list(j.freeze), Native: j.loraImpl != "peft",
		Float32: f32 && j.loraImpl == "peft" && j.lora > 0}
	if err := a.Check(); err != nil {
		return nil, usageError{err}
	}
	return a, nil
}
