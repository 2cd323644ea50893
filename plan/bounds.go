package plan

import (
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/trace"
)

// What a prediction shows of every other: the accumulations it rules out,
// and what a plan needs on the device.

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

// need is predict.Need: the device total a prediction needs, a lower
// bound for one screened out or out of memory.
func need(r *predict.Result) int64 { return predict.Need(r) }

// Need reports the device total a prediction needs, including what an
// out-of-memory prediction asked for.
func Need(r *predict.Result) int64 { return predict.Need(r) }
