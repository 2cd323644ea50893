package train

import (
	"context"
	"errors"
	"fmt"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// storage is one allocation as PyTorch's allocator sees it: every tensor
// that shares it (views, in-place results) keeps it alive.
type storage struct {
	id    int64
	bytes int64
	cat   trace.Category
	refs  int32 // holders: live graph tensors, autograd nodes, Python references
	saves int32 // how many of the holders are autograd nodes
	// freed says the storage went back to the allocator: freeing it again
	// would count its bytes out twice
	freed bool
}

// value is a graph tensor at run time: its storage and the dtype it has in
// this setup (which precision can change).
type value struct {
	st *storage
	dt graph.DType
}

type paramState struct {
	shape graph.Shape
	st    *storage
	// dt and numel are the parameter as the ops see it (its dtype in the
	// forward, its whole size); local, sdt and odt are what this rank
	// keeps of it, in which dtype, and the dtype the optimizer steps (all
	// equal to numel and dt on one GPU). unit is its FSDP unit or ZeRO-3
	// fetch group (-1: never gathered).
	dt       graph.DType
	numel    int64
	local    int64
	sdt, odt graph.DType
	unit     int32
	// lshape is the shape of what this rank keeps (the optimizer's view)
	lshape graph.Shape
	// ugrad is the unsharded gradient waiting for the unit's
	// reduce-scatter (sharded gradients only).
	ugrad   *storage
	grad    *storage // .grad, nil when unset
	state   []*storage
	pending *storage // gradient waiting in AccumulateGrad's input buffer
	// pendingShared: pending is a tensor also handed to another input
	pendingShared bool
	// pendingClone: pending's layout is not the parameter's
	pendingClone bool
	// pendingView: pending is a view of another tensor (accumulate)
	pendingView bool
	arrived     int32
	// quant holds a quantized weight's other device tensors (absmax,
	// codes, scales): st is its packed codes.
	quant []*storage
	// flatN is, for a 4-bit weight that FSDP shards, the elements of
	// fdt its sharded pieces make (shardedQuant); 0 otherwise.
	flatN int64
	fdt   graph.DType
	// cast node (autocast weight cache) input buffer
	castPending     *storage
	castPendingView bool
	castArrived     int32
}

// Simulator turns training steps on a graph into a Trace. Use New, then
// Step for each optimizer step (possibly with graphs of different batch
// sizes), then Trace.
type Simulator struct {
	s      Setup
	tr     trace.Trace
	next   int64
	step   int32
	phase  trace.Phase
	site   int32
	low    graph.DType
	amp    bool
	params []*paramState
	// trained are the params that require grad, which the optimizer steps
	trained []*paramState
	buffers []*storage
	batch   []*storage
	loss    *storage
	// graphHeld is what the last step's autograd graph holds beyond its
	// saved tensors (a reentrant checkpoint's stashed CPU generator
	// state): it goes with the loss, when the loop rebinds it
	graphHeld []*storage
	// returned holds, in eval, what the last forward returned beside the
	// loss (graph.Returned: a ModelOutput's logits), which the loop's
	// variable keeps until the next forward's output replaces it.
	returned []*storage
	// cuBLAS workspaces, one per thread (forward, autograd device thread).
	wsForward, wsBackward bool
	// cuBLASLt workspaces, one per thread's handle (gemmLt).
	ltForward, ltBackward bool
	// cudnnKeys numbers the convolution configurations seen, each an
	// entry of cuDNN's benchmark cache: the first sight of one runs the
	// benchmark search, and its workspaces fall back under its number
	// (trace.Event.Fallback).
	cudnnKeys map[cudnnKey]int32
	// dynamicMap: bitsandbytes' cached dynamic map is on the device
	dynamicMap bool
	scaler     []*storage
	sum        Summary
	err        error
	stepsDone  int
	gradsAlive bool
	slab       []storage
	live       int64 // requested bytes of the live storages
	limit      int64 // StopAbove's limit, 0 for none
	plans      map[*graph.Graph]*plan
	// autograd maps a graph to itself as autograd sees it under the
	// checkpointing policy (AutogradGraph)
	autograd map[*graph.Graph]*graph.Graph
	inBuf    []value
	localBuf []*storage
	// One context of each kind serves every op (an op's rules do not
	// nest): the rules take them by pointer, which would otherwise put one
	// on the heap per op.
	ctx  fwdCtx
	bctx bwdCtx
	// units are the FSDP units or ZeRO-3 fetch groups (parallel.go);
	// stream is the stream new allocations are made on.
	units  []unit
	stream int32
	// gradBuckets are DDP's buckets and ZeRO's reduction buffers, which
	// gradients are copied into.
	gradBuckets []*storage
	// gradPartition is ZeRO-2/3's reduced gradient partition.
	gradPartition *storage
	// heldGather and heldReduce are FSDP2's all-gather output and
	// reduce-scatter input kept for the next group.
	heldGather, heldReduce *storage
	rebuilt                bool // DDP's buckets were rebuilt
	zeroGrad32             *storage
	// onHost: optimizer state is being made in host memory (offload)
	onHost bool
	// collecting keeps every storage allocated (in collected) while the
	// template of a repetition and the micro-batch before it are simulated.
	collecting  bool
	collected   []*storage
	collectedAt int // where the template's storages begin in collected
	// inference: forward passes under torch.no_grad() with the model in
	// eval mode, and the key/value cache they keep (infer.go).
	noGrad bool
	cache  []*storage
	// casts holds autocast's weight-cast cache between forwards that run
	// in one autocast region (generate() inside torch.autocast).
	casts     map[int32]*storage
	castOrder []int32
	// extrapolated counts the decode steps written out by extrapolate
	extrapolated int64
}

// repeatMicroBatches turns on the repetition of steady micro-batches
// (tests compare with it off).
var repeatMicroBatches = true

// repeatMicro ends a step's accumulation without simulating it when the
// micro-batches have become periodic. Every micro-batch after the first
// runs the same graph from the same state (.grad exists, the previous
// batch and loss are held by the loop's variables), so from the third on
// they emit the same events; the fourth (index 3) is checked against the
// third, event by event and id by id, and then stands as the template of
// the remaining times micro-batches: their events are copies with the ids
// moved on, and the storages that outlive it (the batch and the loss the
// loop still holds) take the ids of the last copy. The copies are kept
// once, as a trace.Repeat. evAt and idAt are the event index and next id
// at the start of micro-batches 0 to 4.
func (sim *Simulator) repeatMicro(evAt, idAt [5]int64, times int) bool {
	return sim.repeatRuns(evAt, idAt, times, 0)
}

// repeatRuns is repeatMicro for runs that are steps of their own as well:
// each run's events carry a Step steps higher than the run before.
func (sim *Simulator) repeatRuns(evAt, idAt [5]int64, times int, steps int32) bool {
	return sim.repeatLagged(evAt[:], idAt[:], 1, times, steps)
}

// repeatLagged stands run t = len(evAt)-2 as the template of the times
// runs after it, as repeatRuns does, for runs that may free what the lag
// runs before them allocated (a pipeline stage's 1F1B pairs, lag pairs
// apart from the forward whose activations each backward frees). evAt and
// idAt are the event index and next id at the start of runs 0 to t and at
// the template's end; run 0 is t-2·lag, the first whose frees reach only
// runs that are compared. Runs t-lag to t-1 must equal the template with
// ids and steps moved on, the runs from 0 must have taken ids delta apart,
// and run t-lag must have left nothing behind by the template's end (the
// template frees what it saved): then the storages alive of runs t-lag+1
// to t take the ids of the last copy's matching runs.
func (sim *Simulator) repeatLagged(evAt, idAt []int64, lag, times int, steps int32) bool {
	t := len(evAt) - 2
	if times <= 0 || lag < 1 || t < 2*lag || len(idAt) != len(evAt) {
		return false
	}
	ev := sim.tr.Events
	tmpl := ev[evAt[t]:evAt[t+1]]
	delta := idAt[t+1] - idAt[t]
	if delta <= 0 {
		return false
	}
	for j := t - 2*lag; j < t; j++ {
		if idAt[j+1]-idAt[j] != delta {
			return false
		}
	}
	for j := t - lag; j < t; j++ {
		prev := ev[evAt[j]:evAt[j+1]]
		if len(prev) != len(tmpl) {
			return false
		}
		d := int64(t - j)
		for i := range tmpl {
			a, b := prev[i], tmpl[i]
			if a.ID >= idAt[j-lag] {
				a.ID += d * delta
			}
			a.Step += int32(d) * steps
			if a != b {
				return false
			}
		}
	}
	// Run t-lag must have left nothing behind by the end of the template
	// (the fourth micro-batch's loop rebinds the third's batch and loss;
	// a pair's backward frees what the forward lag pairs before saved): a
	// copy does not free what its template kept.
	for _, st := range sim.collected[:sim.collectedAt] {
		if st.refs > 0 {
			return false
		}
	}
	base := idAt[t]
	sim.tr.Repeats = append(sim.tr.Repeats, trace.Repeat{Start: int(evAt[t]), End: int(evAt[t+1]), Times: times, Base: base, Delta: delta, Steps: steps, Lag: lag})
	shift := int64(times) * delta
	sim.next += shift
	for _, st := range sim.collected[sim.collectedAt:] {
		if st.refs > 0 {
			st.id += shift
		}
	}
	return true
}

// Summary holds the static figures of a setup, measured while simulating.
type Summary struct {
	ParamCount int64
	// TrainableParamCount counts the parameters that require grad (all of
	// them, unless frozen or adapted).
	TrainableParamCount int64
	ParametersBytes     int64
	BuffersBytes        int64
	GradientsBytes      int64
	OptimizerStateBytes int64
	// GradBucketBytes are DDP's gradient buckets and ZeRO-3's reduction
	// bucket, made once.
	GradBucketBytes int64
	// OffloadedBytes are parameters, gradients and optimizer state a
	// sharded strategy keeps in host memory (CPU offload).
	OffloadedBytes int64
	// PagedOptimizerStateBytes are a paged optimizer's states in CUDA
	// unified memory: on the device while used, but outside PyTorch's
	// allocator, and paged out to the host rather than failing.
	PagedOptimizerStateBytes int64
	// QuantizedParamCount counts the elements of the quantized weights
	// (their logical [out, in] size) and QuantizedBytes what they store
	// on the device, all pieces (part of ParametersBytes).
	QuantizedParamCount int64
	QuantizedBytes      int64
	// ActivationsBytes is what autograd holds saved at the end of the
	// first forward pass, counted once per storage, excluding parameters,
	// buffers, autocast's parameter copies and the batch.
	ActivationsBytes int64
	// CastCacheBytes is autocast's low-precision parameter copies alive at
	// the end of the first forward pass.
	CastCacheBytes int64
	BatchDataBytes int64
	WorkspaceBytes int64
	// ConvWorkspaceBytes is the largest cuDNN convolution workspace
	// (conv_cudnn.go: the release's figure, a search's included), and
	// CudnnSearches the benchmark searches run (--cudnn-benchmark).
	ConvWorkspaceBytes int64
	CudnnSearches      int
	// ConvWorkspaceNHWC: some kernel's workspace is cuDNN 9's NHWC copies
	// (conv_cudnn.go) rather than the explicit-GEMM bound.
	ConvWorkspaceNHWC bool
	// LibraryBytes is device memory libraries allocate outside PyTorch's
	// allocator that the step itself makes (cuBLAS's own workspaces
	// before 2.0): in nvidia-smi's figure, not in memory_reserved.
	LibraryBytes int64
	// CudnnConvs, FusedAttention and CudnnAttention: the step runs cuDNN's
	// convolutions, and a fused attention kernel (flash or cuDNN
	// attention; cuDNN's if CudnnAttention), on the GPU (their kernels'
	// modules load on first use: profile.LazyModules).
	CudnnConvs, FusedAttention, CudnnAttention bool
	// PeakRequested is the largest sum of the unrounded sizes of the live
	// allocations over the whole trace: what the allocator's
	// requested_bytes peak would be on a device with room for everything.
	// Unlike the replay's figure it is known even when the replay runs out
	// of memory, which is what a search needs to aim its next guess.
	PeakRequested int64
	// PhasePeakRequested is PeakRequested phase by phase (the largest
	// live sum right after an allocation in that phase). Outside the
	// optimizer step it does not depend on the optimizer's implementation.
	PhasePeakRequested [trace.NumPhases]int64
	// FirstPassPeakRequested is PeakRequested up to the first optimizer
	// step: the parameters and the first step's forward and backward
	// passes, before any optimizer state exists (every optimizer makes
	// its state in its first step), so that no optimizer changes it. When
	// StopAbove stopped the first step, it is the peak so far.
	FirstPassPeakRequested int64
	// SavedByOp attributes ActivationsBytes to the op that first saved each
	// storage, in forward order.
	SavedByOp []OpSaved
	// Ops says how each op of the first graph ran in the first forward
	// pass, indexed like Graph.Ops: what the step-time model needs to know
	// that only the simulation decides (autocast's dtypes and copies, the
	// attention kernel).
	Ops []OpRun
}

// OpRun is one op's first forward run.
type OpRun struct {
	// In is the dtype the kernel computed in: its first operand after
	// autocast (or its weight, for ops without operands); Out its output's.
	In, Out graph.DType
	// Kernel is the attention kernel the dispatcher picked (attention ops);
	// for the math and eager kernels, Scores is the dtype the products run
	// in (the math kernel may upcast) and Probs the softmax's (float32
	// under autocast for Python-level ops).
	Kernel        Attention
	Scores, Probs graph.DType
	// InputCasts marks the operands (bit j for Inputs[j]) autocast copied
	// from CastFrom into In: their size follows the batch. ParamCasts
	// counts the copies of parameters the op made (the first use in an
	// autocast region), and ParamCastBytes is what they read and wrote.
	InputCasts     uint64
	CastFrom       graph.DType
	ParamCasts     int32
	ParamCastBytes int64
}

// OpSaved is one op's share of the saved activations.
type OpSaved struct {
	Op    string
	Kind  graph.Kind
	Bytes int64
}

// New starts a simulation. The graph gives the parameters and buffers,
// which are allocated first (model.to(device)).
func New(g *graph.Graph, s Setup) (*Simulator, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return NewValidated(g, s)
}

// NewValidated is New for a graph that passed graph.Validate and has not
// changed since: a search simulates each of its graphs many times, and
// validating a large graph costs a good part of a short simulation.
func NewValidated(g *graph.Graph, s Setup) (*Simulator, error) {
	s, err := s.Normalize()
	if err != nil {
		return nil, err
	}
	sim := &Simulator{s: s}
	g = sim.autogradGraph(g)
	// Each op allocates and frees a few blocks in forward and backward:
	// about 5/2 events per tensor and op a step, 7/2 with recomputation
	// (counted on the zoo's transformers and ResNets). Reserving room once
	// avoids regrowing the event list.
	per := int64(5)
	if s.Checkpoint.On() {
		per = 7
	}
	// Micro-batches past the fifth are a repetition (repeatMicro), so
	// the reservation counts five at most: it is a hint, and a long
	// accumulation would otherwise reserve memory it never fills.
	sim.tr.Reserve(int((int64(len(g.Tensors)+len(g.Ops))*per/2*int64(s.Steps*min(s.Accumulate, 5)) + 64)))
	sim.low, sim.amp = s.Precision.Autocast()
	if s.Parallel.HalfModule(s.Precision) {
		sim.amp = false
	}
	sim.tr.Label = g.Name
	sim.phase = trace.Setup
	pdt := s.Precision.ParamDType()
	cdt, odt := sim.parallelDTypes()
	for _, id := range g.Params() {
		t := g.Tensor(id)
		sim.site = sim.tr.Site(t.Name)
		n := t.Shape.Numel()
		dt := cdt
		if t.KeepDType {
			dt = t.DType
		}
		ps := &paramState{dt: dt, numel: n, shape: t.Shape, local: n, sdt: pdt, odt: odt, unit: -1}
		if t.KeepDType || s.Parallel.IsZeRO() {
			// a parameter that keeps its own dtype; or DeepSpeed's
			// module cast to the half dtype
			ps.sdt = dt
		}
		if t.KeepDType {
			ps.odt = dt
		}
		if t.Quant != nil && shardsQuant(s, t.Quant) && s.Parallel.Load == LoadMeta {
			return nil, fmt.Errorf("4-bit weights with the FSDP load meta are not modelled (each rank quantizes before FSDP materializes it): use sync or none")
		}
		switch {
		case t.Quant != nil && shardsQuant(s, t.Quant) && s.Parallel.Load == LoadSync:
			sim.quantizeOnLoad(ps, t)
			ps.sdt, ps.odt = ps.dt, ps.dt
		case t.Quant != nil && shardsQuant(s, t.Quant):
			sim.loadQuantizedSharded(ps, t)
			ps.sdt, ps.odt = ps.dt, ps.dt
		case t.Quant != nil:
			sim.loadQuantized(ps, t)
			ps.sdt, ps.odt = ps.dt, ps.dt
		case !s.Parallel.On():
			ps.st = sim.alloc(n*ps.sdt.Size(), trace.Parameter)
			ps.st.refs = 1
			sim.sum.ParametersBytes += n * ps.sdt.Size()
		}
		sim.params = append(sim.params, ps)
		if t.RequiresGrad && !t.Untrained {
			sim.sum.TrainableParamCount += n
			// a frozen parameter never gets a gradient, so the optimizer
			// skips it (_init_group keeps the params whose grad is not
			// None) and makes it no state
			sim.trained = append(sim.trained, ps)
		}
		sim.sum.ParamCount += n
	}
	if s.Parallel.Load == LoadSync && sim.sum.QuantizedBytes > 0 {
		// fsdp_qlora's train.py empties the cache after quantizing
		// ("cleanup any extra memory usage from parallel loading")
		sim.EmptyCache()
	}
	if s.Parallel.On() {
		if s.Parallel.IsZeRO() && sim.sum.QuantizedBytes > 0 {
			// DeepSpeed partitions the packed codes too: not modelled
			return nil, fmt.Errorf("quantized weights under %s are not modelled: use ddp, fsdp or fsdp2, or one GPU", s.Parallel.Strategy)
		}
		if err := checkFSDPDTypes(g, s); err != nil {
			return nil, err
		}
		sim.setupParallel(g)
	}
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Role != graph.Buffer {
			continue
		}
		sim.site = sim.tr.Site(t.Name)
		dt := t.DType
		if dt.IsFloat() {
			// model.to(dtype) converts floating buffers too.
			dt = sim.modelDType()
		}
		st := sim.alloc(t.Shape.Numel()*dt.Size(), trace.Buffer)
		st.refs = 1
		sim.buffers = append(sim.buffers, st)
		sim.sum.BuffersBytes += st.bytes
	}
	if s.Parallel.On() {
		sim.setupReducer()
	}
	if s.Parallel.Load != LoadNone {
		// the script resets the peaks once the model is wrapped, before
		// its first step (fsdp_qlora's train.py:
		// torch.cuda.reset_peak_memory_stats before the epoch loop)
		sim.tr.Add(trace.Event{Action: trace.ResetPeaks, Step: sim.step, Site: -1})
		sim.sum.PeakRequested = sim.live
	}
	return sim, nil
}

