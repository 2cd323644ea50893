package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// Op-table rules for the ops of torchvision's newer vision models
// (stochastic depth, Swin's padding, roll, slices, relative position bias
// and attention mask). Sources as in ops.go: tools/autograd/derivatives.yaml
// for what each node saves, the aten kernels for what they allocate.
func addVisionRules() {
	// Tensors forward makes without autograd: the stochastic-depth noise
	// (empty + bernoulli_ + div_, all in place on one allocation) and
	// constants such as new_zeros, arange or a mask. Only the output is
	// allocated; a floating one takes the run-time dtype of its "like"
	// input, an integer one keeps its own.
	rules[graph.Rand] = rule{}
	rules[graph.Full] = rule{out: func(m *micro, c *fwdCtx) graph.DType {
		if dt := m.g.Tensors[c.op.Output].DType; !dt.IsFloat() || !c.in[0].dt.IsFloat() {
			return dt
		}
		return c.in[0].dt
	}, alias: func(m *micro, c *fwdCtx, out graph.DType) bool {
		// a tensor the model keeps on the host (graph.Attr.Host) exists
		// before the step and takes no device memory: it stands on its
		// "like" input, a parameter, and allocates nothing
		return c.op.Attr.Host
	}}
	// eq / ne: a bool result, not differentiable.
	rules[graph.Compare] = rule{out: func(m *micro, c *fwdCtx) graph.DType { return graph.Bool }}
	// masked_fill.Scalar: self: grad.masked_fill(mask, 0), so the node
	// saves mask when self requires grad; the backward allocates the
	// masked gradient.
	rules[graph.MaskedFill] = rule{fwd: func(c *fwdCtx) {
		if c.requiresGrad(0) {
			c.save(c.in[1])
		}
	}, bwd: gradInput}
	// constant_pad_nd saves only the pads; its backward is constant_pad_nd
	// of the gradient with the pads negated, a new tensor of the input's
	// size (a clone when every pad is zero). reflection_pad and
	// replication_pad save self (derivatives.yaml:
	// reflection_pad2d_backward(grad, self, padding)), and their backward
	// makes a gradient of the input's size.
	rules[graph.Pad] = rule{fwd: func(c *fwdCtx) {
		if c.op.Attr.Pad != graph.PadConstant {
			c.save(c.in[0])
		}
	}, bwd: gradInput}
	// roll: RollBackward0 saves shifts and dims; the backward rolls the
	// gradient back. Over k dims roll_common makes k-1 intermediate
	// tensors (roll(roll(x, s0, d0), tail...)), alive until the last one
	// is made, in forward and in backward alike.
	rules[graph.Roll] = rule{fwd: func(c *fwdCtx) {
		for i := 1; i < c.op.Attr.Count; i++ {
			c.local(c.numel(0)*c.in[0].dt.Size(), trace.Transient)
		}
	}, bwd: func(c *bwdCtx) {
		var tmp []*storage
		for i := 1; i < c.op.Attr.Count; i++ {
			tmp = append(tmp, c.alloc(c.numel(0)*c.gdt.Size()))
		}
		c.gradIn(0)
		for _, st := range tmp {
			c.m.sim.unref(st)
		}
	}}
	// slice: a view; SliceBackward0 saves sizes and slice_backward writes
	// the gradient into zeros of the input's size.
	rules[graph.Slice] = rule{bwd: gradInput}
	// index.Tensor: IndexBackward0 saves indices (and self's sizes);
	// index_backward scatters into zeros of self's size
	// (grad.new_zeros(self.sizes()) then index_put_ with accumulate).
	// The end of a Python function: its inputs were the tensors its
	// locals kept; reading them was the point.
	rules[graph.Release] = rule{}
	// pow.Tensor_Scalar: PowBackward0 keeps self (and the exponent, a
	// number); rsqrt: RsqrtBackward0 keeps its result (derivatives.yaml).
	// Both are on CUDA autocast's AT_FORALL_FP32 (aten/src/ATen/
	// autocast_mode.h: pow.Tensor_Scalar, rsqrt): a half input is cast to
	// a float32 copy, which is the self PowBackward0 keeps. pow_backward
	// (FunctionsManual.cpp) is grad * (exponent * self.pow(exponent - 1)):
	// the power and its scaled copy are temporaries of the expression,
	// alive until the product exists.
	rules[graph.Pow] = rule{cast: castFP32, fwd: saveSelf, bwd: func(c *bwdCtx) {
		n := c.numel(0) * c.inDT(0).Size()
		p := c.alloc(n)
		s := c.alloc(n)
		c.gradIn(0)
		c.m.sim.unref(p)
		c.m.sim.unref(s)
	}}
	rules[graph.Rsqrt] = rule{cast: castFP32, fwd: saveResult, bwd: gradInput}
	// A user's autograd.Function: what ctx.save_for_backward kept, as the
	// capture recorded it, and one gradient per argument that needs one.
	// What its backward computes inside is the user's code, not known:
	// only the gradients it returns are counted.
	rules[graph.Custom] = rule{fwd: func(c *fwdCtx) {
		for _, i := range c.op.Attr.Saved {
			if i >= 0 && i < len(c.in) {
				c.save(c.in[i])
			}
		}
	}, bwd: func(c *bwdCtx) {
		for j := 0; j < c.op.Attr.Count && j < len(c.op.Inputs); j++ {
			if c.needs(j) {
				c.gradIn(j)
			}
		}
	}}
	// Sequence parallelism's collectives write new tensors and save
	// nothing; each one's backward is the other, a new tensor of the
	// input's size. A gathered tensor is remembered so that a Linear
	// saving it keeps the shard (fwdCtx.save).
	rules[graph.AllGather] = rule{fwd: func(c *fwdCtx) {
		if c.m.gathered == nil {
			c.m.gathered = map[*storage]*storage{}
		}
		c.m.gathered[c.out.st] = c.in[0].st
		c.m.sim.ref(c.in[0].st)
	}, bwd: func(c *bwdCtx) { c.gradIn(0) }}
	rules[graph.ReduceScatter] = rule{bwd: func(c *bwdCtx) { c.gradIn(0) }}
	rules[graph.Index] = rule{fwd: func(c *fwdCtx) {
		c.save(c.in[1])
	}, bwd: gradInput}
}

// meanForward: mean.dim. derivatives.yaml gives self:
// mean_backward(grad, self.sym_sizes(), dim, self.sym_numel(), keepdim).
// Torch 1.13's autograd codegen has no saved-value pattern for
// self.sym_numel(), so MeanBackward1 saves self itself (observed on 1.13
// CPU: x.mean((-1, -2), keepdim=True).grad_fn._saved_self is x, and so for
// adaptive_avg_pool2d(x, 1), which runs that mean); later codegen saves
// only self_sym_numel. The whole input stays alive, as when another node
// saves it.
func meanForward(c *fwdCtx) {
	// mean() over every element is MeanBackward0: sizes and numel only,
	// in every release
	if c.m.sim.s.Profile.MeanDimSavesSelf && !c.op.Attr.All {
		c.save(c.in[0])
	}
}
