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
	// Probes is the number of predictions the search made; Tried lists
	// the values in the order simulated.
	Probes int
	Tried  []int64
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
		ans.Tried = append(ans.Tried, v)
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
	// Memory is close to affine in each dimension once activations
	// dominate, so the two largest values that fit predict where the device
	// fills up (the slope from the requested bytes, which grow smoothly;
	// the distance from the device total, which decides fitting). Grow at
	// most eightfold toward that estimate; once a guess was aimed by it,
	// bracket the boundary tightly around the guess by steps of 1/64 that
	// double, and finish by bisection. Only simulated values are ever
	// returned, so a poor estimate costs probes, never correctness.
	prev, prevRes := int64(0), (*predict.Result)(nil)
	for hi == 0 {
		g, aimed := lo*8, false
		if prevRes != nil {
			slope := float64(loRes.Timeline.Final.PeakRequested-prevRes.Timeline.Final.PeakRequested) / float64(lo-prev)
			if slope > 0 {
				est := float64(lo) + float64(loRes.GPU.Capacity-loRes.DeviceTotal)/slope
				if est < float64(lo*8) {
					g, aimed = int64(est), true
				}
			}
		}
		g = min(max(g, lo+1), limit)
		res, err := probe(g)
		if err != nil {
			return nil, err
		}
		if !res.Fits {
			hi, hiRes = g, res
			if aimed {
				for d := max(int64(1), g/64); hi-lo > 1; d *= 2 {
					w := max(hi-d, lo+1)
					res, err := probe(w)
					if err != nil {
						return nil, err
					}
					if res.Fits {
						lo, loRes = w, res
						break
					}
					hi, hiRes = w, res
				}
			}
			break
		}
		prev, prevRes = lo, loRes
		lo, loRes = g, res
		if g == limit {
			ans.Max, ans.Fit, ans.Limited = lo, loRes, true
			return ans, nil
		}
		if aimed {
			for d := max(int64(1), g/64); hi == 0; d *= 2 {
				w := min(lo+d, limit)
				res, err := probe(w)
				if err != nil {
					return nil, err
				}
				if !res.Fits {
					hi, hiRes = w, res
					break
				}
				prev, prevRes = lo, loRes
				lo, loRes = w, res
				if w == limit {
					ans.Max, ans.Fit, ans.Limited = lo, loRes, true
					return ans, nil
				}
			}
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		res, err := probe(mid)
		if err != nil {
			return nil, err
		}
		if res.Fits {
			lo, loRes = mid, res
		} else {
			hi, hiRes = mid, res
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
