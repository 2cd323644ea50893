package onnx

import (
	"fmt"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// kind says what an ONNX value is to the conversion.
type kind uint8

const (
	kAct     kind = iota // a graph tensor: a data input or an op's output
	kInit                // an initializer, or a graph input / value_info standing in for a missing one
	kConst               // a constant the conversion folded (Constant nodes, shape arithmetic)
	kIgnored             // an output batchfit does not model (running statistics, dropout masks)
)

// initUse says how an initializer became part of the graph.
type initUse uint8

const (
	useNone  initUse = iota
	useOwned         // created by a Builder op with its own parameters (Conv2d, BatchNorm2d, LayerNorm)
	useParam         // a parameter tensor of its own (Linear and Embedding weights, biases, operands)
)

type value struct {
	name  string
	kind  kind
	shape shape
	elem  int32 // ONNX element type
	slot  int   // index into bctx.ids, -1 until the value has a graph tensor
	// contig mirrors the Builder's contiguity of the tensor, which decides
	// what Builder.Reshape does (a view of a contiguous tensor, else a
	// copy). strides are the tensor's strides in PyTorch (nil when
	// contiguous), which decide whether a reshape is really a view.
	contig  bool
	strides shape

	// kInit
	init        *tensorInfo // nil for a weight that is missing from the file
	use         initUse
	paramT      bool // the parameter was created transposed (a MatMul weight [in, out] as [out, in])
	transposeOf *value
	tview       *value // the view of a transposed parameter in its file orientation

	// Constant data (kConst, small inline kInit): integers as symbolic
	// dims, floats as float64. literal: straight from the file rather than
	// computed from shapes.
	ints    []dim
	floats  []float64
	hasData bool
	literal bool

	why string // kIgnored: what the output is
}

func (v *value) isFloat() bool { return isFloatElem(v.elem) }

// stridesOf is v's PyTorch strides.
func (v *value) stridesOf() shape {
	if v.strides == nil {
		return contiguousStrides(v.shape)
	}
	return v.strides
}

// setStrides records st, or nil when it is the contiguous layout.
func (v *value) setStrides(st shape) {
	v.strides = nil
	if st != nil && !st.equal(contiguousStrides(v.shape)) {
		v.strides = st
	}
}

// numel is the constant number of elements, -1 when symbolic.
func (v *value) numel() int64 {
	n, ok := v.shape.constNumel()
	if !ok {
		return -1
	}
	return n
}

// isParamLike: a floating-point initializer (or missing weight) that is not
// a scalar, or a transposed view of one.
func (v *value) isParamLike() bool {
	if v.transposeOf != nil {
		return true
	}
	return v.kind == kInit && v.isFloat() && v.numel() != 1
}

// isScalar: a one-element constant or initializer that acts as a Python
// number in the forward pass (x * 0.5, x + 1e-5).
func (v *value) isScalar() bool {
	return (v.kind == kConst || v.kind == kInit) && v.transposeOf == nil && v.numel() == 1
}

// scalarValue is the value of a one-element constant with known data.
func (v *value) scalarValue() (float64, bool) {
	if !v.hasData || v.numel() != 1 {
		return 0, false
	}
	if len(v.floats) == 1 {
		return v.floats[0], true
	}
	if len(v.ints) == 1 {
		if c, ok := v.ints[0].value(); ok {
			return float64(c), true
		}
	}
	return 0, false
}

type converter struct {
	m         *Model
	opset     int64
	nodes     []*onnxpb.NodeProto
	vals      map[string]*value
	consumers map[string][]int
	producer  map[string]int
	outputs   map[string]bool
	valueInfo map[string]*onnxpb.ValueInfoProto
	skip      []bool
	steps     []step
	nslots    int
	owned     map[*value]int
	evalBN    bool
}

func convert(m *Model, g *onnxpb.GraphProto) error {
	nn := len(g.GetNode())
	cv := &converter{m: m, opset: m.Opset, nodes: g.GetNode(),
		vals:      make(map[string]*value, len(g.GetInitializer())+len(g.GetInput())+nn+nn/4),
		consumers: make(map[string][]int, nn+nn/4), producer: make(map[string]int, nn+nn/4),
		outputs: map[string]bool{}, valueInfo: map[string]*onnxpb.ValueInfoProto{},
		owned: map[*value]int{}, steps: make([]step, 0, nn+len(g.GetInitializer()))}
	cv.skip = make([]bool, len(cv.nodes))
	m.counts = map[string]int{}
	for i, n := range cv.nodes {
		m.counts[n.GetOpType()]++
		for _, out := range n.GetOutput() {
			if _, dup := cv.producer[out]; !dup && out != "" {
				cv.producer[out] = i
			}
		}
		for _, in := range n.GetInput() {
			if in != "" {
				cv.consumers[in] = append(cv.consumers[in], i)
			}
		}
	}
	for _, o := range g.GetOutput() {
		cv.outputs[o.GetName()] = true
	}
	for _, vi := range g.GetValueInfo() {
		cv.valueInfo[vi.GetName()] = vi
	}
	m.paramDT = graph.F32
	paramDTSet := false
	for i, t := range g.GetInitializer() {
		ti, err := readTensor(t, fmt.Sprintf("initializer %d (%q)", i, t.GetName()))
		if err != nil {
			return err
		}
		if _, dup := cv.vals[ti.name]; dup {
			return fmt.Errorf("initializer %q defined twice", ti.name)
		}
		v := &value{name: ti.name, kind: kInit, shape: constShape(ti.dims...), elem: ti.elem, slot: -1, contig: true, init: ti, literal: true}
		v.setData(ti)
		cv.vals[ti.name] = v
		if !paramDTSet && isFloatElem(ti.elem) && ti.numel > 1 {
			m.paramDT, _ = onnxDType(ti.elem)
			paramDTSet = true
		}
	}
	if err := cv.inputs(g); err != nil {
		return err
	}
	for i, n := range cv.nodes {
		if cv.skip[i] {
			continue
		}
		if err := cv.node(i, n); err != nil {
			return err
		}
	}
	outs := g.GetOutput()
	if len(outs) == 0 {
		return fmt.Errorf("the graph has no outputs")
	}
	out, ok := cv.vals[outs[0].GetName()]
	switch {
	case !ok:
		return fmt.Errorf("graph output %q is not produced by any node (truncated file?)", outs[0].GetName())
	case out.kind != kAct:
		return fmt.Errorf("graph output %q is not computed from the inputs", out.name)
	case !out.isFloat():
		return fmt.Errorf("graph output %q is %s, not a floating-point tensor a loss can train", out.name, elemName(out.elem))
	}
	m.out = out
	m.steps = cv.steps
	m.nslots = cv.nslots
	cv.finishNotes()
	return nil
}

func (v *value) setData(ti *tensorInfo) {
	if !ti.decoded {
		return
	}
	v.hasData = true
	if ti.ints != nil {
		v.ints = make([]dim, len(ti.ints))
		for i, x := range ti.ints {
			v.ints[i] = konst(x)
		}
	}
	v.floats = ti.floats
	if v.ints == nil && v.floats == nil {
		v.ints = []dim{}
		if isFloatElem(v.elem) {
			v.floats, v.ints = []float64{}, nil
		}
	}
}

func (cv *converter) finishNotes() {
	m := cv.m
	cv.noteFoldedBatchNorms()
	if cv.evalBN {
		m.notes = append(m.notes, "the file was exported in eval mode (BatchNormalization without training_mode): batch norm is simulated in training mode, and any dropout the export removed is not modelled")
	}
	var tied []string
	for v, n := range cv.owned {
		if n > 0 {
			tied = append(tied, v.name)
		}
	}
	if len(tied) > 0 {
		sort.Strings(tied)
		m.notes = append(m.notes, fmt.Sprintf("weights shared between convolution or normalization layers are counted once per use: %s", strings.Join(tied, ", ")))
	}
}

func (cv *converter) newSlot() int {
	cv.nslots++
	return cv.nslots - 1
}

func (cv *converter) emit(s step) { cv.steps = append(cv.steps, s) }

// newAct declares an activation value with its own graph tensor.
func (cv *converter) newAct(name string, s shape, elem int32, contig bool) *value {
	return &value{name: name, kind: kAct, shape: s, elem: elem, slot: cv.newSlot(), contig: contig}
}

// inputs declares the data inputs and the weights that are graph inputs
// (a file exported without its parameters), and decides which axes are
// the batch and the sequence.
func (cv *converter) inputs(g *onnxpb.GraphProto) error {
	m := cv.m
	type cand struct {
		vi   *onnxpb.ValueInfoProto
		dims []*onnxpb.TensorShapeProto_Dimension
		elem int32
	}
	var data []cand
	first := true
	for _, vi := range g.GetInput() {
		name := vi.GetName()
		if _, isInit := cv.vals[name]; isInit {
			continue // IR < 4 lists initializers as inputs too
		}
		tt := vi.GetType().GetTensorType()
		if tt == nil {
			return fmt.Errorf("graph input %q is not a tensor", name)
		}
		if tt.GetShape() == nil {
			return fmt.Errorf("graph input %q has no shape", name)
		}
		dims := tt.GetShape().GetDim()
		if len(dims) > maxRank {
			return fmt.Errorf("graph input %q: rank %d", name, len(dims))
		}
		if cv.isWeightInput(name, dims, first) {
			v, err := cv.weightValue(name, tt)
			if err != nil {
				return err
			}
			cv.vals[name] = v
			continue
		}
		first = false
		data = append(data, cand{vi, dims, tt.GetElemType()})
	}
	if len(data) == 0 {
		return fmt.Errorf("the graph has no data input")
	}
	// The batch: axis 0 of the first data input.
	if len(data[0].dims) == 0 {
		return fmt.Errorf("data input %q is a scalar: no batch axis", data[0].vi.GetName())
	}
	d0 := data[0].dims[0]
	switch x := d0.GetValue().(type) {
	case *onnxpb.TensorShapeProto_Dimension_DimParam:
		m.batchName = x.DimParam
	case *onnxpb.TensorShapeProto_Dimension_DimValue:
		if x.DimValue <= 0 {
			return fmt.Errorf("data input %q: batch dimension %d", data[0].vi.GetName(), x.DimValue)
		}
		m.exportBatch = x.DimValue
		m.notes = append(m.notes, fmt.Sprintf("the file has a fixed batch size (%d, no dynamic batch axis): the batch is substituted in axis 0 of the inputs and in reshape targets whose first size is %d", x.DimValue, x.DimValue))
	default:
		m.batchName = "?"
	}
	for _, c := range data {
		name := c.vi.GetName()
		dt, ok := onnxDType(c.elem)
		if !ok {
			return fmt.Errorf("data input %q has element type %s", name, elemName(c.elem))
		}
		s := make(shape, len(c.dims))
		for i, d := range c.dims {
			switch x := d.GetValue().(type) {
			case *onnxpb.TensorShapeProto_Dimension_DimValue:
				if x.DimValue < 0 || x.DimValue > maxElements {
					return fmt.Errorf("data input %q: dimension %d is %d", name, i, x.DimValue)
				}
				s[i] = konst(x.DimValue)
				if i == 0 && m.exportBatch > 0 && x.DimValue == m.exportBatch {
					s[i] = symN
				}
			case *onnxpb.TensorShapeProto_Dimension_DimParam:
				switch {
				case x.DimParam == m.batchName:
					s[i] = symN
				case x.DimParam == m.seqName:
					s[i] = symS
				case m.seqName == "" && i == 1:
					m.seqName = x.DimParam
					s[i] = symS
				default:
					return fmt.Errorf("data input %q: dimension %d is symbolic (%q); batchfit substitutes only the batch (axis 0) and a sequence length (axis 1)", name, i, x.DimParam)
				}
			default:
				if i == 0 && m.batchName == "?" {
					s[i] = symN
					continue
				}
				return fmt.Errorf("data input %q: dimension %d has neither a size nor a name", name, i)
			}
		}
		v := cv.newAct(name, s, c.elem, true)
		cv.vals[name] = v
		m.inputs = append(m.inputs, Input{Name: name, DType: dt, Shape: s.String()})
		cv.emit(func(c *bctx) { c.set(v, c.b.Input(v.name, c.dims(v.shape, v.name), dt)) })
	}
	// A fixed sequence length: axis 1 of a token (integer) input.
	if in := data[0]; m.seqName == "" && len(in.dims) >= 2 && !isFloatElem(in.elem) {
		if x, ok := in.dims[1].GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok {
			m.seqLen = x.DimValue
		}
	}
	if s := cv.vals[data[0].vi.GetName()].shape; len(s) == 4 && isFloatElem(data[0].elem) {
		if h, ok := s[2].value(); ok {
			if w, ok := s[3].value(); ok {
				m.image = [2]int64{h, w}
			}
		}
	}
	return nil
}

// slotRole says what an operator does with its i-th input.
type slotRole uint8

const (
	roleData   slotRole = iota // an activation
	roleWeight                 // a parameter when it is constant
	roleBuffer                 // a buffer (running statistics)
	roleAny                    // an operand of either kind (elementwise ops, MatMul, Gather)
	roleConst                  // a constant argument (shapes, axes, ratios)
)

func inputRole(op string, i int) slotRole {
	switch op {
	case "Conv", "LayerNormalization":
		if i > 0 {
			return roleWeight
		}
	case "BatchNormalization":
		switch {
		case i == 1 || i == 2:
			return roleWeight
		case i >= 3:
			return roleBuffer
		}
	case "Gemm":
		if i > 0 {
			return roleWeight
		}
	case "MatMul", "Gather", "Add", "Sub", "Mul", "Div", "Concat", "Transpose", "Identity", "Cast", "Slice", "Expand", "Unsqueeze", "Squeeze", "Reshape":
		if i == 0 || op == "MatMul" || op == "Gather" || op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Concat" {
			return roleAny
		}
		return roleConst
	case "Split", "Clip", "Dropout", "Pow", "ReduceMean", "Tile", "Pad":
		if i > 0 {
			return roleConst
		}
	case "ConstantOfShape", "Range", "Shape":
		return roleConst
	}
	return roleData
}