// Simulate runs s.Steps optimizer steps of g and returns the trace and the
// summary.
func Simulate(g *graph.Graph, s Setup) (*trace.Trace, Summary, error) {
	sim, err := New(g, s)
	if err != nil {
		return nil, Summary{}, err
	}
	for i := 0; i < sim.s.Steps; i++ {
		if err := sim.Step(g); err != nil {
			return nil, Summary{}, err
		}
	}
	return sim.Trace(), sim.Summary(), nil
}

// Setup returns the normalized setup.
func (sim *Simulator) Setup() Setup { return sim.s }

// Trace returns the events so far, every repeated micro-batch written out.
func (sim *Simulator) Trace() *trace.Trace {
	sim.tr.Expand()
	return &sim.tr
}

// CompactTrace returns the events so far with repeated micro-batches kept
// once (trace.Repeat): what a replay needs, without the copies.
func (sim *Simulator) CompactTrace() *trace.Trace { return &sim.tr }

// Summary returns the static figures.
func (sim *Simulator) Summary() Summary { return sim.sum }

func (sim *Simulator) alloc(bytes int64, cat trace.Category) *storage {
	return sim.allocFallback(bytes, cat, 0)
}

// allocFallback is alloc for a caller that catches the allocator's
// out-of-memory error and runs without the block (trace.Event.Fallback,
// with its cache key).
func (sim *Simulator) allocFallback(bytes int64, cat trace.Category, fallback int32) *storage {
	// Storages come from a slab: a simulation makes many small ones.
	if len(sim.slab) == 0 {
		sim.slab = make([]storage, 1024)
	}
	st := &sim.slab[0]
	sim.slab = sim.slab[1:]
	*st = storage{id: sim.next, bytes: bytes, cat: cat}
	sim.next++
	if sim.collecting {
		sim.collected = append(sim.collected, st)
	}
	sim.live += bytes
	sim.sum.PeakRequested = max(sim.sum.PeakRequested, sim.live)
	sim.sum.PhasePeakRequested[sim.phase] = max(sim.sum.PhasePeakRequested[sim.phase], sim.live)
	if sim.limit > 0 && sim.err == nil && sim.live-sim.sum.ConvWorkspaceBytes > sim.limit {
		sim.err = ErrOverLimit // the passes stop at the op's end
	}
	sim.tr.Add(trace.Event{Action: trace.Alloc, Category: cat, Phase: sim.phase,
		Stream: sim.stream, Step: sim.step, Site: sim.site, ID: st.id, Size: bytes, Fallback: fallback})
	return st
}

