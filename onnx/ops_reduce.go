package onnx

// ReduceMean and GlobalAveragePool: both become a mean over axes
// (converter.mean).

import "fmt"

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
