package plan

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/suggest"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// Lever is one thing a plan may change.
type Lever string

const (
	Accumulate Lever = "accumulate" // micro-batch × accumulation, the samples per step kept
	Precision  Lever = "precision"  // 32-true, bf16-mixed, 16-mixed, bf16-true
	Checkpoint Lever = "checkpoint" // none, attention cores, every 2nd block, every block
	Optimizer  Lever = "optimizer"  // for-loop, foreach or fused implementation
	Allocator  Lever = "allocator"  // expandable_segments:True
	// Sharding is the data-parallel strategy over the job's --gpus: ddp,
	// ZeRO 1 and 2, FSDP's grad-op and full sharding, full sharding with
	// CPU offload.
	Sharding Lever = "sharding"
	// Tensor is Megatron-style tensor parallelism with sequence
	// parallelism, 2, 4 or 8 ranks a layer (Llama-family models): each
	// multiplies the GPUs the job takes.
	Tensor Lever = "tensor"
	// Pipeline is pipeline parallelism of 2 or 4 stages (1F1B over the
	// accumulation's micro-batches; Llama-family models): each multiplies
	// the GPUs the job takes.
	Pipeline Lever = "pipeline"
	// LoRA trains adapters on a frozen base instead of every parameter
	// (PEFT's defaults for the model family), or QLoRA's adapters on a
	// base stored in 4-bit NF4: a change to what is trained.
	LoRA Lever = "lora"
	// OptimizerKind swaps Adam for bitsandbytes' 8-bit Adam, plain or
	// paged, or transformers' Adafactor: a change to how it is optimised.
	OptimizerKind Lever = "optimizer-kind"
)

// Levers lists every lever.
func Levers() []Lever {
	return []Lever{Accumulate, Precision, Checkpoint, Optimizer, Allocator, Sharding, Tensor, Pipeline, LoRA, OptimizerKind}
}

// Tune is what a plan changes of what is trained.
type Tune string

const (
	// FullTune trains what the job trains.
	FullTune Tune = ""
	// LoRATune trains LoRA adapters (PEFT's LoraConfig defaults, r=8,
	// lora_alpha=8, on the family's default target modules) with every
	// other parameter frozen.
	LoRATune Tune = "lora"
	// QLoRATune is LoRA on a base whose Linear weights bitsandbytes
	// stores in 4-bit NF4 with double quantization (Dettmers et al. 2023,
	// QLoRA), dequantized to the precision's compute dtype.
	QLoRATune Tune = "qlora"
)

