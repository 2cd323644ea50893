package plan

import (
	"slices"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// The values each lever can take for a job: precisions, checkpointing,
// optimizer implementations, tensor and data parallelism, adapters and
// optimizer kinds, and the static bytes that rule combinations out.

// options lists the values each lever may take.
func (pl *planner) precisions() []train.Precision {
	if !pl.allow[Precision] {
		return []train.Precision{pl.base.Precision}
	}
	out := []train.Precision{pl.base.Precision}
	cands := []train.Precision{train.FP32, train.MixedBF16, train.Mixed16, train.TrueBF16}
	for _, p := range cands {
		if p == pl.base.Precision {
			continue
		}
		// bfloat16 needs compute capability 8.0 (torch.cuda.is_bf16_supported)
		if (p == train.MixedBF16 || p == train.TrueBF16) && pl.o.Base.GPU.Major > 0 && pl.o.Base.GPU.Major < 8 {
			continue
		}
		// flash attention takes float16 and bfloat16 only (sdp_utils
		// check_tensor_dtype): a job that names it keeps 16 bits
		if p == train.FP32 && pl.o.Base.Setup.Attention == train.AttentionFlash {
			continue
		}
		out = append(out, p)
	}
	return out
}

func (pl *planner) checkpoints(g *graph.Graph) []train.Checkpoint {
	if pl.o.NoCheckpointing {
		return []train.Checkpoint{{}}
	}
	if !pl.allow[Checkpoint] {
		return []train.Checkpoint{pl.base.Checkpoint}
	}
	out := []train.Checkpoint{pl.base.Checkpoint}
	add := func(c train.Checkpoint) {
		for _, o := range out {
			if o == c {
				return
			}
		}
		out = append(out, c)
	}
	add(train.Checkpoint{})
	hasAttn := false
	for i := range g.Ops {
		hasAttn = hasAttn || g.Ops[i].Kind == graph.Attention
	}
	if hasAttn {
		add(train.Checkpoint{Attention: true})
	}
	if len(g.Blocks) > 1 {
		add(train.Checkpoint{Every: 2})
	}
	if len(g.Blocks) > 0 {
		add(train.FullCheckpoint)
	}
	return out
}

func (pl *planner) impls(optim string) []train.Impl {
	// the optimizer the plan steps with: every one the optimizer-kind
	// lever swaps in has one implementation, as bitsandbytes' and
	// Adafactor have
	_, single := train.SingleImplementation(pl.optimizer(optim, pl.base.Impl))
	if !pl.allow[Optimizer] || pl.o.Base.Setup.Optimizer.Kind == train.NoOptimizer || single {
		return []train.Impl{pl.base.Impl}
	}
	out := []train.Impl{pl.base.Impl}
	for _, i := range []train.Impl{train.Fused, train.Foreach, train.ForLoop} {
		// an implementation the optimizer does not have runs as another
		// (fused SGD without momentum is foreach): offer each once, as
		// it runs
		s := pl.o.Base.Setup
		s.Optimizer.Impl = i
		if n, err := s.Normalize(); err == nil && !slices.Contains(out, n.Optimizer.Impl) {
			out = append(out, n.Optimizer.Impl)
		}
	}
	return out
}

// staticBytes is what parameters, gradients and optimizer state need
// together: all three are alive during every optimizer step after the
// first, so no plan of this precision fits below it.
// Frozen parameters have neither gradient nor state, so only the
// trainable ones count beyond the parameters themselves; the state is the
// optimizer's per-element floor (8-bit states at a byte, paged ones and
// Adafactor's factored moments at nothing), a lower bound.
func (pl *planner) staticBytes(p train.Precision, par train.Parallel, tp tensorOpt, o train.Optimizer, n paramCounts) int64 {
	// tensor parallelism splits the layers' parameters (the norms are
	// replicated, which only adds): a rank holds at least 1/tp
	split := max(tp.tp, 1) * max(tp.pp, 1)
	params, trainable := n.params/split, n.trainable/split
	quantElems, quantBytes := n.quantElems/split, n.quantBytes/split
	pe := p.ParamDType().Size()
	se := pe // the optimizer state's dtype
	var master int64
	if low, _ := p.Autocast(); par.HalfModule(p) {
		// DeepSpeed's half module, float32 master weights and state
		pe, se, master = low.Size(), 4, 4
	}
	// what the optimizer keeps on the device per element of a large
	// matrix (train.OptimizerStates, its one table): no parameter keeps
	// less
	_, _, state := o.PerElement(se)
	// quantized weights are stored as they are (QLoRA's 4-bit codes and
	// constants, graph.Quant.Pieces), the others in the precision's dtype
	P, G, S := pe*(params-quantElems)+quantBytes, pe*trainable, (state+master)*trainable
	if o.Kind == train.NoOptimizer {
		S = 0
	}
	// A rank holds at least its share of what its strategy shards; with
	// the step offloaded, nothing of it need stay on the device.
	if par.Offload || par.OffloadParams {
		return 0
	}
	sh := par.Shards()
	var whole, sharded int64
	for _, s := range []struct {
		bytes int64
		on    bool
	}{{P, sh.Params}, {G, sh.Grads}, {S, sh.State}} {
		if s.on {
			sharded += s.bytes
		} else {
			whole += s.bytes
		}
	}
	return whole + sharded/int64(max(par.ShardRanks(), 1))
}

// tensors lists the tensor parallelism the tensor lever may try: the
// job's own, then 2, 4 and 8 ranks with sequence parallelism, for a job
// that already runs on more than one GPU and a model that splits (the
// lever does not turn a one-GPU job into a multi-GPU one).
func (pl *planner) tensors() []tensorOpt {
	base := tensorOpt{pl.base.TP, pl.base.SP, pl.base.PP}
	multi := pl.base.Parallel.GPUs > 1 || pl.base.TP > 1 || pl.base.PP > 1
	mp, ok := pl.src.(interface{ ModelParallel() bool })
	if !multi || !ok || !mp.ModelParallel() {
		return []tensorOpt{base}
	}
	builds := func(o tensorOpt) bool {
		c := pl.o.Base.Config
		c.Batch, c.TP, c.SP = 1, o.tp, o.sp
		if o.pp != max(c.PP, 1) {
			c.PP, c.StageLayers = o.pp, nil
		}
		if c.PP > 1 {
			c.Stage = 0
		}
		_, err := pl.built.Build(pl.src, c)
		return err == nil // the heads, the MLP or the layers do not split
	}
	tps := []tensorOpt{{base.tp, base.sp, 0}}
	if pl.allow[Tensor] {
		for _, t := range []int64{2, 4, 8} {
			if t != base.tp {
				tps = append(tps, tensorOpt{t, pl.o.Base.Config.Seq%t == 0, 0})
			}
		}
	}
	pps := []int64{base.pp}
	if pl.allow[Pipeline] {
		for _, n := range []int64{2, 4} {
			if n != base.pp {
				pps = append(pps, n)
			}
		}
	}
	out := []tensorOpt{base}
	for _, pp := range pps {
		for _, t := range tps {
			o := tensorOpt{t.tp, t.sp, pp}
			if o != base && builds(o) {
				out = append(out, o)
			}
		}
	}
	return out
}

// strategies lists the data-parallel strategies the sharding lever may
// try: the job's own first, then DDP, ZeRO 1 and 2, FSDP's grad-op and
// full sharding, and full sharding with CPU offload, over the job's GPUs.
func (pl *planner) strategies() []train.Parallel {
	base := pl.base.Parallel
	if !pl.allow[Sharding] || base.GPUs <= 1 {
		return []train.Parallel{base}
	}
	out := []train.Parallel{base}
	for _, c := range []train.Parallel{{Strategy: train.DDP}, {Strategy: train.ZeRO1}, {Strategy: train.ZeRO2},
		{Strategy: train.FSDP, Sharding: train.ShardGradOp}, {Strategy: train.FSDP}, {Strategy: train.FSDP, Offload: true}} {
		c.GPUs, c.NodeGPUs = base.GPUs, base.NodeGPUs
		// the job's training loop accumulates inside no_sync() or not,
		// whichever FSDP sharding it runs under
		c.NoSync = base.NoSync && c.Strategy == train.FSDP
		if c.Strategy == train.FSDP && base.Strategy == train.FSDP {
			// and with the job's wrap policy (PEFT's or the block one)
			c.Wrap = base.Wrap
		}
		n, err := (train.Setup{Parallel: c}).Normalize()
		if err != nil || slices.Contains(out, n.Parallel) {
			continue
		}
		out = append(out, n.Parallel)
	}
	return out
}

// paramCounts are a graph's parameters for the static bound: all of them,
// the trainable ones, and the quantized weights' logical elements and
// stored bytes.
type paramCounts struct{ params, trainable, quantElems, quantBytes int64 }

func countParams(g *graph.Graph) paramCounts {
	var n paramCounts
	n.params = g.ParamCount()
	for _, id := range g.Params() {
		t := g.Tensor(id)
		if t.RequiresGrad {
			n.trainable += t.Shape.Numel()
		}
		if q := t.Quant; q != nil && len(t.Shape) >= 2 {
			out, in := t.Shape[0], t.Shape[len(t.Shape)-1]
			n.quantElems += out * in
			for _, pc := range q.Pieces(out, in) {
				n.quantBytes += pc.Bytes()
			}
		}
	}
	return n
}

// loraTargets are the target_modules PEFT picks by default for each model
// family (peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING,
// Apache-2.0): llama, mistral, qwen2, gemma and opt q_proj and v_proj; gpt2
// c_attn; bert and roberta query and value; t5 q and v; gpt_neox
// query_key_value; codegen qkv_proj, the name of Phi-3's fused projection
// too, for which PEFT releases of 2024 list nothing (a user names it). The
// first list that names Linear layers of the model is the model's.
var loraTargets = [][]string{{"q_proj", "v_proj"}, {"c_attn"}, {"query", "value"}, {"q", "v"}, {"query_key_value"}, {"qkv_proj"}}

// findLoRA sets the adapters the LoRA lever trains: PEFT's LoraConfig
// defaults (r=8, lora_alpha=8, no dropout) on the family's targets; none
// for a job that already trains adapters, freezes or quantizes, or a model
// whose Linear layers none of the families' names match.
func (pl *planner) findLoRA() {
	c := pl.o.Base.Config
	if !pl.allow[LoRA] || c.Adapters != nil || c.Quant != nil || pl.o.Base.Setup.Optimizer.Kind == train.NoOptimizer {
		return
	}
	if q, ok := pl.src.(interface{ Quantized() bool }); ok && q.Quantized() {
		return
	}
	c.Batch = 1
	if c.PP > 1 && c.Stage < 0 {
		c.Stage = 0
	}
	for _, t := range loraTargets {
		a := &graph.Adapters{Rank: 8, Alpha: 8, Targets: t}
		c.Adapters = a
		if _, err := pl.built.Build(pl.src, c); err == nil {
			pl.lora = a
			return
		}
	}
}

// tunes lists what the LoRA lever may train: the job's own, LoRA, QLoRA.
func (pl *planner) tunes() []Tune {
	if pl.lora == nil {
		return []Tune{FullTune}
	}
	return []Tune{FullTune, LoRATune, QLoRATune}
}

// optims lists the optimizers the optimizer-kind lever may swap Adam for:
// bitsandbytes' 8-bit Adam of the same decay (plain, then paged) and
// transformers' Adafactor, each once, after the job's own ("").
func (pl *planner) optims() []string {
	o := pl.o.Base.Setup.Optimizer
	out := []string{""}
	if !pl.allow[OptimizerKind] || (o.Kind != train.Adam && o.Kind != train.AdamW) {
		return out
	}
	k := string(o.Kind)
	if !o.Bits8 {
		out = append(out, k+"8bit")
	}
	if !(o.Paged && o.Bits8) {
		out = append(out, "paged_"+k+"8bit")
	}
	return append(out, string(train.Adafactor))
}
