package train

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// Load is how FSDP1 builds its units' sharded flat parameters before the
// first step, which decides what the caching allocator holds, cached and
// free, when a script resets its peaks (torch.cuda.reset_peak_memory_stats
// keeps the reserved bytes of that moment as the new peak reserved).
type Load string

const (
	// LoadNone lays each unit's shard out directly, with nothing cached:
	// the shards as a state dict loaded into an already sharded model
	// leaves them.
	LoadNone Load = ""
	// LoadSync is rank 0 of FullyShardedDataParallel(module on the CPU,
	// device_id=rank, sync_module_states=True): the path of Answer.AI's
	// fsdp_qlora (low_memory, its default) and of accelerate's
	// cpu_ram_efficient_loading (fsdp_sync_module_states). For each unit,
	// children first (_recursive_wrap in torch/distributed/fsdp/wrap.py
	// wraps a module's children before the module), FSDP's
	// _init_param_handle_from_module
	// (torch/distributed/fsdp/_init_utils.py, torch 2.2):
	//   - _move_module_to_device copies each of the unit's CPU parameters
	//     to the GPU (param.data = param.to(device), one block each);
	//   - _sync_module_params_and_buffers broadcasts them from rank 0 with
	//     dist._broadcast_coalesced in buckets of
	//     PARAM_BROADCAST_BUCKET_SIZE (250 MiB): a bucket closes once it
	//     reaches that size (compute_bucket_assignment_by_size,
	//     torch/csrc/distributed/c10d/reducer.cpp), and each bucket of
	//     more than one tensor is flattened into a new tensor
	//     (BroadcastWork: flatten_dense_tensors, a torch.cat; a single
	//     tensor is a view) that ProcessGroupNCCL records on its stream,
	//     so its free completes only once the broadcast has (the blocks
	//     come back when the next unit's synchronous host-to-device copy
	//     has waited for it). broadcast_coalesced
	//     (torch/csrc/distributed/c10d/comm.cpp) keeps at most two
	//     buckets in flight on the host (max_in_flight), but finish()
	//     only orders the streams: a host running ahead of the GPU has
	//     not waited for the broadcast, so every bucket of a unit is
	//     taken as held until the unit is built, the larger figure for a
	//     unit of more than two buckets (a 70B model's block);
	//   - FlatParamHandle's flatten_tensors concatenates the parameters
	//     into the unsharded flat parameter (torch.cat, no padding with
	//     use_orig_params=False), and shard() clones this rank's chunk
	//     (_get_shard: chunk.clone()) and frees the unsharded storage
	//     (orig_storage._resize_(0)) (torch/distributed/fsdp/_flat_param.py);
	//   - the moved parameters go when the function's list of them does.
	//
	// The allocator keeps every freed block cached: the shards of later
	// units and the step's blocks are carved out of what the earlier
	// units left, or get new segments. With 4-bit weights, fsdp_qlora's
	// rank 0 first quantizes every Linear4bit on the GPU and moves its
	// codes to the CPU (load_and_quantize, to_cpu), then calls
	// torch.cuda.empty_cache().
	LoadSync Load = "sync"
	// LoadMeta builds the model on the meta device and has FSDP
	// materialize each unit on the GPU (param_init_fn or
	// reset_parameters after to_empty: _materialize_with_param_init_fn,
	// _materialize_meta_module), flatten and shard it, with no broadcast:
	// LoadSync without the buckets.
	LoadMeta Load = "meta"
)

// ParseLoad reads an --fsdp-load name.
func ParseLoad(s string) (Load, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "none":
		return LoadNone, nil
	case "sync", "sync-module-states", "sync_module_states", "cpu":
		return LoadSync, nil
	case "meta":
		return LoadMeta, nil
	}
	return "", fmt.Errorf("unknown FSDP load %q (want none, sync or meta)", s)
}

func (l Load) String() string {
	if l == LoadNone {
		return "none"
	}
	return string(l)
}

// broadcastBucketBytes is FSDP's PARAM_BROADCAST_BUCKET_SIZE,
// int(250 * 1024 * 1024) (torch/distributed/fsdp/_init_utils.py).
const broadcastBucketBytes = 250 << 20

