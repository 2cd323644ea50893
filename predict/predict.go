package predict

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// Source builds a model's graph for given sizes: a zoo entry, a YAML spec,
// a Hugging Face config, an ONNX file.
type Source interface {
	Name() string
	Build(c models.Config) (*graph.Graph, error)
	// DefaultSeq is the sequence length used when none is given (0 when
	// the model has none).
	DefaultSeq() int64
	// Dims lists the dimensions besides batch the source can vary.
	Dims() []models.Dim
}

// Zoo wraps a zoo entry as a Source.
type Zoo struct{ M models.Model }

func (z Zoo) Name() string { return z.M.Name }
func (z Zoo) Build(c models.Config) (*graph.Graph, error) {
	if c.Seq == 0 {
		c.Seq = z.M.DefaultSeq
	}
	return z.M.Build(c)
}
func (z Zoo) DefaultSeq() int64 { return z.M.DefaultSeq }

// Note is the zoo entry's note (models.Model.Note).
func (z Zoo) Note() string { return z.M.Note }

// Notes hands the entry's note to the typed notes (Noter), so that it
// reaches Result.Notes as well as the header's line (the CS336 models').
func (z Zoo) Notes() []string {
	if z.M.Note == "" {
		return nil
	}
	return []string{z.M.Note}
}

// ModelParallel reports that the zoo entry's builder splits for tensor
// and pipeline parallelism (the transformers family; the builder checks
// the architecture).
func (z Zoo) ModelParallel() bool { return z.M.Family == "transformers" }
func (z Zoo) Dims() []models.Dim  { return z.M.Dims }

// Range gives the valid values of a dimension of the zoo entry.
func (z Zoo) Range(d models.Dim, c models.Config) models.Range {
	if z.M.Range == nil {
		return models.AnyPositive
	}
	return z.M.Range(d, c)
}

// Ranger is a Source whose dimensions take only some values (see
// models.Range).
type Ranger interface {
	Range(d models.Dim, c models.Config) models.Range
}

// RangeOf gives the valid values of dimension d of a source, the other
// sizes as in c: every positive value unless the source says otherwise.
// The batch takes every positive value.
func RangeOf(s Source, d models.Dim, c models.Config) models.Range {
	if r, ok := s.(Ranger); ok && d != models.DimBatch {
		return r.Range(d, c)
	}
	return models.AnyPositive
}

// Request is one prediction.
type Request struct {
	Source Source
	Config models.Config
	Setup  train.Setup
	GPU    gpu.GPU
	// Context overrides the GPU's CUDA context size when not negative.
	Context int64
	// EagerModules: PyTorch was built for a CUDA runtime before 11.7,
	// which loads every kernel at start-up (no lazy module loading), so
	// the context is at least gpu.EagerContextSize on whatever GPU the
	// job runs (ContextSize).
	EagerModules bool
	// NCCLBuffSize is NCCL_BUFFSIZE, the Simple protocol's buffer per
	// connection; 0 takes NCCL's default (profile.NCCLSimpleBuffSize).
	NCCLBuffSize int64
	// Margin is the headroom, bytes, the job must leave on the device to
	// count as fitting (see Band.Margin); 0 answers for the bare figure.
	Margin int64
	Alloc  alloc.Config
	// Schedule gives the batch size of each optimizer step (the seed's
	// 64, 8, 32, 4 experiment); empty means Config.Batch for Setup.Steps
	// steps.
	Schedule []int64
	// Record keeps the allocator state after every event.
	Record bool
	// Observe is called after every replayed event (see
	// alloc.ReplayOptions.Observe); the trace is then replayed in full.
	Observe func(alloc.Observation)
	// KeepTrace keeps the simulated events in the Result. A trace of a
	// large model runs to megabytes and a search makes many results, so
	// by default the events are recycled once replayed.
	KeepTrace bool
	// Graphs, when set, is a search's cache of the graphs it built: the
	// request's graphs are taken from it and kept in it.
	Graphs *Graphs
	// Screen answers without replaying the allocator when the simulated
	// step's requested peak alone exceeds what the device leaves the
	// allocator: every block rounds its request up and reserved memory
	// holds every block, so no allocator setting can fit that step. The
	// Result is then Screened, with an empty Timeline. A search that
	// only asks whether a step fits sets it.
	Screen bool
	// Infer, when set, predicts inference (eval or generate) instead of
	// training: the optimizer, accumulation and checkpointing of Setup
	// play no part.
	Infer *Inference
}

