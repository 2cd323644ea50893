package solve

import (
	"fmt"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
)

// Point is one simulated value of the searched dimension.
type Point struct {
	Value  int64
	Result *predict.Result
}

// Sweep predicts every batch size in batches.
func Sweep(r predict.Request, batches []int64) ([]Point, error) {
	var out []Point
	for _, b := range batches {
		q := r
		q.Config.Batch = b
		res, err := predict.Run(q)
		if err != nil {
			return nil, fmt.Errorf("batch %d: %w", b, err)
		}
		out = append(out, Point{Value: b, Result: res})
	}
	return out, nil
}

// Answer is the result of a search.
type Answer struct {
	Dim models.Dim
	// Max is the largest value that fits; 0 when even the smallest does
	// not.
	Max int64
	// Fit is the prediction at Max; Over the one at Max+1 (nil when Max
	// reached the search limit).
	Fit, Over *predict.Result
	// Limited reports that the search stopped at Limit with Limit fitting.
	Limited bool
	// Probes is the number of predictions the search made.
	Probes int
}

// DefaultLimit bounds searches: no model reaches it on any catalog GPU.
const DefaultLimit = 1 << 24

// MaxBatch finds the largest batch that fits.
func MaxBatch(r predict.Request, limit int64) (*Answer, error) {
	return MaxDim(r, models.DimBatch, limit)
}

// MaxDim finds the largest value of dim that fits, the other sizes as in r.
func MaxDim(r predict.Request, dim models.Dim, limit int64) (*Answer, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	if dim != models.DimBatch {
		ok := false
		for _, d := range r.Source.Dims() {
			ok = ok || d == dim
		}
		if !ok {
			return nil, fmt.Errorf("%s cannot vary %q (it can vary: %s)", r.Source.Name(), dim, dimList(r.Source.Dims()))
		}
	}
	ans := &Answer{Dim: dim}
	probe := func(v int64) (*predict.Result, error) {
		q := r
		switch dim {
		case models.DimBatch:
			q.Config.Batch = v
		case models.DimSeq:
			q.Config.Seq = v
		case models.DimLayers:
			q.Config.Layers = v
		case models.DimHidden:
			q.Config.Hidden = v
		}
		ans.Probes++
		res, err := predict.Run(q)
		if err != nil {
			return nil, fmt.Errorf("%s %d: %w", dim, v, err)
		}
		return res, nil
	}
	first, err := probe(1)
	if err != nil {
		return nil, err
	}
	if !first.Fits {
		ans.Over = first
		return ans, nil
	}
	lo, loRes := int64(1), first
	var hi int64
	var hiRes *predict.Result
	// A safeguarded secant search. Memory is close to affine in each
	// dimension once activations dominate, so the two largest values that
	// fit predict where the device fills up; while the boundary is not
	// bracketed the guess may grow at most eightfold, and once it is, a
	// guess that fails to halve the bracket twice in a row is replaced by
	// the midpoint. Only simulated values are ever returned, so a poor
	// guess costs probes, never correctness.
	prev, prevRes := int64(0), (*predict.Result)(nil)
	stalls := 0
	// shrink lowers the capacity the secant aims at after a guess that did
	// not fit (the allocator's rounding and fragmentation are not in the
	// straight line), and relaxes after one that did.
	shrink := 0.0
	estimate := func() (float64, bool) {
		if prevRes == nil {
			return 0, false
		}
		// The slope comes from the requested bytes, which grow smoothly;
		// reserved memory moves in segment-sized steps. The distance to
		// go is measured on the device total, which decides fitting.
		slope := float64(loRes.Timeline.Final.PeakRequested-prevRes.Timeline.Final.PeakRequested) / float64(lo-prev)
		if slope <= 0 {
			return 0, false
		}
		target := float64(loRes.GPU.Capacity) * (1 - shrink)
		return float64(lo) + (target-float64(loRes.DeviceTotal))/slope, true
	}
	for hi == 0 || hi-lo > 1 {
		var g int64
		switch {
		case hi == 0:
			g = lo * 8
			if est, ok := estimate(); ok {
				g = int64(min(est, float64(lo*8)))
			}
			// Not bracketed yet: move at least an eighth, so a guess
			// pulled below lo by the shrink cannot creep.
			g = min(max(g, lo+lo/8+1), limit)
		default:
			g = lo + (hi-lo)/2
			if est, ok := estimate(); ok && stalls < 2 {
				g = min(max(int64(est), lo+1), hi-1)
			}
		}
		width := hi - lo
		res, err := probe(g)
		if err != nil {
			return nil, err
		}
		if res.Fits {
			shrink /= 2
			prev, prevRes = lo, loRes
			lo, loRes = g, res
			if g == limit && hi == 0 {
				ans.Max, ans.Fit, ans.Limited = lo, loRes, true
				return ans, nil
			}
		} else {
			shrink = min(0.5, max(0.02, 2*shrink))
			hi, hiRes = g, res
		}
		if hi != 0 && width > 0 && 2*(hi-lo) > width {
			stalls++
		} else {
			stalls = 0
		}
	}
	ans.Max, ans.Fit, ans.Over = lo, loRes, hiRes
	return ans, nil
}

func dimList(ds []models.Dim) string {
	s := "batch"
	for _, d := range ds {
		s += ", " + string(d)
	}
	return s
}