func (sim *Simulator) free(st *storage) {
	if st.freed {
		sim.fail("internal: storage %d freed twice", st.id)
		return
	}
	st.freed = true
	sim.live -= st.bytes
	sim.tr.Add(trace.Event{Action: trace.Free, Category: st.cat, Phase: sim.phase,
		Step: sim.step, Site: sim.site, ID: st.id})
}

func (sim *Simulator) ref(st *storage) {
	if st != nil {
		st.refs++
	}
}

func (sim *Simulator) unref(st *storage) {
	if st == nil {
		return
	}
	st.refs--
	if st.refs == 0 {
		sim.free(st)
	} else if st.refs < 0 {
		sim.fail("internal: storage %d released more often than held", st.id)
	}
}

// temp allocates and immediately frees: a workspace or intermediate that
// lives only inside one kernel or composite op.
func (sim *Simulator) temp(bytes int64, cat trace.Category) {
	if bytes <= 0 {
		return
	}
	sim.free(sim.alloc(bytes, cat))
}

func (sim *Simulator) fail(format string, args ...any) {
	if sim.err == nil {
		sim.err = fmt.Errorf(format, args...)
	}
}

// ErrOverLimit is what a step stopped by StopAbove returns.
var ErrOverLimit = errors.New("the requested bytes passed the simulation's limit")

