package onnx

// MatMul and Gemm: matrix products, emitted as F.linear when one operand is
// a weight (with the bias Add that follows folded in).

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

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
