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

// convPads reads pads (or auto_pad) for a 2-D window op and requires them
// symmetric, as PyTorch's padding is.
func (n *nctx) convPads(in [2]int64, kernel, stride, dil [2]int64) [2]int64 {
	var pads [2]int64
	switch ap := n.s("auto_pad", "NOTSET"); ap {
	case "NOTSET", "":
		if p, ok := n.ints("pads"); ok {
			if len(p) != 4 {
				n.fail("pads %v: only 2-D padding is supported", p)
				return pads
			}
			if p[0] != p[2] || p[1] != p[3] {
				n.fail("asymmetric pads %v are not supported (PyTorch pads symmetrically)", p)
				return pads
			}
			pads = [2]int64{p[0], p[1]}
		}
	case "VALID":
	case "SAME_UPPER", "SAME_LOWER":
		for i := 0; i < 2; i++ {
			if stride[i] <= 0 {
				n.fail("stride %v", stride)
				return pads
			}
			outSize := (in[i] + stride[i] - 1) / stride[i]
			total := max((outSize-1)*stride[i]+dil[i]*(kernel[i]-1)+1-in[i], 0)
			if total%2 != 0 {
				n.fail("auto_pad %s needs asymmetric padding here, which is not supported", ap)
				return pads
			}
			pads[i] = total / 2
		}
	default:
		n.fail("auto_pad %q", ap)
	}
	for _, p := range pads {
		if p < 0 {
			n.fail("negative padding %v", pads)
		}
	}
	return pads
}

// spatial reads the constant H and W of a 4-D input.
func (n *nctx) spatial(x *value) [2]int64 {
	if len(x.shape) != 4 {
		n.fail("only 2-D (N, C, H, W) inputs are supported, got shape %v", x.shape)
		return [2]int64{}
	}
	h, ok1 := x.shape[2].value()
	w, ok2 := x.shape[3].value()
	if !ok1 || !ok2 {
		n.fail("the spatial size %v depends on the batch or sequence size", x.shape[2:])
	}
	return [2]int64{h, w}
}

func opConv(n *nctx) error {
	xs, x := n.act(0)
	w := n.need(1)
	bias := n.input(2)
	if n.err != nil {
		return n.err
	}
	if w.kind != kInit || w.transposeOf != nil || len(w.shape) != 4 {
		return fmt.Errorf("the weight %q must be a 4-D initializer, got shape %v", w.name, w.shape)
	}
	hw := n.spatial(x)
	wd, _ := constDims(w.shape)
	group := n.i("group", 1)
	kernel := n.pair("kernel_shape", 0)
	if kernel == [2]int64{} {
		kernel = [2]int64{wd[2], wd[3]}
	}
	stride, dil := n.pair("strides", 1), n.pair("dilations", 1)
	if n.err != nil {
		return n.err
	}
	pads := n.convPads(hw, kernel, stride, dil)
	if n.err != nil {
		return n.err
	}
	if kernel != [2]int64{wd[2], wd[3]} {
		return fmt.Errorf("kernel_shape %v does not match the weight %v", kernel, wd)
	}
	inC, ok := x.shape[1].value()
	if !ok || group <= 0 || inC != wd[1]*group {
		return fmt.Errorf("input channels %v do not match the weight %v with %d groups", x.shape[1], wd, group)
	}
	var out [2]int64
	for i := 0; i < 2; i++ {
		v, ok := convOut(hw[i], kernel[i], stride[i], pads[i], dil[i])
		if !ok {
			return fmt.Errorf("kernel %v larger than the padded input %v", kernel, hw)
		}
		out[i] = v
	}
	if bias != nil && (bias.kind != kInit || !bias.shape.equal(constShape(wd[0]))) {
		return fmt.Errorf("the bias %q must be an initializer of shape [%d]", bias.name, wd[0])
	}
	n.cv.ownParam(w)
	if bias != nil {
		n.cv.ownParam(bias)
	}
	parent, leaf := n.module(w.name)
	o := graph.Conv2dOpts{Kernel: kernel, Stride: stride, Padding: pads, Dilation: dil, Groups: group, Bias: bias != nil}
	res := n.cv.newAct(n.outName(0), shape{x.shape[0], konst(wd[0]), konst(out[0]), konst(out[1])}, x.elem, true)
	outC := wd[0]
	n.cv.emit(func(c *bctx) {
		c.set(res, scoped(c.b, parent, func() graph.TensorID { return c.b.Conv2d(leaf, c.ids[xs], outC, o) }))
	})
	n.define(0, res)
	return nil
}

