package plan

import "slices"

// The order of the plans: the keys that rank them and bound the search.

func (cb *combo) changesResults() bool { return cb.resultChanges() > 0 }

func (cb *combo) resultChanges() int { return btoi(cb.tune != FullTune) + btoi(cb.optim != "") }

// gpus is the GPUs a combination's plans take (Candidate.GPUs).
func (cb *combo) gpus() int64 { return Ranks(cb.par) * max(cb.tp.tp, 1) * max(cb.tp.pp, 1) }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// key ranks a plan, the smaller first: the levers of what is trained and
// how it is optimised that it moves, the levers it moves under
// FewestChanges (0 otherwise), then its cost and a tie-break.
//
// Timed, the cost is the GPU-seconds of a step, step time × GPUs: every
// plan makes the same global batch a step, so the fewer GPU-seconds, the
// more samples a second each GPU gives (Plan.ThroughputPerGPU), and a plan
// that is a little faster on many times the GPUs ranks after one that
// keeps them; a tie goes to the fewer GPUs. Untimed, the cost is the GPUs
// and the tie-break the device total.
type key [4]float64

// less orders keys: plans that change what is trained or how it is
// optimised after those that do not (and those that change both after
// those that change one), then by the objective.
func less(a, b key) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// rankKey is the key of a plan or combination that moves rc levers of
// what is trained, changes levers in all, takes gpus GPUs and seconds a
// step, and needs bytes on the device (0 for a combination not yet
// simulated: the least it can need, so that a bound made of it never rules
// out a plan that would rank before).
func rankKey(o Objective, untimed bool, rc, changes int, gpus int64, seconds float64, bytes int64) key {
	k := key{float64(rc)}
	if o == FewestChanges {
		k[1] = float64(changes)
	}
	if untimed {
		k[2], k[3] = float64(gpus), float64(bytes)
	} else {
		k[2], k[3] = seconds*float64(gpus), float64(gpus)
	}
	return k
}

// planKey is a simulated plan's key.
func planKey(p *Plan, o Objective, untimed bool) key {
	var bytes int64
	if p.Result != nil {
		bytes = p.Result.DeviceTotal
	}
	return rankKey(o, untimed, p.resultChanges(), len(p.Changes), p.GPUs(), p.Seconds, bytes)
}

func (pl *planner) planKey(p *Plan) key { return planKey(p, pl.o.Objective, pl.ans.Untimed) }

// comboKeyAt bounds the key of a combination's plan at accumulation
// index i.
func (pl *planner) comboKeyAt(cb *combo, i int) (key, error) {
	t, err := pl.timeAt(cb, i)
	if err != nil {
		return key{}, err
	}
	n := cb.changes + btoi(pl.accs[i] != pl.base.Accumulate)
	return rankKey(pl.o.Objective, pl.ans.Untimed, cb.resultChanges(), n, cb.gpus(), t, 0), nil
}

// couldEnter reports whether a plan of combination cb with key k at best
// could still be shown: among the plans kept, or as the best plan on the
// current setup's GPUs (Answer.SameGPUs).
func (pl *planner) couldEnter(k key, cb *combo) bool {
	if len(pl.ans.Best) < pl.o.Top || less(k, pl.planKey(pl.ans.Best[pl.o.Top-1])) {
		return true
	}
	return cb.gpus() == pl.ans.GPUs && (pl.ans.SameGPUs == nil || less(k, pl.planKey(pl.ans.SameGPUs)))
}

// sortPlans orders plans by their keys, stably.
func sortPlans(ps []*Plan, o Objective, untimed bool) {
	slices.SortStableFunc(ps, func(a, b *Plan) int {
		ka, kb := planKey(a, o, untimed), planKey(b, o, untimed)
		switch {
		case less(ka, kb):
			return -1
		case less(kb, ka):
			return 1
		}
		return 0
	})
}