// ParseLevers reads a comma-separated list of lever names.
func ParseLevers(s string) ([]Lever, error) {
	var names []string
	for _, l := range Levers() {
		names = append(names, string(l))
	}
	var out []Lever
	for _, part := range strings.Split(s, ",") {
		p := strings.ToLower(strings.TrimSpace(part))
		if p == "" {
			continue
		}
		ok := false
		for _, l := range Levers() {
			if string(l) == p {
				out = append(out, l)
				ok = true
			}
		}
		if !ok {
			msg := fmt.Sprintf("unknown lever %q", part)
			if near := suggest.Nearest(p, names, 2); len(near) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
			}
			return nil, fmt.Errorf("%s (levers: %s)", msg, strings.Join(names, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no lever named in %q (levers: %s)", s, strings.Join(names, ", "))
	}
	return out, nil
}

// Objective orders the plans.
type Objective int

const (
	// Throughput ranks plans by predicted step time.
	Throughput Objective = iota
	// FewestChanges ranks plans by how many levers they move from the
	// current setup, then by step time: the smallest changes that fit.
	FewestChanges
)

// Options describe a planning question.
type Options struct {
	// Base is the current job. Its Config.Batch and Setup.Accumulate give
	// the micro-batch and accumulation the plans are compared with.
	Base predict.Request
	// GlobalBatch is the samples per optimizer step every plan keeps, over
	// all data-parallel ranks (default Base's micro-batch × accumulation
	// × ranks). The current setup must make it.
	GlobalBatch int64
	// Levers the plans may move (default all).
	Levers []Lever
	// NoCheckpointing forbids activation checkpointing in every plan.
	NoCheckpointing bool
	// MaxAccumulate bounds the accumulation (default 64); MinMicroBatch
	// bounds the micro-batch from below (default 1).
	MaxAccumulate int
	MinMicroBatch int64
	// Margin is the headroom a plan must leave on the device, bytes.
	Margin int64
	// MarginFor, when set, is the headroom a candidate's plan must leave,
	// by the candidate's own request: the band its answer carries depends
	// on what it relies on (predict.Request.Reliances), and the levers
	// change that (LoRA, QLoRA, sharding). Margin is then the least it
	// can be, which the planner's screens take so that they never rule
	// out a plan that fits.
	MarginFor func(predict.Request) (int64, error)
	// Top is the number of plans to find (default 5).
	Top       int
	Objective Objective
	// MaxPredictions bounds the planner's work: the simulations it runs,
	// each pipeline stage one (default DefaultMaxPredictions). Past it
	// the search stops and the answer says so (Answer.Stopped).
	MaxPredictions int
}

// DefaultMaxPredictions is the planner's default budget of simulations.
// The examples of the README take 1 to 160 (an 8-GPU Llama-3-8B plan with
// every lever, the most); the combinations are searched most promising
// first, so a search stopped here has tried the likeliest plans. A
// simulation of a 70B model takes a tenth of a second or more, so the
// budget keeps a plan within a minute or so.
const DefaultMaxPredictions = 256

// errBudget stops a search that has spent its predictions.
var errBudget = errors.New("the planner's budget of predictions is spent")

// Candidate is one combination of the levers.
type Candidate struct {
	Precision  train.Precision
	Checkpoint train.Checkpoint
	Impl       train.Impl
	Expandable bool
	Accumulate int
	MicroBatch int64
	// Parallel is the data-parallel strategy (the job's own unless the
	// sharding lever moves it).
	Parallel train.Parallel
	// TP and SP are the tensor and sequence parallelism, PP the pipeline
	// stages.
	TP int64
	SP bool
	PP int64
	// Tune is what is trained (LoRA, QLoRA; empty: as the job); Optim
	// the optimizer's name when the plan changes it (empty: the job's).
	Tune  Tune
	Optim string
}

// ChangesResults reports a plan that changes what is trained or how it is
// optimised: unlike accumulation, checkpointing, the allocator or the
// layout, it can change the model the job produces. Such plans rank after
// every plan that does not.
func (c Candidate) ChangesResults() bool { return c.resultChanges() > 0 }

// resultChanges counts the levers of what is trained and how it is
// optimised that the candidate moves: the ranking prefers fewer.
func (c Candidate) resultChanges() int { return btoi(c.Tune != FullTune) + btoi(c.Optim != "") }

// Plan is a candidate with what is known of it.
type Plan struct {
	Candidate
	// Changes describes what differs from the current setup.
	Changes []string
	// Result is the prediction, nil for a plan not simulated.
	Result *predict.Result
	// Seconds is the predicted step time.
	Seconds float64
	// Fits: the prediction leaves at least the margin free.
	Fits bool
}

// Throughput is samples per second over all data-parallel ranks.
func (p *Plan) Throughput() float64 {
	if p.Seconds <= 0 {
		return 0
	}
	return float64(p.MicroBatch) * float64(p.Accumulate) * float64(Ranks(p.Parallel)) / p.Seconds
}

// Ranks is the number of data-parallel ranks of a strategy: each takes
// its own micro-batches, so a step's global batch is micro-batch ×
// accumulation × ranks (DDP, FSDP and ZeRO alike).
func Ranks(p train.Parallel) int64 { return int64(max(p.GPUs, 1)) }

// Pruned is a combination ruled out without a full search.
type Pruned struct {
	Precision  train.Precision
	Checkpoint train.Checkpoint
	Impl       train.Impl
	Reason     string
	Parallel   train.Parallel
	// TP, SP and PP are the tensor, sequence and pipeline parallelism.
	TP int64
	SP bool
	PP int64
	// Tune and Optim: what is trained and the optimizer, as in Candidate.
	Tune  Tune
	Optim string
}

// pruned records a combination ruled out without a search.
func (pl *planner) pruned(cb *combo, reason string) {
	pl.ans.Pruned = append(pl.ans.Pruned, Pruned{Precision: cb.p, Checkpoint: cb.ck, Impl: cb.impl, Reason: reason, Parallel: cb.par,
		TP: cb.tp.tp, SP: cb.tp.sp, PP: cb.tp.pp, Tune: cb.tune, Optim: cb.optim})
}

// Answer is the planner's answer.
type Answer struct {
	// Base is the current setup at the global batch.
	Base *Plan
	// Best are the plans found, best first.
	Best []*Plan
	// Evaluated lists every simulated plan, in the order simulated.
	Evaluated []*Plan
	// Pruned lists the combinations not searched, with the reason.
	Pruned []Pruned
	// Need is, when nothing fits, the least device total (margin
	// included) of the plans simulated in full, and NeedFrom names that
	// plan. NeedAtLeast: that plan ran out of memory, so Need is its
	// requested peak with the context, a lower bound (see Need). Plans
	// screened out are not among them: their simulation stopped once
	// they requested more than the device leaves, so what they would
	// need is not known (Screened counts them).
	Need        int64
	NeedFrom    string
	NeedAtLeast bool
	Screened    int
	// StatesNeed is, when nothing fits, the least that the combinations
	// ruled out without simulation need for their parameters, gradients
	// and optimizer state alone, with the context and the margin: a lower
	// bound before any activation, never a device total. StatesFrom
	// names that combination.
	StatesNeed int64
	StatesFrom string
	// Margin is the headroom the plans were held to; with
	// Options.MarginFor (OwnMargins) the least of their own margins.
	Margin     int64
	OwnMargins bool
	// GlobalBatch is the samples of a step over all ranks; RankBatch
	// one rank's share (micro-batch × accumulation), Ranks the
	// data-parallel ranks.
	GlobalBatch, RankBatch, Ranks int64
	// Untimed: no step times (a GPU without rates, or under parallelism
	// one whose interconnect is not known); the plans are ranked by the
	// fewest changes.
	Untimed bool
	// Simulations counts the simulations run (each pipeline stage one);
	// Stopped reports that the search stopped at Options.MaxPredictions
	// with combinations left unsearched: the plans are the best of those
	// tried.
	Simulations int
	Stopped     bool
	// req turns a candidate into the request that predicts it
	req func(Candidate) predict.Request
}

// request is the prediction request of a candidate of this search.
func (a *Answer) request(c Candidate) predict.Request { return a.req(c) }

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
		return nil, fmt.Errorf("plans are ranked by step time, which needs %s's peak rates and memory bandwidth (the catalog GPUs have them)", o.Base.GPU.Name)
	}
	if o.Margin < 0 {
		return nil, fmt.Errorf("the margin must not be negative, got %d bytes", o.Margin)
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
		return nil, fmt.Errorf("batch size must be positive, got %d", o.Base.Config.Batch)
	}
	ranks := Ranks(s.Parallel)
	if o.GlobalBatch == 0 {
		var ok bool
		if o.GlobalBatch, ok = graph.MulSize(o.Base.Config.Batch, int64(s.Accumulate)); ok {
			o.GlobalBatch, ok = graph.MulSize(o.GlobalBatch, ranks)
		}
		if !ok {
			return nil, fmt.Errorf("batch %d × accumulation %d × %d ranks overflows", o.Base.Config.Batch, s.Accumulate, ranks)
		}
	}
	if o.GlobalBatch <= 0 {
		return nil, fmt.Errorf("the global batch must be positive, got %d", o.GlobalBatch)
	}
	if o.GlobalBatch%ranks != 0 {
		return nil, fmt.Errorf("the global batch %d does not split evenly over %d data-parallel ranks", o.GlobalBatch, ranks)
	}
	if cur := o.Base.Config.Batch * int64(s.Accumulate) * ranks; cur != o.GlobalBatch {
		on := ""
		if ranks > 1 {
			on = fmt.Sprintf(" on each of %d ranks", ranks)
		}
		return nil, fmt.Errorf("the current setup, micro-batch %d × accumulation %d%s, makes %d samples a step, not the global batch %d: give the current micro-batch and accumulation that make it",
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
			return fmt.Errorf("the global batch %d with accumulation %d gives micro-batches of %d, below the minimum %d", o.GlobalBatch, a0, n/int64(a0), o.MinMicroBatch)
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
		return fmt.Errorf("no micro-batch of at least %d with at most %d accumulation steps makes a global batch of %d (%d a rank)", o.MinMicroBatch, o.MaxAccumulate, o.GlobalBatch, n)
	}
	return nil
}

func (pl *planner) graph(micro int64, tune Tune) (*graph.Graph, error) {
	return pl.graphOf(micro, tune, tensorOpt{max(pl.o.Base.Config.TP, 1), pl.o.Base.Config.SP, max(pl.o.Base.Config.PP, 1)})
}

// graphOf builds the model at a micro-batch as a candidate trains and
// splits it: its adapters, its tensor parallelism and its pipeline (the
// first stage standing for the pipeline), as request lays it out.
func (pl *planner) graphOf(micro int64, tune Tune, tp tensorOpt) (*graph.Graph, error) {
	k := graphKey{micro, tune, tp}
	if g, ok := pl.graphs[k]; ok {
		return g, nil
	}
	if err := pl.ctx.Err(); err != nil {
		return nil, err
	}
	c := pl.tuned(pl.o.Base.Config, tune)
	c.Batch = micro
	c.TP, c.SP = tp.tp, tp.sp
	if tp.pp != max(pl.o.Base.Config.PP, 1) {
		c.PP, c.Stage, c.StageLayers = tp.pp, -1, nil
	}
	if c.PP > 1 && c.Stage < 0 {
		// the first stage stands for the pipeline in the op records and
		// the static bound (every stage's own is at least as large as
		// the first's, or the worst is)
		c.Stage = 0
	}
	g, err := pl.built.Build(pl.src, c)
	if err != nil {
		return nil, err
	}
	pl.graphs[k] = g
	return g, nil
}

// tuned is the model's sizes with what a tune trains: LoRA's adapters, and
// for QLoRA the base in NF4.
func (pl *planner) tuned(c models.Config, tune Tune) models.Config {
	switch tune {
	case LoRATune:
		c.Adapters = pl.lora
	case QLoRATune:
		c.Adapters = pl.lora
		// QLoRA's storage: NF4 with double quantization in blocks of 64
		// (bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
		// bitsandbytes' blocksize), computing in the precision's dtype
		c.Quant = &graph.Quant{Format: graph.NF4, Bits: 4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16, ComputeFollowsPrecision: true}
	}
	return c
}

// optimizer is the optimizer a plan steps with.
func (pl *planner) optimizer(name string, impl train.Impl) train.Optimizer {
	o := pl.o.Base.Setup.Optimizer
	o.Impl = impl
	if name == "" {
		return o
	}
	on, err := train.ParseOptimizerName(name)
	if err != nil {
		return o
	}
	o.Kind, o.Bits8, o.Paged, o.AMSGrad = on.Kind, on.Bits8, on.Paged, false
	if on.Kind == train.Adafactor {
		// transformers' Adafactor loops over the parameters
		o.Impl, o.WeightDecay = train.ForLoop, 0
	}
	return o
}

// request turns a candidate into a prediction request.
func (pl *planner) request(c Candidate) predict.Request {
	r := pl.o.Base
	// the plan runs on the device less the margin, as maxbatch's answer
	// does (predict.Request.Margin); a candidate's own margin is set by
	// evaluate (Options.MarginFor)
	r.Margin = pl.o.Margin
	r.Config.Batch = c.MicroBatch
	r.Schedule = nil
	s := r.Setup
	s.Precision = c.Precision
	s.Checkpoint = c.Checkpoint
	s.Optimizer = pl.optimizer(c.Optim, c.Impl)
	s.Accumulate = c.Accumulate
	s.Parallel = c.Parallel
	r.Setup = s
	r.Config.TP, r.Config.SP = c.TP, c.SP
	r.Config = pl.tuned(r.Config, c.Tune)
	if q := r.Config.Quant; c.Tune == QLoRATune && q != nil {
		// the compute dtype follows the candidate's precision (the
		// simulator reads it so, ComputeFollowsPrecision); named here too
		qq := *q
		qq.Compute = c.Precision.ParamDType()
		if low, amp := c.Precision.Autocast(); amp {
			qq.Compute = low
		}
		r.Config.Quant = &qq
	}
	if c.PP != max(pl.o.Base.Config.PP, 1) {
		// a new pipeline: even stages, every one predicted
		r.Config.PP, r.Config.Stage, r.Config.StageLayers = c.PP, -1, nil
	}
	r.Alloc = pl.baseAC
	r.Alloc.ExpandableSegments = c.Expandable
	r.Graphs = pl.built
	return r
}

// evaluate simulates a candidate, once.
func (pl *planner) evaluate(c Candidate) (*Plan, error) {
	if p, ok := pl.seen[c]; ok {
		return p, nil
	}
	r := pl.request(c)
	sims := 1
	if r.Config.PP > 1 && r.Config.Stage < 0 {
		sims = int(r.Config.PP) // every stage is simulated
	}
	if pl.searching && pl.ans.Simulations+sims > pl.o.MaxPredictions {
		return nil, errBudget
	}
	if pl.o.MarginFor != nil {
		m, err := pl.o.MarginFor(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", describe(c), err)
		}
		// never below the least, which the screens took
		r.Margin = max(m, pl.o.Margin)
	}
	pl.ans.Simulations += sims
	// the current setup is shown in full; a candidate whose requested
	// bytes alone exceed the device needs no allocator replay to rule out
	r.Screen = pl.ans.Base != nil
	res, err := predict.Run(pl.ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describe(c), err)
	}
	p := &Plan{Candidate: c, Result: res, Changes: pl.changes(c)}
	p.Fits = !res.Screened && res.Timeline.OOM == nil && res.DeviceTotal <= pl.o.Base.GPU.Capacity-r.Margin
	if res.Time != nil {
		p.Seconds = res.Time.Seconds
	} else if res.Screened {
		// timed as the searches time candidates, from the op records
		if p.Seconds, err = pl.timeOf(c); err != nil {
			return nil, err
		}
	}
	pl.ans.Evaluated = append(pl.ans.Evaluated, p)
	pl.seen[c] = p
	switch {
	case res.Screened:
		// simulated only until it requested more than the device
		// leaves: what the whole step needs is not known
		pl.ans.Screened++
	case !p.Fits:
		if n := need(res) + r.Margin; pl.ans.Need == 0 || n < pl.ans.Need {
			pl.ans.Need, pl.ans.NeedFrom, pl.ans.NeedAtLeast = n, describe(c), res.Timeline.OOM != nil
		}
	}
	return p, nil
}

