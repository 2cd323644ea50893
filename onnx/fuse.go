package onnx

import (
	"math"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/onnx/onnxpb"
)

// Patterns: the decompositions older opsets export for ops PyTorch runs
// as one autograd node. They are matched on the ONNX graph and mapped to
// that node's graph kind, since what autograd saves is the fused op's
// (native_layer_norm saves x, mean and rstd; gelu saves x), not what the
// decomposition would.

// soleConsumer is the node consuming name, when exactly one node does (and
// name is not a graph output).
func (cv *converter) soleConsumer(name string) (int, *onnxpb.NodeProto) {
	cons := cv.consumers[name]
	if len(cons) != 1 || cv.outputs[name] || cv.skip[cons[0]] {
		return -1, nil
	}
	n := cv.nodes[cons[0]]
	if d := n.GetDomain(); d != "" && d != "ai.onnx" {
		return -1, nil
	}
	return cons[0], n
}

// other returns the input of binary node n that is not name.
func other(n *onnxpb.NodeProto, name string) (string, bool) {
	in := n.GetInput()
	if len(in) != 2 || len(n.GetOutput()) < 1 {
		return "", false
	}
	switch {
	case in[0] == name && in[1] != name:
		return in[1], true
	case in[1] == name && in[0] != name:
		return in[0], true
	}
	return "", false
}

// peekScalar is the value of a one-element constant or initializer, read
// from its Constant node when that node has not been converted yet.
func (cv *converter) peekScalar(name string) (float64, bool) {
	if v, ok := cv.vals[name]; ok {
		if !isConstant(v) {
			return 0, false
		}
		return v.scalarValue()
	}
	v := cv.peekConst(name)
	if v == nil {
		return 0, false
	}
	return v.scalarValue()
}

// peekConst decodes the Constant node producing name ahead of time.
func (cv *converter) peekConst(name string) *value {
	i, ok := cv.producer[name]
	if !ok || cv.nodes[i].GetOpType() != "Constant" {
		return nil
	}
	tmp := &converter{m: cv.m, opset: cv.opset, vals: map[string]*value{}}
	n := &nctx{cv: tmp, idx: i, p: cv.nodes[i], op: "Constant", attrs: cv.nodes[i].GetAttribute()}
	if opConstant(n) != nil || n.err != nil {
		return nil
	}
	return tmp.vals[name]
}

// peekInts reads constant integers (axes) the same way.
func (cv *converter) peekInts(name string) ([]int64, bool) {
	v, ok := cv.vals[name]
	if !ok {
		v = cv.peekConst(name)
	}
	if v == nil || !v.hasData || v.ints == nil {
		return nil, false
	}
	out := make([]int64, len(v.ints))
	for i, d := range v.ints {
		c, ok := d.value()
		if !ok {
			return nil, false
		}
		out[i] = c
	}
	return out, true
}

func near(v, want float64) bool { return math.Abs(v-want) <= 1e-5*math.Abs(want) }

// tryGELU matches the erf GELU that torch exports before opset 20 from the
// node n (Div by √2, or Mul by 1/√2):
//
//	x / 1.41421 → Erf → + 1 → x * (·) → (·) * 0.5
//
// and emits one gelu (graph.GELU).
func (cv *converter) tryGELU(n *nctx) (bool, error) {
	in := n.p.GetInput()
	if len(in) != 2 || len(n.p.GetOutput()) != 1 {
		return false, nil
	}
	var x string
	switch n.op {
	case "Div":
		if c, ok := cv.peekScalar(in[1]); ok && near(c, math.Sqrt2) {
			x = in[0]
		}
	case "Mul":
		for j := 0; j < 2; j++ {
			if c, ok := cv.peekScalar(in[1-j]); ok && near(c, 1/math.Sqrt2) {
				x = in[j]
			}
		}
	}
	xv, ok := cv.vals[x]
	if x == "" || !ok || xv.kind != kAct {
		return false, nil
	}
	ei, e := cv.soleConsumer(n.p.GetOutput()[0])
	if e == nil || e.GetOpType() != "Erf" || len(e.GetOutput()) != 1 {
		return false, nil
	}
	ai, a := cv.soleConsumer(e.GetOutput()[0])
	if a == nil || a.GetOpType() != "Add" {
		return false, nil
	}
	if o, ok := other(a, e.GetOutput()[0]); !ok {
		return false, nil
	} else if c, ok := cv.peekScalar(o); !ok || !near(c, 1) {
		return false, nil
	}
	mi, m := cv.soleConsumer(a.GetOutput()[0])
	if m == nil || m.GetOpType() != "Mul" {
		return false, nil
	}
	if o, ok := other(m, a.GetOutput()[0]); !ok || o != x {
		return false, nil
	}
	hi, h := cv.soleConsumer(m.GetOutput()[0])
	if h == nil || h.GetOpType() != "Mul" || len(h.GetOutput()) != 1 {
		return false, nil
	}
	if o, ok := other(h, m.GetOutput()[0]); !ok {
		return false, nil
	} else if c, ok := cv.peekScalar(o); !ok || !near(c, 0.5) {
		return false, nil
	}
	xs, err := cv.tensor(xv)
	if err != nil {
		return false, err
	}
	for _, i := range []int{ei, ai, mi, hi} {
		cv.skip[i] = true
	}
	name := e.GetName()
	if name == "" {
		name = n.opName()
	}
	res := cv.newAct(h.GetOutput()[0], xv.shape.clone(), xv.elem, xv.contig)
	res.strides = xv.strides
	cv.emit(func(c *bctx) { c.set(res, c.b.Act(graph.GELU, name, c.ids[xs], false)) })
	cv.vals[res.name] = res
	return true, nil
}