// PeakAt says where in the training step the allocated peak was reached.
type PeakAt struct {
	Phase trace.Phase
	Step  int32 // 0-based
	Site  string
}

// Result is the answer to a Request.
type Result struct {
	Model    string
	Config   models.Config
	Setup    train.Setup
	GPU      gpu.GPU
	Summary  train.Summary
	Timeline *alloc.Timeline
	// Trace is the simulated step, kept only when Request.KeepTrace.
	Trace *trace.Trace
	// PeakAt is where the allocated peak was first reached; nil when
	// nothing was allocated.
	PeakAt *PeakAt
	// Context is the CUDA context and driver memory outside PyTorch,
	// Libraries included.
	Context int64
	// Libraries is what the step makes libraries allocate outside
	// PyTorch's allocator (train.Summary.LibraryBytes), part of Context.
	Libraries int64
	// Modules is the kernels the step loads on first launch
	// (profile.LazyModules), part of Context.
	Modules int64
	// NCCL is the upper bound of NCCL's communicator buffers
	// (NCCLBytes), part of Context; 0 on one GPU.
	NCCL int64
	// Screened: the requested peak alone exceeds the device
	// (Request.Screen), so the allocator was not replayed; Fits is false
	// and the Timeline empty.
	Screened bool
	// DeviceTotal is what nvidia-smi would show for the process at the
	// peak: peak reserved plus the context.
	DeviceTotal int64
	// Margin is the headroom Fits required (Request.Margin).
	Margin int64
	// Relies is what the prediction relies on, and Band the band those
	// predictions have earned on real GPUs (BandFor).
	Relies Reliance
	Band   Band
	Fits   bool
	// Decider names the figure that decided Fits.
	Decider string
	// Note is what the source says about itself (a checkpoint's stored
	// dtype and parameter count), when it has a Note method.
	Note string
	// Notes are the prediction's caveats (Note), in the order every
	// output shows them.
	Notes []Note
	// Stages are every pipeline stage's figures when the request named
	// no stage; the Result is then the stage that fits worst.
	Stages []StageResult
	// Time is the predicted time of one optimizer step (of the first
	// step's batch size in a schedule); nil when the GPU's rates are not
	// known, and for inference.
	Time *cost.Estimate
	// Comm is the communication under data, tensor or pipeline
	// parallelism, part of Time (nil on one GPU).
	Comm *cost.Comm
	// Infer is the inference that was predicted (nil: training), and
	// Generation its cache figures when it generated.
	Infer      *Inference
	Generation *train.GenerationSummary
}

// ContextSize is the CUDA context the request's job has before the
// libraries' own allocations: the one given (Context), else the GPU
// family's lazy-loading estimate, or the eager one where every kernel
// loads at start-up (EagerModules), whichever is larger.
func (r Request) ContextSize() int64 {
	if r.Context >= 0 {
		return r.Context
	}
	if r.EagerModules {
		return max(r.GPU.ContextSize, gpu.EagerContextSize)
	}
	return r.GPU.ContextSize
}

// Timed reports whether a step time is predicted for r: training steps,
// and under data, tensor or pipeline parallelism only on a GPU whose
// interconnect the catalog knows (package cost's communication model).
func (r Request) Timed() bool {
	return r.Infer == nil && (!r.multiGPU() || r.GPU.Link.Known())
}

func (r Request) multiGPU() bool {
	return r.Setup.Parallel.On() || r.Config.TP > 1 || r.Config.PP > 1
}

// Run answers a Request. It stops early with ctx's error when ctx is
// done: the simulation and the replay check it every so often.
func Run(ctx context.Context, r Request) (*Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if r.Source == nil {
		return nil, fmt.Errorf("no model given")
	}
	if err := checkLimits(r); err != nil {
		return nil, err
	}
	if r.Config.PP > 1 && r.Config.Stage < 0 {
		return runStages(ctx, r)
	}
	r, setup, err := normalize(r)
	if err != nil {
		return nil, err
	}
	var sim *train.Simulator
	var g0 *graph.Graph
	var gen *train.GenerationSummary
	if r.Infer != nil {
		sim, g0, gen, err = simulateInference(ctx, r, setup)
	} else {
		sim, g0, err = simulateTraining(ctx, r, setup)
	}
	if err != nil {
		return nil, err
	}
	return finish(ctx, r, setup, sim, g0, gen)
}