// isWeightInput decides whether a graph input without an initializer is a
// weight whose data was left out of the file: every use is a weight or
// buffer slot, or (used only as an operand of either kind) it has no
// symbolic dimension and is not the first input.
func (cv *converter) isWeightInput(name string, dims []*onnxpb.TensorShapeProto_Dimension, first bool) bool {
	weight, anyUse := false, false
	for _, i := range cv.consumers[name] {
		n := cv.nodes[i]
		for j, in := range n.GetInput() {
			if in != name {
				continue
			}
			switch inputRole(n.GetOpType(), j) {
			case roleWeight, roleBuffer:
				weight = true
			case roleAny:
				anyUse = true
			default:
				return false
			}
		}
	}
	if weight {
		return true
	}
	if !anyUse || first {
		return false
	}
	for _, d := range dims {
		if _, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); !ok {
			return false
		}
	}
	return true
}

// weightValue is the value of a weight known only by its type and shape.
func (cv *converter) weightValue(name string, tt *onnxpb.TypeProto_Tensor) (*value, error) {
	var dims []int64
	for i, d := range tt.GetShape().GetDim() {
		x, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue)
		if !ok || x.DimValue < 0 {
			return nil, fmt.Errorf("weight %q: dimension %d has no size", name, i)
		}
		dims = append(dims, x.DimValue)
	}
	s := constShape(dims...)
	if n, ok := s.constNumel(); !ok || n > maxElements {
		return nil, fmt.Errorf("weight %q: declared shape %v is too large", name, dims)
	}
	return &value{name: name, kind: kInit, shape: s, elem: tt.GetElemType(), slot: -1, contig: true}, nil
}

