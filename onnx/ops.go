package onnx

import (
	"fmt"
	"math"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// The operators. Each handler infers the output shapes symbolically and
// emits the Builder calls that build the op at a given batch size; what
// an op saves for backward is never decided here but by the graph kind it
// maps to (train/ops.go).

func opConstant(n *nctx) error {
	name := n.outName(0)
	switch {
	case n.has("value"):
		a := n.attr("value", onnxpb.AttributeProto_TENSOR)
		if a == nil {
			return n.err
		}
		ti, err := readTensor(a.GetT(), "value")
		if err != nil {
			return err
		}
		if ti.external {
			return fmt.Errorf("a Constant with external data")
		}
		v := newConst(name, constShape(ti.dims...), ti.elem, true)
		v.setData(ti)
		n.define(0, v)
	case n.has("value_float"):
		v := newConst(name, shape{}, elemFloat, true)
		v.floats, v.hasData = []float64{n.f("value_float", 0)}, true
		n.define(0, v)
	case n.has("value_floats"):
		a := n.attr("value_floats", onnxpb.AttributeProto_FLOATS)
		if a == nil {
			return n.err
		}
		v := newConst(name, constShape(int64(len(a.GetFloats()))), elemFloat, true)
		v.floats = make([]float64, len(a.GetFloats()))
		for i, f := range a.GetFloats() {
			v.floats[i] = float64(f)
		}
		v.hasData = true
		n.define(0, v)
	case n.has("value_int"):
		v := newConst(name, shape{}, elemInt64, true)
		v.ints, v.hasData = []dim{konst(n.i("value_int", 0))}, true
		n.define(0, v)
	case n.has("value_ints"):
		vs, _ := n.ints("value_ints")
		v := newConst(name, constShape(int64(len(vs))), elemInt64, true)
		v.ints = make([]dim, len(vs))
		for i, x := range vs {
			v.ints[i] = konst(x)
		}
		v.hasData = true
		n.define(0, v)
	default:
		return fmt.Errorf("a Constant without a value, value_float(s) or value_int(s) attribute")
	}
	return nil
}

func opIdentity(n *nctx) error {
	n.define(0, n.need(0))
	return nil
}

func opCast(n *nctx) error {
	x := n.need(0)
	to := int32(n.i("to", 0))
	if n.err != nil {
		return n.err
	}
	if isConstant(x) {
		n.define(0, foldUnary("Cast", x, to, n.outName(0)))
		return nil
	}
	dt, ok := onnxDType(to)
	if !ok {
		return fmt.Errorf("cast to %s", elemName(to))
	}
	if from, ok := onnxDType(x.elem); ok && from == dt {
		n.define(0, x)
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	out := n.cv.newAct(n.outName(0), x.shape.clone(), to, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(out, c.b.Cast(name, c.ids[xs], dt)) })
	n.define(0, out)
	return nil
}

func opShape(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	r := int64(len(x.shape))
	start, end := n.i("start", 0), n.i("end", r)
	clampAxis := func(a int64) int64 {
		if a < 0 {
			a += r
		}
		return min(max(a, 0), r)
	}
	start, end = clampAxis(start), clampAxis(end)
	if end < start {
		end = start
	}
	v := newConst(n.outName(0), constShape(end-start), elemInt64, false)
	v.ints = x.shape[start:end].clone()
	v.hasData = true
	n.define(0, v)
	return nil
}

func opConstantOfShape(n *nctx) error {
	ds, ok := n.constInts(0, "shape")
	if !ok {
		return n.err
	}
	elem, fill := elemFloat, 0.0
	if a := n.attr("value", onnxpb.AttributeProto_TENSOR); a != nil {
		ti, err := readTensor(a.GetT(), "value")
		if err != nil {
			return err
		}
		elem = ti.elem
		if ti.decoded && ti.numel == 1 {
			if ti.floats != nil {
				fill = ti.floats[0]
			} else if ti.ints != nil {
				fill = float64(ti.ints[0])
			}
		}
	}
	for _, d := range ds {
		if d.sign() < 0 {
			return fmt.Errorf("negative size in shape %v", ds)
		}
	}
	v := newConst(n.outName(0), shape(ds).clone(), elem, false)
	if cnt := v.numel(); cnt >= 0 && cnt <= maxConstElements {
		if isFloatElem(elem) {
			v.floats = make([]float64, cnt)
			for i := range v.floats {
				v.floats[i] = fill
			}
		} else {
			v.ints = make([]dim, cnt)
			for i := range v.ints {
				v.ints[i] = konst(int64(fill))
			}
		}
		v.hasData = true
	}
	n.define(0, v)
	return nil
}

func opRange(n *nctx) error {
	start, limit, delta := n.need(0), n.need(1), n.need(2)
	if n.err != nil {
		return n.err
	}
	if !isConstant(start) || !isConstant(limit) || !isConstant(delta) {
		return fmt.Errorf("Range of computed tensors")
	}
	d, okd := delta.scalarValue()
	s, oks := start.scalarValue()
	if !okd || !oks || d == 0 {
		return fmt.Errorf("Range needs constant start and delta")
	}
	var count dim
	if l, ok := limit.scalarValue(); ok {
		count = konst(max(int64(math.Ceil((l-s)/d)), 0))
	} else if len(limit.ints) == 1 && s == 0 && d == 1 {
		count = limit.ints[0] // arange(N) or arange(seq)
	} else {
		return fmt.Errorf("Range with a limit batchfit cannot evaluate")
	}
	v := newConst(n.outName(0), shape{count}, start.elem, false)
	if c, ok := count.value(); ok && c <= maxConstElements {
		if isFloatElem(start.elem) {
			v.floats = make([]float64, c)
			for i := range v.floats {
				v.floats[i] = s + float64(i)*d
			}
		} else {
			v.ints = make([]dim, c)
			for i := range v.ints {
				v.ints[i] = konst(int64(s) + int64(i)*int64(d))
			}
		}
		v.hasData = true
	}
	n.define(0, v)
	return nil
}

// scoped runs fn inside Builder scope parent (none when empty).
func scoped(b *graph.Builder, parent string, fn func() graph.TensorID) graph.TensorID {
	if parent == "" {
		return fn()
	}
	b.Push(parent)
	defer b.Pop()
	return fn()
}

// opDropout: the ratio comes from the node; a node exported in eval mode
// (training_mode false) still becomes a training-mode dropout, since a
// training step is what is predicted.
func opDropout(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	p := n.f("ratio", 0.5)
	if n.input(1) != nil {
		v, ok := n.scalarConst(1)
		if !ok {
			return fmt.Errorf("the ratio %q is not a constant", n.in[1].name)
		}
		p = v
	}
	if p < 0 || p >= 1 {
		return fmt.Errorf("ratio %g outside [0, 1)", p)
	}
	res := n.cv.newAct(n.outName(0), x.shape.clone(), x.elem, x.contig)
	res.strides = x.strides
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Dropout(name, c.ids[xs], p, false)) })
	n.define(0, res)
	n.ignoreFrom(1, "dropout mask")
	return nil
}