// timeOf predicts the step time of a candidate without simulating its
// memory: the op records of its precision are the same at every batch.
func (pl *planner) timeOf(c Candidate) (float64, error) {
	if pl.ans.Untimed {
		return 0, nil
	}
	if err := pl.ctx.Err(); err != nil {
		return 0, err
	}
	rk := recKey{c.Precision, c.Tune}
	runs, ok := pl.runs[rk]
	if !ok {
		return 0, fmt.Errorf("internal: no op records for %s", c.Precision)
	}
	tp := tensorOpt{c.TP, c.SP, c.PP}
	g, err := pl.graphOf(c.MicroBatch, c.Tune, tp)
	if err != nil {
		return 0, err
	}
	s := pl.request(c).Setup
	s, err = s.Normalize()
	if err != nil {
		return 0, err
	}
	ak := alignKey{c.Precision, c.MicroBatch, c.Tune, tp}
	aligned, ok := pl.aligned[ak]
	if !ok {
		aligned = cost.Align(g, pl.runsOn[rk], runs)
		pl.aligned[ak] = aligned
	}
	runs = aligned
	// the compute does not depend on the data-parallel strategy (the
	// communication below adds what does): one timing serves them all
	sk := stepKey{g, c.Precision, c.Checkpoint, c.Impl, c.Optim, c.Accumulate}
	e, ok := pl.steps[sk]
	if !ok {
		in := cost.Input{Graph: g, Ops: runs, Setup: s, Rates: pl.o.Base.GPU.Rates, Seq: pl.o.Base.Config.Seq, Batch: c.MicroBatch}
		pk := passKey{g, c.Precision, c.Checkpoint}
		pass, ok := pl.passes[pk]
		if !ok {
			if pass, err = cost.TimePass(in); err != nil {
				return 0, err
			}
			pl.passes[pk] = pass
		}
		if e, err = pass.Step(in); err != nil {
			return 0, err
		}
		pl.steps[sk] = e
	}
	if c.Parallel.On() || c.TP > 1 || c.PP > 1 {
		// the same communication predict.Run adds (cost.Communication)
		ck := commKey{g, c.Parallel, c.Precision, c.Checkpoint}
		comms, ok := pl.comms[ck]
		if !ok {
			comms = train.Collectives(g, s, runs, c.TP, c.SP, int(c.PP))
			pl.comms[ck] = comms
		}
		comm, err := cost.Communication(cost.CommInput{Comms: comms,
			Setup: s, Link: pl.o.Base.GPU.Link, TP: c.TP, PP: c.PP, Compute: e})
		if err != nil {
			return 0, err
		}
		e = e.WithComm(comm)
	}
	return e.Seconds, nil
}