// Records simulates the first micro-batch of r's training for its op
// records alone (train.Summary.Ops: the dtypes autocast gave each op and
// the copies it made), with no allocator replay and no timing. The
// records are the same at every batch size, accumulation and step, which
// is why a planner takes them once per precision and times every other
// micro-batch with them. It answers the graph the records belong to: a
// pipeline's first stage, for a pipeline.
func Records(ctx context.Context, r Request) ([]train.OpRun, *graph.Graph, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if r.Source == nil {
		return nil, nil, fmt.Errorf("no model given")
	}
	if err := checkLimits(r); err != nil {
		return nil, nil, err
	}
	if r.Infer != nil {
		return nil, nil, fmt.Errorf("op records are taken of training")
	}
	if r.Config.PP > 1 && r.Config.Stage < 0 {
		r.Config.Stage = 0
	}
	r.Schedule = nil
	r.Setup.Steps, r.Setup.Accumulate = 1, 1
	r, setup, err := normalize(r)
	if err != nil {
		return nil, nil, err
	}
	sim, g0, err := simulateTraining(ctx, r, setup)
	if err != nil {
		return nil, nil, err
	}
	sim.CompactTrace().Release()
	return sim.Summary().Ops, g0, nil
}

// normalize checks a request for one simulation and fills in its
// defaults: the sequence, the pipeline stage's setup, the compute
// capability.
func normalize(r Request) (Request, train.Setup, error) {
	if r.Config.TP > 1 || r.Config.PP > 1 {
		mp, ok := r.Source.(interface{ ModelParallel() bool })
		if !ok || !mp.ModelParallel() {
			return r, train.Setup{}, fmt.Errorf("%s: tensor and pipeline parallelism are built for Hugging Face decoder models of the Llama family", r.Source.Name())
		}
	}
	if r.Config.Batch <= 0 && len(r.Schedule) == 0 {
		return r, train.Setup{}, fmt.Errorf("batch size must be positive, got %d", r.Config.Batch)
	}
	for _, b := range r.Schedule {
		if b <= 0 {
			return r, train.Setup{}, fmt.Errorf("batch sizes must be positive, got %d in the schedule", b)
		}
	}
	if r.Config.Seq == 0 {
		r.Config.Seq = r.Source.DefaultSeq()
	}
	if r.Config.PP > 1 {
		r.Setup.Stages, r.Setup.Stage = int(r.Config.PP), int(r.Config.Stage)
	}
	setup, err := r.Setup.Normalize()
	if err != nil {
		return r, train.Setup{}, err
	}
	setup.ComputeMajor = r.GPU.Major
	if setup.ComputeMajor == 0 {
		setup.ComputeMajor = 9
	}
	// CUDA's reduction kernel sizes its grid by the device's
	// multiprocessors (train.Setup.SMs)
	setup.SMs, setup.ThreadsPerSM = r.GPU.Rates.SMs, r.GPU.MaxThreadsPerSM()
	if r.Infer != nil && (setup.Parallel.On() || r.Config.TP > 1 || r.Config.PP > 1) {
		return r, train.Setup{}, fmt.Errorf("inference is predicted on one GPU: data, tensor and pipeline parallelism are for training here")
	}
	if r.Infer != nil && len(r.Schedule) > 1 {
		return r, setup, fmt.Errorf("a batch-size schedule is for training; inference takes one batch size")
	}
	return r, setup, nil
}

// screenLimit is what the device leaves the allocator before the
// libraries' workspaces, which are known only once the step has run: a
// step that requests more cannot fit (Request.Screen).
func screenLimit(r Request) int64 {
	ctx := r.ContextSize()
	return max(r.GPU.Capacity-r.Margin-ctx-NCCLBytes(r.Setup.Parallel, r.Config.TP, r.Config.PP, r.NCCLBuffSize), 1)
}

