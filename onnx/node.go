package onnx

import (
	"fmt"
	"math"
	"strings"

	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// nctx is one node being converted.
type nctx struct {
	cv    *converter
	idx   int
	p     *onnxpb.NodeProto
	op    string
	in    []*value
	attrs []*onnxpb.AttributeProto
	err   error
}

type handler func(n *nctx) error

var handlers map[string]handler

func (cv *converter) node(i int, p *onnxpb.NodeProto) error {
	op := p.GetOpType()
	if d := p.GetDomain(); d != "" && d != "ai.onnx" {
		return fmt.Errorf("unsupported operator %s of domain %q (node %q, index %d)", op, d, p.GetName(), i)
	}
	h, ok := handlers[op]
	if !ok {
		return fmt.Errorf("unsupported operator %s (node %q, index %d)", op, p.GetName(), i)
	}
	wrap := func(err error) error { return fmt.Errorf("%s node %q (index %d): %w", op, p.GetName(), i, err) }
	n := &nctx{cv: cv, idx: i, p: p, op: op, attrs: p.GetAttribute(), in: make([]*value, 0, len(p.GetInput()))}
	for _, name := range p.GetInput() {
		if name == "" {
			n.in = append(n.in, nil)
			continue
		}
		v, err := cv.lookup(name)
		if err != nil {
			return wrap(err)
		}
		n.in = append(n.in, v)
	}
	for _, out := range p.GetOutput() {
		if _, dup := cv.vals[out]; dup && out != "" {
			return wrap(fmt.Errorf("output %q is already defined", out))
		}
	}
	if err := h(n); err != nil {
		return wrap(err)
	}
	if n.err != nil {
		return wrap(n.err)
	}
	return nil
}

func (n *nctx) fail(format string, args ...any) error {
	if n.err == nil {
		n.err = fmt.Errorf(format, args...)
	}
	return n.err
}

// input is the i-th input, nil when absent.
func (n *nctx) input(i int) *value {
	if i < len(n.in) {
		return n.in[i]
	}
	return nil
}

// need is the i-th input, failing when absent.
func (n *nctx) need(i int) *value {
	v := n.input(i)
	if v == nil {
		n.fail("input %d is missing", i)
		return &value{kind: kIgnored, slot: -1}
	}
	return v
}

func (n *nctx) outName(i int) string {
	if outs := n.p.GetOutput(); i < len(outs) {
		return outs[i]
	}
	return ""
}

// define binds output i to v (nothing when the output is absent).
func (n *nctx) define(i int, v *value) {
	if name := n.outName(i); name != "" {
		n.cv.vals[name] = v
	}
}

// ignoreFrom marks outputs from i on as not modelled.
func (n *nctx) ignoreFrom(i int, why string) {
	for j := i; j < len(n.p.GetOutput()); j++ {
		if name := n.outName(j); name != "" {
			n.cv.vals[name] = &value{name: name, kind: kIgnored, slot: -1, why: why}
		}
	}
}

// opName names the graph op: the ONNX node name, or op type and index.
func (n *nctx) opName() string {
	if s := n.p.GetName(); s != "" {
		return s
	}
	return fmt.Sprintf("%s_%d", n.op, n.idx)
}

// module splits the module path of a parameter name ("layer1.0.conv1.weight")
// into the Builder scope and the op name ("layer1.0", "conv1"); a name
// without the ".weight" suffix gives the node's name.
func (n *nctx) module(param string) (parent, leaf string) {
	mod := n.opName()
	if strings.HasSuffix(param, ".weight") && len(param) > len(".weight") {
		mod = strings.TrimSuffix(param, ".weight")
	}
	if i := strings.LastIndexByte(mod, '.'); i > 0 && i < len(mod)-1 {
		return mod[:i], mod[i+1:]
	}
	return "", mod
}

// modulePath is the module path of a parameter ("layer1.0.conv1"), or the
// node's name.
func (n *nctx) modulePath(param string) string {
	parent, leaf := n.module(param)
	if parent == "" {
		return leaf
	}
	return parent + "." + leaf
}

// act is the graph tensor slot of input i.
func (n *nctx) act(i int) (int, *value) {
	v := n.need(i)
	if n.err != nil {
		return 0, v
	}
	s, err := n.cv.tensor(v)
	if err != nil {
		n.fail("%v", err)
	}
	return s, v
}

// Attributes. A wrong attribute type fails the node.

func (n *nctx) find(name string) *onnxpb.AttributeProto {
	for _, a := range n.attrs {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

func (n *nctx) attr(name string, t onnxpb.AttributeProto_AttributeType) *onnxpb.AttributeProto {
	a := n.find(name)
	if a == nil {
		return nil
	}
	if a.GetType() != t && a.GetType() != onnxpb.AttributeProto_UNDEFINED {
		n.fail("attribute %s has type %s, want %s", name, a.GetType(), t)
		return nil
	}
	return a
}

func (n *nctx) has(name string) bool { return n.find(name) != nil }

func (n *nctx) i(name string, def int64) int64 {
	if a := n.attr(name, onnxpb.AttributeProto_INT); a != nil {
		return a.GetI()
	}
	return def
}

func (n *nctx) f(name string, def float64) float64 {
	if a := n.attr(name, onnxpb.AttributeProto_FLOAT); a != nil {
		return float64(a.GetF())
	}
	return def
}

func (n *nctx) s(name, def string) string {
	if a := n.attr(name, onnxpb.AttributeProto_STRING); a != nil {
		return string(a.GetS())
	}
	return def
}

func (n *nctx) ints(name string) ([]int64, bool) {
	if a := n.attr(name, onnxpb.AttributeProto_INTS); a != nil {
		return a.GetInts(), true
	}
	return nil, false
}

// pair reads a 2-element ints attribute (kernel, strides, dilations).
func (n *nctx) pair(name string, def int64) [2]int64 {
	v, ok := n.ints(name)
	if !ok {
		return [2]int64{def, def}
	}
	if len(v) != 2 {
		n.fail("attribute %s = %v: only 2-D (two values) is supported", name, v)
		return [2]int64{def, def}
	}
	// Every kernel_shape, strides and dilations entry must be positive:
	// PyTorch refuses the others before running the op
	// (aten/src/ATen/native/Convolution.cpp, check_shape_forward:
	// "non-positive stride is not supported", "dilation should be greater
	// than zero"), and a zero stride would otherwise divide the output size
	// by zero or be reported as a kernel larger than the input.
	if v[0] <= 0 || v[1] <= 0 {
		n.fail("attribute %s = %v: every value must be positive", name, v)
		return [2]int64{def, def}
	}
	return [2]int64{v[0], v[1]}
}

// constInts reads a constant integer input (shapes, axes), nil and false
// when the input is absent.
func (n *nctx) constInts(i int, what string) ([]dim, bool) {
	v := n.input(i)
	if v == nil {
		return nil, false
	}
	if !v.hasData || v.ints == nil || (v.kind != kConst && v.kind != kInit) {
		n.fail("the %s (input %d, %q) is not a constant batchfit can evaluate", what, i, v.name)
		return nil, false
	}
	return v.ints, true
}

// constInt64s is constInts with every value a plain integer.
func (n *nctx) constInt64s(i int, what string) ([]int64, bool) {
	ds, ok := n.constInts(i, what)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(ds))
	for j, d := range ds {
		c, isConst := d.value()
		if !isConst {
			n.fail("the %s (input %d) depends on the batch or sequence size: %v", what, i, ds)
			return nil, false
		}
		out[j] = c
	}
	return out, true
}

// axes reads the axes of Squeeze, Unsqueeze, ReduceMean: an attribute
// before opset 13 (18 for the reductions), an input after.
func (n *nctx) axes(input int) ([]int64, bool) {
	if a, ok := n.ints("axes"); ok {
		return a, true
	}
	return n.constInt64s(input, "axes")
}

// scalarConst is the value of constant input i when it is a one-element
// constant.
func (n *nctx) scalarConst(i int) (float64, bool) {
	v := n.input(i)
	if v == nil {
		return 0, false
	}
	return v.scalarValue()
}

func init() {
	handlers = map[string]handler{
		"Constant":           opConstant,
		"Identity":           opIdentity,
		"Cast":               opCast,
		"Shape":              opShape,
		"ConstantOfShape":    opConstantOfShape,
		"Range":              opRange,
		"Conv":               opConv,
		"BatchNormalization": opBatchNorm,
		"LayerNormalization": opLayerNorm,
		"Relu":               opUnary,
		"Sigmoid":            opUnary,
		"Tanh":               opUnary,
		"HardSigmoid":        opUnary,
		"HardSwish":          opUnary,
		"Gelu":               opUnary,
		"Clip":               opUnary,
		"Sqrt":               opUnary,
		"Erf":                opUnary,
		"Neg":                opUnary,
		"Reciprocal":         opUnary,
		"Pow":                opPow,
		"Add":                opBinary,
		"Sub":                opBinary,
		"Mul":                opBinary,
		"Div":                opBinary,
		"Equal":              opBinary,
		"Where":              opWhere,
		"MaxPool":            opPool,
		"AveragePool":        opPool,
		"GlobalAveragePool":  opGlobalAveragePool,
		"ReduceMean":         opReduceMean,
		"Flatten":            opFlatten,
		"Reshape":            opReshape,
		"Transpose":          opTranspose,
		"Unsqueeze":          opUnsqueeze,
		"Squeeze":            opSqueeze,
		"Expand":             opExpand,
		"Gemm":               opGemm,
		"MatMul":             opMatMul,
		"Softmax":            opSoftmax,
		"LogSoftmax":         opSoftmax,
		"Gather":             opGather,
		"Concat":             opConcat,
		"Slice":              opSlice,
		"Split":              opSplit,
		"Dropout":            opDropout,
		"Pad":                opPad,
	}
}

// isConstant: a value with no graph tensor behind it (a folded constant,
// an integer or one-element initializer).
func isConstant(v *value) bool {
	return v.kind == kConst || (v.kind == kInit && !v.isParamLike())
}

// newConst makes a folded constant.
func newConst(name string, s shape, elem int32, literal bool) *value {
	return &value{name: name, kind: kConst, shape: s, elem: elem, slot: -1, contig: true, literal: literal}
}

func sameFloat(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }
