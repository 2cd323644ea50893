package train

import (
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// Comms are the collectives a data-parallel rank runs in one step, with
// the byte sizes the simulation gives the buffers they fill: the same
// units, shards, dtypes and buckets as setupParallel, gather, reduce and
// rebuildBuckets, so that the step-time model (package cost) times the
// traffic whose memory the simulation holds.
type Comms struct {
	// Units are the FSDP units or ZeRO-3 fetch groups, in forward order
	// (the blocks, then the root: embeddings, final norm, head); nil
	// when parameters are not gathered.
	Units []UnitComm
	// Buckets are DDP's rebuilt gradient buckets in the order the
	// reducer fires them (reverse registration order), bytes; under
	// FSDP's NO_SHARD each unit's flat gradient, in backward's order.
	Buckets []int64
	// Grads is the bytes of every trainable gradient in the dtype it is
	// reduced in (DDP's and ZeRO's), and Params the trainable parameters
	// in the dtype ZeRO 1 and 2 all-gather them after the step.
	Grads, Params int64
	// ReduceBucket is ZeRO's reduce_bucket_size in bytes of the
	// gradients' dtype, and GatherBucket its allgather_bucket_size (ZeRO
	// 1 and 2 gather the updated parameters in buckets of it).
	ReduceBucket, GatherBucket int64
	// Ranks is the number of ranks the parameters are sharded over
	// (Parallel.ShardRanks); Replicas the copies of each shard (HYBRID
	// SHARD's nodes), whose gradients are all-reduced.
	Ranks, Replicas int
	// Model are tensor (and sequence) parallelism's collectives in one
	// micro-batch's forward, in order, from the graph's all_gather and
	// reduce_scatter ops (sequence parallelism) or Megatron's
	// all-reduces around the parallel projections (without it).
	Model []ModelComm
	// Boundary is the bytes a pipeline stage sends its neighbour per
	// micro-batch (its last block's output), 0 without a pipeline.
	Boundary int64
}

// UnitComm is one unit's traffic: Gather is the flat (padded) parameter
// all-gathered in the compute dtype, Reduce its gradients reduce-scattered
// (0: nothing trainable), Weight its parameter elements, by which the
// unit's share of the step's arithmetic is apportioned.
//
// Shard is this rank's shard in the dtype it is stored in: what CPU
// offload copies to the device before each gather, and the gradient shard
// it copies back.
type UnitComm struct {
	Name           string
	Gather, Reduce int64
	Shard          int64
	Weight         int64
	Root           bool
}

// CollKind is a collective.
type CollKind uint8

const (
	AllReduce CollKind = iota
	AllGather
	ReduceScatter
)

func (k CollKind) String() string {
	return [...]string{"all-reduce", "all-gather", "reduce-scatter"}[k]
}

// ModelComm is one tensor-parallel collective of the forward pass: Bytes
// is the full (unsharded) tensor, Back the collective its backward runs
// (Megatron's conjugate: an all-gather's backward is a reduce-scatter and
// the other way round; the identity in forward all-reduces in backward).
// Twice marks an all-gather whose Linear keeps the shard and gathers again
// in backward (sequence parallelism). Region is the op's checkpointed
// region (−1: none): recomputation runs it again.
type ModelComm struct {
	Fwd, Back     CollKind
	FwdOn, BackOn bool
	Bytes         int64
	Twice         bool
	Region        int32
}

// Collectives lists what s's data, tensor and pipeline parallelism
// communicate for graph g. runs are the simulation's op records
// (Summary.Ops), which give the activations' dtypes (nil: the graph's); tp
// is the tensor-parallel degree (1: none), sp sequence parallelism, stages
// the pipeline's (1: none); s must be normalized.
func Collectives(g *graph.Graph, s Setup, runs []OpRun, tp int64, sp bool, stages int) Comms {
	p := s.Parallel
	c := Comms{Ranks: p.ShardRanks(), Replicas: 1}
	if p.IsFSDP() && p.Sharding == HybridShard && c.Ranks > 0 {
		c.Replicas = max(p.GPUs/c.Ranks, 1)
	}
	cdt, _ := parallelDTypes(s)
	ids := g.Params()
	dt := func(t *graph.Tensor) graph.DType {
		if t.KeepDType {
			return t.DType
		}
		return cdt
	}
	var sizes []int64
	for _, id := range ids {
		t := g.Tensor(id)
		if t.RequiresGrad && !t.Untrained && t.Quant == nil {
			n := t.Shape.Numel()
			sizes = append(sizes, n*dt(t).Size())
			c.Grads += n * dt(t).Size()
			c.Params += n * dt(t).Size()
		}
	}
	c.ReduceBucket = p.ReduceBucket * cdt.Size()
	// allgather_bucket_size's default is reduce_bucket_size's, 5e8
	// elements (deepspeed/runtime/zero/config.py)
	c.GatherBucket = ZeROReduceBucket * cdt.Size()
	if p.On() && p.Strategy == DDP {
		c.Buckets = ddpBuckets(sizes, p.BucketMB)
	}
	if p.On() && p.IsFSDP() && p.Sharding == NoShard {
		// NO_SHARD all-reduces each unit's flat gradient in its
		// post-backward hook: the blocks from the last, then the root
		unitOf := paramUnits(g)
		per := make([]int64, len(g.Blocks)+1)
		for _, id := range ids {
			if t := g.Tensor(id); t.RequiresGrad && !t.Untrained && t.Quant == nil {
				per[unitOf[id]] += t.Shape.Numel() * dt(t).Size()
			}
		}
		for u := len(g.Blocks) - 1; u >= 0; u-- {
			if per[u] > 0 {
				c.Buckets = append(c.Buckets, per[u])
			}
		}
		if root := per[len(g.Blocks)]; root > 0 {
			c.Buckets = append(c.Buckets, root)
		}
	}
	if p.On() && p.shardsParams() {
		unitOf := paramUnits(g)
		units := make([]UnitComm, len(g.Blocks)+1)
		for u := range units {
			units[u].Name = "root"
			if u < len(g.Blocks) {
				units[u].Name = g.Blocks[u]
			}
			units[u].Root = u == len(g.Blocks)
		}
		trainable := make([]bool, len(units))
		for _, id := range ids {
			t := g.Tensor(id)
			u := unitOf[id]
			n := t.Shape.Numel()
			units[u].Weight += n
			sh := t.Shape
			if t.Quant != nil {
				if !shardsQuant(s, t.Quant) {
					continue // kept whole, never gathered (setupParallel)
				}
				sh = graph.Shape{quantFlatElems(t, s.Precision.ParamDType())}
			} else if p.Strategy == ZeRO3 && n <= p.Persist {
				continue // kept whole, never gathered (setupParallel)
			}
			local := shardElems(sh, c.Ranks, p.Strategy == FSDP2)
			b := local * int64(c.Ranks) * dt(t).Size()
			if t.Quant != nil {
				b = local * int64(c.Ranks) * s.Precision.ParamDType().Size()
			}
			units[u].Gather += b
			sdt := s.Precision.ParamDType()
			if t.KeepDType && t.Quant == nil || p.IsZeRO() {
				sdt = dt(t)
			}
			units[u].Shard += local * sdt.Size()
			if t.RequiresGrad {
				trainable[u] = true
				if p.Strategy != FSDP || p.Wrap == WrapLoRA {
					// FSDP2's foreach_reduce and ZeRO-3 take the
					// parameters that have a gradient; PEFT's wrap
					// policy gives them units of their own
					units[u].Reduce += b
				}
			}
		}
		for u := range units {
			if p.Strategy == FSDP && p.Wrap != WrapLoRA && trainable[u] {
				// FSDP1's flat gradient covers the whole flat parameter
				units[u].Reduce = units[u].Gather
			}
		}
		c.Units = units
	}
	if len(runs) != len(g.Ops) {
		runs = nil
	}
	out := func(i int) int64 {
		t := g.Tensor(g.Ops[i].Output)
		if runs == nil {
			return t.Shape.Numel() * t.DType.Size()
		}
		return t.Shape.Numel() * runs[i].Out.Size()
	}
	in := func(i int) int64 {
		t := g.Tensor(g.Ops[i].Inputs[0])
		if runs == nil {
			return t.Shape.Numel() * t.DType.Size()
		}
		return t.Shape.Numel() * runs[i].In.Size()
	}
	if tp > 1 {
		c.Model = modelComms(g, s, sp, out, in)
	}
	if stages > 1 {
		for i := len(g.Ops) - 1; i >= 0; i-- {
			if g.Ops[i].Block >= 0 {
				c.Boundary = out(i)
				break
			}
		}
	}
	return c
}

// modelComms finds tensor parallelism's collectives in one forward. With
// sequence parallelism they are the graph's all_gather ops (before the
// column-parallel projections and the head) and reduce_scatter ops (after
// the row-parallel projections and the embedding), Megatron-LM's
// gather_from_sequence_parallel_region and
// reduce_scatter_to_sequence_parallel_region. Without it, at the same
// places, Megatron's g operator all-reduces the row-parallel output in
// forward (reduce_from_tensor_model_parallel_region) and its f operator
// all-reduces the column-parallel input's gradient in backward
// (copy_to_tensor_model_parallel_region): the outputs of o_proj, down_proj
// and the vocabulary-parallel embedding, and the inputs of the attention
// and MLP and the head, which the Llama-family builder takes from the
// norms (models/transformers_llama.go).
func modelComms(g *graph.Graph, s Setup, sp bool, outBytes, inBytes func(int) int64) []ModelComm {
	region, _ := Regions(g, s.Checkpoint)
	var out []ModelComm
	for i := range g.Ops {
		op := &g.Ops[i]
		bytes := outBytes(i)
		if sp {
			switch op.Kind {
			case graph.AllGather:
				out = append(out, ModelComm{Fwd: AllGather, Back: ReduceScatter, FwdOn: true, BackOn: true, Bytes: bytes, Twice: true, Region: region[i]})
			case graph.ReduceScatter:
				out = append(out, ModelComm{Fwd: ReduceScatter, Back: AllGather, FwdOn: true, BackOn: true, Bytes: inBytes(i), Region: region[i]})
			}
			continue
		}
		name := op.Name
		if j := strings.LastIndexByte(name, '.'); j >= 0 {
			name = name[j+1:]
		}
		switch {
		case name == "o_proj" || name == "down_proj" || op.Kind == graph.Embedding && op.Block < 0:
			out = append(out, ModelComm{Fwd: AllReduce, FwdOn: true, Bytes: bytes, Region: region[i]})
		case name == "input_layernorm" || name == "post_attention_layernorm" || name == "norm" && op.Block < 0:
			out = append(out, ModelComm{Back: AllReduce, BackOn: true, Bytes: bytes, Region: region[i]})
		}
	}
	return out
}
