package onnx

// The element-wise ops: the unary activations and functions, Pow, the
// broadcasting binary arithmetic and Where.

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

func opUnary(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	if isConstant(x) {
		switch n.op {
		case "Neg", "Sqrt", "Reciprocal":
			n.define(0, foldUnary(n.op, x, x.elem, n.outName(0)))
			return nil
		}
		return fmt.Errorf("%s of a constant", n.op)
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	var k graph.Kind
	switch n.op {
	case "Relu":
		k = graph.ReLU
	case "Sigmoid":
		k = graph.Sigmoid
	case "Tanh":
		k = graph.Tanh
	case "HardSigmoid":
		k = graph.Hardsigmoid
	case "HardSwish":
		k = graph.Hardswish
	case "Clip":
		// Clip(0, 6) is ReLU6, hardtanh: HardtanhBackward0 saves self.
		k = graph.Hardtanh
	case "Gelu":
		k = graph.GELU
		if n.s("approximate", "none") == "tanh" {
			k = graph.GELUTanh
		}
	case "Sqrt":
		k = graph.Sqrt
	case "Reciprocal":
		k = graph.Reciprocal
	case "Erf":
		// An Erf outside the exact-GELU pattern (which fuse.go folds).
		k = graph.Erf
	case "Neg":
		// -x: a new tensor that saves nothing, x * -1.
		return n.cv.scale(n, xs, x, n.outName(0))
	default:
		return fmt.Errorf("%s: not an elementwise operator batchfit maps", n.op)
	}
	res := n.cv.newAct(n.outName(0), x.shape.clone(), x.elem, x.contig)
	res.strides = x.strides // elementwise outputs keep a dense input's layout
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Act(k, name, c.ids[xs], false)) })
	n.define(0, res)
	return nil
}

// scale emits x * number (or x + number, x / number): a new tensor that
// saves nothing, Builder.Scale.
func (cv *converter) scale(n *nctx, xs int, x *value, outName string) error {
	res := cv.newAct(outName, x.shape.clone(), x.elem, true)
	name := n.opName()
	cv.emit(func(c *bctx) { c.set(res, c.b.Scale(name, c.ids[xs])) })
	cv.vals[outName] = res
	return nil
}

// opPow: x ** k with a constant exponent saves x (PowBackward0); recorded
// as x * x, which saves x once, as the zoo records torch.pow.
func opPow(n *nctx) error {
	x, e := n.need(0), n.need(1)
	if n.err != nil {
		return n.err
	}
	if isConstant(x) && isConstant(e) {
		return fmt.Errorf("Pow of constants")
	}
	if !isConstant(e) || e.numel() != 1 {
		return fmt.Errorf("Pow with a tensor exponent is not supported")
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	if k, ok := e.scalarValue(); ok && k == 1 {
		n.define(0, x)
		return nil
	}
	res := n.cv.newAct(n.outName(0), x.shape.clone(), x.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Mul(name, c.ids[xs], c.ids[xs])) })
	n.define(0, res)
	return nil
}

// opBinary: Add, Sub, Mul, Div (and Equal on constants).
func opBinary(n *nctx) error {
	a, b := n.need(0), n.need(1)
	if n.err != nil {
		return n.err
	}
	if isConstant(a) && isConstant(b) {
		v, err := foldBinary(n.op, a, b, n.outName(0))
		if err != nil {
			return err
		}
		n.define(0, v)
		return nil
	}
	if n.op == "Equal" {
		return fmt.Errorf("Equal of computed tensors is not supported")
	}
	if n.op == "Div" || n.op == "Mul" {
		if ok, err := n.cv.tryGELU(n); ok || err != nil {
			return err
		}
	}
	s, ok := broadcast(a.shape, b.shape)
	if !ok {
		return fmt.Errorf("shapes %v and %v do not broadcast", a.shape, b.shape)
	}
	// A tensor and a number: x + c, x - c, c - x, x * c, x / c.
	for j, x := range []*value{a, b} {
		other := []*value{b, a}[j]
		if !other.isScalar() || len(other.shape) > len(x.shape) || isConstant(x) {
			continue
		}
		if n.op == "Div" && j == 1 {
			return fmt.Errorf("division of a constant by a tensor is not supported")
		}
		xs, err := n.cv.tensor(x)
		if err != nil {
			return err
		}
		return n.cv.scale(n, xs, x, n.outName(0))
	}
	as, err := n.cv.tensor(a)
	if err != nil {
		return err
	}
	bs, err := n.cv.tensor(b)
	if err != nil {
		return err
	}
	elem := a.elem
	if !a.isFloat() && b.isFloat() {
		elem = b.elem
	}
	res := n.cv.newAct(n.outName(0), s, elem, true)
	name := n.opName()
	switch n.op {
	case "Add", "Sub":
		// sub saves nothing either: a - b is recorded as an add.
		n.cv.emit(func(c *bctx) { c.set(res, c.b.Add(name, c.ids[as], c.ids[bs])) })
	default:
		// div saves what mul saves (each operand for the other's gradient).
		n.cv.emit(func(c *bctx) { c.set(res, c.b.Mul(name, c.ids[as], c.ids[bs])) })
	}
	n.define(0, res)
	return nil
}

// opWhere folds Where on constants (the shape arithmetic of expand).
func opWhere(n *nctx) error {
	cond, x, y := n.need(0), n.need(1), n.need(2)
	if n.err != nil {
		return n.err
	}
	if !isConstant(cond) || !isConstant(x) || !isConstant(y) {
		return fmt.Errorf("Where on computed tensors (masking) is not supported")
	}
	s1, ok1 := broadcast(cond.shape, x.shape)
	s, ok2 := broadcast(s1, y.shape)
	if !ok1 || !ok2 {
		return fmt.Errorf("shapes %v, %v, %v do not broadcast", cond.shape, x.shape, y.shape)
	}
	out := newConst(n.outName(0), s, x.elem, false)
	od, ok := constDims(s)
	if cnt, small := s.constNumel(); ok && small && cnt <= maxConstElements && foldable(cond, x, y) && (x.ints != nil) == (y.ints != nil) && cond.ints != nil {
		cd, _ := constDims(cond.shape)
		xd, _ := constDims(x.shape)
		yd, _ := constDims(y.shape)
		cm, xm, ym := bcastMap(od, cd), bcastMap(od, xd), bcastMap(od, yd)
		if x.ints != nil {
			out.ints = make([]dim, len(cm))
		} else {
			out.floats = make([]float64, len(cm))
		}
		for i := range cm {
			c, isC := cond.ints[cm[i]].value()
			if !isC {
				return fmt.Errorf("Where with a condition that depends on the batch size")
			}
			src, j := y, ym[i]
			if c != 0 {
				src, j = x, xm[i]
			}
			if out.ints != nil {
				out.ints[i] = src.ints[j]
			} else {
				out.floats[i] = src.floats[j]
			}
		}
		out.hasData = true
	}
	n.define(0, out)
	return nil
}