// StopAbove makes the steps stop with ErrOverLimit after the op whose
// allocation takes the requested bytes, less the largest cuDNN workspace
// (which a replay without workspaces would not request), past limit; 0
// never stops. A
// prediction that only asks whether a step fits a device has its answer
// there: the allocator rounds every request up, so a step that requests
// more than the device cannot fit it. The Summary then holds the peaks up
// to the stop, each a lower bound of the whole step's.
func (sim *Simulator) StopAbove(limit int64) { sim.limit = limit }

// Stopped reports whether StopAbove stopped the simulation: its trace is
// then a prefix of the step's and must not be replayed as the whole.
func (sim *Simulator) Stopped() bool { return errors.Is(sim.err, ErrOverLimit) }

// Step simulates one optimizer step: Accumulate micro-batches of forward
// and backward on g, then the optimizer step and zero_grad.
func (sim *Simulator) Step(g *graph.Graph) error {
	return sim.StepContext(context.Background(), g)
}

// StepContext is Step that stops with ctx's error when ctx is done,
// checked before each micro-batch (the loop a long accumulation makes
// long; one micro-batch is bounded by the graph's size).
func (sim *Simulator) StepContext(ctx context.Context, g *graph.Graph) error {
	if sim.stepsDone == 0 {
		defer sim.notePass()
	}
	return sim.runStep(ctx, g)
}

