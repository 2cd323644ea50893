package chart

import (
	"math"
	"strconv"
	"strings"
)

// scale maps an axis' values to pixels and chooses its ticks.
type scale struct {
	axis   Axis
	lo, hi float64 // domain
	p0, p1 float64 // pixels of lo and hi
	ticks  []float64
	unit   float64 // the divisor of tick labels (bytes: 1024^k)
	suffix string
}

// newScale fits a scale to the data range [lo, hi]. A value axis (y)
// starts at zero and ends at a round number above the data; an x axis
// spans the data exactly.
func newScale(a Axis, lo, hi, p0, p1 float64, value bool) scale {
	if a.Max > a.Min {
		lo, hi = a.Min, a.Max
	}
	s := scale{axis: a, p0: p0, p1: p1, unit: 1}
	if a.Log2 {
		lo = math.Max(lo, math.SmallestNonzeroFloat64)
		if hi <= lo {
			hi = lo * 2
		}
		s.lo, s.hi = lo, hi
		// powers of two, thinned to at most ten ticks
		e0, e1 := math.Ceil(math.Log2(lo)), math.Floor(math.Log2(hi))
		step := math.Max(1, math.Ceil((e1-e0+1)/10))
		for e := e0; e <= e1; e += step {
			s.ticks = append(s.ticks, math.Exp2(e))
		}
		if len(s.ticks) == 0 { // no power of two inside: the ends
			s.ticks = []float64{lo, hi}
		}
		s.pickUnit(hi)
		return s
	}
	single := hi <= lo
	if single {
		// one value: centred between its neighbours
		lo, hi = lo-1, lo+1
	}
	s.pickUnit(math.Max(math.Abs(lo), math.Abs(hi)))
	step := niceStep((hi-lo)/s.unit/5) * s.unit
	if single && s.axis.Unit == Plain {
		step = 1 // a batch size has no halves
	}
	if value {
		lo = math.Floor(lo/step) * step
		hi = math.Ceil(hi/step) * step
	}
	s.lo, s.hi = lo, hi
	first := math.Ceil(lo/step - 1e-9)
	for i := 0.0; i <= 20; i++ {
		// each tick from the first, not by adding steps: no creeping error
		t := (first + i) * step
		if t > hi+step*1e-9 {
			break
		}
		if math.Abs(t) < step*1e-9 {
			t = 0
		}
		s.ticks = append(s.ticks, t)
	}
	return s
}

// pickUnit chooses the unit of the tick labels from the largest value.
func (s *scale) pickUnit(top float64) {
	switch s.axis.Unit {
	case Bytes:
		s.unit, s.suffix = 1, " B"
		for _, u := range []struct {
			div float64
			suf string
		}{{1 << 40, " TiB"}, {1 << 30, " GiB"}, {1 << 20, " MiB"}, {1 << 10, " KiB"}} {
			if top >= u.div {
				s.unit, s.suffix = u.div, u.suf
				break
			}
		}
	case Seconds:
		s.unit, s.suffix = 1, " s"
		switch {
		case top < 1e-3:
			s.unit, s.suffix = 1e-6, " µs"
		case top < 1:
			s.unit, s.suffix = 1e-3, " ms"
		}
	}
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*mag*(1+1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// at maps a value to its pixel.
func (s *scale) at(v float64) float64 {
	var f float64
	if s.axis.Log2 {
		v = math.Max(v, s.lo)
		f = (math.Log2(v) - math.Log2(s.lo)) / (math.Log2(s.hi) - math.Log2(s.lo))
	} else {
		f = (v - s.lo) / (s.hi - s.lo)
	}
	return s.p0 + f*(s.p1-s.p0)
}

// label prints a tick's value in the scale's unit.
func (s *scale) label(v float64) string {
	x := v / s.unit
	var out string
	switch {
	case x == math.Trunc(x) && math.Abs(x) >= 1e4 && s.axis.Unit == Plain:
		out = Commas(int64(x))
	case x == math.Trunc(x):
		out = strconv.FormatInt(int64(x), 10)
	default:
		out = strings.TrimRight(strings.TrimRight(strconv.FormatFloat(x, 'f', 3, 64), "0"), ".")
	}
	return out + s.suffix
}

// Commas prints n with a comma between groups of three digits, as every
// figure batchfit shows is printed.
func Commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
