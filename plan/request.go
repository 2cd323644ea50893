package plan

import (
	"fmt"

	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// How a candidate becomes a prediction: its graph, its request, its
// simulation and its step time.

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
	if impl, single := train.SingleImplementation(o); single && impl != train.ImplDefault {
		o.Impl = impl
	}
	if on.Kind == train.Adafactor {
		// transformers' Adafactor takes no decay by default
		// (weight_decay=0.0)
		o.WeightDecay = 0
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
	// whether a simulation is screened out is known only once it has
	// run: it must fit in the budget as a full one
	if pl.searching && pl.spent()+sims*screenedPerFull > pl.o.MaxPredictions*screenedPerFull {
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
		pl.ans.ScreenedSimulations += sims
	case !p.Fits:
		if n := need(res) + r.Margin; pl.ans.Need == 0 || n < pl.ans.Need {
			pl.ans.Need, pl.ans.NeedFrom, pl.ans.NeedAtLeast = n, describe(c), res.Timeline.OOM != nil
		}
	}
	return p, nil
}

// spent is the budget spent, in screened simulations (Answer.Spent).
func (pl *planner) spent() int {
	return (pl.ans.Simulations-pl.ans.ScreenedSimulations)*screenedPerFull + pl.ans.ScreenedSimulations
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