// finish replays a simulation through the allocator and times it.
func finish(ctx context.Context, r Request, setup train.Setup, sim *train.Simulator, g0 *graph.Graph, gen *train.GenerationSummary) (*Result, error) {
	var err error
	if q := r.Config.Quant; q != nil && !quantized(g0) {
		return nil, fmt.Errorf("%s: no Linear weight of this model is stored %s (the source does not build quantized layers, or every Linear is skipped)", r.Source.Name(), q.Format)
	}
	// The libraries' own allocations come on top of the context, given
	// or not: a context measured before the first GEMM (the usual way,
	// after a first tiny tensor) lacks them; one measured after the step
	// counts them twice, the safe side.
	lib := sim.Summary().LibraryBytes
	// The kernels a training step loads on first launch (lazy module
	// loading, profile.LazyModules) are part of the catalog's context,
	// which is a context after torch.cuda.init: added to it. A given
	// context is what the process holds outside the allocator while it
	// trains (nvidia-smi's figure less memory_reserved, or an
	// out-of-memory message's non-PyTorch memory): they are in it.
	var modules int64
	if r.Infer == nil && !setup.CPU && r.Context < 0 {
		sum := sim.Summary()
		modules = setup.Profile.LazyModules.Bytes(sum.CudnnConvs, sum.FusedAttention, sum.CudnnAttention)
	}
	cudaCtx := r.ContextSize() + lib + modules
	// NCCL's buffers come on top of a given context too: one measured
	// before init_process_group lacks them, one measured after counts
	// them twice, the safe side.
	if r.NCCLBuffSize < 0 {
		return nil, fmt.Errorf("NCCL_BUFFSIZE must not be negative, got %d bytes", r.NCCLBuffSize)
	}
	nccl := NCCLBytes(r.Setup.Parallel, r.Config.TP, r.Config.PP, r.NCCLBuffSize)
	cudaCtx += nccl
	if r.Margin < 0 {
		return nil, fmt.Errorf("the margin must not be negative, got %d bytes", r.Margin)
	}
	if cudaCtx >= r.GPU.Capacity && nccl > 0 {
		simple := r.NCCLBuffSize
		if simple == 0 {
			simple = profile.NCCLSimpleBuffSize
		}
		return nil, fmt.Errorf("NCCL's communicator buffers (%s, NCCL_BUFFSIZE of %s per connection) and the CUDA context (%s) leave nothing of the %s device",
			alloc.FormatSize(nccl), alloc.FormatSize(simple), alloc.FormatSize(cudaCtx-nccl), alloc.FormatSize(r.GPU.Capacity))
	}
	if cudaCtx >= r.GPU.Capacity {
		return nil, fmt.Errorf("the CUDA context (%s) leaves nothing of the %s device", alloc.FormatSize(cudaCtx), alloc.FormatSize(r.GPU.Capacity))
	}
	if cudaCtx+r.Margin >= r.GPU.Capacity {
		return nil, fmt.Errorf("the margin of %s and the CUDA context (%s) leave nothing of the %s device", alloc.FormatSize(r.Margin), alloc.FormatSize(cudaCtx), alloc.FormatSize(r.GPU.Capacity))
	}
	// With a margin the job runs on a device that much smaller, so that
	// the caching allocator frees its cache and retries (c10's
	// release_cached_blocks on a failed cudaMalloc) where it would on a
	// device whose real figures are the band's worst above the prediction.
	dev := alloc.Device{Capacity: r.GPU.Capacity - r.Margin - cudaCtx, Total: r.GPU.Capacity - r.Margin}
	// cuDNN's workspaces are screened at their low end, none, below. A
	// simulation StopAbove stopped is screened out whatever the figures
	// say: its trace is only a prefix of the step.
	if req := sim.Summary().PeakRequested - sim.Summary().ConvWorkspaceBytes; sim.Stopped() || (r.Screen && req > dev.Capacity) {
		sim.CompactTrace().Release()
		res := &Result{Model: r.Source.Name(), Config: r.Config, Setup: sim.Setup(), GPU: r.GPU, Summary: sim.Summary(),
			Timeline: &alloc.Timeline{PeakAllocatedEvent: -1, PeakReservedEvent: -1}, Context: cudaCtx, Libraries: lib, Modules: modules, NCCL: nccl, Margin: r.Margin,
			Screened: true, Relies: r.reliancesOf(g0), Band: BandFor(r.reliancesOf(g0)), Decider: fmt.Sprintf("the step requests %s at its peak, more than the %s the device leaves the allocator: no allocator setting fits it",
				alloc.FormatSize(sim.Summary().PeakRequested), alloc.FormatSize(dev.Capacity))}
		res.Notes = notesOf(r, res, g0)
		return res, nil
	}
	// A replay reads repeated micro-batches once (and skips their copies
	// when the allocator's state comes back); a kept or recorded trace is
	// written out in full.
	tr := sim.CompactTrace()
	if r.KeepTrace || r.Record || r.Observe != nil {
		tr = sim.Trace()
	}
	tl, err := alloc.ReplayContext(ctx, tr, r.Alloc, dev, alloc.ReplayOptions{Record: r.Record, Observe: r.Observe})
	if err != nil {
		return nil, err
	}
	res := &Result{Model: r.Source.Name(), Config: r.Config, Setup: sim.Setup(), GPU: r.GPU, Summary: sim.Summary(),
		Timeline: tl, Context: cudaCtx, Libraries: lib, Modules: modules, NCCL: nccl, Margin: r.Margin}
	if i := tl.PeakAllocatedEvent; i >= 0 && i < tr.Len() {
		e := tr.At(i)
		res.PeakAt = &PeakAt{Phase: e.Phase, Step: e.Step, Site: tr.SiteName(e.Site)}
	}
	if r.KeepTrace {
		res.Trace = tr
	} else {
		tr.Release()
	}
	res.Infer, res.Generation = r.Infer, gen
	if r.GPU.Rates.Known() && r.Timed() {
		est, err := cost.Step(cost.Input{Graph: g0, Ops: res.Summary.Ops, Setup: res.Setup, Rates: r.GPU.Rates,
			Seq: r.Config.Seq, Batch: g0BatchOf(r)})
		if err != nil {
			return nil, err
		}
		if r.multiGPU() {
			comm, err := cost.Communication(cost.CommInput{
				Comms: train.Collectives(g0, res.Setup, res.Summary.Ops, r.Config.TP, r.Config.SP, int(r.Config.PP)),
				Setup: res.Setup, Link: r.GPU.Link, TP: r.Config.TP, PP: r.Config.PP, Compute: est})
			if err != nil {
				return nil, err
			}
			res.Comm = &comm
			est = est.WithComm(comm)
		}
		res.Time = &est
	}
	if n, ok := r.Source.(interface{ Note() string }); ok {
		res.Note = n.Note()
	}
	res.Relies = r.reliancesOf(g0)
	res.Band = BandFor(res.Relies)
	res.DeviceTotal = tl.PeakReserved + cudaCtx
	res.Notes = notesOf(r, res, g0)
	if tl.OOM != nil && r.Margin > 0 {
		// The replay ran on the device less the margin, and the error it
		// raised quotes that device's total: the message quotes the GPU's
		// own total (what cudaMemGetInfo reports on it) and says what the
		// margin holds back of it. The free figure stays that of the
		// smaller device: the margin is not free to the job.
		oom := *tl.OOM
		oom.DeviceTotal += r.Margin
		oom.HeldBack = r.Margin
		tl.OOM = &oom
	}
	if tl.OOM != nil {
		res.Fits = false
		res.Decider = fmt.Sprintf("the allocator runs out of memory: %s", tl.OOM.Error())
		if r.Margin > 0 {
			res.Decider = fmt.Sprintf("the allocator runs out of memory on the %s the margin of %s leaves: %s",
				alloc.FormatSize(r.GPU.Capacity-r.Margin), alloc.FormatSize(r.Margin), tl.OOM.Error())
		}
	} else {
		res.Fits = res.DeviceTotal <= r.GPU.Capacity-r.Margin
		outside := "CUDA context " + alloc.FormatSize(cudaCtx)
		if nccl > 0 {
			outside = fmt.Sprintf("CUDA context %s + NCCL buffers %s", alloc.FormatSize(cudaCtx-nccl), alloc.FormatSize(nccl))
		}
		res.Decider = fmt.Sprintf("peak reserved %s + %s = %s of %s",
			alloc.FormatSize(tl.PeakReserved), outside, alloc.FormatSize(res.DeviceTotal), alloc.FormatSize(r.GPU.Capacity))
		if r.Margin > 0 {
			res.Decider = fmt.Sprintf("peak reserved %s + %s = %s; the margin of %s leaves %s of %s",
				alloc.FormatSize(tl.PeakReserved), outside, alloc.FormatSize(res.DeviceTotal),
				alloc.FormatSize(r.Margin), alloc.FormatSize(r.GPU.Capacity-r.Margin), alloc.FormatSize(r.GPU.Capacity))
		}
	}
	return res, nil
}