func convOut(in, k, s, p, d int64) (int64, bool) {
	eff := d*(k-1) + 1
	if k <= 0 || d <= 0 || s <= 0 || in+2*p < eff {
		return 0, false
	}
	return (in+2*p-eff)/s + 1, true
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

// opBatchNorm: BatchNormalization in either export mode becomes the
// training-mode batch norm (a training step is what is predicted).
func opBatchNorm(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	if len(x.shape) < 2 {
		return fmt.Errorf("input shape %v: want (N, C, ...)", x.shape)
	}
	for i := 1; i <= 4; i++ {
		p := n.need(i)
		if n.err != nil {
			return n.err
		}
		if p.kind != kInit || !p.shape.equal(shape{x.shape[1]}) {
			return fmt.Errorf("input %d (%q) must be an initializer of shape [%v], got %v", i, p.name, x.shape[1], p.shape)
		}
		n.cv.ownParam(p)
	}
	// Exported in eval mode: training_mode 0 (opset 14 on), or no
	// statistics outputs (before).
	if (n.cv.opset >= 14 && n.i("training_mode", 0) == 0) || (n.cv.opset < 14 && len(n.p.GetOutput()) == 1) {
		n.cv.evalBN = true
	}
	parent, leaf := n.module(n.in[1].name)
	res := n.cv.newAct(n.outName(0), x.shape.clone(), x.elem, true)
	n.cv.emit(func(c *bctx) {
		c.set(res, scoped(c.b, parent, func() graph.TensorID { return c.b.BatchNorm2d(leaf, c.ids[xs]) }))
	})
	n.define(0, res)
	n.ignoreFrom(1, "batch norm statistics output")
	return nil
}

// opLayerNorm: LayerNormalization (opset 17).
func opLayerNorm(n *nctx) error {
	xs, x := n.act(0)
	w := n.need(1)
	bias := n.input(2)
	if n.err != nil {
		return n.err
	}
	axis, ok := normAxis(n.i("axis", -1), len(x.shape))
	if !ok {
		return fmt.Errorf("axis %d out of range for shape %v", n.i("axis", -1), x.shape)
	}
	if err := n.cv.layerNorm(n, xs, x, axis, w, bias, n.outName(0)); err != nil {
		return err
	}
	n.ignoreFrom(1, "layer norm statistics output")
	return nil
}

// layerNorm emits nn.LayerNorm over x's dims from axis on, with weight w
// and optional bias.
func (cv *converter) layerNorm(n *nctx, xs int, x *value, axis int, w, bias *value, outName string) error {
	norm := x.shape[axis:]
	if !norm.isConst() {
		return fmt.Errorf("normalized shape %v depends on the batch or sequence size", norm)
	}
	if w.kind != kInit || w.transposeOf != nil || !w.shape.equal(norm) {
		return fmt.Errorf("the scale %q must be an initializer of shape %v, got %v", w.name, norm, w.shape)
	}
	if bias != nil && (bias.kind != kInit || !bias.shape.equal(norm)) {
		return fmt.Errorf("the bias %q must be an initializer of shape %v, got %v", bias.name, norm, bias.shape)
	}
	cv.ownParam(w)
	if bias != nil {
		cv.ownParam(bias)
	}
	parent, leaf := n.module(w.name)
	dims := len(x.shape) - axis
	hasBias := bias != nil
	res := cv.newAct(outName, x.shape.clone(), x.elem, true)
	cv.emit(func(c *bctx) {
		c.set(res, scoped(c.b, parent, func() graph.TensorID { return c.b.LayerNorm(leaf, c.ids[xs], dims, hasBias) }))
	})
	cv.vals[outName] = res
	return nil
}

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

func opPool(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	hw := n.spatial(x)
	kernel := n.pair("kernel_shape", 0)
	stride, dil := n.pair("strides", 1), n.pair("dilations", 1)
	ceil := n.i("ceil_mode", 0) != 0
	if n.err != nil {
		return n.err
	}
	pads := n.convPads(hw, kernel, stride, dil)
	if n.err != nil {
		return n.err
	}
	var out [2]int64
	for i := 0; i < 2; i++ {
		if kernel[i] <= 0 || stride[i] <= 0 || dil[i] <= 0 {
			return fmt.Errorf("kernel %v, strides %v, dilations %v", kernel, stride, dil)
		}
		eff := dil[i]*(kernel[i]-1) + 1
		num := hw[i] + 2*pads[i] - eff
		if num < 0 {
			return fmt.Errorf("kernel %v larger than the input %v", kernel, hw)
		}
		o := num/stride[i] + 1
		if ceil && num%stride[i] != 0 {
			o++
			if (o-1)*stride[i] >= hw[i]+pads[i] {
				o--
			}
		}
		out[i] = o
	}
	k := graph.MaxPool2d
	if n.op == "AveragePool" {
		k = graph.AvgPool2d
	}
	o := graph.Pool2dOpts{Kernel: kernel, Stride: stride, Padding: pads, Dilation: dil, CeilMode: ceil}
	res := n.cv.newAct(n.outName(0), shape{x.shape[0], x.shape[1], konst(out[0]), konst(out[1])}, x.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) {
		if k == graph.MaxPool2d {
			c.set(res, c.b.MaxPool2d(name, c.ids[xs], o))
		} else {
			c.set(res, c.b.AvgPool2d(name, c.ids[xs], o))
		}
	})
	n.define(0, res)
	n.ignoreFrom(1, "max pool indices")
	return nil
}

// opGlobalAveragePool is nn.AdaptiveAvgPool2d(1) as PyTorch computes it: a
// mean over the spatial dims (which saves nothing) viewed as keepdim, the
// zoo's tvGlobalAvgPool.
func opGlobalAveragePool(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	if len(x.shape) < 3 {
		return fmt.Errorf("input shape %v: want (N, C, spatial...)", x.shape)
	}
	var axes []int
	keep := x.shape.clone()
	for i := 2; i < len(x.shape); i++ {
		axes = append([]int{i - len(x.shape)}, axes...)
		keep[i] = konst(1)
	}
	return n.cv.mean(n, xs, x, axes, keep, n.outName(0))
}

// mean emits x.mean(axes) followed, when keep (the keepdim shape) differs
// from the reduced shape, by a view to keep.
func (cv *converter) mean(n *nctx, xs int, x *value, axes []int, keep shape, outName string) error {
	res := cv.newAct(outName, keep, x.elem, true)
	name := n.opName()
	cv.emit(func(c *bctx) {
		m := c.b.Mean(name, c.ids[xs], axes...)
		if len(c.b.Shape(m)) != len(keep) {
			m = c.b.Reshape(name+"_keepdim", m, c.dims(keep, name)...)
		}
		c.set(res, m)
	})
	cv.vals[outName] = res
	return nil
}