// notePass keeps the first step's requested peak before its optimizer
// step (closeStep), or where the step stopped.
func (sim *Simulator) notePass() {
	if sim.sum.FirstPassPeakRequested == 0 {
		sim.sum.FirstPassPeakRequested = sim.sum.PeakRequested
	}
}

func (sim *Simulator) runStep(ctx context.Context, g *graph.Graph) error {
	g = sim.autogradGraph(g)
	if err := sim.checkParams(g); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if sim.err != nil {
		return sim.err
	}
	if sim.s.Stages > 1 {
		sim.pipelineStep(g)
		return sim.closeStep()
	}
	var evAt, idAt [5]int64
	for m := 0; m < sim.s.Accumulate; m++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if m < len(evAt) {
			evAt[m], idAt[m] = int64(len(sim.tr.Events)), sim.next
		}
		// Under no_sync the last micro-batch differs (it reduces), so
		// the steady ones before it are repeated and it is simulated.
		last := 0
		if sim.s.Parallel.NoSync {
			last = 1
		}
		if m == 4 && repeatMicroBatches && sim.repeatMicro(evAt, idAt, sim.s.Accumulate-4-last) {
			if last == 0 {
				break
			}
			m = sim.s.Accumulate - 1
		}
		sim.collecting = m == 2 || m == 3
		if m == 3 {
			sim.collectedAt = len(sim.collected)
		}
		mb := newMicro(sim, g)
		mb.noSync = sim.s.Parallel.NoSync && m < sim.s.Accumulate-1
		if sim.stepsDone == 0 && m == 0 {
			mb.ops = make([]OpRun, len(g.Ops))
			sim.sum.Ops = mb.ops
		}
		mb.loadBatch()
		mb.forward()
		if sim.err != nil {
			return sim.err
		}
		if sim.stepsDone == 0 && m == 0 {
			mb.measureSaved()
		}
		mb.exitAutocast()
		mb.backward()
		if sim.err != nil {
			return sim.err
		}
	}
	sim.collecting, sim.collected = false, sim.collected[:0]
	return sim.closeStep()
}