// Headroom is what is left on the device at the peak (negative when the job
// does not fit).
func (r *Result) Headroom() int64 {
	if r.Timeline.OOM != nil {
		return r.GPU.Capacity - r.Context - r.Timeline.OOM.Reserved - r.Timeline.OOM.AllocSize
	}
	return r.GPU.Capacity - r.DeviceTotal
}

// StageResult is one pipeline stage's answer.
type StageResult struct {
	Stage                       int64
	Params                      int64
	PeakAllocated, PeakReserved int64
	DeviceTotal                 int64
	Fits                        bool
}

// runStages predicts every stage of a pipeline and answers with the one
// that fits worst: the first that does not fit, or the one with the
// largest device total.
func runStages(ctx context.Context, r Request) (*Result, error) {
	var worst *Result
	var stages []StageResult
	for s := int64(0); s < r.Config.PP; s++ {
		q := r
		q.Config.Stage = s
		res, err := Run(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("stage %d: %w", s, err)
		}
		stages = append(stages, StageResult{Stage: s, Params: res.Summary.ParamCount, PeakAllocated: res.Timeline.PeakAllocated,
			PeakReserved: res.Timeline.PeakReserved, DeviceTotal: res.DeviceTotal, Fits: res.Fits})
		switch {
		case worst == nil,
			worst.Fits && !res.Fits,
			worst.Fits == res.Fits && res.DeviceTotal > worst.DeviceTotal:
			worst = res
		}
	}
	worst.Stages = stages
	return worst, nil
}

