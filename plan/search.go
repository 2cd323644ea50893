package plan

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"sort"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// The search over the lever space: the combinations enumerated and pruned
// by their static bound, then searched most promising first.

// pruned records a combination ruled out without a search.
func (pl *planner) pruned(cb *combo, reason string) {
	pl.ans.Pruned = append(pl.ans.Pruned, Pruned{Precision: cb.p, Checkpoint: cb.ck, Impl: cb.impl, Reason: reason, Parallel: cb.par,
		TP: cb.tp.tp, SP: cb.tp.sp, PP: cb.tp.pp, Tune: cb.tune, Optim: cb.optim})
}

func (pl *planner) run() error {
	pl.findLoRA()
	// The current setup first: the reference every plan is compared with.
	base, err := pl.evaluate(pl.base)
	if err != nil {
		return err
	}
	pl.ans.Base = base
	combos, err := pl.combos()
	if err != nil {
		return err
	}
	// Plans that change what is trained or how it is optimised rank after
	// those that change less of it, whatever their speed: each group is
	// timed and searched only while the plans kept leave room for it.
	groups := make([][]*combo, 3)
	for _, cb := range combos {
		rc := cb.resultChanges()
		groups[rc] = append(groups[rc], cb)
	}
	for rc, group := range groups {
		if stop, err := pl.searchGroup(rc, group); stop || err != nil {
			return err
		}
	}
	return nil
}

// combos enumerates the lever space (space) and rules out, before any
// simulation, the combinations whose parameters, gradients and optimizer
// state alone need more than the device leaves, and the trainings whose
// model does not build.
func (pl *planner) combos() ([]*combo, error) {
	var out []*combo
	for pt := range pl.space() {
		cb := pt.cb
		if pt.err != nil {
			if cb.tune == FullTune {
				return nil, pt.err
			}
			pl.pruned(cb, fmt.Sprintf("not built: %v", pt.err))
			continue
		}
		o := pl.optimizer(cb.optim, pl.base.Impl)
		if need := pl.staticBytes(cb.p, cb.par, cb.tp, o, pt.counts); need > pl.capLeft {
			pl.pruned(cb, fmt.Sprintf("parameters, gradients and optimizer state alone need %s", alloc.FormatSize(need)))
			// a bound of the model states alone, kept apart from the
			// simulated plans' device totals
			total := need + (pl.o.Base.GPU.Capacity - pl.capLeft)
			if pl.ans.StatesNeed == 0 || total < pl.ans.StatesNeed {
				pl.ans.StatesNeed = total
				pl.ans.StatesFrom = fmt.Sprintf("%s: parameters, gradients and optimizer state %s, the CUDA context and the margin", strategyPrefix(cb.par)+string(cb.p)+tuneSuffix(cb.tune, cb.optim), alloc.FormatSize(need))
			}
			continue
		}
		cb.changes = btoi(cb.p != pl.base.Precision) + btoi(cb.ck != pl.base.Checkpoint) + btoi(cb.impl != pl.base.Impl) + btoi(cb.par != pl.base.Parallel) +
			btoi(cb.tp.tp != pl.base.TP || cb.tp.sp != pl.base.SP) + btoi(cb.tp.pp != pl.base.PP) + btoi(cb.tune != FullTune) + btoi(cb.optim != "")
		out = append(out, cb)
	}
	return out, nil
}

// point is a combination as the lever space yields it, with the
// parameters of the model it trains (for the static bound), or the error
// that kept that model from building (cb then stands for every
// combination of its training).
type point struct {
	cb     *combo
	counts paramCounts
	err    error
}

// space yields every combination of the levers' values, what is trained
// varying slowest, then the optimizer, the model split, the strategy, the
// precision, the checkpointing and the optimizer's implementation. The
// checkpointing policies depend on the model's blocks and the
// implementations on the optimizer; the other values are the same for
// every combination.
func (pl *planner) space() iter.Seq[point] {
	return func(yield func(point) bool) {
		tensors, strategies, precisions := pl.tensors(), pl.strategies(), pl.precisions()
		for _, tune := range pl.tunes() {
			g0, err := pl.graph(pl.accsMicro(len(pl.accs)-1), tune)
			if err != nil {
				cb := &combo{p: pl.base.Precision, ck: pl.base.Checkpoint, impl: pl.base.Impl, par: pl.base.Parallel, tp: tensorOpt{pl.base.TP, pl.base.SP, pl.base.PP}, tune: tune}
				if !yield(point{cb: cb, err: err}) {
					return
				}
				continue
			}
			counts := countParams(g0)
			cbs := []combo{{tune: tune}}
			cbs = vary(cbs, func(combo) []string { return pl.optims() }, func(c *combo, v string) { c.optim = v })
			cbs = vary(cbs, func(combo) []tensorOpt { return tensors }, func(c *combo, v tensorOpt) { c.tp = v })
			cbs = vary(cbs, func(combo) []train.Parallel { return strategies }, func(c *combo, v train.Parallel) { c.par = v })
			cbs = vary(cbs, func(combo) []train.Precision { return precisions }, func(c *combo, v train.Precision) { c.p = v })
			cbs = vary(cbs, func(combo) []train.Checkpoint { return pl.checkpoints(g0) }, func(c *combo, v train.Checkpoint) { c.ck = v })
			cbs = vary(cbs, func(c combo) []train.Impl { return pl.impls(c.optim) }, func(c *combo, v train.Impl) { c.impl = v })
			for i := range cbs {
				if !yield(point{cb: &cbs[i], counts: counts}) {
					return
				}
			}
		}
	}
}