// closeStep is the optimizer step and zero_grad that close a step.
func (sim *Simulator) closeStep() error {
	if sim.err != nil {
		return sim.err
	}
	if sim.stepsDone == 0 {
		sim.notePass()
	}
	sim.ctx, sim.bctx = fwdCtx{}, bwdCtx{} // drop the last op's micro-batch state
	sim.optimizerStep()
	sim.zeroGrad()
	sim.tr.Add(trace.Event{Action: trace.StepEnd, Step: sim.step, Site: -1})
	if sim.s.EmptyCache {
		sim.tr.Add(trace.Event{Action: trace.EmptyCache, Step: sim.step, Site: -1})
	}
	sim.step++
	sim.stepsDone++
	return sim.err
}

// plan is what a simulation looks up once per graph rather than once per
// op run: each op's trace site and simulation rule (a graph is revisited
// every step, and ops in checkpointed blocks run twice).
type plan struct {
	sites []int32
	rules []rule
	known []bool // whether the op's kind has a rule
	// unitFirst and unitLast are each block's first and last op, in
	// forward order (the hooks of sharded strategies run there).
	unitFirst, unitLast []int32
	// region is the checkpointed region each op belongs to, or -1;
	// regions counts them. A region is a contiguous run of ops.
	region  []int32
	regions int32
	// dead marks the regions none of whose ops makes a tensor that
	// requires grad: their call keeps nothing for backward and nothing
	// recomputes them (AutogradGraph)
	dead []bool
}