func opReduceMean(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	if isConstant(x) {
		return fmt.Errorf("ReduceMean of a constant")
	}
	if ok, err := n.cv.tryLayerNorm(n); ok || err != nil {
		return err
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	axes, _ := n.axes(1)
	if n.err != nil {
		return n.err
	}
	keepdims := n.i("keepdims", 1) != 0
	if len(axes) == 0 {
		if n.i("noop_with_empty_axes", 0) != 0 {
			n.define(0, x)
			return nil
		}
		for i := range x.shape {
			axes = append(axes, int64(i))
		}
	}
	drop := map[int]bool{}
	var ax []int
	for _, a := range axes {
		i, ok := normAxis(a, len(x.shape))
		if !ok || drop[i] {
			return fmt.Errorf("axes %v for shape %v", axes, x.shape)
		}
		drop[i] = true
		ax = append(ax, i)
	}
	var out shape
	for i, d := range x.shape {
		switch {
		case !drop[i]:
			out = append(out, d)
		case keepdims:
			out = append(out, konst(1))
		}
	}
	return n.cv.mean(n, xs, x, ax, out, n.outName(0))
}

// reshape emits x.reshape(s) as PyTorch runs it: a view when the strides
// allow one (PyTorch's computeStride), a copy otherwise. st are the view's
// strides when the caller knows them (Unsqueeze, Squeeze: always views).
// Builder.Reshape is a view of a tensor it knows contiguous and a copy of
// any other, so a view of a non-contiguous tensor is built as a view op of
// the new shape (Builder.Expand, which only records the shape).
func (cv *converter) reshape(n *nctx, xs int, x *value, s shape, st shape, outName string) {
	isView := st != nil
	if !isView {
		st, isView = viewStrides(x.shape, x.stridesOf(), s)
	}
	name := n.opName()
	if isView && !x.contig {
		res := cv.newAct(outName, s, x.elem, false)
		res.setStrides(st)
		cv.emit(func(c *bctx) { c.set(res, c.b.Expand(name, c.ids[xs], c.dims(s, name)...)) })
		cv.vals[outName] = res
		return
	}
	res := cv.newAct(outName, s, x.elem, true)
	if isView && x.contig {
		res.setStrides(st)
	}
	cv.emit(func(c *bctx) { c.set(res, c.b.Reshape(name, c.ids[xs], c.dims(s, name)...)) })
	cv.vals[outName] = res
}

func opFlatten(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	r := len(x.shape)
	axis := n.i("axis", 1)
	if axis < 0 {
		axis += int64(r)
	}
	if axis < 0 || axis > int64(r) {
		return fmt.Errorf("axis %d for shape %v", n.i("axis", 1), x.shape)
	}
	a, ok1 := x.shape[:axis].numel()
	b, ok2 := x.shape[axis:].numel()
	if !ok1 || !ok2 {
		return fmt.Errorf("cannot flatten %v", x.shape)
	}
	s := shape{a, b}
	if isConstant(x) {
		n.define(0, reshaped(x, s, n.outName(0)))
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	if r == 2 && axis == 1 {
		n.define(0, x) // torch.flatten(x, 1) of a 2-D tensor is x itself
		return nil
	}
	n.cv.reshape(n, xs, x, s, nil, n.outName(0))
	return nil
}

// reshapeTarget applies ONNX Reshape's rules (0 copies the input size
// unless allowzero, -1 is inferred) to a constant target shape.
func (cv *converter) reshapeTarget(x *value, target []dim, literal, allowzero bool) (shape, error) {
	out := make(shape, len(target))
	infer := -1
	known := konst(1)
	for i, d := range target {
		if lit, ok := d.value(); ok {
			switch {
			case lit == 0 && !allowzero:
				if i >= len(x.shape) {
					return nil, fmt.Errorf("target %v copies dimension %d of %v", target, i, x.shape)
				}
				d = x.shape[i]
			case lit == -1 && infer < 0:
				infer = i
				continue
			case lit < 0:
				return nil, fmt.Errorf("target shape %v", target)
			case i == 0 && literal && cv.m.exportBatch > 0 && lit == cv.m.exportBatch && len(x.shape) > 0 && x.shape[0] == symN:
				// A fixed-batch export spells the batch as a number.
				d = symN
			}
		} else if d.sign() <= 0 {
			return nil, fmt.Errorf("target shape %v", target)
		}
		out[i] = d
		var ok bool
		if known, ok = mulDim(known, d); !ok {
			return nil, fmt.Errorf("target shape %v overflows", target)
		}
	}
	total, ok := x.shape.numel()
	if !ok {
		return nil, fmt.Errorf("shape %v overflows", x.shape)
	}
	if infer >= 0 {
		q, ok := divDim(total, known)
		if !ok {
			return nil, fmt.Errorf("cannot reshape %v to %v: %v elements are not a multiple of %v", x.shape, target, total, known)
		}
		out[infer] = q
	} else if known != total {
		return nil, fmt.Errorf("cannot reshape %v (%v elements) to %v", x.shape, total, out)
	}
	return out, nil
}

func opReshape(n *nctx) error {
	x := n.need(0)
	target, ok := n.constInts(1, "target shape")
	if !ok {
		return n.err
	}
	s, err := n.cv.reshapeTarget(x, target, n.in[1].literal, n.i("allowzero", 0) != 0)
	if err != nil {
		return err
	}
	if isConstant(x) {
		n.define(0, reshaped(x, s, n.outName(0)))
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	n.cv.reshape(n, xs, x, s, nil, n.outName(0))
	return nil
}

func opTranspose(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	r := len(x.shape)
	perm, ok := n.ints("perm")
	if !ok {
		for i := r - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	if len(perm) != r {
		return fmt.Errorf("perm %v for shape %v", perm, x.shape)
	}
	s := make(shape, r)
	p := make([]int, r)
	seen := make([]bool, r)
	identity := true
	for i, a := range perm {
		j, ok := normAxis(a, r)
		if !ok || seen[j] {
			return fmt.Errorf("perm %v for shape %v", perm, x.shape)
		}
		seen[j] = true
		s[i], p[i] = x.shape[j], j
		identity = identity && j == i
	}
	switch {
	case identity:
		n.define(0, x)
		return nil
	case x.kind == kInit && x.isParamLike() && x.transposeOf == nil && r == 2:
		// W.t() of a weight: the MatMul that uses it is a linear layer.
		n.define(0, &value{name: n.outName(0), kind: kInit, shape: s, elem: x.elem, slot: -1, contig: false, transposeOf: x})
		return nil
	case isConstant(x):
		n.define(0, newConst(n.outName(0), s, x.elem, x.literal))
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	res := n.cv.newAct(n.outName(0), s, x.elem, false)
	xst := x.stridesOf()
	st := make(shape, r)
	for i, j := range p {
		st[i] = xst[j]
	}
	res.setStrides(st)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Permute(name, c.ids[xs], p...)) })
	n.define(0, res)
	return nil
}

func opUnsqueeze(n *nctx) error {
	x := n.need(0)
	axes, _ := n.axes(1)
	if n.err != nil {
		return n.err
	}
	r := len(x.shape) + len(axes)
	ins := make([]bool, r)
	for _, a := range axes {
		i, ok := normAxis(a, r)
		if !ok || ins[i] {
			return fmt.Errorf("axes %v for shape %v", axes, x.shape)
		}
		ins[i] = true
	}
	s := make(shape, 0, r)
	st := make(shape, 0, r)
	xst := x.stridesOf()
	j := 0
	for i := 0; i < r; i++ {
		if ins[i] {
			// PyTorch: size * stride of the dim that follows, 1 at the end.
			d := konst(1)
			if j < len(x.shape) {
				d, _ = mulDim(x.shape[j], xst[j])
			}
			s, st = append(s, konst(1)), append(st, d)
		} else {
			s, st = append(s, x.shape[j]), append(st, xst[j])
			j++
		}
	}
	return n.cv.reshapeLike(n, x, s, st)
}

func opSqueeze(n *nctx) error {
	x := n.need(0)
	axes, _ := n.axes(1)
	if n.err != nil {
		return n.err
	}
	drop := make([]bool, len(x.shape))
	if len(axes) == 0 {
		for i, d := range x.shape {
			drop[i] = d == konst(1)
		}
	}
	for _, a := range axes {
		i, ok := normAxis(a, len(x.shape))
		if !ok || x.shape[i] != konst(1) {
			return fmt.Errorf("cannot squeeze axes %v of %v", axes, x.shape)
		}
		drop[i] = true
	}
	s, st := shape{}, shape{}
	xst := x.stridesOf()
	for i, d := range x.shape {
		if !drop[i] {
			s, st = append(s, d), append(st, xst[i])
		}
	}
	return n.cv.reshapeLike(n, x, s, st)
}

// reshapeLike: a view with strides st (Unsqueeze, Squeeze) of a tensor,
// or new metadata for a constant.
func (cv *converter) reshapeLike(n *nctx, x *value, s, st shape) error {
	if isConstant(x) {
		n.define(0, reshaped(x, s, n.outName(0)))
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	cv.reshape(n, xs, x, s, st, n.outName(0))
	return nil
}

func opExpand(n *nctx) error {
	x := n.need(0)
	target, ok := n.constInts(1, "shape")
	if !ok {
		return n.err
	}
	s, ok := broadcast(x.shape, shape(target))
	if !ok {
		return fmt.Errorf("cannot expand %v to %v", x.shape, target)
	}
	if isConstant(x) {
		out := newConst(n.outName(0), s, x.elem, false)
		if od, ok := constDims(s); ok && foldable(x) {
			if cnt, _ := s.constNumel(); cnt <= maxConstElements {
				xd, _ := constDims(x.shape)
				out = take(x, s, bcastMap(od, xd), n.outName(0))
			}
		}
		n.define(0, out)
		return nil
	}
	if s.equal(x.shape) {
		n.define(0, x)
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	res := n.cv.newAct(n.outName(0), s, x.elem, false)
	xst := x.stridesOf()
	st := make(shape, len(s))
	for i := range s {
		j := i - (len(s) - len(x.shape))
		if j >= 0 && x.shape[j] == s[i] {
			st[i] = xst[j]
		} else {
			st[i] = konst(0)
		}
	}
	res.strides = st
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Expand(name, c.ids[xs], c.dims(s, name)...)) })
	n.define(0, res)
	return nil
}

// biasAdd finds the Add that adds a bias vector of size out to the output
// of node i (a MatMul), when it is the output's only consumer.
func (cv *converter) biasAdd(output string, out dim) (int, *value) {
	cons := cv.consumers[output]
	if len(cons) != 1 || cv.outputs[output] {
		return -1, nil
	}
	a := cv.nodes[cons[0]]
	if a.GetOpType() != "Add" || (a.GetDomain() != "" && a.GetDomain() != "ai.onnx") || len(a.GetInput()) != 2 || len(a.GetOutput()) != 1 {
		return -1, nil
	}
	other := a.GetInput()[0]
	if other == output {
		other = a.GetInput()[1]
	}
	if other == output {
		return -1, nil
	}
	v, ok := cv.vals[other]
	if !ok || v.kind != kInit || v.transposeOf != nil || !v.isFloat() || !v.shape.equal(shape{out}) {
		return -1, nil
	}
	return cons[0], v
}

// linear emits F.linear(x, W, bias) for a weight operand w that is used as
// [in, out] (MatMul, Gemm transB=0) or [out, in] (Gemm transB=1).
func (cv *converter) linear(n *nctx, xs int, x, w *value, inOut bool, bias *value, outName string) error {
	u, flip := w, inOut
	if w.transposeOf != nil {
		u, flip = w.transposeOf, !inOut
	}
	if len(u.shape) != 2 {
		return fmt.Errorf("weight %q has shape %v, want 2-D", u.name, u.shape)
	}
	outF, inF := u.shape[0], u.shape[1]
	if flip {
		outF, inF = inF, outF
	}
	if len(x.shape) == 0 || x.shape[len(x.shape)-1] != inF {
		return fmt.Errorf("input %v does not match the weight %q %v", x.shape, u.name, u.shape)
	}
	s := x.shape.clone()
	s[len(s)-1] = outF
	res := cv.newAct(outName, s, x.elem, true)
	var bs = -1
	if bias != nil {
		var err error
		if bs, err = cv.paramSlot(bias, false); err != nil {
			return err
		}
	}
	if u.slot >= 0 && u.use == useParam && u.paramT != flip {
		// The parameter exists in the other orientation (the weight is
		// used both ways): it is then [in, out] itself, and the product
		// is a matmul with it.
		ws := u.slot
		name := n.opName()
		mm := res
		if bias != nil {
			mm = &value{slot: cv.newSlot(), shape: s, name: outName + ".mm"}
		}
		cv.emit(func(c *bctx) { c.set(mm, c.b.MatMul(name, c.ids[xs], c.ids[ws])) })
		if bias != nil {
			cv.emit(func(c *bctx) { c.set(res, c.b.Add(name+".bias", c.ids[mm.slot], c.ids[bs])) })
		}
		cv.vals[outName] = res
		return nil
	}
	ws, err := cv.paramSlot(u, flip)
	if err != nil {
		return err
	}
	mod := n.modulePath(u.name)
	cv.emit(func(c *bctx) {
		bid := graph.None
		if bs >= 0 {
			bid = c.ids[bs]
		}
		c.set(res, c.b.LinearWith(mod, c.ids[xs], c.ids[ws], bid))
	})
	cv.vals[outName] = res
	return nil
}

func opMatMul(n *nctx) error {
	a, b := n.need(0), n.need(1)
	if n.err != nil {
		return n.err
	}
	if len(a.shape) < 2 || len(b.shape) < 2 {
		return fmt.Errorf("matmul of %v and %v: 1-D operands are not supported", a.shape, b.shape)
	}
	if !isConstant(a) && !a.isParamLike() && b.isParamLike() && len(b.shape) == 2 {
		xs, _ := n.act(0)
		if n.err != nil {
			return n.err
		}
		outName := n.outName(0)
		wOut := b.shape[1]
		addIdx, bias := n.cv.biasAdd(outName, wOut)
		if addIdx >= 0 {
			n.cv.skip[addIdx] = true
			outName = n.cv.nodes[addIdx].GetOutput()[0]
		}
		return n.cv.linear(n, xs, a, b, true, bias, outName)
	}
	as, err := n.cv.tensor(a)
	if err != nil {
		return err
	}
	bs, err := n.cv.tensor(b)
	if err != nil {
		return err
	}
	sa, sb := a.shape, b.shape
	if sa[len(sa)-1] != sb[len(sb)-2] {
		return fmt.Errorf("matmul of %v and %v", sa, sb)
	}
	lead, ok := broadcast(sa[:len(sa)-2], sb[:len(sb)-2])
	if !ok {
		return fmt.Errorf("matmul batch dims of %v and %v do not broadcast", sa, sb)
	}
	s := append(lead, sa[len(sa)-2], sb[len(sb)-1])
	res := n.cv.newAct(n.outName(0), s, a.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.MatMul(name, c.ids[as], c.ids[bs])) })
	n.define(0, res)
	return nil
}