// checkLoad refuses the load paths that are not modelled.
func checkLoad(p Parallel) error {
	if p.Load == LoadNone {
		return nil
	}
	if _, err := ParseLoad(string(p.Load)); err != nil {
		return err
	}
	switch {
	case p.Strategy != FSDP:
		return fmt.Errorf("the FSDP load %s is FullyShardedDataParallel's (strategy fsdp), not %s's", p.Load, p.Strategy)
	case p.ShardRanks() < 2:
		return fmt.Errorf("the FSDP load %s shards each unit: it needs a sharding strategy over more than one GPU", p.Load)
	case p.Offload:
		return fmt.Errorf("the FSDP load %s with CPU offload is not modelled", p.Load)
	}
	return nil
}

// quantizeOnLoad is fsdp_qlora's load_and_quantize on rank 0 with
// low_memory: the weight is copied to the GPU in the model's dtype and
// quantized there (Params4bit.cuda, as loadQuantized simulates it), and
// its codes go to the CPU (value.data.to("cpu")), freed on the device; the
// quantization state stays on the GPU, whole, as every rank keeps it.
func (sim *Simulator) quantizeOnLoad(ps *paramState, t *graph.Tensor) {
	sim.loadQuantized(ps, t)
	codes := ps.st
	sim.free(codes)
	sim.sum.ParametersBytes -= codes.bytes
	sim.sum.QuantizedBytes -= codes.bytes
	ps.st = nil
	ps.fdt = sim.s.Precision.ParamDType()
	ps.flatN = quantFlatElems(t, ps.fdt)
	sim.sum.QuantizedBytes += shardElems(graph.Shape{ps.flatN}, sim.s.Parallel.ShardRanks(), false) * ps.fdt.Size()
}

// loadUnits builds FSDP1's units as LoadSync or LoadMeta says, in the
// order FSDP wraps them: each block's adapters first when PEFT's policy
// gives every adapter a unit of its own (WrapLoRA), then the block, the
// root last. It leaves each unit's shard allocated as setupParallel's
// direct layout would, one per FSDP unit.
func (sim *Simulator) loadUnits(g *graph.Graph) {
	p := sim.s.Parallel
	ids := g.Params()
	for u := range sim.units {
		un := &sim.units[u]
		if !un.sharded() {
			continue
		}
		var base []*paramState
		for _, pi := range un.params {
			ps := sim.params[pi]
			t := g.Tensor(ids[pi])
			if p.Wrap == WrapLoRA && t.RequiresGrad && !t.Untrained {
				// lambda_auto_wrap_policy's unit of one adapter weight
				sim.site = sim.tr.Site(t.Name + ".flat_param")
				ps.st = sim.loadUnit([]*paramState{ps})
				continue
			}
			base = append(base, ps)
		}
		if len(base) == 0 {
			continue
		}
		sim.site = sim.tr.Site(sim.unitName(g, u) + ".flat_param")
		un.flat = sim.loadUnit(base)
		for _, ps := range base {
			ps.st = un.flat
		}
	}
}

// loadUnit is one unit's _init_param_handle_from_module on this rank (see
// LoadSync): it returns the shard, held.
func (sim *Simulator) loadUnit(params []*paramState) *storage {
	sync := sim.s.Parallel.Load == LoadSync
	orig := make([]*storage, 0, len(params))
	var whole, local int64
	for _, ps := range params {
		n := ps.numel
		if ps.flatN > 0 {
			n = ps.flatN // the 4-bit codes, as the storage dtype
		}
		b := n * ps.shardDT().Size()
		orig = append(orig, sim.alloc(b, trace.Transient))
		whole += b
		local += ps.local * ps.shardDT().Size()
	}
	var buckets []*storage
	if sync {
		var size int64
		var count int
		flush := func() {
			if count > 1 {
				buckets = append(buckets, sim.alloc(size, trace.Transient))
			}
			size, count = 0, 0
		}
		for _, o := range orig {
			size += o.bytes
			count++
			if size >= broadcastBucketBytes {
				flush()
			}
		}
		flush()
	}
	flat := sim.alloc(whole, trace.Transient)
	shard := sim.alloc(local, trace.Parameter)
	shard.refs = 1
	sim.sum.ParametersBytes += local
	sim.free(flat)
	for i := len(orig) - 1; i >= 0; i-- {
		sim.free(orig[i])
	}
	for _, b := range buckets {
		sim.free(b)
	}
	return shard
}