// autogradGraph is g under the setup's checkpointing policy
// (AutogradGraph), made once per graph.
func (sim *Simulator) autogradGraph(g *graph.Graph) *graph.Graph {
	if a, ok := sim.autograd[g]; ok {
		return a
	}
	if sim.autograd == nil {
		sim.autograd = map[*graph.Graph]*graph.Graph{}
	}
	a := AutogradGraph(g, sim.s.Checkpoint)
	sim.autograd[g] = a
	return a
}

func (sim *Simulator) planFor(g *graph.Graph) *plan {
	if p, ok := sim.plans[g]; ok {
		return p
	}
	if sim.plans == nil {
		sim.plans = map[*graph.Graph]*plan{}
	}
	p := &plan{sites: make([]int32, len(g.Ops)), rules: make([]rule, len(g.Ops)), known: make([]bool, len(g.Ops))}
	sim.tr.ReserveSites(len(g.Ops))
	for i := range g.Ops {
		p.sites[i] = sim.tr.Site(g.Ops[i].Name)
		p.rules[i], p.known[i] = rules[g.Ops[i].Kind]
	}
	p.region, p.regions = Regions(g, sim.s.Checkpoint)
	p.dead = DeadRegions(g, p.region, p.regions)
	if sim.units != nil {
		p.unitFirst = make([]int32, len(g.Blocks))
		p.unitLast = make([]int32, len(g.Blocks))
		for i := range p.unitFirst {
			p.unitFirst[i] = -1
		}
		for i := range g.Ops {
			if b := g.Ops[i].Block; b >= 0 {
				if p.unitFirst[b] < 0 {
					p.unitFirst[b] = int32(i)
				}
				p.unitLast[b] = int32(i)
			}
		}
	}
	sim.plans[g] = p
	return p
}

// EmptyCache records a torch.cuda.empty_cache() call.
func (sim *Simulator) EmptyCache() {
	sim.tr.Add(trace.Event{Action: trace.EmptyCache, Step: sim.step, Site: -1})
}

func (sim *Simulator) checkParams(g *graph.Graph) error {
	ps := g.Params()
	if len(ps) != len(sim.params) {
		return fmt.Errorf("graph %s has %d parameters, the simulation started with %d", g.Name, len(ps), len(sim.params))
	}
	for i, id := range ps {
		if g.Tensor(id).Shape.Numel() != sim.params[i].numel {
			return fmt.Errorf("graph %s: parameter %s changed size between steps", g.Name, g.Tensor(id).Name)
		}
	}
	return nil
}

