package onnx

// The ops that index, join, cut or pad tensors along axes: Gather, Concat,
// Slice, Split and Pad.

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

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