// lookup finds the value an input name refers to; a name nothing defines
// but value_info describes is a weight missing from the file.
func (cv *converter) lookup(name string) (*value, error) {
	if v, ok := cv.vals[name]; ok {
		return v, nil
	}
	if vi, ok := cv.valueInfo[name]; ok && vi.GetType().GetTensorType() != nil && vi.GetType().GetTensorType().GetShape() != nil {
		v, err := cv.weightValue(name, vi.GetType().GetTensorType())
		if err != nil {
			return nil, err
		}
		cv.vals[name] = v
		return v, nil
	}
	return nil, fmt.Errorf("input %q is not produced by an earlier node, an initializer or a graph input", name)
}

// tensor returns the graph tensor slot of v, creating the tensor when v is
// an initializer or a constant used as an operand: a float initializer
// becomes a parameter, anything else a buffer (or, when its shape depends
// on the batch, an extra input, as the zoo declares tensors forward()
// creates outside autograd).
func (cv *converter) tensor(v *value) (int, error) {
	switch v.kind {
	case kAct:
		return v.slot, nil
	case kIgnored:
		return 0, fmt.Errorf("%q (%s) is used, and batchfit does not model it", v.name, v.why)
	}
	if v.transposeOf != nil {
		p, err := cv.paramSlot(v.transposeOf, false)
		if err != nil {
			return 0, err
		}
		if v.slot < 0 {
			out := &value{slot: cv.newSlot(), name: v.name, shape: v.shape}
			v.slot = out.slot
			cv.emit(func(c *bctx) { c.set(out, c.b.Transpose(out.name, c.ids[p], 0, 1)) })
		}
		return v.slot, nil
	}
	if v.kind == kInit && v.isFloat() {
		p, err := cv.paramSlot(v, false)
		if err != nil || !v.paramT {
			return p, err
		}
		// Created as [out, in] for a linear layer; used here as in the file.
		if v.tview == nil {
			v.tview = &value{slot: cv.newSlot(), name: v.name + ".T", shape: v.shape}
			t := v.tview
			cv.emit(func(c *bctx) { c.set(t, c.b.Transpose(t.name, c.ids[p], 0, 1)) })
		}
		return v.tview.slot, nil
	}
	if v.slot >= 0 {
		return v.slot, nil
	}
	dt, ok := onnxDType(v.elem)
	if !ok {
		return 0, fmt.Errorf("constant %q has element type %s", v.name, elemName(v.elem))
	}
	v.slot = cv.newSlot()
	if v.shape.isConst() {
		cv.emit(func(c *bctx) { c.set(v, c.b.Buffer(v.name, c.dims(v.shape, v.name), dt)) })
	} else {
		cv.emit(func(c *bctx) { c.set(v, c.b.Input(v.name, c.dims(v.shape, v.name), dt)) })
	}
	return v.slot, nil
}

// paramSlot returns the parameter tensor of initializer v, created on
// first use. transposed asks for it as [out, in] when v is [in, out] (a
// MatMul weight); the first use decides the orientation, and ok reports
// whether the parameter has the asked one.
func (cv *converter) paramSlot(v *value, transposed bool) (int, error) {
	if v.slot < 0 {
		if v.use == useOwned {
			cv.owned[v]++ // counted twice: a Builder op created it too
		}
		if !v.isFloat() {
			return 0, fmt.Errorf("weight %q is %s, not floating point", v.name, elemName(v.elem))
		}
		v.slot = cv.newSlot()
		v.use = useParam
		v.paramT = transposed && len(v.shape) == 2
		s := v.shape
		if v.paramT {
			s = shape{v.shape[1], v.shape[0]}
		}
		p := &value{name: v.name, slot: v.slot, shape: s}
		cv.emit(func(c *bctx) { c.set(p, c.b.Param(p.name, c.dims(p.shape, p.name))) })
	}
	return v.slot, nil
}

// ownParam marks v as created by a Builder op.
func (cv *converter) ownParam(v *value) {
	if v.use != useNone {
		cv.owned[v]++
		return
	}
	v.use = useOwned
}