// tryLayerNorm matches the layer norm that torch exports before opset 17,
// from its first ReduceMean:
//
//	m = ReduceMean(x, axes); d = x - m; v = ReduceMean(d ** 2, axes)
//	y = d / Sqrt(v + eps) [* weight [+ bias]]
//
// over the last dims, and emits one native_layer_norm (graph.LayerNorm).
// Without the weight it is not nn.LayerNorm and stays primitive ops.
func (cv *converter) tryLayerNorm(n *nctx) (bool, error) {
	x := n.in[0]
	if x.kind != kAct || len(n.p.GetOutput()) != 1 || n.i("keepdims", 1) == 0 {
		return false, nil
	}
	axes, ok := cv.reduceAxes(n.p)
	if !ok || len(axes) == 0 {
		return false, nil
	}
	r := len(x.shape)
	seen := map[int]bool{}
	for _, a := range axes {
		j, ok := normAxis(a, r)
		if !ok || seen[j] {
			return false, nil
		}
		seen[j] = true
	}
	first := r - len(axes)
	for j := first; j < r; j++ {
		if !seen[j] {
			return false, nil // not the trailing dims
		}
	}
	xname := n.p.GetInput()[0]
	mean := n.p.GetOutput()[0]
	di, d := cv.soleConsumer(mean)
	if d == nil || d.GetOpType() != "Sub" || len(d.GetInput()) != 2 || d.GetInput()[0] != xname || d.GetInput()[1] != mean {
		return false, nil
	}
	dOut := d.GetOutput()[0]
	cons := cv.consumers[dOut]
	if len(cons) != 2 || cv.outputs[dOut] {
		return false, nil
	}
	var pi, qi = -1, -1
	for _, c := range cons {
		switch cv.nodes[c].GetOpType() {
		case "Pow":
			pi = c
		case "Div":
			qi = c
		}
	}
	if pi < 0 || qi < 0 || cv.skip[pi] || cv.skip[qi] {
		return false, nil
	}
	p, q := cv.nodes[pi], cv.nodes[qi]
	if len(p.GetInput()) != 2 || p.GetInput()[0] != dOut {
		return false, nil
	}
	if c, ok := cv.peekScalar(p.GetInput()[1]); !ok || c != 2 {
		return false, nil
	}
	r2i, r2 := cv.soleConsumer(p.GetOutput()[0])
	if r2 == nil || r2.GetOpType() != "ReduceMean" {
		return false, nil
	}
	if ax2, ok := cv.reduceAxes(r2); !ok || !sameAxes(ax2, axes, r) || intAttr(r2, "keepdims", 1) == 0 {
		return false, nil
	}
	ei, e := cv.soleConsumer(r2.GetOutput()[0])
	if e == nil || e.GetOpType() != "Add" {
		return false, nil
	}
	if o, ok := other(e, r2.GetOutput()[0]); !ok {
		return false, nil
	} else if _, ok := cv.peekScalar(o); !ok {
		return false, nil
	}
	si, s := cv.soleConsumer(e.GetOutput()[0])
	if s == nil || s.GetOpType() != "Sqrt" {
		return false, nil
	}
	if qi2, _ := cv.soleConsumer(s.GetOutput()[0]); qi2 != qi || len(q.GetInput()) != 2 || q.GetInput()[0] != dOut || q.GetInput()[1] != s.GetOutput()[0] {
		return false, nil
	}
	// The affine part: * weight, then optionally + bias.
	wi, w := cv.soleConsumer(q.GetOutput()[0])
	if w == nil || w.GetOpType() != "Mul" {
		return false, nil
	}
	wname, ok := other(w, q.GetOutput()[0])
	wv := cv.vals[wname]
	if !ok || wv == nil || wv.kind != kInit || wv.transposeOf != nil || !wv.shape.equal(x.shape[first:]) {
		return false, nil
	}
	out := w.GetOutput()[0]
	skip := []int{di, pi, r2i, ei, si, qi, wi}
	var bv *value
	if bi, b := cv.soleConsumer(out); b != nil && b.GetOpType() == "Add" {
		if bname, ok := other(b, out); ok {
			if v := cv.vals[bname]; v != nil && v.kind == kInit && v.transposeOf == nil && v.shape.equal(x.shape[first:]) {
				bv = v
				out = b.GetOutput()[0]
				skip = append(skip, bi)
			}
		}
	}
	xs, err := cv.tensor(x)
	if err != nil {
		return false, err
	}
	for _, i := range skip {
		cv.skip[i] = true
	}
	return true, cv.layerNorm(n, xs, x, first, wv, bv, out)
}

// reduceAxes reads a reduction's axes: an attribute, or (opset 18) a
// constant input.
func (cv *converter) reduceAxes(n *onnxpb.NodeProto) ([]int64, bool) {
	for _, a := range n.GetAttribute() {
		if a.GetName() == "axes" {
			return a.GetInts(), true
		}
	}
	if in := n.GetInput(); len(in) > 1 && in[1] != "" {
		return cv.peekInts(in[1])
	}
	return nil, false
}

func sameAxes(a, b []int64, r int) bool {
	if len(a) != len(b) {
		return false
	}
	set := map[int]bool{}
	for _, x := range a {
		j, ok := normAxis(x, r)
		if !ok {
			return false
		}
		set[j] = true
	}
	for _, x := range b {
		j, ok := normAxis(x, r)
		if !ok || !set[j] {
			return false
		}
	}
	return true
}

func intAttr(n *onnxpb.NodeProto, name string, def int64) int64 {
	for _, a := range n.GetAttribute() {
		if a.GetName() == name {
			return a.GetI()
		}
	}
	return def
}
