package train

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// Strategy is how the data-parallel ranks hold the model.
type Strategy string

const (
	// Single is one GPU.
	Single Strategy = "single"
	// DDP is torch.nn.parallel.DistributedDataParallel: every rank holds
	// the whole model, and the reducer's gradient buckets beside it.
	DDP Strategy = "ddp"
	// FSDP is torch.distributed.fsdp.FullyShardedDataParallel: each
	// wrapped unit's parameters as one flat parameter, sharded.
	FSDP Strategy = "fsdp"
	// FSDP2 is fully_shard: every parameter sharded on dim 0.
	FSDP2 Strategy = "fsdp2"
	// ZeRO1, ZeRO2 and ZeRO3 are DeepSpeed's ZeRO stages: the optimizer
	// state, then the gradients, then the parameters partitioned.
	ZeRO1 Strategy = "zero1"
	ZeRO2 Strategy = "zero2"
	ZeRO3 Strategy = "zero3"
)

// Strategies lists the strategy names ParseStrategy knows.
var Strategies = []Strategy{Single, DDP, FSDP, FSDP2, ZeRO1, ZeRO2, ZeRO3}

// ParseStrategy reads a strategy name, case-insensitively, with the
// spellings the libraries use.
func ParseStrategy(s string) (Strategy, error) {
	k := strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(strings.TrimSpace(s)))
	switch k {
	case "", "single", "none", "1gpu":
		return Single, nil
	case "ddp", "distributeddataparallel":
		return DDP, nil
	case "fsdp", "fsdp1", "fullyshardeddataparallel":
		return FSDP, nil
	case "fsdp2", "fullyshard":
		return FSDP2, nil
	case "zero1", "zerostage1", "deepspeed1", "deepspeedstage1":
		return ZeRO1, nil
	case "zero2", "zerostage2", "deepspeed2", "deepspeedstage2":
		return ZeRO2, nil
	case "zero3", "zerostage3", "deepspeed3", "deepspeedstage3":
		return ZeRO3, nil
	}
	return "", fmt.Errorf("unknown strategy %q (want %s)", s, strategyList())
}