func opGemm(n *nctx) error {
	xs, x := n.act(0)
	w := n.need(1)
	cIn := n.input(2)
	if n.err != nil {
		return n.err
	}
	if n.i("transA", 0) != 0 {
		return fmt.Errorf("transA=1 is not supported")
	}
	if len(x.shape) != 2 || len(w.shape) != 2 {
		return fmt.Errorf("Gemm of %v and %v: want 2-D operands", x.shape, w.shape)
	}
	transB := n.i("transB", 0) != 0
	outF := w.shape[1]
	if transB {
		outF = w.shape[0]
	}
	// C is a bias vector (an initializer of outF elements, [outF] or
	// [1, outF]) or anything else, added after the product.
	var bias *value
	if cIn != nil && cIn.kind == kInit && cIn.transposeOf == nil && cIn.isFloat() {
		if cnt, _ := cIn.shape.numel(); cnt == outF && (len(cIn.shape) == 1 || (len(cIn.shape) == 2 && cIn.shape[0] == konst(1))) {
			bias = cIn
		}
	}
	if !w.isParamLike() {
		return fmt.Errorf("the weight %q must be an initializer", w.name)
	}
	outName := n.outName(0)
	if cIn != nil && bias == nil {
		outName += ".gemm"
	}
	if err := n.cv.linear(n, xs, x, w, !transB, bias, outName); err != nil {
		return err
	}
	if cIn != nil && bias == nil {
		// C is a tensor (or a broadcast constant): added after the product.
		mm := n.cv.vals[outName]
		cs, err := n.cv.tensor(cIn)
		if err != nil {
			return err
		}
		s, ok := broadcast(mm.shape, cIn.shape)
		if !ok {
			return fmt.Errorf("C %v does not broadcast to %v", cIn.shape, mm.shape)
		}
		res := n.cv.newAct(n.outName(0), s, x.elem, true)
		name := n.opName() + ".add"
		n.cv.emit(func(c *bctx) { c.set(res, c.b.Add(name, c.ids[mm.slot], c.ids[cs])) })
		n.define(0, res)
	}
	return nil
}