func (pl *planner) run() error {
	pl.findLoRA()
	// The current setup first: the reference every plan is compared with.
	base, err := pl.evaluate(pl.base)
	if err != nil {
		return err
	}
	pl.ans.Base = base
	var combos []*combo
	for _, tune := range pl.tunes() {
		g0, err := pl.graph(pl.accsMicro(len(pl.accs)-1), tune)
		if err != nil {
			if tune == FullTune {
				return err
			}
			pl.pruned(&combo{p: pl.base.Precision, ck: pl.base.Checkpoint, impl: pl.base.Impl, par: pl.base.Parallel, tp: tensorOpt{pl.base.TP, pl.base.SP, pl.base.PP}, tune: tune},
				fmt.Sprintf("not built: %v", err))
			continue
		}
		counts := countParams(g0)
		for _, optim := range pl.optims() {
			for _, tp := range pl.tensors() {
				for _, par := range pl.strategies() {
					for _, p := range pl.precisions() {
						o := pl.optimizer(optim, pl.base.Impl)
						if need := pl.staticBytes(p, par, tp, o, counts); need > pl.capLeft {
							for _, ck := range pl.checkpoints(g0) {
								for _, im := range pl.impls(optim) {
									pl.pruned(&combo{p: p, ck: ck, impl: im, par: par, tp: tp, tune: tune, optim: optim},
										fmt.Sprintf("parameters, gradients and optimizer state alone need %s", alloc.FormatSize(need)))
								}
							}
							// a bound of the model states alone, kept apart
							// from the simulated plans' device totals
							total := need + (pl.o.Base.GPU.Capacity - pl.capLeft)
							if pl.ans.StatesNeed == 0 || total < pl.ans.StatesNeed {
								pl.ans.StatesNeed = total
								pl.ans.StatesFrom = fmt.Sprintf("%s: parameters, gradients and optimizer state %s, the CUDA context and the margin", strategyPrefix(par)+string(p)+tuneSuffix(tune, optim), alloc.FormatSize(need))
							}
							continue
						}
						for _, ck := range pl.checkpoints(g0) {
							for _, im := range pl.impls(optim) {
								cb := &combo{par: par, tp: tp, p: p, ck: ck, impl: im, tune: tune, optim: optim}
								cb.changes = btoi(p != pl.base.Precision) + btoi(ck != pl.base.Checkpoint) + btoi(im != pl.base.Impl) + btoi(par != pl.base.Parallel) +
									btoi(tp.tp != pl.base.TP || tp.sp != pl.base.SP) + btoi(tp.pp != pl.base.PP) + btoi(tune != FullTune) + btoi(optim != "")
								combos = append(combos, cb)
							}
						}
					}
				}
			}
		}
	}
	// Plans that change what is trained or how it is optimised rank after
	// those that change less of it, whatever their speed: each group is
	// timed and searched only while the plans kept leave room for it.
	for rc := 0; rc <= 2; rc++ {
		var group []*combo
		for _, cb := range combos {
			if cb.resultChanges() == rc {
				group = append(group, cb)
			}
		}
		if rc > 0 && len(pl.ans.Best) >= pl.o.Top && pl.ans.Best[pl.o.Top-1].resultChanges() < rc {
			for _, cb := range group {
				pl.pruned(cb, "changes what is trained or how it is optimised, and enough plans that change less of it fit")
			}
			continue
		}
		var ready []*combo
		for _, cb := range group {
			if err := pl.prepare(cb); err != nil {
				if rc == 0 || pl.ctx.Err() != nil {
					return err
				}
				// a combination the simulator refuses (a quantized base
				// under a sharding strategy)
				pl.pruned(cb, fmt.Sprintf("not simulated: %v", err))
				continue
			}
			ready = append(ready, cb)
		}
		key := func(cb *combo) [3]float64 {
			if pl.o.Objective == FewestChanges {
				return [3]float64{float64(rc), float64(cb.changes), cb.times[0]}
			}
			return [3]float64{float64(rc), 0, cb.times[0]}
		}
		sort.SliceStable(ready, func(i, j int) bool { return less(key(ready[i]), key(ready[j])) })
		pl.searching = true
		for _, cb := range ready {
			if len(pl.ans.Best) >= pl.o.Top && !less(key(cb), pl.planKey(pl.ans.Best[pl.o.Top-1])) {
				pl.pruned(cb, "slower than the plans shown even at its largest micro-batch")
				continue
			}
			if err := pl.search(cb); err != nil {
				if errors.Is(err, errBudget) {
					pl.ans.Stopped = true
					return nil
				}
				if rc == 0 || pl.ctx.Err() != nil {
					return err
				}
				pl.pruned(cb, fmt.Sprintf("not simulated: %v", err))
			}
		}
	}
	return nil
}