func strategyList() string {
	names := make([]string, len(Strategies))
	for i, s := range Strategies {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Sharding is FSDP's ShardingStrategy (and FSDP2's equivalents).
type Sharding string

const (
	// FullShard shards parameters, gradients and optimizer state, and
	// frees each unit's gathered parameters after its forward.
	FullShard Sharding = "full"
	// ShardGradOp keeps the gathered parameters from forward until the
	// unit's backward (FSDP2: reshard_after_forward=False).
	ShardGradOp Sharding = "grad-op"
	// HybridShard shards within a node and replicates across nodes.
	HybridShard Sharding = "hybrid"
	// NoShard replicates everything, as DDP does.
	NoShard Sharding = "none"
)

// ParseSharding reads FSDP's ShardingStrategy names.
func ParseSharding(s string) (Sharding, error) {
	switch strings.NewReplacer("_", "-", " ", "-").Replace(strings.ToLower(strings.TrimSpace(s))) {
	case "", "full", "full-shard":
		return FullShard, nil
	case "grad-op", "shard-grad-op", "no-reshard":
		return ShardGradOp, nil
	case "hybrid", "hybrid-shard":
		return HybridShard, nil
	case "none", "no-shard":
		return NoShard, nil
	}
	return "", fmt.Errorf("unknown sharding %q (want full, grad-op, hybrid or none)", s)
}

// Parallel says how the step is spread over data-parallel ranks. The
// prediction is for one rank; the batch is the rank's own.
type Parallel struct {
	Strategy Strategy
	// GPUs is the data-parallel world size.
	GPUs int
	// NodeGPUs is the ranks of one node: HYBRID_SHARD shards within
	// them (default 8).
	NodeGPUs int
	// Sharding is FSDP's sharding strategy (FSDP and FSDP2 only).
	Sharding Sharding
	// Offload is FSDP's CPUOffload(offload_params=True) (parameters,
	// gradients and the optimizer step on the host) or ZeRO's
	// offload_optimizer (master weights, optimizer state and gradient
	// partition on the host).
	Offload bool
	// OffloadParams is ZeRO-3's offload_param.
	OffloadParams bool
	// BucketMB is DDP's bucket_cap_mb (default 25).
	BucketMB float64
	// BucketView is DDP's gradient_as_bucket_view.
	BucketView bool
	// ReduceBucket is ZeRO's reduce_bucket_size in elements (default
	// 5e8).
	ReduceBucket int64
	// PrefetchBucket is ZeRO-3's stage3_prefetch_bucket_size in
	// elements (default 5e7); 0 turns prefetching off.
	PrefetchBucket int64
	// Persist is ZeRO-3's stage3_param_persistence_threshold in elements
	// (default 1e5): smaller parameters are not partitioned.
	Persist int64
	// MaxReuse is ZeRO-3's stage3_max_reuse_distance in elements
	// (default 1e9).
	MaxReuse int64
	// NoSync runs every micro-batch of a step but the last inside
	// FullyShardedDataParallel.no_sync() (FSDP1 only), as Lightning
	// Fabric's no_backward_sync and Accelerate's accumulate do under
	// gradient accumulation: the post-backward hook reshards the
	// parameters but skips the reduce-scatter, so each unit keeps its
	// whole unsharded flat gradient, accumulated in place, until the
	// syncing micro-batch reduces it ("FSDP will accumulate the full
	// model gradients (instead of gradient shards) until the eventual
	// sync": the no_sync docstring, and _post_backward_hook's early
	// return when not state._sync_gradients, in
	// torch/distributed/fsdp/fully_sharded_data_parallel.py and
	// _runtime_utils.py, torch 2.1).
	NoSync bool
	// Wrap is FSDP's wrap policy: block or lora under FSDP1 (default
	// block), param under FSDP2 (its only one).
	Wrap Wrap
	// Load is how FSDP1 builds its sharded units before the first step
	// (fsdpload.go); LoadNone lays the shards out with nothing cached.
	Load Load
}

// DeepSpeed's defaults (deepspeed/runtime/zero/config.py).
const (
	ZeROReduceBucket   = 500_000_000
	ZeROPrefetchBucket = 50_000_000
	zeroPersist        = 100_000
	zeroMaxReuse       = 1_000_000_000
)

// DDP's defaults (torch/nn/parallel/distributed.py): bucket_cap_mb=25 and
// a first bucket of dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB), so that the
// first allreduce starts early.
const (
	DDPBucketMB         = 25
	ddpFirstBucketBytes = 1 << 20
)

// On reports whether more than one GPU, or a sharding wrapper on one, is
// simulated.
func (p Parallel) On() bool { return p.Strategy != Single && (p.Strategy != "" || p.GPUs > 1) }

// IsZeRO reports a DeepSpeed stage.
func (p Parallel) IsZeRO() bool {
	return p.Strategy == ZeRO1 || p.Strategy == ZeRO2 || p.Strategy == ZeRO3
}

// HalfModule reports DeepSpeed's fp16 or bf16 mode, which is what a
// *-mixed precision means under ZeRO: the module itself is cast to the half
// dtype, nothing runs under autocast, and the optimizer keeps float32
// master weights in its partition (the ZeRO paper's 2Ψ + 2Ψ + 12Ψ/N for
// Adam). This is the one place that says so.
func (p Parallel) HalfModule(prec Precision) bool {
	_, amp := prec.Autocast()
	return amp && p.IsZeRO()
}

// IsFSDP reports FSDP or FSDP2.
func (p Parallel) IsFSDP() bool { return p.Strategy == FSDP || p.Strategy == FSDP2 }

// ShardRanks is the number of ranks the state is sharded over: the world
// for a full shard, one node for HYBRID_SHARD, 1 when nothing is sharded.
func (p Parallel) ShardRanks() int {
	switch {
	case p.IsFSDP() && p.Sharding == NoShard, p.Strategy == DDP, !p.On():
		return 1
	case p.IsFSDP() && p.Sharding == HybridShard:
		return min(p.GPUs, p.NodeGPUs)
	}
	return p.GPUs
}

// shardsParams reports that parameters are gathered unit by unit.
func (p Parallel) shardsParams() bool {
	return p.IsFSDP() && p.Sharding != NoShard || p.Strategy == ZeRO3
}

// shardsGrads reports that gradients are reduce-scattered to a partition.
func (p Parallel) shardsGrads() bool {
	return p.IsFSDP() && p.Sharding != NoShard || p.Strategy == ZeRO2 || p.Strategy == ZeRO3
}

// Name is the strategy in a few words: single, ddp, zero2, fsdp
// (grad-op), fsdp+offload.
func (p Parallel) Name() string {
	if !p.On() {
		return string(Single)
	}
	s := string(p.Strategy)
	if s == "" {
		s = string(DDP)
	}
	if p.IsFSDP() && p.Sharding != FullShard && p.Sharding != "" {
		s += " (" + string(p.Sharding) + ")"
	}
	if p.Offload {
		s += "+offload"
	}
	if p.OffloadParams {
		s += "+param-offload"
	}
	return s
}

// String is the strategy and its ranks: "fsdp (grad-op) on 8 GPUs".
func (p Parallel) String() string {
	if !p.On() {
		return "1 GPU"
	}
	return fmt.Sprintf("%s on %d GPUs", p.Name(), p.GPUs)
}

func (p Parallel) normalize() (Parallel, error) {
	if p.Strategy == "" {
		p.Strategy = Single
		if p.GPUs > 1 {
			p.Strategy = DDP
		}
	}
	if _, err := ParseStrategy(string(p.Strategy)); err != nil {
		return p, err
	}
	if p.GPUs == 0 {
		p.GPUs = 1
	}
	if p.GPUs < 1 || p.GPUs > 1<<16 {
		return p, fmt.Errorf("gpus must be between 1 and 65536, got %d", p.GPUs)
	}
	if p.Strategy == Single && p.GPUs > 1 {
		return p, fmt.Errorf("strategy single runs on one GPU, got %d GPUs", p.GPUs)
	}
	if p.NodeGPUs == 0 {
		p.NodeGPUs = 8
	}
	if p.NodeGPUs < 1 {
		return p, fmt.Errorf("GPUs per node must be at least 1, got %d", p.NodeGPUs)
	}
	if p.Sharding == "" {
		p.Sharding = FullShard
	}
	if p.IsFSDP() && p.Sharding == HybridShard && p.GPUs > p.NodeGPUs && p.GPUs%p.NodeGPUs != 0 {
		// FSDP's _init_intra_node_process_group makes the shard groups
		// with dist.new_subgroups(group_size=GPUs per node), which raises
		// "The world size must be divisible by 'group_size'"
		return p, fmt.Errorf("%d GPUs per node do not divide %d GPUs: hybrid sharding shards within whole nodes", p.NodeGPUs, p.GPUs)
	}
	if _, err := ParseSharding(string(p.Sharding)); err != nil {
		return p, err
	}
	if !p.IsFSDP() && p.Sharding != FullShard {
		return p, fmt.Errorf("sharding %s is FSDP's; strategy %s does not take it", p.Sharding, p.Strategy)
	}
	if p.Strategy == FSDP2 && p.Sharding == NoShard {
		return p, fmt.Errorf("fully_shard always shards: use ddp for no sharding")
	}
	if p.Strategy == FSDP && p.GPUs == 1 {
		// FullyShardedDataParallel switches a world of one to NO_SHARD
		// (_init_process_group_state warns that it does).
		p.Sharding = NoShard
	}
	if p.Offload && !(p.IsFSDP() || p.IsZeRO()) {
		return p, fmt.Errorf("offload is FSDP's CPUOffload or ZeRO's offload_optimizer; strategy %s has neither", p.Strategy)
	}
	if p.NoSync && p.Strategy != FSDP {
		return p, fmt.Errorf("no_sync's full gradients are modelled for FSDP1 (--strategy fsdp); strategy %s does not take it", p.Strategy)
	}
	w, err := ParseWrap(string(p.Wrap))
	if err != nil {
		return p, err
	}
	p.Wrap = w
	switch {
	case p.Strategy == FSDP2 && (p.Wrap == "" || p.Wrap == WrapParam):
		p.Wrap = WrapParam
	case p.Strategy == FSDP2:
		return p, fmt.Errorf("fully_shard (fsdp2) shards every parameter on its own: its wrap is param, not %s", p.Wrap)
	case p.Strategy == FSDP && p.Wrap == "":
		p.Wrap = WrapBlock
	case p.Strategy == FSDP && p.Wrap == WrapParam:
		return p, fmt.Errorf("wrap param is fully_shard's per-parameter sharding: use strategy fsdp2")
	case p.Strategy != FSDP && p.Wrap != "":
		return p, fmt.Errorf("a wrap policy is FSDP's; strategy %s does not take it", p.Strategy)
	}
	l, err := ParseLoad(string(p.Load))
	if err != nil {
		return p, err
	}
	p.Load = l
	if err := checkLoad(p); err != nil {
		return p, err
	}
	if p.OffloadParams && p.Strategy != ZeRO3 {
		return p, fmt.Errorf("parameter offload needs zero3")
	}
	if p.BucketMB == 0 {
		p.BucketMB = DDPBucketMB
	}
	if p.BucketMB < 0 || p.BucketMB > 1<<20 {
		return p, fmt.Errorf("bucket size must be between 0 and 1048576 MB, got %g", p.BucketMB)
	}
	if p.BucketView && p.Strategy != DDP {
		return p, fmt.Errorf("gradient_as_bucket_view is DDP's; strategy %s does not take it", p.Strategy)
	}
	if p.ReduceBucket == 0 {
		p.ReduceBucket = ZeROReduceBucket
	}
	switch {
	case p.PrefetchBucket == 0:
		p.PrefetchBucket = ZeROPrefetchBucket
	case p.PrefetchBucket == -1:
		p.PrefetchBucket = 0 // turned off
	}
	if p.Persist == 0 {
		p.Persist = zeroPersist
	}
	if p.MaxReuse == 0 {
		p.MaxReuse = zeroMaxReuse
	}
	if p.ReduceBucket < 0 || p.PrefetchBucket < 0 && p.PrefetchBucket != -1 || p.Persist < 0 || p.MaxReuse < 0 {
		return p, fmt.Errorf("ZeRO bucket sizes and thresholds must not be negative")
	}
	return p, nil
}

// shardElems is how many of n elements (a tensor of shape sh) one rank
// keeps when sharded over r ranks: FSDP2 chunks dim 0 (torch.chunk, padded
// to ceil(dim0/r) rows on every rank); FSDP1 and ZeRO split the flat
// parameter evenly after padding it to a multiple of r, which per tensor is
// at most ceil(n/r).
func shardElems(sh graph.Shape, r int, perDim0 bool) int64 {
	n := sh.Numel()
	if r <= 1 {
		return n
	}
	if perDim0 && len(sh) > 0 && sh[0] > 0 {
		rows := (sh[0] + int64(r) - 1) / int64(r)
		return rows * (n / sh[0])
	}
	return (n + int64(r) - 1) / int64(r)
}

// unit is an FSDP unit or a ZeRO-3 fetch group: the parameters of one
// block (what an auto-wrap policy on the layer class wraps), or, for the
// last unit, the root's own (embeddings, final norm, head).
type unit struct {
	params []int32
	// full is the elements the unit all-gathers: each rank's shard times
	// the ranks (the padded flat parameter).
	full int64
	// local is the elements this rank keeps of it.
	local int64
	// shardBytes is this rank's shard of the unit in the shards' dtypes,
	// gatherBytes the gathered parameters in the dtypes the ops see them
	// in (the shards times the ranks).
	shardBytes, gatherBytes int64
	// flat holds FSDP1's flat shard, its sharded gradient, and the
	// gathered flat parameter.
	flat, flatGrad, gathered *storage
	// each holds FSDP2's and ZeRO-3's gathered parameters, one per
	// parameter.
	each        []*storage
	gatheredNow bool
	unreduced   bool // unsharded gradients wait for the reduce-scatter
}

// Streams the sharded strategies allocate on: the caching allocator keeps
// a pool per stream, and FSDP and DeepSpeed gather and reduce on streams of
// their own (FSDP1's _unshard_stream and _post_backward_stream, FSDP2's
// all-gather and reduce-scatter streams, ZeRO-3's allgather stream).
const (
	computeStream = 0
	gatherStream  = 1
	reduceStream  = 2
)

// setupParallel lays the parameters out per rank: the whole model for DDP
// and ZeRO 1 and 2, one shard per unit for FSDP, per parameter for FSDP2
// and ZeRO-3. It runs instead of the plain model.to(device).
func (sim *Simulator) setupParallel(g *graph.Graph) {
	p := sim.s.Parallel
	r := p.ShardRanks()
	unitOf := paramUnits(g)
	nunits := len(g.Blocks) + 1
	sim.units = make([]unit, nunits)
	ids := g.Params()
	perDim0 := p.Strategy == FSDP2
	for i, id := range ids {
		ps := sim.params[i]
		u := unitOf[id]
		ps.unit = u
		if !p.shardsParams() || g.Tensor(id).Quant != nil && ps.flatN == 0 {
			continue
		}
		if p.Strategy == ZeRO3 && ps.numel <= p.Persist {
			// stage3_param_persistence_threshold: kept whole, never
			// gathered
			ps.unit = -1
			continue
		}
		sh := ps.shape
		if ps.flatN > 0 {
			// the 4-bit pieces FSDP shards, as a float tensor
			sh = graph.Shape{ps.flatN}
		}
		ps.local = shardElems(sh, r, perDim0)
		ps.lshape = graph.Shape{ps.local}
		if perDim0 && len(sh) > 0 && sh.Numel() > 0 {
			ps.lshape = append(graph.Shape{ps.local / (sh.Numel() / max(sh[0], 1))}, sh[1:]...)
		}
		un := &sim.units[u]
		un.params = append(un.params, int32(i))
		un.local += ps.local
		un.shardBytes += ps.local * ps.shardDT().Size()
		un.gatherBytes += ps.local * int64(r) * ps.computeDT().Size()
	}
	for u := range sim.units {
		un := &sim.units[u]
		un.full = un.local * int64(r)
	}
	if !p.shardsParams() {
		sim.units = nil
	}
	var flat int64 // ZeRO's flattened trainable parameters
	for i, id := range ids {
		ps := sim.params[i]
		t := g.Tensor(id)
		sim.site = sim.tr.Site(t.Name)
		if t.Quant != nil && (ps.flatN == 0 || p.Strategy == FSDP) {
			// loaded as its stored pieces (loadQuantized), or, sharded,
			// in its unit's flat parameter
			continue
		}
		if p.Strategy == FSDP && sim.units != nil && ps.unit >= 0 && sim.units[ps.unit].sharded() {
			continue // one flat shard per unit, below
		}
		if p.IsZeRO() && t.RequiresGrad && !(p.Strategy == ZeRO3 && ps.unit < 0) {
			// DeepSpeed flattens each parameter group's (partitions of
			// the) parameters into one contiguous buffer
			// (bit16_groups_flat; stage 3's fp16_partitioned_groups_flat)
			flat += ps.local
			continue
		}
		if sim.offloadsParams() && ps.unit >= 0 {
			sim.sum.OffloadedBytes += ps.local * ps.sdt.Size()
			continue
		}
		ps.st = sim.alloc(ps.local*ps.shardDT().Size(), trace.Parameter)
		ps.st.refs = 1
		sim.sum.ParametersBytes += ps.st.bytes
	}
	if p.Strategy == FSDP && p.Load != LoadNone {
		sim.loadUnits(g)
	} else if p.Strategy == FSDP {
		for u := range sim.units {
			un := &sim.units[u]
			if !un.sharded() {
				continue
			}
			sim.site = sim.tr.Site(sim.unitName(g, u) + ".flat_param")
			bytes := un.shardBytes
			if sim.offloadsParams() {
				sim.sum.OffloadedBytes += bytes
				continue
			}
			un.flat = sim.alloc(bytes, trace.Parameter)
			un.flat.refs = 1
			sim.sum.ParametersBytes += bytes
			for _, pi := range un.params {
				sim.params[pi].st = un.flat
			}
		}
	}
	if flat > 0 {
		sim.site = sim.tr.Site("zero.flat_params")
		cdt := sim.trained[0].sdt
		if sim.offloadsParams() {
			sim.sum.OffloadedBytes += flat * cdt.Size()
		} else {
			st := sim.alloc(flat*cdt.Size(), trace.Parameter)
			st.refs = 1
			sim.sum.ParametersBytes += st.bytes
			for _, ps := range sim.trained {
				if ps.st == nil {
					ps.st = st
				}
			}
		}
	}
	for _, ps := range sim.params {
		if ps.st == nil {
			// on the host: the ops' values need a storage that nothing
			// frees
			ps.st = &storage{id: -1, refs: 1 << 30}
		}
	}
	if p.IsZeRO() && len(sim.trained) > 0 {
		// The optimizer steps one flat fp32 partition per parameter
		// group (single_partition_of_fp32_groups): ceil(Ψ/N) elements.
		var n int64
		for _, ps := range sim.trained {
			n += ps.numel
		}
		n = (n + int64(p.GPUs) - 1) / int64(p.GPUs)
		if p.GPUs == 1 {
			n = 0
			for _, ps := range sim.trained {
				n += ps.numel
			}
		}
		odt := sim.trained[0].odt
		sim.trained = []*paramState{{shape: graph.Shape{n}, numel: n, local: n, dt: odt, sdt: odt, odt: odt, unit: -1}}
	}
}

// sharded reports that the unit holds sharded parameters.
func (un *unit) sharded() bool { return len(un.params) > 0 }

func (sim *Simulator) unitName(g *graph.Graph, u int) string {
	if u < len(g.Blocks) {
		return g.Blocks[u]
	}
	return "root"
}

// offloadsParams: the parameter shards live on the host.
func (sim *Simulator) offloadsParams() bool {
	p := sim.s.Parallel
	return p.IsFSDP() && p.Offload || p.OffloadParams
}

// paramUnits assigns each parameter to the block whose ops use it, or to
// the root (the last unit) when it is used outside blocks or by more than
// one block (a tied embedding).
func paramUnits(g *graph.Graph) map[graph.TensorID]int32 {
	root := int32(len(g.Blocks))
	units := map[graph.TensorID]int32{}
	use := func(t graph.TensorID, blk int32) {
		if t == graph.None || g.Tensors[t].Role != graph.Parameter {
			return
		}
		if blk < 0 {
			blk = root
		}
		if old, ok := units[t]; ok && old != blk {
			blk = root
		}
		units[t] = blk
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		use(op.Weight, op.Block)
		use(op.Bias, op.Block)
		for _, t := range op.Inputs {
			use(t, op.Block)
		}
	}
	for _, id := range g.Params() {
		if _, ok := units[id]; !ok {
			units[id] = root
		}
	}
	return units
}

// parallelDTypes gives the dtype the ops see the parameters in and the
// dtype the optimizer steps them in. FSDP's MixedPrecision(param_dtype=low)
// gathers the parameters in the low dtype and keeps the shards in float32;
// DeepSpeed's half module (HalfModule) computes in the low dtype and steps
// float32 master weights.
func (sim *Simulator) parallelDTypes() (compute, opt graph.DType) { return parallelDTypes(sim.s) }

func parallelDTypes(s Setup) (compute, opt graph.DType) {
	pdt := s.Precision.ParamDType()
	p := s.Parallel
	if low, amp := s.Precision.Autocast(); amp && (p.IsFSDP() || p.HalfModule(s.Precision)) {
		return low, graph.F32
	}
	return pdt, pdt
}

// setupReducer makes DDP's reducer buckets at construction: the trainable
// parameters in reverse registration order, grouped by dtype, cut into
// buckets of bucket_cap_mb (the first of 1 MiB) — a bucket closes once it
// reaches its cap (compute_bucket_assignment_by_size) — each one flat
// tensor of its parameters' gradients (Reducer::initialize_buckets).
func (sim *Simulator) setupReducer() {
	p := sim.s.Parallel
	if p.Strategy == ZeRO3 && len(sim.trained) > 0 {
		// stage 3 makes its reduction bucket once, at construction
		// (__ipg_bucket_flat_buffer)
		sim.site = sim.tr.Site("zero.ipg_buffer")
		st := sim.alloc(p.ReduceBucket*sim.params[0].dt.Size(), trace.Gradient)
		st.refs = 1
		sim.gradBuckets = append(sim.gradBuckets, st)
		sim.sum.GradBucketBytes += st.bytes
	}
	if p.Strategy != DDP {
		return
	}
	// Without find_unused_parameters or a static graph, DDP starts with
	// one bucket of every gradient (bucket_size_limits = [sys.maxsize])
	// and rebuilds the buckets in the second iteration's forward.
	sim.site = sim.tr.Site("ddp.reducer")
	var all int64
	for _, ps := range sim.trained {
		all += ps.numel * ps.dt.Size()
	}
	if all > 0 {
		st := sim.alloc(all, trace.Gradient)
		st.refs = 1
		sim.gradBuckets = append(sim.gradBuckets, st)
		sim.sum.GradBucketBytes = all
	}
}

// rebuildBuckets is Reducer::rebuild_buckets at the second iteration's
// forward: the old buckets are cleared first, then the new ones made in the
// order the gradients became ready (reverse registration order here), cut
// at 1 MiB for the first (_DEFAULT_FIRST_BUCKET_BYTES) and bucket_cap_mb
// after it; a bucket closes once it reaches its cap
// (compute_bucket_assignment_by_size). The total does not change.
func (sim *Simulator) rebuildBuckets() {
	p := sim.s.Parallel
	if p.Strategy != DDP || sim.stepsDone != 1 || sim.rebuilt || len(sim.gradBuckets) == 0 {
		return
	}
	sim.rebuilt = true
	prev := sim.site
	sim.site = sim.tr.Site("ddp.reducer")
	for _, st := range sim.gradBuckets {
		sim.unref(st)
	}
	sim.gradBuckets = sim.gradBuckets[:0]
	sizes := make([]int64, len(sim.trained))
	for i, ps := range sim.trained {
		sizes[i] = ps.numel * ps.dt.Size()
	}
	for _, b := range ddpBuckets(sizes, p.BucketMB) {
		st := sim.alloc(b, trace.Gradient)
		st.refs = 1
		sim.gradBuckets = append(sim.gradBuckets, st)
	}
	sim.site = prev
}

// ddpBuckets cuts the trainable parameters' gradient bytes (in
// registration order) into the reducer's rebuilt buckets, in the order the
// gradients become ready (reverse registration): 1 MiB for the first
// (_DEFAULT_FIRST_BUCKET_BYTES), bucket_cap_mb after it, a bucket closing
// once it reaches its cap (compute_bucket_assignment_by_size).
func ddpBuckets(sizes []int64, capMB float64) []int64 {
	var out []int64
	limit := int64(ddpFirstBucketBytes)
	var size int64
	for i := len(sizes) - 1; i >= 0; i-- {
		size += sizes[i]
		if size >= limit {
			out = append(out, size)
			size = 0
			limit = int64(capMB * (1 << 20))
		}
	}
	if size > 0 {
		out = append(out, size)
	}
	return out
}

// unitSite names a unit's events.
func (m *micro) unitSite(u int32, what string) {
	m.sim.site = m.sim.tr.Site(m.sim.unitName(m.g, int(u)) + "." + what)
}

// gather all-gathers unit u's parameters before its forward or backward:
// FSDP1's FlatParamHandle.unshard (a low-precision copy of the shard under
// MixedPrecision, then the padded flat parameter), FSDP2's
// foreach_all_gather (one flat output, copied out into a tensor per
// parameter, then freed), ZeRO-3's coalesced all-gather (one flat buffer
// the parameters view). With offload the shard is first copied to the
// device.
func (m *micro) gather(u int32) {
	sim := m.sim
	if u < 0 || int(u) >= len(sim.units) {
		return
	}
	un := &sim.units[u]
	if un.gatheredNow || len(un.params) == 0 {
		return
	}
	un.gatheredNow = true
	prev, prevSite := sim.stream, sim.site
	sim.stream = gatherStream
	m.unitSite(u, "all_gather")
	// the shard cast to the gathered dtype (MixedPrecision's param_dtype)
	low := un.gatherBytes / int64(max(sim.s.Parallel.ShardRanks(), 1))
	var staged []*storage
	if sim.offloadsParams() {
		staged = append(staged, sim.alloc(un.shardBytes, trace.Transient))
	}
	switch sim.s.Parallel.Strategy {
	case FSDP:
		if low != un.shardBytes {
			staged = append(staged, sim.alloc(low, trace.Transient))
		}
		un.gathered = sim.alloc(un.gatherBytes, trace.Parameter)
	case FSDP2:
		if low != un.shardBytes && !sim.offloadsParams() {
			// _get_param_all_gather_inputs: the shards cast into one
			// flat copy-in buffer first
			staged = append(staged, sim.alloc(low, trace.Transient))
		}
		// one flat output per group; this rank's input is a narrow of it
		out := sim.alloc(un.gatherBytes, trace.Transient)
		for _, st := range staged {
			sim.free(st)
		}
		staged = staged[:0]
		un.each = un.each[:0]
		for _, pi := range un.params {
			ps := sim.params[pi]
			n := ps.numel
			if ps.flatN > 0 {
				n = ps.flatN
			}
			un.each = append(un.each, sim.alloc(n*ps.computeDT().Size(), trace.Parameter))
		}
		// wait_for_unshard: in forward the flat output is kept until
		// the next group's copy-out (all_gather_state), in backward
		// freed at once
		if sim.heldGather != nil {
			sim.free(sim.heldGather)
			sim.heldGather = nil
		}
		if sim.phase == trace.Forward {
			sim.heldGather = out
		} else {
			sim.free(out)
		}
	default:
		un.gathered = sim.alloc(un.gatherBytes, trace.Parameter)
	}
	for _, st := range staged {
		sim.free(st)
	}
	sim.stream, sim.site = prev, prevSite
}

// reshard frees unit u's gathered parameters (FSDP's _reshard, ZeRO-3's
// release): autograd's references to them do not keep the memory, which
// FSDP frees by resizing the storage to zero.
func (m *micro) reshard(u int32) {
	sim := m.sim
	if u < 0 || int(u) >= len(sim.units) {
		return
	}
	un := &sim.units[u]
	if !un.gatheredNow {
		return
	}
	un.gatheredNow = false
	if un.gathered != nil {
		sim.free(un.gathered)
		un.gathered = nil
	}
	for _, st := range un.each {
		sim.free(st)
	}
	un.each = un.each[:0]
}

// keepsGathered: inside no_sync() SHARD_GRAD_OP keeps a unit's gathered
// parameters after its backward too, so the next micro-batch gathers
// nothing (_should_free_in_backward: state._sync_gradients or a strategy
// in RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES, which SHARD_GRAD_OP is not;
// torch/distributed/fsdp/_runtime_utils.py, torch 2.1).
func (m *micro) keepsGathered() bool {
	return m.noSync && m.sim.s.Parallel.Sharding == ShardGradOp
}

// reshardAfterForward: FULL_SHARD and HYBRID_SHARD free a unit's
// parameters after its forward, except the root's, which backward needs at
// once (FSDP2 sets the root's reshard_after_forward to False; FSDP1 does
// not reshard the root either). ZeRO-3 releases every fetched module.
func (m *micro) reshardAfterForward(u int32) bool {
	p := m.sim.s.Parallel
	if int(u) == len(m.sim.units)-1 {
		return false
	}
	if p.Strategy == ZeRO3 {
		// The coordinator releases a module's parameters unless the
		// trace says they are used again within
		// stage3_max_reuse_distance elements of fetches: a block is
		// fetched again in backward after the blocks behind it, twice.
		var dist int64
		for v := int(u) + 1; v < len(m.sim.units)-1; v++ {
			dist += 2 * m.sim.units[v].full
		}
		return dist > p.MaxReuse
	}
	return p.IsFSDP() && (p.Sharding == FullShard || p.Sharding == HybridShard)
}

// prefetches: FSDP's default BackwardPrefetch.BACKWARD_PRE gathers the
// next unit of backward before the current one computes; ZeRO-3 prefetches
// up to stage3_prefetch_bucket_size elements ahead in both passes, counted
// here as the whole next unit.
func (m *micro) prefetches(backward bool) bool {
	p := m.sim.s.Parallel
	if p.Strategy == ZeRO3 {
		return p.PrefetchBucket > 0
	}
	return backward && p.IsFSDP()
}

// reduce reduce-scatters unit u's gradients after its backward and keeps
// this rank's shard, in the shards' dtype, as its sharded gradient (added
// to the one already there under accumulation). FSDP1: the views'
// gradients are written into one flat unsharded gradient, reduce-scattered
// into a new padded shard on the post-backward stream, which is cast to
// the parameter dtype (_cast_grad_to_param_dtype); FSDP2: the gradients
// are copied into one flat reduce-scatter input (chunk_cat), reduced into
// a flat output, and cast per parameter.
func (m *micro) reduce(u int32) {
	sim := m.sim
	un := &sim.units[u]
	if !un.unreduced {
		return
	}
	un.unreduced = false
	prev := sim.stream
	m.unitSite(u, "reduce_scatter")
	// FSDP2's foreach_reduce takes the parameters that have a gradient
	// (frozen ones have none), and so does FSDP1 under PEFT's wrap
	// policy, whose adapters are units of their own; otherwise FSDP1's
	// flat gradient covers the whole flat parameter (WrapBlock)
	par := sim.s.Parallel
	onlyTrained := par.Strategy == FSDP2 || par.Wrap == WrapLoRA
	var full, local, up int64 // bytes: the unsharded input, the reduced shard, cast to the shard's dtype
	for _, pi := range un.params {
		ps := sim.params[pi]
		if onlyTrained && ps.ugrad == nil {
			continue
		}
		full += ps.local * int64(par.ShardRanks()) * ps.computeDT().Size()
		local += ps.local * ps.computeDT().Size()
		up += ps.local * ps.shardDT().Size()
	}
	in := sim.alloc(full, trace.Transient)
	for _, pi := range un.params {
		ps := sim.params[pi]
		if ps.ugrad != nil {
			sim.unref(ps.ugrad)
			ps.ugrad = nil
		}
	}
	sim.stream = reduceStream
	out := sim.alloc(local, trace.Transient)
	if sim.s.Parallel.Strategy == FSDP2 {
		// the previous group's reduce-scatter input lives until this
		// group's post_backward waits on it (reduce_scatter_state)
		if sim.heldReduce != nil {
			sim.free(sim.heldReduce)
		}
		sim.heldReduce = in
	} else {
		sim.free(in)
	}
	if up != local {
		st := sim.alloc(up, trace.Transient)
		sim.free(out)
		out = st
	}
	if sim.s.Parallel.Offload {
		// the shard goes to the host (offload_params) and the device
		// copy with it
		sim.free(out)
	} else if un.flatGrad == nil {
		out.refs = 1
		un.flatGrad = out
		if sim.stepsDone == 0 {
			sim.sum.GradientsBytes += out.bytes
		}
	} else {
		sim.free(out) // added into the sharded gradient in place
	}
	sim.stream = prev
}

// zeroBackward is DeepSpeed ZeRO-1/2's backward(): with
// contiguous_gradients (the default) it allocates the reduction bucket of
// reduce_bucket_size elements in the gradients' dtype before running
// autograd, and releases it in the epilogue.
func (m *micro) zeroBackward() *storage {
	sim := m.sim
	p := sim.s.Parallel
	if (p.Strategy != ZeRO1 && p.Strategy != ZeRO2) || len(sim.trained) == 0 {
		return nil
	}
	sim.site = sim.tr.Site("zero.ipg_buffer")
	st := sim.alloc(p.ReduceBucket*sim.params[0].dt.Size(), trace.Transient)
	st.refs = 1
	return st
}

// gradDone is a parameter's gradient complete in AccumulateGrad under a
// strategy that takes it away: held for the unit's reduce-scatter (FSDP),
// copied into the reduction bucket and released (ZeRO-2/3, whose reduced
// partition lives in one buffer made at the first reduction), copied into
// DDP's bucket view (gradient_as_bucket_view: .grad becomes the view).
// It reports false when the gradient stays in .grad as on one GPU.
func (m *micro) gradDone(p int32, g *storage) bool {
	sim := m.sim
	par := sim.s.Parallel
	ps := sim.params[p]
	switch {
	case sim.units != nil && par.IsFSDP() && ps.unit >= 0 && len(sim.units[ps.unit].params) > 0:
		if ps.ugrad == nil {
			ps.ugrad = g
		} else {
			sim.unref(g)
		}
		sim.units[ps.unit].unreduced = true
		return true
	case par.Strategy == ZeRO2 || par.Strategy == ZeRO3:
		sim.unref(g)
		if sim.gradPartition == nil {
			var n int64
			for _, t := range sim.trained {
				n += t.local
			}
			prev := sim.site
			sim.site = sim.tr.Site("zero.grads_in_partition")
			if par.Offload {
				sim.sum.OffloadedBytes += n * ps.dt.Size()
				sim.gradPartition = &storage{id: -1, refs: 1 << 30}
			} else {
				sim.gradPartition = sim.alloc(n*ps.dt.Size(), trace.Gradient)
				sim.gradPartition.refs = 1
				sim.sum.GradientsBytes += sim.gradPartition.bytes
			}
			sim.site = prev
		}
		return true
	case par.Strategy == DDP && par.BucketView:
		sim.unref(g)
		return true
	}
	return false
}