// vary expands each combination into one for each value a lever takes
// with it, in order: applied lever after lever, it lists the product of
// their values with the last applied varying fastest.
func vary[T any](cbs []combo, values func(combo) []T, set func(*combo, T)) []combo {
	var out []combo
	for _, c := range cbs {
		for _, v := range values(c) {
			set(&c, v)
			out = append(out, c)
		}
	}
	return out
}

// searchGroup times and searches the combinations that change rc levers
// of what is trained or how it is optimised, fastest bound first. It
// reports stop when the budget of predictions is spent (Answer.Stopped).
func (pl *planner) searchGroup(rc int, group []*combo) (stop bool, err error) {
	if rc > 0 && len(pl.ans.Best) >= pl.o.Top && pl.ans.Best[pl.o.Top-1].resultChanges() < rc {
		// only the best plan on the current setup's GPUs may still come
		// from this group, while none that changes less of it fits there
		same := pl.ans.SameGPUs == nil || pl.ans.SameGPUs.resultChanges() >= rc
		var rest []*combo
		for _, cb := range group {
			if same && cb.gpus() == pl.ans.GPUs {
				rest = append(rest, cb)
				continue
			}
			pl.pruned(cb, "changes what is trained or how it is optimised, and enough plans that change less of it fit")
		}
		group = rest
	}
	var ready []*combo
	for _, cb := range group {
		if err := pl.prepare(cb); err != nil {
			if rc == 0 || pl.ctx.Err() != nil {
				return false, err
			}
			// a combination the simulator refuses (a quantized base
			// under a sharding strategy)
			pl.pruned(cb, fmt.Sprintf("not simulated: %v", err))
			continue
		}
		ready = append(ready, cb)
	}
	key := func(cb *combo) key {
		return rankKey(pl.o.Objective, pl.ans.Untimed, rc, cb.changes, cb.gpus(), cb.times[0], 0)
	}
	// The combinations on the current setup's GPUs first: the answer
	// always shows the best plan that keeps them (Answer.SameGPUs), so
	// the budget is spent on it before the layouts that take more or
	// fewer GPUs; each part is visited in the order of its bound.
	sort.SliceStable(ready, func(i, j int) bool {
		si, sj := ready[i].gpus() == pl.ans.GPUs, ready[j].gpus() == pl.ans.GPUs
		if si != sj {
			return si
		}
		return less(key(ready[i]), key(ready[j]))
	})
	pl.searching = true
	for _, cb := range ready {
		if !pl.couldEnter(key(cb), cb) {
			pl.pruned(cb, "slower than the plans shown even at its largest micro-batch")
			continue
		}
		if err := pl.search(cb); err != nil {
			if errors.Is(err, errBudget) {
				pl.ans.Stopped = true
				return true, nil
			}
			if rc == 0 || pl.ctx.Err() != nil {
				return false, err
			}
			pl.pruned(cb, fmt.Sprintf("not simulated: %v", err))
		}
	}
	return false, nil
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

func (pl *planner) accsMicro(i int) int64 { return pl.ans.RankBatch / int64(pl.accs[i]) }

func (pl *planner) cand(cb *combo, i int, expandable bool) Candidate {
	return Candidate{Precision: cb.p, Checkpoint: cb.ck, Impl: cb.impl, Expandable: expandable,
		Accumulate: pl.accs[i], MicroBatch: pl.accsMicro(i), Parallel: cb.par, TP: cb.tp.tp, SP: cb.tp.sp, PP: cb.tp.pp, Tune: cb.tune, Optim: cb.optim}
}

// keep adds a fitting plan to the best list.
func (pl *planner) keep(p *Plan) {
	if p.Candidate == pl.base && pl.o.Objective == FewestChanges && !pl.ans.Untimed {
		// the changes asked for are changes; a plan ranked by changes
		// only for want of step times keeps the job as it is when it fits
		return
	}
	if p.GPUs() == pl.ans.GPUs && (pl.ans.SameGPUs == nil || less(pl.planKey(p), pl.planKey(pl.ans.SameGPUs))) {
		pl.ans.SameGPUs = p
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
				sortPlans(pl.ans.Best, pl.o.Objective, pl.ans.Untimed)
			}
			return
		}
	}
	best := append(pl.ans.Best, p)
	sortPlans(best, pl.o.Objective, pl.ans.Untimed)
	if len(best) > pl.o.Top {
		best = best[:pl.o.Top]
	}
	pl.ans.Best = best
}