// prepare times a combination at its smallest accumulation, the fastest
// it can be, first taking the op records of its precision and training
// when none were taken yet.
func (pl *planner) prepare(cb *combo) error {
	if rk := (recKey{cb.p, cb.tune}); pl.runs[rk] == nil {
		// One micro-batch simulated, with no allocator replay: the
		// records are the same at every size, and the searches predict
		// what they need of memory. A builder's op list at batch 1 may
		// differ from the larger ones' (a reshape that is a view at batch
		// 1 and a copy beyond it), so the records are taken at the second
		// smallest micro-batch, whose ops the larger ones share, and only
		// the smallest needs them carried over (cost.Align).
		at := max(len(pl.accs)-2, 0)
		c := pl.base
		c.Precision = cb.p
		c.Parallel = cb.par
		c.TP, c.SP, c.PP = cb.tp.tp, cb.tp.sp, cb.tp.pp
		c.Tune, c.Optim = cb.tune, cb.optim
		c.Accumulate = pl.accs[at]
		c.MicroBatch = pl.accsMicro(at)
		runs, g, err := predict.Records(pl.ctx, pl.request(c))
		if err != nil {
			return fmt.Errorf("%s: %w", describe(c), err)
		}
		pl.runs[rk], pl.runsOn[rk] = runs, g
	}
	_, err := pl.timeAt(cb, 0)
	return err
}

