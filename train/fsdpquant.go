package train

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// FSDP with 4-bit base weights (FSDP-QLoRA).
//
// bitsandbytes 0.43.0 gave Params4bit a quant_storage dtype
// (bnb_4bit_quant_storage): the packed codes, two a byte, are stored as a
// tensor of that dtype, so that FSDP, which flattens and shards float
// tensors only, takes them into a unit's flat parameter (FSDP1) or shards
// them as a DTensor (FSDP2) like any other weight, and all-gathers them
// with the unit before its forward and backward and frees them after
// (the same unshard and reshard as every parameter). The bytes do not
// change. The quantization state (absmax, its nested absmax, the code
// tables) is no parameter: it lives on each rank whole, on the module as
// well as on the weight (Linear4bit.quant_state, restored into the
// gathered weight by fix_4bit_weight_quant_state_from_module in
// bitsandbytes/nn/modules.py, since FSDP's views lose the attribute).
// accelerate, PEFT and Answer.AI's fsdp_qlora require the storage dtype to
// be the model's (torch_dtype) and FSDP's param_dtype (transformers'
// Trainer._fsdp_qlora_plugin_updates sets MixedPrecision to it), so the
// codes are gathered as they are stored, never cast.
//
// torchtune's distributed QLoRA shards torchao's NF4Tensor with FSDP2:
// NF4Tensor's fsdp_pre_all_gather hands FSDP its quantized_scalers,
// quantization_factor and quantized_data, the three tensors its dim-0
// split (nf4_split) cuts per rank, and fsdp_post_all_gather rebuilds the
// tensor from the gathered three; the 16-entry nf4 table and the
// scaler mean stay whole on every rank (torchao/dtypes/nf4tensor.py).

// shardsQuant reports whether FSDP shards the weight quantized as q:
// bitsandbytes' and torchao's 4-bit formats under FSDP or FSDP2 with
// sharded parameters.
func shardsQuant(s Setup, q *graph.Quant) bool {
	p := s.Parallel
	return q != nil && p.IsFSDP() && p.Sharding != NoShard && p.ShardRanks() > 1 &&
		(q.Format == graph.NF4 || q.Format == graph.FP4) && (q.Torchao || q.FloatStorage)
}

// shardedPieces splits a 4-bit weight's pieces (graph.Quant.Pieces) into
// those FSDP shards and those every rank keeps whole.
func shardedPieces(q *graph.Quant, out, in int64) (sharded, whole []graph.QuantPiece) {
	ps := q.Pieces(out, in)
	if q.Torchao {
		// nf4 table, scaler_mean | quantization_factor,
		// quantized_scalers, quantized_data
		return ps[2:], ps[:2]
	}
	return ps[:1], ps[1:] // the codes | the quantization state
}

// quantFlatElems is how many elements of the storage dtype st the pieces
// FSDP shards of t make (the codes of a Params4bit with quant_storage st:
// ceil(bytes / st's size)).
func quantFlatElems(t *graph.Tensor, st graph.DType) int64 {
	sh, _ := shardedPieces(t.Quant, t.Shape[0], t.Shape[len(t.Shape)-1])
	var b int64
	for _, p := range sh {
		b += p.Bytes()
	}
	return (b + st.Size() - 1) / st.Size()
}

