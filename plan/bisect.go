package plan

import (
	"fmt"
	"slices"
)

// One combination's search: the accumulations that can still enter the
// list, bisected for the smallest that fits.

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
		for ; hi >= 0; hi-- {
			k, err := pl.comboKeyAt(cb, hi)
			if err != nil {
				return err
			}
			if pl.couldEnter(k, cb) {
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
// with the smallest accumulation, and that accumulation's index; the best
// plan on the current setup's GPUs is kept too, when the list leaves it
// out.
func (pl *planner) keptAt(cb *combo) (*Plan, int) {
	var best *Plan
	bi := 0
	kept := pl.ans.Best
	if s := pl.ans.SameGPUs; s != nil && !slices.Contains(kept, s) {
		kept = append(slices.Clip(kept), s)
	}
	for _, q := range kept {
		if q.Precision == cb.p && q.Checkpoint == cb.ck && q.Tune == cb.tune && q.Optim == cb.optim && q.Parallel == cb.par && (tensorOpt{q.TP, q.SP, q.PP}) == cb.tp {
			if i := pl.indexOf(q.Accumulate); i >= 0 && (best == nil || i < bi) {
				best, bi = q, i
			}
		}
	}
	return best, bi
}

func (pl *planner) indexOf(a int) int {
	for i, v := range pl.accs {
		if v == a {
			return i
		}
	}
	return -1
}