func opSoftmax(n *nctx) error {
	xs, x := n.act(0)
	if n.err != nil {
		return n.err
	}
	def := int64(-1)
	if n.cv.opset < 13 {
		def = 1
	}
	axis, ok := normAxis(n.i("axis", def), len(x.shape))
	if !ok {
		return fmt.Errorf("axis %d for shape %v", n.i("axis", def), x.shape)
	}
	if n.cv.opset < 13 && axis != len(x.shape)-1 {
		return fmt.Errorf("opset %d %s over axis %d of %v flattens the input to 2-D, which is not supported", n.cv.opset, n.op, axis, x.shape)
	}
	log := n.op == "LogSoftmax"
	res := n.cv.newAct(n.outName(0), x.shape.clone(), x.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.Softmax(name, c.ids[xs], axis, log)) })
	n.define(0, res)
	return nil
}

func opGather(n *nctx) error {
	data, idx := n.need(0), n.need(1)
	if n.err != nil {
		return n.err
	}
	axis, ok := normAxis(n.i("axis", 0), len(data.shape))
	if !ok {
		return fmt.Errorf("axis %d for shape %v", n.i("axis", 0), data.shape)
	}
	if idx.isFloat() {
		return fmt.Errorf("indices %q are %s", idx.name, elemName(idx.elem))
	}
	s := append(append(data.shape[:axis].clone(), idx.shape...), data.shape[axis+1:]...)
	switch {
	case isConstant(data) && isConstant(idx):
		out := newConst(n.outName(0), s, data.elem, data.literal && idx.literal)
		if dd, ok := constDims(data.shape); ok && foldable(data, idx) {
			if cnt, ok := s.constNumel(); ok && cnt <= maxConstElements {
				ix := make([]int64, len(idx.ints))
				for i, d := range idx.ints {
					c, ok := d.value()
					if !ok {
						return fmt.Errorf("symbolic index %v", d)
					}
					ix[i] = c
				}
				m, err := gatherMap(dd, axis, ix)
				if err != nil {
					return err
				}
				out = take(data, s, m, n.outName(0))
			}
		}
		n.define(0, out)
		return nil
	case data.isParamLike() && data.transposeOf == nil && axis == 0 && len(data.shape) == 2:
		// nn.Embedding: a lookup in a weight table.
		is, err := n.cv.tensor(idx)
		if err != nil {
			return err
		}
		ws, err := n.cv.paramSlot(data, false)
		if err != nil {
			return err
		}
		if data.paramT {
			return fmt.Errorf("embedding table %q is also used transposed as a matmul weight", data.name)
		}
		res := n.cv.newAct(n.outName(0), s, data.elem, true)
		mod := n.modulePath(data.name)
		n.cv.emit(func(c *bctx) { c.set(res, c.b.EmbeddingWith(mod, c.ids[is], c.ids[ws])) })
		n.define(0, res)
		return nil
	case isConstant(idx) && len(idx.shape) <= 1:
		ds, err := n.cv.tensor(data)
		if err != nil {
			return err
		}
		name := n.opName()
		if len(idx.shape) == 0 {
			// x[:, i]: select, a view.
			res := n.cv.newAct(n.outName(0), s, data.elem, data.contig && axis == 0)
			dst := data.stridesOf()
			res.setStrides(append(dst[:axis].clone(), dst[axis+1:]...))
			n.cv.emit(func(c *bctx) { c.set(res, c.b.Select(name, c.ids[ds], axis)) })
			n.define(0, res)
			return nil
		}
		// index_select with constant indices: a new tensor that saves
		// only the (integer) indices; recorded as narrow + cat, which
		// allocates the result and saves nothing.
		k := idx.shape[0]
		if !k.isConst() {
			return fmt.Errorf("index count %v depends on the batch size", k)
		}
		res := n.cv.newAct(n.outName(0), s, data.elem, true)
		n.cv.emit(func(c *bctx) {
			v := c.b.Narrow(name+".narrow", c.ids[ds], axis, k.c)
			c.set(res, c.b.Cat(name, axis, v))
		})
		n.define(0, res)
		return nil
	}
	return fmt.Errorf("Gather of %q with computed indices is not supported", data.name)
}