// Regions assigns the ops of g to the regions the policy wraps in
// torch.utils.checkpoint: every Every-th block whole, and each attention
// core outside those blocks alone. It returns each op's region (-1 for
// ops that are not wrapped) and the number of regions.
func Regions(g *graph.Graph, c Checkpoint) ([]int32, int32) {
	region := make([]int32, len(g.Ops))
	blockRegion := make([]int32, len(g.Blocks))
	for i := range blockRegion {
		blockRegion[i] = -1
	}
	var n int32
	for i := range g.Ops {
		op := &g.Ops[i]
		r := int32(-1)
		switch {
		case c.Every > 0 && op.Block >= 0 && int(op.Block)%c.Every == 0:
			if blockRegion[op.Block] < 0 {
				blockRegion[op.Block] = n
				n++
			}
			r = blockRegion[op.Block]
		case c.Attention && op.Kind == graph.Attention:
			r = n
			n++
		}
		region[i] = r
	}
	return region, n
}

// modelDType is the dtype the module itself was cast to: the precision's
// parameter dtype, or the half dtype of DeepSpeed's fp16 and bf16 modes.
// Floating buffers and inputs follow it.
func (sim *Simulator) modelDType() graph.DType {
	if sim.s.Parallel.HalfModule(sim.s.Precision) {
		return sim.low
	}
	return sim.s.Precision.ParamDType()
}

// optShape is the shape the optimizer sees: the parameter's own, or its
// shard's.
func (ps *paramState) optShape() graph.Shape {
	if ps.lshape != nil {
		return ps.lshape
	}
	return ps.shape
}

// pipelineStep runs one step of a pipeline stage with the 1F1B schedule
// (Megatron-LM's forward_backward_pipelining_without_interleaving): stage
// s of p runs min(p−s−1, m) warm-up forwards, then alternates one forward
// and one backward, then drains the backwards, so at most p−s
// micro-batches are in flight. Each keeps what it received (and, on the
// first stage, its batch) until its backward; a stage's output is freed
// once sent (deallocate_output_tensor) unless autograd saved it, and the
// gradient received for it is the seed of its backward.
func (sim *Simulator) pipelineStep(g *graph.Graph) {
	n := sim.s.Accumulate
	warm := min(sim.s.Stages-sim.s.Stage-1, n)
	var inflight []*micro
	done := 0
	fwd := func() {
		mb := newMicro(sim, g)
		mb.pipelined = true
		first := sim.stepsDone == 0 && done == 0 && len(inflight) == 0
		if first {
			mb.ops = make([]OpRun, len(g.Ops))
			sim.sum.Ops = mb.ops
		}
		mb.loadBatch()
		mb.forward()
		if first {
			mb.measureSaved()
		}
		mb.exitAutocast()
		inflight = append(inflight, mb)
	}
	bwd := func() {
		mb := inflight[0]
		inflight = inflight[1:]
		mb.backward()
		for _, st := range mb.batch {
			sim.unref(st)
		}
		mb.batch = nil
		if mb.out != nil {
			sim.unref(mb.out)
			mb.out = nil
		}
		done++
	}
	for i := 0; i < warm && sim.err == nil; i++ {
		fwd()
	}
	// The steady pairs repeat: pair p runs forward p+warm and backward p
	// on the same graph with the same micro-batches in flight, so once
	// the backwards free only what pairs saved, each emits the events of
	// the pair before with the ids moved on (repeatLagged). Pair p's
	// backward frees what the forward of pair p-warm saved: lag pairs.
	// The first step's first pair makes the gradients, so the runs
	// compared start at pair 1: the template is pair 2·lag+1, checked
	// against the lag pairs before it; pairs t-lag to t are collected to
	// move the ids of what stays in flight.
	pairs := n - warm
	lag := max(warm, 1)
	t := 2*lag + 1
	var evAt, idAt []int64
	for p := 0; p < pairs && sim.err == nil; p++ {
		if repeatMicroBatches && p >= 1 && p <= t+1 {
			evAt, idAt = append(evAt, int64(len(sim.tr.Events))), append(idAt, sim.next)
			if p == t+1 && sim.repeatLagged(evAt, idAt, lag, pairs-p, 0) {
				done += pairs - p
				break
			}
			sim.collecting = p >= t-lag && p <= t
			if p == t-lag+1 {
				sim.collectedAt = len(sim.collected)
			}
		}
		fwd()
		bwd()
	}
	sim.collecting, sim.collected = false, sim.collected[:0]
	for len(inflight) > 0 && sim.err == nil {
		bwd()
	}
}
