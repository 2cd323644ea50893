package onnx

import (
	"fmt"
	"math"

	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// Constant folding: the shape arithmetic of an export (Shape, Gather,
// Unsqueeze, Concat, Reshape, ...) evaluated once at load time with
// symbolic batch and sequence sizes. Integer data are symbolic dims;
// floating data are float64. A constant whose data cannot be known (it
// depends on a symbol, or is large) keeps its shape only.

const (
	elemInt64 = int32(onnxpb.TensorProto_INT64)
	elemBool  = int32(onnxpb.TensorProto_BOOL)
	elemFloat = int32(onnxpb.TensorProto_FLOAT)
)

// constDims is the concrete shape of a constant, false when symbolic.
func constDims(s shape) ([]int64, bool) {
	out := make([]int64, len(s))
	for i, d := range s {
		v, ok := d.value()
		if !ok || v < 0 {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// foldable: data known and small enough to compute with.
func foldable(vs ...*value) bool {
	for _, v := range vs {
		if v == nil || !isConstant(v) || !v.hasData {
			return false
		}
		if n := v.numel(); n < 0 || n > maxConstElements {
			return false
		}
		if int64(len(v.ints)+len(v.floats)) != v.numel() {
			return false
		}
	}
	return true
}

// strides of a row-major shape.
func strides(s []int64) []int64 {
	st := make([]int64, len(s))
	acc := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= s[i]
	}
	return st
}

// bcastMap maps each flat index of out to the flat index of in broadcast
// to out.
func bcastMap(out, in []int64) []int {
	n := int64(1)
	for _, d := range out {
		n *= d
	}
	ost, ist := strides(out), strides(in)
	m := make([]int, n)
	off := len(out) - len(in)
	for f := int64(0); f < n; f++ {
		rem, idx := f, int64(0)
		for k := range out {
			c := rem / ost[k]
			rem %= ost[k]
			if j := k - off; j >= 0 && in[j] != 1 {
				idx += c * ist[j]
			}
		}
		m[f] = int(idx)
	}
	return m
}

// withData fills a constant's data from per-element getters.
func (v *value) intAt(i int) (dim, bool) {
	if v.ints != nil {
		return v.ints[i], true
	}
	f := v.floats[i]
	if f != math.Trunc(f) || math.Abs(f) > 1<<62 {
		return dim{}, false
	}
	return konst(int64(f)), true
}

func (v *value) floatAt(i int) (float64, bool) {
	if v.floats != nil {
		return v.floats[i], true
	}
	c, ok := v.ints[i].value()
	return float64(c), ok
}

// foldBinary evaluates Add, Sub, Mul, Div, Equal on two constants.
func foldBinary(op string, a, b *value, name string) (*value, error) {
	s, ok := broadcast(a.shape, b.shape)
	if !ok {
		return nil, fmt.Errorf("shapes %v and %v do not broadcast", a.shape, b.shape)
	}
	elem := a.elem
	if op == "Equal" {
		elem = elemBool
	}
	out := newConst(name, s, elem, a.literal && b.literal)
	if !foldable(a, b) {
		return out, nil
	}
	od, ok := constDims(s)
	if cnt, small := s.constNumel(); !ok || !small || cnt > maxConstElements {
		return out, nil
	}
	ad, _ := constDims(a.shape)
	bd, _ := constDims(b.shape)
	am, bm := bcastMap(od, ad), bcastMap(od, bd)
	useFloat := a.floats != nil || b.floats != nil
	if useFloat && op != "Equal" {
		out.floats = make([]float64, len(am))
		for i := range am {
			x, ok1 := a.floatAt(am[i])
			y, ok2 := b.floatAt(bm[i])
			if !ok1 || !ok2 {
				return out, nil
			}
			switch op {
			case "Add":
				out.floats[i] = x + y
			case "Sub":
				out.floats[i] = x - y
			case "Mul":
				out.floats[i] = x * y
			case "Div":
				out.floats[i] = x / y
			}
		}
		out.hasData = true
		return out, nil
	}
	out.ints = make([]dim, len(am))
	for i := range am {
		if useFloat { // Equal on floats
			x, ok1 := a.floatAt(am[i])
			y, ok2 := b.floatAt(bm[i])
			if !ok1 || !ok2 {
				out.ints = nil
				return out, nil
			}
			out.ints[i] = konst(b2i(x == y))
			continue
		}
		x, y := a.ints[am[i]], b.ints[bm[i]]
		var r dim
		var ok bool
		switch op {
		case "Add":
			r, ok = addDim(x, y)
		case "Sub":
			r, ok = subDim(x, y)
		case "Mul":
			r, ok = mulDim(x, y)
		case "Div":
			r, ok = floorDivDim(x, y)
		case "Equal":
			var eq int
			eq, ok = equalDim(x, y)
			r = konst(int64(eq))
		}
		if !ok {
			return nil, fmt.Errorf("%s of %v and %v cannot be computed for every batch size", op, x, y)
		}
		out.ints[i] = r
	}
	out.hasData = true
	return out, nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// equalDim compares two symbolic sizes; the symbols are positive integers,
// so N = -1 is false for every N while N = 4 depends on N.
func equalDim(x, y dim) (int, bool) {
	if x == y {
		return 1, true
	}
	if x.n == y.n && x.s == y.s {
		return 0, true
	}
	if x.isConst() && x.c <= 0 && !y.isConst() && y.c > 0 || y.isConst() && y.c <= 0 && !x.isConst() && x.c > 0 {
		return 0, true
	}
	return 0, false
}

// foldUnary evaluates Neg, Sqrt, Reciprocal and Cast on a constant.
func foldUnary(op string, x *value, elem int32, name string) *value {
	out := newConst(name, x.shape.clone(), elem, x.literal)
	if !foldable(x) {
		return out
	}
	n := int(x.numel())
	if isFloatElem(elem) {
		out.floats = make([]float64, n)
		for i := range out.floats {
			f, ok := x.floatAt(i)
			if !ok {
				out.floats = nil
				return out
			}
			switch op {
			case "Neg":
				f = -f
			case "Sqrt":
				f = math.Sqrt(f)
			case "Reciprocal":
				f = 1 / f
			}
			out.floats[i] = f
		}
		out.hasData = true
		return out
	}
	out.ints = make([]dim, n)
	for i := range out.ints {
		d, ok := x.intAt(i)
		if !ok {
			out.ints = nil
			return out
		}
		switch op {
		case "Neg":
			d = negDim(d)
		case "Sqrt", "Reciprocal":
			out.ints = nil
			return out
		}
		if elem == elemBool {
			d = konst(b2i(d != konst(0)))
		}
		out.ints[i] = d
	}
	out.hasData = true
	return out
}

// take builds a constant of shape s whose element i is x's element idx[i].
func take(x *value, s shape, idx []int, name string) *value {
	out := newConst(name, s, x.elem, x.literal)
	if idx == nil || !foldable(x) {
		return out
	}
	if x.ints != nil {
		out.ints = make([]dim, len(idx))
		for i, j := range idx {
			out.ints[i] = x.ints[j]
		}
	} else {
		out.floats = make([]float64, len(idx))
		for i, j := range idx {
			out.floats[i] = x.floats[j]
		}
	}
	out.hasData = true
	return out
}

// reshaped is x's data under a new shape.
func reshaped(x *value, s shape, name string) *value {
	out := newConst(name, s, x.elem, x.literal)
	if foldable(x) {
		out.ints, out.floats, out.hasData = x.ints, x.floats, true
	}
	return out
}

// gatherMap: Gather along axis of data dims d with integer indices.
func gatherMap(d []int64, axis int, indices []int64) ([]int, error) {
	st := strides(d)
	outer := int64(1)
	for _, v := range d[:axis] {
		outer *= v
	}
	inner := st[axis]
	var m []int
	for o := int64(0); o < outer; o++ {
		for _, ix := range indices {
			if ix < 0 {
				ix += d[axis]
			}
			if ix < 0 || ix >= d[axis] {
				return nil, fmt.Errorf("index %d out of range for size %d", ix, d[axis])
			}
			base := o*d[axis]*inner + ix*inner
			for k := int64(0); k < inner; k++ {
				m = append(m, int(base+k))
			}
		}
	}
	return m, nil
}

// sliceMap: the flat indices of a strided N-D slice.
func sliceMap(d []int64, starts, steps, counts []int64) []int {
	st := strides(d)
	total := int64(1)
	for _, c := range counts {
		total *= c
	}
	m := make([]int, 0, total)
	cst := strides(counts)
	for f := int64(0); f < total; f++ {
		rem, idx := f, int64(0)
		for k := range counts {
			c := rem / cst[k]
			rem %= cst[k]
			idx += (starts[k] + c*steps[k]) * st[k]
		}
		m = append(m, int(idx))
	}
	return m
}