// loadQuantizedSharded keeps the pieces of a 4-bit weight that every rank
// holds whole and marks the rest for its unit (setupParallel), in the
// model's dtype. Loading is taken to quantize off the device or one
// rank at a time before the step (fsdp_qlora's low_memory load,
// accelerate's cpu_ram_efficient_loading, torchtune's sharded state-dict
// load), so no load-time temporaries are simulated.
func (sim *Simulator) loadQuantizedSharded(ps *paramState, t *graph.Tensor) {
	q := t.Quant
	out, in := t.Shape[0], t.Shape[len(t.Shape)-1]
	ps.dt = graph.U8
	sim.sum.QuantizedParamCount += out * in
	_, whole := shardedPieces(q, out, in)
	for _, p := range whole {
		st := sim.alloc(p.Bytes(), trace.Parameter)
		st.refs = 1
		sim.sum.ParametersBytes += p.Bytes()
		sim.sum.QuantizedBytes += p.Bytes()
		ps.quant = append(ps.quant, st)
	}
	ps.fdt = sim.s.Precision.ParamDType()
	ps.flatN = quantFlatElems(t, ps.fdt)
	// the shard's bytes count as quantized bytes when the unit is laid out
	sim.sum.QuantizedBytes += shardElems(graph.Shape{ps.flatN}, sim.s.Parallel.ShardRanks(), sim.s.Parallel.Strategy == FSDP2) * ps.fdt.Size()
}

// shardDT is the dtype this rank keeps the parameter's shard in.
func (ps *paramState) shardDT() graph.DType {
	if ps.flatN > 0 {
		return ps.fdt
	}
	return ps.sdt
}

// computeDT is the dtype the parameter is gathered in.
func (ps *paramState) computeDT() graph.DType {
	if ps.flatN > 0 {
		return ps.fdt
	}
	return ps.dt
}

// checkFSDPDTypes refuses what FSDP itself refuses or what is not
// modelled:
//   - FSDP1 flattens a unit's parameters into one tensor, which must have
//     one dtype (_validate_tensors_to_flatten in
//     torch/distributed/fsdp/_flat_param.py: "Must flatten tensors with
//     uniform dtype"): PEFT's float32 adapters on a half-precision base
//     can share no unit with it, which PEFT's wrap policy ensures and the
//     block policy does not;
//   - bitsandbytes' uint8 codes cannot be flattened with float weights:
//     FSDP needs a float bnb_4bit_quant_storage;
//   - the codes are gathered as stored: FSDP's param_dtype must be the
//     storage dtype, which is the model's (a pure half-precision or
//     float32 run; transformers' Trainer forces MixedPrecision to it).
func checkFSDPDTypes(g *graph.Graph, s Setup) error {
	p := s.Parallel
	if !p.IsFSDP() {
		return nil
	}
	cdt, _ := parallelDTypes(s)
	pdt := s.Precision.ParamDType()
	for _, id := range g.Params() {
		t := g.Tensor(id)
		if t.Quant != nil {
			switch {
			case t.Quant.Format != graph.NF4 && t.Quant.Format != graph.FP4:
				return fmt.Errorf("%s weights under %s are not modelled: FSDP-QLoRA is bitsandbytes' or torchao's 4-bit (nf4, fp4)", t.Quant.Format, p.Strategy)
			case !t.Quant.Torchao && !t.Quant.FloatStorage:
				return fmt.Errorf("FSDP flattens and shards float tensors only: bitsandbytes' 4-bit codes need a float bnb_4bit_quant_storage (the model's dtype)")
			case shardsQuant(s, t.Quant) && cdt != pdt:
				return fmt.Errorf("FSDP with 4-bit weights gathers the codes in their storage dtype, the model's: use --precision bf16-true or 16-true (bnb_4bit_quant_storage = torch_dtype = MixedPrecision's param_dtype, as transformers' Trainer sets it), not %s", s.Precision)
			}
		}
		if p.Strategy == FSDP && p.Wrap == WrapBlock && t.KeepDType && t.Quant == nil && t.DType != pdt && t.RequiresGrad {
			return fmt.Errorf("FSDP1 flattens each unit into one tensor of one dtype: %s %s (PEFT's float32 adapters, autocast_adapter_dtype) cannot share a block's flat parameter with its %s weights; use --fsdp-wrap lora (PEFT's fsdp_auto_wrap_policy), or PEFT before 0.12 (--peft-version)", t.Name, t.DType, pdt)
		}
	}
	return nil
}
