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
	for v := int64(2); ; v *= 2 {
		if v > limit {
			v = limit
		}
		res, err := probe(v)
		if err != nil {
			return nil, err
		}
		if !res.Fits {
			hi, hiRes = v, res
			break
		}
		lo, loRes = v, res
		if v == limit {
			ans.Max, ans.Fit, ans.Limited = lo, loRes, true
			return ans, nil
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
