package solve

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
)

// Point is one simulated value of the searched dimension.
type Point struct {
	Value  int64
	Result *predict.Result
}

// Sweep predicts every batch size in batches.
func Sweep(ctx context.Context, r predict.Request, batches []int64) ([]Point, error) {
	var out []Point
	for _, b := range batches {
		q := r
		q.Config.Batch = b
		res, err := predict.Run(ctx, q)
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
	// Range is the values the search could try: the source's valid
	// values of Dim (a transformer's width in multiples of its head size,
	// its sequence up to a learned position table).
	Range models.Range
	// Max is the largest value that fits; 0 when even the smallest does
	// not.
	Max int64
	// Next is the valid value after Max, simulated and not fitting (0
	// when Max reached the search's or the model's limit).
	Next int64
	// Fit is the prediction at Max; Over the one at Next (or, when even
	// the smallest value does not fit, at that value).
	Fit, Over *predict.Result
	// Limited reports that the search stopped at its limit with the limit
	// fitting: the search's own limit, or the model's (Bound).
	Limited bool
	// Bound, when Limited, says what in the model set the limit (a learned
	// position table's size); empty when it was the search's limit.
	Bound string
	// Beyond, when Limited, says which of batchfit's bounds the value
	// after Max is beyond (graph.ErrBound: more layers than simulated, a
	// graph of too many ops or bytes): not known not to fit, but not
	// answered.
	Beyond string
	// Probes is the number of predictions the search made; Tried lists
	// the values in the order simulated.
	Probes int
	Tried  []int64
}

// DefaultLimit bounds searches: no model reaches it on any catalog GPU.
const DefaultLimit = 1 << 24

// MaxBatch finds the largest batch that fits.
func MaxBatch(ctx context.Context, r predict.Request, limit int64) (*Answer, error) {
	return MaxDim(ctx, r, models.DimBatch, limit)
}

// MaxDim finds the largest value of dim that fits, the other sizes as in r.
// It tries only the values the source declares valid (predict.RangeOf), up
// to the smaller of limit and the source's own bound.
func MaxDim(ctx context.Context, r predict.Request, dim models.Dim, limit int64) (*Answer, error) {
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
	rng := predict.RangeOf(r.Source, dim, r.Config)
	if rng.Min <= 0 || rng.Step <= 0 {
		return nil, fmt.Errorf("internal: %s's range of %s starts at %d in steps of %d", r.Source.Name(), dim, rng.Min, rng.Step)
	}
	n := rng.Count(limit)
	if n == 0 {
		what := fmt.Sprintf("the limit %d", limit)
		if rng.Max > 0 && rng.Max < limit {
			what = rng.MaxWhy
		}
		return nil, fmt.Errorf("%s: no valid %s up to %s (the smallest is %d, %s)", r.Source.Name(), dim, what, rng.Min, rng.StepWhy)
	}
	sr := &search{ctx: ctx, r: r, dim: dim, rng: rng, limit: n, ans: &Answer{Dim: dim, Range: rng}}
	if err := sr.run(); err != nil {
		return nil, err
	}
	a := sr.ans
	if a.Limited && a.Beyond == "" && rng.Max > 0 && rng.Max <= limit {
		a.Bound = rng.MaxWhy
	}
	return a, nil
}

// search holds the bracket of a MaxDim search over the indices of the
// range's values (1 for Range.Min): lo fits (0 before the first probe), hi
// does not (0 while unknown).
type search struct {
	ctx          context.Context
	r            predict.Request
	dim          models.Dim
	rng          models.Range
	limit        int64 // the last index
	ans          *Answer
	lo, hi       int64
	loRes, hiRes *predict.Result
	prev         int64 // the fitting index before lo, for the growth slope
	prevRes      *predict.Result
	last         int64 // the index probed last
}

func (s *search) probe(k int64) (*predict.Result, error) {
	v := s.rng.Value(k)
	q := s.r
	switch s.dim {
	case models.DimBatch:
		q.Config.Batch = v
	case models.DimSeq:
		q.Config.Seq = v
	case models.DimLayers:
		q.Config.Layers = v
	case models.DimHidden:
		q.Config.Hidden = v
	}
	s.ans.Probes++
	s.ans.Tried = append(s.ans.Tried, v)
	s.last = k
	res, err := predict.Run(s.ctx, q)
	if err != nil {
		return nil, fmt.Errorf("%s %d: %w", s.dim, v, err)
	}
	if res.Fits {
		s.prev, s.prevRes = s.lo, s.loRes
		s.lo, s.loRes = k, res
	} else {
		s.hi, s.hiRes = k, res
	}
	return res, nil
}

// Memory is close to affine in each dimension once activations dominate,
// so two simulated values predict where the device fills up: the slope
// from the requested peak, which grows smoothly and is known for the whole
// step even when the allocator ran out of memory, and the headroom left at
// a value that fits. The search grows at most eightfold toward that
// estimate until a value does not fit; a guess aimed by the estimate, from
// two fitting values or inside the bracket, is followed by steps of 1/64
// of it that double toward the boundary; bisection finishes. Only
// simulated values are ever returned, so a poor estimate costs probes,
// never correctness.
func (s *search) run() error {
	first, err := s.probe(1)
	if err != nil {
		return err
	}
	if !first.Fits {
		s.ans.Over = first
		return nil
	}
	for s.hi == 0 {
		if s.lo >= s.limit {
			// the limit lowered to a fitting value (bounded)
			s.ans.Max, s.ans.Fit, s.ans.Limited = s.rng.Value(s.lo), s.loRes, true
			return nil
		}
		g, aimed := s.lo*8, false
		if s.prevRes != nil {
			if est, ok := aim(s.lo, s.loRes, s.prev, s.prevRes); ok && est < float64(s.lo*8) {
				g, aimed = int64(est), true
			}
		}
		g = min(max(g, s.lo+1), s.limit)
		if err := s.guess(g, aimed); err != nil {
			if !s.bounded(err) {
				return err
			}
			continue
		}
		if s.hi == 0 && s.lo == s.limit {
			s.ans.Max, s.ans.Fit, s.ans.Limited = s.rng.Value(s.lo), s.loRes, true
			return nil
		}
		if s.hi != 0 && !aimed && s.hi-s.lo > 1 {
			// The overshoot was blind (the growth slope came from values
			// where something other than activations set the peak); the
			// value that does not fit gives the slope the boundary has.
			if est, ok := aim(s.lo, s.loRes, s.hi, s.hiRes); ok {
				if err := s.guess(min(max(int64(est), s.lo+1), s.hi-1), true); err != nil {
					return err
				}
			}
		}
	}
	for s.hi-s.lo > 1 {
		if _, err := s.probe(s.lo + (s.hi-s.lo)/2); err != nil {
			return err
		}
	}
	s.ans.Max, s.ans.Next, s.ans.Fit, s.ans.Over = s.rng.Value(s.lo), s.rng.Value(s.hi), s.loRes, s.hiRes
	return nil
}

// bounded reports whether err is a probe beyond batchfit's bounds while
// the boundary is not yet bracketed: the index probed then becomes the
// limit's successor, and the search goes on below it. Every value below a
// fitting one is within the bounds (sizes and ops grow with each
// dimension), so the bracket's bisection never meets one.
func (s *search) bounded(err error) bool {
	if !errors.Is(err, graph.ErrBound) || s.hi != 0 || s.last <= s.lo {
		return false
	}
	s.limit = s.last - 1
	var inner interface{ Unwrap() error }
	for e := err; errors.As(e, &inner); e = inner.Unwrap() {
		err = inner.Unwrap() // the bound's own message, without the probe's prefix
	}
	s.ans.Beyond = err.Error()
	if at := fmt.Sprintf("%s %d", s.dim, s.rng.Value(s.last)); !strings.HasPrefix(s.ans.Beyond, at) {
		s.ans.Beyond = at + ": " + s.ans.Beyond
	}
	return true
}

// guess probes g and, when g was aimed, steps from it toward the boundary by
// 1/64 of g, doubling, until the boundary is bracketed or the limit fits.
func (s *search) guess(g int64, aimed bool) error {
	res, err := s.probe(g)
	if err != nil || !aimed {
		return err
	}
	up := res.Fits
	for d := max(int64(1), g/64); ; d *= 2 {
		var w int64
		if up {
			if s.lo == s.limit || (s.hi != 0 && s.hi-s.lo <= 1) {
				return nil
			}
			w = min(s.lo+d, s.limit)
			if s.hi != 0 {
				w = min(w, s.hi-1)
			}
		} else {
			if s.hi-s.lo <= 1 {
				return nil
			}
			w = max(s.hi-d, s.lo+1)
		}
		res, err := s.probe(w)
		if err != nil {
			return err
		}
		if res.Fits != up {
			return nil
		}
	}
}

// aim estimates the value where the device fills up, from a value a that
// fits and another value b: the requested peak interpolated linearly
// through both, with the headroom as at a.
func aim(a int64, ar *predict.Result, b int64, br *predict.Result) (float64, bool) {
	slope := float64(br.Summary.PeakRequested-ar.Summary.PeakRequested) / float64(b-a)
	if slope <= 0 {
		return 0, false
	}
	return float64(a) + float64(ar.GPU.Capacity-ar.Margin-ar.DeviceTotal)/slope, true
}

func dimList(ds []models.Dim) string {
	s := "batch"
	for _, d := range ds {
		s += ", " + string(d)
	}
	return s
}
