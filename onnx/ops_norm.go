package onnx

// BatchNormalization, LayerNormalization and Softmax: the normalizations
// over an axis (LayerNormalization's converter.layerNorm also serves the fusion
// of a decomposed layer norm, fuse.go).

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

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
