package onnx

import (
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// dim is a symbolic dimension c·N^n·S^s: a constant times powers of the
// batch size N and the sequence length S. Monomials are closed under the
// products and exact quotients that shape arithmetic performs (flatten,
// reshape with -1, head splitting), which is all an export's shapes need.
// A sum of different monomials (N+1) cannot be represented and is reported
// as an error by the operation that would produce it.
type dim struct {
	c    int64
	n, s int8
}

func konst(v int64) dim { return dim{c: v} }

var (
	symN = dim{c: 1, n: 1}
	symS = dim{c: 1, s: 1}
)

func (d dim) isConst() bool { return d.n == 0 && d.s == 0 }

// value returns d's value when it is a constant.
func (d dim) value() (int64, bool) { return d.c, d.isConst() }

func (d dim) String() string {
	if d.isConst() {
		return fmt.Sprint(d.c)
	}
	var parts []string
	if d.c != 1 {
		parts = append(parts, fmt.Sprint(d.c))
	}
	for _, t := range []struct {
		name string
		p    int8
	}{{"batch", d.n}, {"seq", d.s}} {
		switch {
		case t.p == 1:
			parts = append(parts, t.name)
		case t.p != 0:
			parts = append(parts, fmt.Sprintf("%s^%d", t.name, t.p))
		}
	}
	return strings.Join(parts, "·")
}

func mulDim(a, b dim) (dim, bool) {
	hi, lo := bits.Mul64(uabs(a.c), uabs(b.c))
	if hi != 0 || lo > math.MaxInt64 {
		return dim{}, false
	}
	c := int64(lo)
	if (a.c < 0) != (b.c < 0) {
		c = -c
	}
	if c == 0 {
		return konst(0), true
	}
	n, s := int(a.n)+int(b.n), int(a.s)+int(b.s)
	if n > 8 || s > 8 || n < -8 || s < -8 {
		return dim{}, false
	}
	return dim{c: c, n: int8(n), s: int8(s)}, true
}

// divDim is the exact quotient a/b; ok is false when it is not a monomial
// with an integer coefficient.
func divDim(a, b dim) (dim, bool) {
	if b.c == 0 {
		return dim{}, false
	}
	if a.c == 0 {
		return konst(0), true
	}
	if a.c%b.c != 0 || a.n < b.n || a.s < b.s {
		return dim{}, false
	}
	return dim{c: a.c / b.c, n: a.n - b.n, s: a.s - b.s}, true
}

// floorDivDim is integer division (ONNX Div on int64 shape values), exact
// for constants and for symbolic dividends divisible by the divisor.
func floorDivDim(a, b dim) (dim, bool) {
	if a.isConst() && b.isConst() {
		if b.c == 0 {
			return dim{}, false
		}
		q := a.c / b.c
		if (a.c%b.c != 0) && ((a.c < 0) != (b.c < 0)) {
			q--
		}
		return konst(q), true
	}
	return divDim(a, b)
}

func addDim(a, b dim) (dim, bool) {
	switch {
	case a.c == 0:
		return b, true
	case b.c == 0:
		return a, true
	case a.n != b.n || a.s != b.s:
		return dim{}, false
	}
	c, ok := addInt(a.c, b.c)
	if !ok {
		return dim{}, false
	}
	if c == 0 {
		return konst(0), true
	}
	return dim{c: c, n: a.n, s: a.s}, true
}

func negDim(a dim) dim { return dim{c: -a.c, n: a.n, s: a.s} }

func subDim(a, b dim) (dim, bool) { return addDim(a, negDim(b)) }

// eval is d at batch n and sequence length s.
func (d dim) eval(n, s int64) (int64, bool) {
	v := d.c
	for i := int8(0); i < d.n; i++ {
		var ok bool
		if v, ok = mulInt(v, n); !ok {
			return 0, false
		}
	}
	for i := int8(0); i < d.s; i++ {
		var ok bool
		if v, ok = mulInt(v, s); !ok {
			return 0, false
		}
	}
	if d.n < 0 || d.s < 0 {
		return 0, false
	}
	return v, true
}

// sign reports whether d is positive (1), negative (-1) or zero (0): the
// symbols are positive, so the sign is the coefficient's.
func (d dim) sign() int {
	switch {
	case d.c > 0:
		return 1
	case d.c < 0:
		return -1
	}
	return 0
}

func uabs(v int64) uint64 {
	if v < 0 {
		return uint64(-v)
	}
	return uint64(v)
}

func mulInt(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uabs(a), uabs(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	if (a < 0) != (b < 0) {
		return -int64(lo), true
	}
	return int64(lo), true
}

func addInt(a, b int64) (int64, bool) {
	c := a + b
	if (c > a) != (b > 0) {
		return 0, false
	}
	return c, true
}

// shape is a symbolic tensor shape.
type shape []dim

func (s shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func (s shape) clone() shape { return append(shape(nil), s...) }

func constShape(vs ...int64) shape {
	s := make(shape, len(vs))
	for i, v := range vs {
		s[i] = konst(v)
	}
	return s
}

// numel is the product of the dims.
func (s shape) numel() (dim, bool) {
	p := konst(1)
	for _, d := range s {
		var ok bool
		if p, ok = mulDim(p, d); !ok {
			return dim{}, false
		}
	}
	return p, true
}

// constNumel is the number of elements of a shape without symbols.
func (s shape) constNumel() (int64, bool) {
	p := int64(1)
	for _, d := range s {
		v, ok := d.value()
		if !ok || v < 0 {
			return 0, false
		}
		if p, ok = mulInt(p, v); !ok {
			return 0, false
		}
	}
	return p, true
}

func (s shape) isConst() bool {
	for _, d := range s {
		if !d.isConst() {
			return false
		}
	}
	return true
}

func (s shape) equal(t shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// eval is s at batch n and sequence length s.
func (s shape) eval(n, sq int64) ([]int64, bool) {
	out := make([]int64, len(s))
	total := int64(1)
	for i, d := range s {
		v, ok := d.eval(n, sq)
		if !ok || v < 0 {
			return nil, false
		}
		if total, ok = mulInt(total, v); !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// broadcast is numpy-style broadcasting of two symbolic shapes.
func broadcast(a, b shape) (shape, bool) {
	n := max(len(a), len(b))
	out := make(shape, n)
	one := konst(1)
	for i := 0; i < n; i++ {
		x, y := one, one
		if j := len(a) - n + i; j >= 0 {
			x = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			y = b[j]
		}
		switch {
		case x == y || y == one:
			out[i] = x
		case x == one:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a int64, rank int) (int, bool) {
	if a < 0 {
		a += int64(rank)
	}
	if a < 0 || a >= int64(rank) {
		return 0, false
	}
	return int(a), true
}

// contiguousStrides are the row-major strides of s.
func contiguousStrides(s shape) shape {
	st := make(shape, len(s))
	acc := konst(1)
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = acc
		if p, ok := mulDim(acc, s[i]); ok {
			acc = p
		}
	}
	return st
}

// viewStrides is PyTorch's computeStride: the strides of a view of a
// tensor (shape old, strides st) with shape s, or false when no view
// exists and reshape must copy (or the answer depends on the batch size).
func viewStrides(old, st, s shape) (shape, bool) {
	oldN, ok1 := old.numel()
	newN, ok2 := s.numel()
	if !ok1 || !ok2 || oldN != newN {
		return nil, false
	}
	out := make(shape, len(s))
	if oldN == konst(0) || len(old) == 0 {
		return contiguousStrides(s), true
	}
	viewD := len(s) - 1
	chunkBase := st[len(st)-1]
	tensorN, viewN := konst(1), konst(1)
	for d := len(old) - 1; d >= 0; d-- {
		var ok bool
		if tensorN, ok = mulDim(tensorN, old[d]); !ok {
			return nil, false
		}
		boundary := d == 0
		if !boundary && old[d-1] != konst(1) {
			want, ok := mulDim(tensorN, chunkBase)
			if !ok {
				return nil, false
			}
			boundary = st[d-1] != want
		}
		if !boundary {
			continue
		}
		// PyTorch consumes view dims while view_numel < tensor_numel;
		// sizes are positive, so the products only grow and "until
		// equal" is the same loop, decidable for symbolic sizes.
		for viewD >= 0 && (viewN != tensorN || s[viewD] == konst(1)) {
			if out[viewD], ok = mulDim(viewN, chunkBase); !ok {
				return nil, false
			}
			if viewN, ok = mulDim(viewN, s[viewD]); !ok {
				return nil, false
			}
			viewD--
		}
		if viewN != tensorN {
			return nil, false
		}
		if d > 0 {
			chunkBase = st[d-1]
			tensorN, viewN = konst(1), konst(1)
		}
	}
	if viewD != -1 {
		return nil, false
	}
	return out, true
}