func opConcat(n *nctx) error {
	if len(n.in) == 0 {
		return fmt.Errorf("no inputs")
	}
	for i := range n.in {
		n.need(i)
	}
	if n.err != nil {
		return n.err
	}
	first := n.in[0]
	axis, ok := normAxis(n.i("axis", 0), len(first.shape))
	if !ok {
		return fmt.Errorf("axis %d for shape %v", n.i("axis", 0), first.shape)
	}
	s := first.shape.clone()
	allConst, literal := true, true
	for i, v := range n.in {
		allConst = allConst && isConstant(v)
		literal = literal && v.literal
		if len(v.shape) != len(s) {
			return fmt.Errorf("concat of %v and %v", first.shape, v.shape)
		}
		for j := range s {
			if j != axis && v.shape[j] != s[j] {
				return fmt.Errorf("concat of %v and %v along %d", first.shape, v.shape, axis)
			}
		}
		if i > 0 {
			var ok bool
			if s[axis], ok = addDim(s[axis], v.shape[axis]); !ok {
				return fmt.Errorf("concatenated size %v + %v", s[axis], v.shape[axis])
			}
		}
	}
	if allConst {
		out := newConst(n.outName(0), s, first.elem, literal)
		if od, ok := constDims(s); ok && foldable(n.in...) && out.numel() <= maxConstElements {
			// Gather the inputs' elements in output order.
			outer := int64(1)
			for _, d := range od[:axis] {
				outer *= d
			}
			var ints []dim
			var floats []float64
			for o := int64(0); o < outer; o++ {
				for _, v := range n.in {
					vd, _ := constDims(v.shape)
					chunk := int64(1)
					for _, d := range vd[axis:] {
						chunk *= d
					}
					for k := o * chunk; k < (o+1)*chunk; k++ {
						if v.ints != nil {
							ints = append(ints, v.ints[k])
						} else {
							floats = append(floats, v.floats[k])
						}
					}
				}
			}
			if (ints == nil) != (floats == nil) || len(ints)+len(floats) == 0 {
				out.ints, out.floats, out.hasData = ints, floats, true
			}
		}
		n.define(0, out)
		return nil
	}
	slots := make([]int, len(n.in))
	for i, v := range n.in {
		var err error
		if slots[i], err = n.cv.tensor(v); err != nil {
			return err
		}
	}
	res := n.cv.newAct(n.outName(0), s, first.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) {
		ids := make([]graph.TensorID, len(slots))
		for i, sl := range slots {
			ids[i] = c.ids[sl]
		}
		c.set(res, c.b.Cat(name, axis, ids...))
	})
	n.define(0, res)
	return nil
}

// sliceBound clamps a Slice start or end to [0, size]; a huge constant
// means "to the end". ok is false when the bound cannot be decided.
func sliceBound(b, size dim) (dim, bool) {
	if c, isC := b.value(); isC {
		switch {
		case c >= 1<<62:
			return size, true
		case c < 0:
			if sc, ok := size.value(); ok {
				return konst(max(sc+c, 0)), true
			}
			if c <= -(1 << 62) {
				return konst(0), true
			}
			v, ok := addDim(size, konst(c))
			return v, ok
		}
		if sc, ok := size.value(); ok {
			return konst(min(c, sc)), true
		}
		// A constant bound in a symbolic size: assumed inside it.
		return b, true
	}
	if b == size {
		return b, true
	}
	// A symbolic bound inside a constant size (position_ids[:, :seq]):
	// assumed in range, checked when the graph is built.
	return b, true
}