// timeAt is a combination's step time at accumulation index i.
func (pl *planner) timeAt(cb *combo, i int) (float64, error) {
	if cb.times == nil {
		cb.times = make([]float64, len(pl.accs))
		for j := range cb.times {
			cb.times[j] = math.NaN()
		}
	}
	if math.IsNaN(cb.times[i]) {
		t, err := pl.timeOf(pl.cand(cb, i, false))
		if err != nil {
			return 0, err
		}
		cb.times[i] = t
	}
	return cb.times[i], nil
}

func (cb *combo) changesResults() bool { return cb.resultChanges() > 0 }

func (cb *combo) resultChanges() int { return btoi(cb.tune != FullTune) + btoi(cb.optim != "") }

// tuneSuffix names what a combination trains and steps with, ", LoRA,
// optimizer adamw8bit", or nothing.
func tuneSuffix(t Tune, optim string) string {
	var s string
	switch t {
	case LoRATune:
		s += ", LoRA"
	case QLoRATune:
		s += ", QLoRA"
	}
	if optim != "" {
		s += ", optimizer " + optim
	}
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// less orders keys: plans that change what is trained or how it is
// optimised after those that do not (and those that change both after
// those that change one), then by the objective.
func less(a, b [3]float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func (pl *planner) planKey(p *Plan) [3]float64 {
	rc := float64(p.resultChanges())
	if pl.o.Objective == FewestChanges {
		return [3]float64{rc, float64(len(p.Changes)), p.Seconds}
	}
	return [3]float64{rc, 0, p.Seconds}
}

func (pl *planner) accsMicro(i int) int64 { return pl.ans.RankBatch / int64(pl.accs[i]) }

func (pl *planner) cand(cb *combo, i int, expandable bool) Candidate {
	return Candidate{Precision: cb.p, Checkpoint: cb.ck, Impl: cb.impl, Expandable: expandable,
		Accumulate: pl.accs[i], MicroBatch: pl.accsMicro(i), Parallel: cb.par, TP: cb.tp.tp, SP: cb.tp.sp, PP: cb.tp.pp, Tune: cb.tune, Optim: cb.optim}
}

// probe predicts the combination at accumulation index i, unless an
// earlier prediction already showed it cannot fit (then it returns nil).
func (pl *planner) probe(cb *combo, i int, expandable bool) (*Plan, error) {
	k := deadKey{cb.p, cb.ck, cb.par, cb.tp, cb.tune, cb.optim}
	anyOptim := k
	anyOptim.optim = "*"
	for _, k := range []deadKey{k, anyOptim} {
		if d, ok := pl.dead[k]; ok && i <= d {
			return nil, nil
		}
	}
	p, err := pl.evaluate(pl.cand(cb, i, expandable))
	if err != nil || p.Fits {
		return p, err
	}
	// Before its first optimizer step a job holds no optimizer state: a
	// first pass that requests more than the device fails with every
	// optimizer.
	if p.Result.Summary.FirstPassPeakRequested > pl.capLeft {
		if d, ok := pl.dead[anyOptim]; !ok || i > d {
			pl.dead[anyOptim] = i
		}
	}
	// Requested bytes are a floor under allocated and reserved ones: a
	// pass whose requested peak exceeds the device fails under every
	// allocator setting, and the forward and backward passes are the same
	// for every optimizer implementation.
	var outside int64
	for ph, b := range p.Result.Summary.PhasePeakRequested {
		if trace.Phase(ph) != trace.OptimizerStep {
			outside = max(outside, b)
		}
	}
	if outside > pl.capLeft {
		if d, ok := pl.dead[k]; !ok || i > d {
			pl.dead[k] = i
		}
	}
	return p, nil
}

// fitsFloor reports whether a failed prediction's requested peak still
// leaves room: only then can another allocator setting make it fit.
func (pl *planner) fitsFloor(p *Plan) bool {
	return p != nil && p.Result.Summary.PeakRequested <= pl.capLeft
}

// search finds a combination's best plan: the smallest accumulation that
// fits (the fastest, see the package doc), among those that could still
// enter the list; then whether expandable segments let it go one
// accumulation lower.
func (pl *planner) search(cb *combo) error {
	exp0 := pl.base.Expandable
	rescue := pl.allow[Allocator] && !exp0
	// Only accumulations that can beat the last plan kept are worth a
	// probe; time rises with accumulation, so they are a prefix.
	hi := len(pl.accs) - 1
	if len(pl.ans.Best) >= pl.o.Top {
		worst := pl.planKey(pl.ans.Best[pl.o.Top-1])
		for ; hi >= 0; hi-- {
			k, err := pl.comboKeyAt(cb, hi)
			if err != nil {
				return err
			}
			if less(k, worst) {
				break
			}
		}
	}
	// A plan of the same precision and checkpointing is already kept at
	// accumulation index b: another implementation adds a plan only at a
	// smaller accumulation, or at b when it is faster there (variants are
	// one plan, see keep).
	if q, b := pl.keptAt(cb); q != nil && b <= hi {
		hi = b
		k, err := pl.comboKeyAt(cb, b)
		if err != nil {
			return err
		}
		if !less(k, pl.planKey(q)) {
			hi = b - 1
		}
	}
	if hi < 0 {
		return nil
	}
	if pl.o.Objective == FewestChanges {
		// the current accumulation first: fitting there changes one
		// lever less
		if i := pl.indexOf(pl.base.Accumulate); i >= 0 && i <= hi {
			p, err := pl.probe(cb, i, exp0)
			if err != nil {
				return err
			}
			if p != nil && p.Fits {
				pl.keep(p)
				return nil
			}
		}
	}
	// Bisection over the prefix, without probing its most frugal end
	// first: when a plan fits, the probes that find it show that the end
	// fits too, and the end's own prediction is needed only when nothing
	// else does.
	lo, loPlan, fit, err := pl.bisect(cb, -1, hi+1, nil, exp0)
	if err != nil {
		return err
	}
	if fit == nil {
		// nothing fits up to hi; loPlan is hi's prediction
		if loPlan == nil {
			pl.pruned(cb, fmt.Sprintf(
				"with %s%s and checkpointing %s the forward and backward passes alone need more than the device at a micro-batch of %d",
				strategyPrefix(cb.par), cb.p, cb.ck, pl.accsMicro(hi)))
			return nil
		}
		if !rescue || !pl.fitsFloor(loPlan) {
			return nil
		}
	} else {
		pl.keep(fit)
	}
	// expandable segments leave less reserved but unused: a larger
	// micro-batch may fit with them
	if rescue && lo >= 0 && loPlan != nil && pl.fitsFloor(loPlan) {
		q, err := pl.probe(cb, lo, true)
		if err != nil {
			return err
		}
		if q != nil && q.Fits {
			_, _, fit, err := pl.bisect(cb, -1, lo, q, true)
			if err == nil && fit != nil {
				pl.keep(fit)
			}
			return err
		}
	}
	return nil
}

// bisect finds the smallest accumulation index in (lo, fitAt] that fits
// with the allocator setting given: fitAt fits, as plan fit, or is one
// past the last index and not known to (fit nil). It answers the index
// just below the smallest that fits (-1 when none is) with that index's
// prediction (nil when it was ruled out without one), and the plan that
// fits (nil when none does).
func (pl *planner) bisect(cb *combo, lo, fitAt int, fit *Plan, expandable bool) (int, *Plan, *Plan, error) {
	var loPlan *Plan
	for fitAt-lo > 1 {
		mid := (lo + fitAt) / 2
		q, err := pl.probe(cb, mid, expandable)
		if err != nil {
			return 0, nil, nil, err
		}
		if q != nil && q.Fits {
			fitAt, fit = mid, q
		} else {
			lo, loPlan = mid, q
		}
	}
	return lo, loPlan, fit, nil
}

// keptAt is the kept plan of the same precision and checkpointing as cb
// with the smallest accumulation, and that accumulation's index.
func (pl *planner) keptAt(cb *combo) (*Plan, int) {
	var best *Plan
	bi := 0
	for _, q := range pl.ans.Best {
		if q.Precision == cb.p && q.Checkpoint == cb.ck && q.Tune == cb.tune && q.Optim == cb.optim && q.Parallel == cb.par && (tensorOpt{q.TP, q.SP, q.PP}) == cb.tp {
			if i := pl.indexOf(q.Accumulate); i >= 0 && (best == nil || i < bi) {
				best, bi = q, i
			}
		}
	}
	return best, bi
}

func (pl *planner) comboKeyAt(cb *combo, i int) ([3]float64, error) {
	t, err := pl.timeAt(cb, i)
	if err != nil {
		return [3]float64{}, err
	}
	rc := float64(cb.resultChanges())
	if pl.o.Objective == FewestChanges {
		n := cb.changes + btoi(pl.accs[i] != pl.base.Accumulate)
		return [3]float64{rc, float64(n), t}, nil
	}
	return [3]float64{rc, 0, t}, nil
}

func (pl *planner) indexOf(a int) int {
	for i, v := range pl.accs {
		if v == a {
			return i
		}
	}
	return -1
}

// keep adds a fitting plan to the best list.
func (pl *planner) keep(p *Plan) {
	if p.Candidate == pl.base && pl.o.Objective == FewestChanges && !pl.ans.Untimed {
		// the changes asked for are changes; a plan ranked by changes
		// only for want of step times keeps the job as it is when it fits
		return
	}
	for i, q := range pl.ans.Best {
		if q == p {
			return
		}
		// Plans that differ only in the optimizer's implementation or the
		// allocator's setting are one plan with variants: the list keeps
		// the better, so that it shows different ways to fit.
		if q.Precision == p.Precision && q.Checkpoint == p.Checkpoint && q.Accumulate == p.Accumulate && q.Tune == p.Tune && q.Optim == p.Optim && sameLayout(q.Candidate, p.Candidate) {
			if less(pl.planKey(p), pl.planKey(q)) {
				pl.ans.Best[i] = p
				sort.SliceStable(pl.ans.Best, func(i, j int) bool { return less(pl.planKey(pl.ans.Best[i]), pl.planKey(pl.ans.Best[j])) })
			}
			return
		}
	}
	best := append(pl.ans.Best, p)
	sort.SliceStable(best, func(i, j int) bool { return less(pl.planKey(best[i]), pl.planKey(best[j])) })
	if len(best) > pl.o.Top {
		best = best[:pl.o.Top]
	}
	pl.ans.Best = best
}

// need is the device total of a prediction; for one screened out, its
// requested peak with the context; for one that ran out of memory, the larger of what the failing request asked for and the
// requested peak of the whole step (which the simulator knows past the
// failure) with the context: a lower bound, since the allocator rounds
// and caches on top.
func need(r *predict.Result) int64 {
	if r.Screened {
		return r.Summary.PeakRequested + r.Context
	}
	if r.Timeline.OOM != nil {
		return max(r.GPU.Capacity-r.Headroom(), r.Summary.PeakRequested+r.Context)
	}
	return r.DeviceTotal
}

// Need reports the device total a prediction needs, including what an
// out-of-memory prediction asked for.
func Need(r *predict.Result) int64 { return predict.Need(r) }

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
