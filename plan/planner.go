package plan

import (
	"context"
	"fmt"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// The planner's state and its caches, and the checks of the question
// before any search.

// combo is a candidate without its accumulation.
type combo struct {
	par   train.Parallel
	tp    tensorOpt
	tune  Tune
	optim string
	p     train.Precision
	ck    train.Checkpoint
	impl  train.Impl
	// times per accumulation option, timed when first asked for
	// (timeAt): most combinations are ruled out by their fastest
	times []float64
	// changes without accumulation and allocator
	changes int
}

type planner struct {
	ctx context.Context
	// searching: the current setup and each precision's op records are
	// simulated; the searches that follow spend the budget
	searching bool
	o         Options
	base      Candidate
	baseAC    alloc.Config
	accs      []int
	graphs    map[graphKey]*graph.Graph
	runs      map[recKey][]train.OpRun
	runsOn    map[recKey]*graph.Graph
	// lora is the adapters the LoRA lever trains (nil: the lever has
	// nothing to offer the model)
	lora    *graph.Adapters
	ans     *Answer
	capLeft int64 // capacity − context − margin
	allow   map[Lever]bool
	src     predict.Source
	seen    map[Candidate]*Plan
	// dead holds, per precision and checkpointing policy, the largest
	// accumulation index at which the forward and backward passes alone
	// (which no optimizer implementation or allocator setting changes)
	// were seen to need more than the device: every smaller accumulation
	// needs more still.
	dead map[deadKey]int
	// aligned caches the op records carried over to each micro-batch's
	// graph
	aligned map[alignKey][]train.OpRun
	// steps and comms cache timings: the compute of a graph under a
	// setup, and the collectives of a graph under a strategy
	steps map[stepKey]cost.Estimate
	comms map[commKey]train.Comms
	// passes caches a micro-batch's forward and backward timed, which
	// the optimizer, its implementation and the accumulation leave alone
	passes map[passKey]*cost.Pass
	// built holds every graph the search builds, its predictions' too
	built *predict.Graphs
}

type passKey struct {
	g  *graph.Graph
	p  train.Precision
	ck train.Checkpoint
}

type stepKey struct {
	g     *graph.Graph
	p     train.Precision
	ck    train.Checkpoint
	impl  train.Impl
	optim string
	acc   int
}

type commKey struct {
	g   *graph.Graph
	par train.Parallel
	p   train.Precision
	ck  train.Checkpoint
}

type alignKey struct {
	p     train.Precision
	micro int64
	tune  Tune
	tp    tensorOpt
}

// graphKey and recKey: a graph differs with what is trained (adapters, a
// quantized base), and so do its op records.
type graphKey struct {
	micro int64
	tune  Tune
	tp    tensorOpt
}

type recKey struct {
	p    train.Precision
	tune Tune
}

type deadKey struct {
	p     train.Precision
	ck    train.Checkpoint
	par   train.Parallel
	tp    tensorOpt
	tune  Tune
	optim string
}

// tensorOpt is a degree of tensor parallelism, with or without sequence
// parallelism.
type tensorOpt struct {
	tp int64
	sp bool
	pp int64
}

// Run plans. It stops with ctx's error when ctx is done, checked before
// every prediction and timing.
func Run(ctx context.Context, o Options) (*Answer, error) {
	if o.Base.Source == nil {
		return nil, fmt.Errorf("no model given")
	}
	if o.Top <= 0 {
		o.Top = 5
	}
	if o.MaxAccumulate <= 0 {
		o.MaxAccumulate = 64
	}
	if o.MinMicroBatch <= 0 {
		o.MinMicroBatch = 1
	}
	if o.MaxPredictions <= 0 {
		o.MaxPredictions = DefaultMaxPredictions
	}
	if !o.Base.GPU.Rates.Known() {
		return nil, inputErrorf("plans are ranked by step time, which needs %s's peak rates and memory bandwidth (the catalog GPUs have them)", o.Base.GPU.Name)
	}
	if o.Margin < 0 {
		return nil, inputErrorf("the margin must not be negative, got %d bytes", o.Margin)
	}
	s, err := o.Base.Setup.Normalize()
	if err != nil {
		return nil, err
	}
	o.Base.Setup = s
	untimed := !o.Base.Timed()
	if untimed {
		// no step times to rank by: the fewest changes instead
		o.Objective = FewestChanges
	}
	if o.Base.Config.Batch <= 0 {
		return nil, inputErrorf("batch size must be positive, got %d", o.Base.Config.Batch)
	}
	ranks := Ranks(s.Parallel)
	if o.GlobalBatch == 0 {
		var ok bool
		if o.GlobalBatch, ok = graph.MulSize(o.Base.Config.Batch, int64(s.Accumulate)); ok {
			o.GlobalBatch, ok = graph.MulSize(o.GlobalBatch, ranks)
		}
		if !ok {
			return nil, inputErrorf("batch %d × accumulation %d × %d ranks overflows", o.Base.Config.Batch, s.Accumulate, ranks)
		}
	}
	if o.GlobalBatch <= 0 {
		return nil, inputErrorf("the global batch must be positive, got %d", o.GlobalBatch)
	}
	if o.GlobalBatch%ranks != 0 {
		return nil, inputErrorf("the global batch %d does not split evenly over %d data-parallel ranks", o.GlobalBatch, ranks)
	}
	if cur := o.Base.Config.Batch * int64(s.Accumulate) * ranks; cur != o.GlobalBatch {
		on := ""
		if ranks > 1 {
			on = fmt.Sprintf(" on each of %d ranks", ranks)
		}
		return nil, inputErrorf("the current setup, micro-batch %d × accumulation %d%s, makes %d samples a step, not the global batch %d: give the current micro-batch and accumulation that make it",
			o.Base.Config.Batch, s.Accumulate, on, cur, o.GlobalBatch)
	}
	if o.Base.Config.Seq == 0 {
		o.Base.Config.Seq = o.Base.Source.DefaultSeq()
	}
	pl := &planner{ctx: ctx, o: o, graphs: map[graphKey]*graph.Graph{}, runs: map[recKey][]train.OpRun{}, runsOn: map[recKey]*graph.Graph{},
		ans: &Answer{Margin: o.Margin, OwnMargins: o.MarginFor != nil, GlobalBatch: o.GlobalBatch, RankBatch: o.GlobalBatch / ranks, Ranks: ranks, Untimed: untimed}, allow: map[Lever]bool{}, src: o.Base.Source,
		seen: map[Candidate]*Plan{}, dead: map[deadKey]int{}, aligned: map[alignKey][]train.OpRun{},
		steps: map[stepKey]cost.Estimate{}, comms: map[commKey]train.Comms{}, passes: map[passKey]*cost.Pass{}, built: predict.NewGraphs()}
	levers := o.Levers
	if len(levers) == 0 {
		levers = Levers()
	}
	for _, l := range levers {
		pl.allow[l] = true
	}
	pl.ans.req = pl.request
	cudaCtx := o.Base.ContextSize()
	pl.capLeft = o.Base.GPU.Capacity - cudaCtx - o.Margin
	if err := pl.accumulations(); err != nil {
		return nil, err
	}
	pl.ans.GPUs = pl.base.GPUs()
	if err := pl.run(); err != nil {
		return nil, err
	}
	return pl.ans, nil
}

// accumulations lists the allowed accumulation values: divisors of a
// rank's share of the global batch leaving a micro-batch of at least the
// minimum.
func (pl *planner) accumulations() error {
	o := pl.o
	n := pl.ans.RankBatch
	a0 := o.Base.Setup.Accumulate
	pl.base = Candidate{Precision: o.Base.Setup.Precision, Checkpoint: o.Base.Setup.Checkpoint, Impl: o.Base.Setup.Optimizer.Impl,
		Expandable: o.Base.Alloc.ExpandableSegments, Accumulate: a0, MicroBatch: o.Base.Config.Batch, Parallel: o.Base.Setup.Parallel,
		TP: max(o.Base.Config.TP, 1), SP: o.Base.Config.SP, PP: max(o.Base.Config.PP, 1)}
	pl.baseAC = o.Base.Alloc
	if !pl.allow[Accumulate] {
		if n/int64(a0) < o.MinMicroBatch {
			return inputErrorf("the global batch %d with accumulation %d gives micro-batches of %d, below the minimum %d", o.GlobalBatch, a0, n/int64(a0), o.MinMicroBatch)
		}
		pl.accs = []int{a0}
		return nil
	}
	for a := 1; a <= o.MaxAccumulate && int64(a) <= n; a++ {
		if n%int64(a) == 0 && n/int64(a) >= o.MinMicroBatch {
			pl.accs = append(pl.accs, a)
		}
	}
	if len(pl.accs) == 0 {
		return inputErrorf("no micro-batch of at least %d with at most %d accumulation steps makes a global batch of %d (%d a rank)", o.MinMicroBatch, o.MaxAccumulate, o.GlobalBatch, n)
	}
	return nil
}