// quantized reports whether any parameter of g is stored quantized.
func quantized(g *graph.Graph) bool {
	for i := range g.Tensors {
		if g.Tensors[i].Quant != nil {
			return true
		}
	}
	return false
}

// g0BatchOf is the batch size of the first step.
func g0BatchOf(r Request) int64 {
	if len(r.Schedule) > 0 {
		return r.Schedule[0]
	}
	return r.Config.Batch
}

// simulateTraining runs the optimizer steps of the schedule (or Steps
// steps of Config.Batch).
func simulateTraining(ctx context.Context, r Request, setup train.Setup) (*train.Simulator, *graph.Graph, error) {
	sched := r.Schedule
	if len(sched) == 0 {
		sched = make([]int64, setup.Steps)
		for i := range sched {
			sched[i] = r.Config.Batch
		}
	}
	graphs := map[int64]*graph.Graph{}
	build := func(b int64) (*graph.Graph, error) {
		if g, ok := graphs[b]; ok {
			return g, nil
		}
		c := r.Config
		c.Batch = b
		// the CPU's kernels run a recurrent module step by step, cuDNN
		// as one call (graph.Config.CPU)
		c.CPU = setup.CPU
		// the release's nn.MultiheadAttention in-projection
		c.MHAPackedInProjection = setup.Profile.MHAPackedInProjection
		g, err := r.Graphs.Build(r.Source, c)
		if err != nil {
			return nil, err
		}
		if setup.Parallel.Strategy == train.FSDP && setup.Parallel.Wrap != train.WrapLoRA {
			// FSDP1's flat parameters: a unit mixing frozen and trainable
			// parameters computes gradients for all of them (on a copy:
			// the graph may be a search's, shared with other setups).
			// PEFT's wrap policy gives the adapters units of their own,
			// so no unit mixes them (train.WrapLoRA)
			cp := *g
			cp.Tensors = slices.Clone(g.Tensors)
			g = &cp
			g.UnfreezeMixedUnits()
		}
		graphs[b] = g
		return g, nil
	}
	g0, err := build(sched[0])
	if err != nil {
		return nil, nil, err
	}
	if err := checkAttention(r, setup, g0); err != nil {
		return nil, nil, err
	}
	sim, err := r.Graphs.simulator(g0, setup)
	if err != nil {
		return nil, nil, err
	}
	if r.Screen {
		sim.StopAbove(screenLimit(r))
	}
	for _, b := range sched {
		g, err := build(b)
		if err != nil {
			return nil, nil, err
		}
		if err := sim.StepContext(ctx, g); errors.Is(err, train.ErrOverLimit) {
			break // finish screens it out
		} else if err != nil {
			return nil, nil, err
		}
	}
	return sim, g0, nil
}