func opSlice(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	var starts, ends, axes, steps []dim
	if n.cv.opset < 10 {
		for _, a := range []struct {
			name string
			dst  *[]dim
		}{{"starts", &starts}, {"ends", &ends}, {"axes", &axes}} {
			if v, ok := n.ints(a.name); ok {
				for _, x := range v {
					*a.dst = append(*a.dst, konst(x))
				}
			}
		}
	} else {
		starts, _ = n.constInts(1, "starts")
		ends, _ = n.constInts(2, "ends")
		axes, _ = n.constInts(3, "axes")
		steps, _ = n.constInts(4, "steps")
	}
	if n.err != nil {
		return n.err
	}
	if len(starts) != len(ends) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return fmt.Errorf("starts, ends, axes and steps differ in length")
	}
	s := x.shape.clone()
	type cut struct {
		axis          int
		start, length dim
		step          int64
	}
	var cuts []cut
	seen := map[int]bool{}
	var checks []step
	for i := range starts {
		a := i
		if axes != nil {
			c, ok := axes[i].value()
			if !ok {
				return fmt.Errorf("symbolic axis")
			}
			var okA bool
			if a, okA = normAxis(c, len(s)); !okA {
				return fmt.Errorf("axis %d for shape %v", c, x.shape)
			}
		}
		if a >= len(s) || seen[a] {
			return fmt.Errorf("axes %v for shape %v", axes, x.shape)
		}
		seen[a] = true
		step := int64(1)
		if steps != nil {
			c, ok := steps[i].value()
			if !ok || c == 0 {
				return fmt.Errorf("step %v", steps[i])
			}
			step = c
		}
		size := s[a]
		st, ok1 := sliceBound(starts[i], size)
		en, ok2 := sliceBound(ends[i], size)
		if !ok1 || !ok2 {
			return fmt.Errorf("slice [%v:%v] of a dimension of size %v cannot be evaluated for every batch size", starts[i], ends[i], size)
		}
		var length dim
		if step == 1 {
			var ok bool
			if length, ok = subDim(en, st); !ok {
				return fmt.Errorf("slice [%v:%v] has a length batchfit cannot express", st, en)
			}
			if length.sign() < 0 {
				length = konst(0)
			}
		} else {
			sc, ok1 := st.value()
			ec, ok2 := en.value()
			if !ok1 || !ok2 {
				return fmt.Errorf("a strided slice of a symbolic dimension")
			}
			if step < 0 {
				// Negative steps clamp differently: start to size-1, end to -1.
				sz, _ := size.value()
				sc0, _ := starts[i].value()
				ec0, _ := ends[i].value()
				sc, ec = clampNeg(sc0, sz, true), clampNeg(ec0, sz, false)
				st = konst(sc)
			}
			cnt := int64(0)
			if step > 0 && ec > sc {
				cnt = (ec - sc + step - 1) / step
			} else if step < 0 && sc > ec {
				cnt = (sc - ec + (-step) - 1) / (-step)
			}
			length = konst(cnt)
		}
		if length != size && (!size.isConst() || !length.isConst()) {
			// A bound assumed inside the dimension (position_ids[:, :seq]):
			// checked when the graph is built.
			ln, sz, nm := length, size, n.opName()
			checks = append(checks, func(c *bctx) {
				if l, s := c.eval(ln, nm), c.eval(sz, nm); l > s {
					c.b.Fail("%s: slice of %d from a dimension of size %d (the sequence is longer than the model allows)", nm, l, s)
				}
			})
		}
		s[a] = length
		cuts = append(cuts, cut{a, st, length, step})
	}
	n.cv.steps = append(n.cv.steps, checks...)
	if isConstant(x) {
		out := newConst(n.outName(0), s, x.elem, x.literal)
		xd, ok1 := constDims(x.shape)
		_, ok2 := constDims(s)
		if ok1 && ok2 && foldable(x) {
			st := make([]int64, len(xd))
			stp := make([]int64, len(xd))
			cnt := append([]int64(nil), xd...)
			for i := range stp {
				stp[i] = 1
			}
			for _, c := range cuts {
				st[c.axis], _ = c.start.value()
				stp[c.axis] = c.step
				cnt[c.axis], _ = c.length.value()
			}
			out = take(x, s, sliceMap(xd, st, stp, cnt), n.outName(0))
		}
		n.define(0, out)
		return nil
	}
	for _, c := range cuts {
		if c.step != 1 {
			return fmt.Errorf("a slice with step %d is not supported", c.step)
		}
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	cur, curSlot := x, xs
	for i, c := range cuts {
		if c.length == cur.shape[c.axis] {
			continue
		}
		ns := cur.shape.clone()
		ns[c.axis] = c.length
		leading := true
		for _, d := range cur.shape[:c.axis] {
			leading = leading && d == konst(1)
		}
		outName := n.outName(0)
		if i < len(cuts)-1 {
			outName = fmt.Sprintf("%s.%d", outName, i)
		}
		res := n.cv.newAct(outName, ns, x.elem, cur.contig && leading)
		res.setStrides(cur.stridesOf())
		name, ax, ln, src := n.opName(), c.axis, c.length, curSlot
		n.cv.emit(func(c *bctx) { c.set(res, c.b.Narrow(name, c.ids[src], ax, c.eval(ln, name))) })
		cur, curSlot = res, res.slot
	}
	n.define(0, cur)
	return nil
}

// clampNeg clamps a bound of a negative-step slice to [-1, size-1].
func clampNeg(v, size int64, _ bool) int64 {
	if v < 0 {
		v += size
	}
	return min(max(v, -1), size-1)
}

