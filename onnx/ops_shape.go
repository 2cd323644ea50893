package onnx

// The ops that only change a tensor's shape or layout: Reshape, Flatten,
// Transpose, Unsqueeze, Squeeze and Expand (views or copies, as PyTorch runs them).

import "fmt"

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
