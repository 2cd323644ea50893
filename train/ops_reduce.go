package train

import "github.com/batchfit/batchfit/graph"

// Op-table rules for element-wise and reduction ops written out by hand
// (exp, log, neg, max and sum over a dimension, gather). What each node
// saves is tools/autograd/derivatives.yaml's; what a backward allocates is
// the formula's result.
func addReductionRules() {
	// exp: self: grad * result, so ExpBackward0 saves the result. Under
	// autocast exp is in AT_FORALL_FP32 (aten/src/ATen/autocast_mode.cpp):
	// half inputs run in float32.
	rules[graph.Exp] = rule{cast: castFP32, fwd: saveResult, bwd: gradInput}
	// log: self: grad.div(self.conj()), so LogBackward0 saves self; log is
	// in AT_FORALL_FP32 too.
	rules[graph.Log] = rule{cast: castFP32, fwd: saveSelf, bwd: gradInput}
	// neg: self: grad.neg(), nothing saved; the gradient is a new tensor.
	rules[graph.Neg] = rule{bwd: gradInput}
	// max.dim: values and int64 indices are both new tensors;
	// self: value_selecting_reduction_backward_symint(grad, dim, indices,
	// self.sym_sizes(), keepdim) saves the indices and makes zeros of
	// self's size into which it scatters the gradient.
	rules[graph.MaxDim] = rule{fwd: func(c *fwdCtx) {
		c.saveNew(c.outShape().Numel() * 8)
	}, bwd: gradInput}
	// sum.dim_IntList saves only sizes (sum_backward expands the gradient
	// back to self's size); under autocast sum is in
	// AT_FORALL_FP32_SET_OPT_DTYPE and runs in float32. The expanded
	// gradient is a view, but the tensor it flows to also gets the
	// gradient of its other use (exp(x) / sum(exp(x)) divides by it), and
	// the engine adds the two into a new tensor of self's size
	// (torch/csrc/autograd/input_buffer.cpp, accumulate): counted here as
	// the gradient sum_backward hands on.
	rules[graph.SumDim] = rule{out: fp32UnderAutocast, bwd: gradInput}
	// gather: self: gather_backward(grad, self, dim, index, sparse_grad)
	// saves self itself (not only its sizes) and index, and makes zeros of
	// self's size to scatter_add into. torch 1.13 on the CPU:
	// GatherBackward0 has _saved_self and _saved_index.
	rules[graph.Gather] = rule{fwd: func(c *fwdCtx) {
		if c.requiresGrad(0) {
			c.save(c.in[0])
		}
		c.save(c.in[1])
	}, bwd: gradInput}
}