func opSplit(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	if isConstant(x) {
		return fmt.Errorf("Split of a constant")
	}
	axis, ok := normAxis(n.i("axis", 0), len(x.shape))
	if !ok {
		return fmt.Errorf("axis %d for shape %v", n.i("axis", 0), x.shape)
	}
	outs := len(n.p.GetOutput())
	var sizes []dim
	if v, ok := n.ints("split"); ok {
		for _, s := range v {
			sizes = append(sizes, konst(s))
		}
	} else if n.input(1) != nil {
		sizes, _ = n.constInts(1, "split sizes")
	} else {
		parts := int64(n.i("num_outputs", int64(outs)))
		if parts <= 0 {
			return fmt.Errorf("split into %d parts", parts)
		}
		each, ok := divDim(x.shape[axis], konst(parts))
		if !ok {
			return fmt.Errorf("split of %v into %d equal parts", x.shape[axis], parts)
		}
		for i := int64(0); i < parts; i++ {
			sizes = append(sizes, each)
		}
	}
	if n.err != nil {
		return n.err
	}
	if len(sizes) != outs {
		return fmt.Errorf("%d split sizes for %d outputs", len(sizes), outs)
	}
	total := konst(0)
	for _, d := range sizes {
		var ok bool
		if total, ok = addDim(total, d); !ok || d.sign() < 0 {
			return fmt.Errorf("split sizes %v", sizes)
		}
	}
	if total != x.shape[axis] {
		return fmt.Errorf("split sizes %v do not add up to %v", sizes, x.shape[axis])
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	leading := true
	for _, d := range x.shape[:axis] {
		leading = leading && d == konst(1)
	}
	for i, d := range sizes {
		if n.outName(i) == "" {
			continue
		}
		s := x.shape.clone()
		s[axis] = d
		res := n.cv.newAct(n.outName(i), s, x.elem, x.contig && (leading || d == x.shape[axis]))
		res.setStrides(x.stridesOf())
		name, ln := fmt.Sprintf("%s.%d", n.opName(), i), d
		n.cv.emit(func(c *bctx) { c.set(res, c.b.Narrow(name, c.ids[xs], axis, c.eval(ln, name))) })
		n.define(i, res)
	}
	return nil
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

// opPad is ONNX Pad: pads (an input since opset 11, an attribute before)
// hold every axis's begin amounts, then every axis's end amounts; axes
// (opset 18) names the axes they are for. mode "constant" is F.pad's
// constant_pad_nd, a new tensor (none when every amount is zero: the
// exporter writes such Pads before pooling); "reflect" and "edge" are
// reflection_pad / replication_pad, whose backward needs the input
// (derivatives.yaml: reflection_pad2d_backward(grad, self, padding)).
func opPad(n *nctx) error {
	x := n.need(0)
	if n.err != nil {
		return n.err
	}
	mode := n.s("mode", "constant")
	var padMode graph.PadMode
	switch mode {
	case "constant":
		padMode = graph.PadConstant
	case "reflect":
		padMode = graph.PadReflect
	case "edge":
		padMode = graph.PadReplicate
	default:
		return fmt.Errorf("pad mode %q (want constant, reflect or edge)", mode)
	}
	r := len(x.shape)
	var pads []int64
	if n.input(1) != nil {
		p, ok := n.constInt64s(1, "pads")
		if !ok {
			return n.err
		}
		pads = p
	} else {
		p, ok := n.ints("pads")
		if !ok {
			p, ok = n.ints("paddings") // opset 1
		}
		if !ok {
			return fmt.Errorf("no pads")
		}
		pads = p
	}
	for _, p := range pads {
		if p > maxElements || p < -maxElements {
			return fmt.Errorf("pad amount %d out of range", p)
		}
	}
	axes := make([]int64, 0, r)
	if n.input(3) != nil {
		a, ok := n.constInt64s(3, "axes")
		if !ok {
			return n.err
		}
		for _, ax := range a {
			norm, ok := normAxis(ax, r)
			if !ok {
				return fmt.Errorf("axis %d for shape %v", ax, x.shape)
			}
			axes = append(axes, int64(norm))
		}
	} else {
		for i := 0; i < r; i++ {
			axes = append(axes, int64(i))
		}
	}
	if len(pads) != 2*len(axes) {
		return fmt.Errorf("%d pads for %d axes", len(pads), len(axes))
	}
	begin, end := make([]int64, r), make([]int64, r)
	zero := true
	seen := make([]bool, r)
	for _, ax := range axes {
		if seen[ax] {
			return fmt.Errorf("axis %d named twice in axes", ax)
		}
		seen[ax] = true
	}
	for i, ax := range axes {
		begin[ax], end[ax] = pads[i], pads[i+len(axes)]
		zero = zero && pads[i] == 0 && pads[i+len(axes)] == 0
	}
	s := x.shape.clone()
	for i := range s {
		if begin[i] == 0 && end[i] == 0 {
			continue
		}
		d, ok := addDim(s[i], konst(begin[i]+end[i]))
		if !ok || d.sign() < 0 {
			return fmt.Errorf("pads %v leave axis %d of %v negative", pads, i, x.shape)
		}
		s[i] = d
	}
	if zero && padMode == graph.PadConstant {
		n.define(0, x)
		return nil
	}
	if isConstant(x) {
		n.define(0, newConst(n.outName(0), s, x.elem, false))
		return nil
	}
	xs, _ := n.act(0)
	if n.err != nil {
		return n.err
	}
	// F.pad's order: the last axis first, (begin, end) for each.
	last := 0
	for i := 0; i < r; i++ {
		if begin[i] != 0 || end[i] != 0 {
			last = r - i
			break
		}
	}
	fp := make([]int64, 0, 2*last)
	for i := r - 1; i >= r-last; i-- {
		fp = append(fp, begin[i], end[i])
	}
	res := n.cv.newAct(n.outName(0), s, x.elem, true)
	name := n.opName()
	n.cv.emit(func(c *bctx) { c.set(res, c.b.PadMode(name, c.ids[xs], padMode, fp...)) })
	n.define(0, res)
	return nil
}
