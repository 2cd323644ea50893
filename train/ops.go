package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// The op table: for each op kind, how autocast treats its inputs, the dtype
// of its output, what its autograd node saves, and what its backward
// allocates. This is the one place these rules live. Sources:
// tools/autograd/derivatives.yaml (saved tensors), aten/src/ATen/autocast_mode.cpp
// (cast lists), the aten kernels named at each rule.

type castPolicy uint8

const (
	castNone  castPolicy = iota // runs in its input dtype
	castLower                   // AT_FORALL_LOWER_PRECISION_FP: floating inputs cast to the autocast dtype
	castFP32                    // AT_FORALL_FP32: half inputs cast to float32
)

type rule struct {
	cast castPolicy
	out  func(m *micro, c *fwdCtx) graph.DType
	fwd  func(c *fwdCtx)
	bwd  func(c *bwdCtx)
	// alias reports that the op returns its input itself (no memory).
	alias func(m *micro, c *fwdCtx, out graph.DType) bool
	// pre runs before the output is allocated: temporaries a kernel makes
	// before its result (im2col columns, per-group pieces). Its locals are
	// released when the op returns, after the output exists.
	pre func(c *fwdCtx)
	// storage returns the storage the output is written into when it
	// exists already (a preallocated cache), or nil.
	storage func(c *fwdCtx) *storage
	// cache: a new output is the key/value cache's (trace.KVCache).
	cache bool
}

var rules map[graph.Kind]rule

func init() {
	rules = map[graph.Kind]rule{
		// F.linear → addmm(bias, x, W.t()) (or matmul on a 2-D view of a
		// contiguous N-D input): addmm saves mat1 = x when W requires grad
		// and mat2 = W.t() (a view of W or of its autocast copy) when x does.
		//
		// A quantized weight (graph.Quant) runs bitsandbytes' or GPTQ's
		// layer instead: see quant.go.
		graph.Linear: {cast: castLower, pre: quantLinearPre, out: linearOut, fwd: func(c *fwdCtx) {
			if q := quantOf(c.m.g, c.op); q != nil {
				quantLinearForward(c, q)
				return
			}
			c.gemm()
			if linearLt(c) {
				c.gemmLt()
			}
			if c.m.g.Tensors[c.op.Weight].RequiresGrad {
				c.save(c.in[0])
			}
			if c.requiresGrad(0) {
				c.save(c.w)
			}
			if n := c.m.sim.s.Profile.CublasLtWorkspaceTransientBytes; n > 0 && c.op.Bias != graph.None && !c.m.sim.s.CPU {
				c.m.sim.temp(n, trace.Workspace)
			}
		}, bwd: func(c *bwdCtx) {
			if q := quantOf(c.m.g, c.op); q != nil {
				quantLinearBackward(c, q)
				return
			}
			c.gemm()
			if linearBiasApart(c) {
				// AddBackward0 of output.add_(bias) runs first: the bias
				// gradient (sum_to) goes to AccumulateGrad before the
				// matmul's backward allocates anything.
				c.gradParam(c.op.Bias)
				c.linearBiasSum()
				c.handOn()
				cp := c.linearViewCopy()
				c.gradIn(0)
				c.gradWeightView()
				c.dropViewCopy(cp)
				return
			}
			cp := c.linearViewCopy()
			c.gradIn(0)
			c.gradWeightView()
			// addmm's bias gradient is the incoming gradient itself,
			// which the engine sums to the bias's shape after apply()
			// returns (validate_outputs, sum_to)
			c.applyReturns()
			c.gradParam(c.op.Bias)
			c.linearBiasSum()
			c.dropViewCopy(cp)
		}},
		// matmul/bmm of two activations: each operand is saved for the
		// other's gradient.
		graph.MatMul: {cast: castLower, fwd: func(c *fwdCtx) {
			c.gemm()
			if c.requiresGrad(1) {
				c.save(c.in[0])
			}
			if c.requiresGrad(0) {
				c.save(c.in[1])
			}
		}, bwd: func(c *bwdCtx) {
			c.gemm()
			c.gradIn(0)
			c.gradIn(1)
		}},
		// convolution: ConvolutionBackward0 saves input and weight always.
		// The kernels' temporaries are rules of their own: conv_cpu.go on
		// the CPU, conv_cudnn.go (cuDNN workspaces) on the GPU.
		graph.Conv2d: {cast: castLower, pre: convCPUForward, fwd: func(c *fwdCtx) {
			c.save(c.in[0])
			c.save(c.w)
			convCUDAForward(c)
		}, bwd: convBackward},
		// conv_transpose2d: ConvolutionBackward0 saves input and weight, as
		// for any convolution. A transposed convolution is the backward
		// data pass of the convolution that maps its output's shape to its
		// input's: cuDNN runs it with that convolution's kernels (forward:
		// backward-data; input gradient: forward; weight gradient:
		// backward-filter with the roles swapped), and the CPU's
		// slow_conv_transpose2d unfolds columns of that convolution.
		graph.ConvTranspose2d: {cast: castLower, fwd: func(c *fwdCtx) {
			c.save(c.in[0])
			c.save(c.w)
			in, out := c.shape(0), c.outShape()
			if c.m.sim.s.CPU {
				c.local(convColumns(out, in, c.op.Attr, c.in[0].dt), trace.Transient)
				return
			}
			c.m.sim.cudnnKernel("bwd_data", out, in, c.op.Attr, c.in[0].dt)
		}, bwd: func(c *bwdCtx) {
			in := c.m.g.Tensors[c.op.Inputs[0]].Shape
			out := c.m.g.Tensors[c.op.Output].Shape
			if !c.m.sim.s.CPU {
				cudnnGrads(c, out, in, "fwd")
				return
			}
			if c.needs(0) {
				c.gradIn(0)
			}
			if w := c.op.Weight; w != graph.None && c.m.g.Tensors[w].RequiresGrad && c.m.pidx[w] >= 0 {
				c.gradParam(w)
			}
			c.gradParam(c.op.Bias)
			c.temp(convColumns(out, in, c.op.Attr, c.inDT(0)))
		}},
		// native_batch_norm / cudnn_batch_norm in training: input, weight,
		// running mean and var, and save_mean / save_invstd of C elements in
		// float32 (the cuDNN reserve space is empty without a fused
		// activation).
		// On the CPU the kernel's temporaries are rules of their own
		// (bn_cpu.go).
		graph.BatchNorm: {pre: batchNormCPUPre, fwd: func(c *fwdCtx) {
			if c.m.sim.noGrad {
				// eval mode normalizes with the running statistics:
				// no batch statistics are computed or kept
				return
			}
			c.save(c.in[0])
			c.save(c.w)
			for _, b := range c.op.Buffers[:min(2, len(c.op.Buffers))] {
				c.save(c.m.val[b])
			}
			if batchNormCPU(c) {
				batchNormCPUForward(c)
				return
			}
			ch := c.shape(0)[1]
			c.saveNew(ch * 4)
			c.saveNew(ch * 4)
		}, bwd: func(c *bwdCtx) {
			if c.m.sim.s.CPU {
				batchNormCPUBackward(c)
				return
			}
			c.gradIn(0)
			c.gradParam(c.op.Weight)
			c.gradParam(c.op.Bias)
		}},
		// at::instance_norm: the affine weight and bias repeated to N×C
		// (weight.repeat(N), in their own dtype), the input viewed as
		// (1, N×C, ...) and batch_norm over it, whose node (NativeBatchNorm
		// or CudnnBatchNorm) saves that input view, the repeated weight and
		// save_mean / save_invstd of N×C elements in float32; there are no
		// running statistics (nn.InstanceNorm's track_running_stats is
		// off). Backward makes the repeated weight's and bias's gradients,
		// which RepeatBackward sums to C. Autocast lists none of these ops:
		// the input's dtype runs.
		graph.InstanceNorm: {fwd: func(c *fwdCtx) {
			s := c.shape(0)
			nc := s[0] * s[1]
			if c.w.st != nil {
				c.saveNew(nc * c.w.dt.Size())
			}
			if c.b.st != nil {
				c.local(nc*c.b.dt.Size(), trace.Transient)
			}
			c.save(c.in[0])
			c.saveNew(nc * 4)
			c.saveNew(nc * 4)
		}, bwd: func(c *bwdCtx) {
			c.gradIn(0)
			s := c.m.g.Tensors[c.op.Inputs[0]].Shape
			nc := s[0] * s[1]
			for _, p := range []graph.TensorID{c.op.Weight, c.op.Bias} {
				if p == graph.None || !c.m.g.Tensors[p].RequiresGrad {
					continue
				}
				rep := c.alloc(nc * c.m.g.Tensors[p].DType.Size())
				c.gradParam(p)
				c.m.sim.unref(rep)
			}
		}},
		// native_layer_norm (fp32 under autocast): input, weight, bias and
		// mean / rstd of one float32 per normalized row. The saved input is
		// the argument itself even when it is not contiguous (a permuted
		// view): layer_norm_cpu / layer_norm_cuda then work on
		// input.expect_contiguous(), a temporary copy, and so does
		// layer_norm_backward.
		graph.LayerNorm: {cast: castFP32, fwd: func(c *fwdCtx) {
			if c.op.Attr.InputCopy {
				c.local(c.numel(0)*c.in[0].dt.Size(), trace.Transient)
			}
			c.save(c.in[0])
			c.save(c.w)
			c.save(c.b)
			rows := c.numel(0) / normalizedNumel(c)
			c.saveNew(rows * 4)
			c.saveNew(rows * 4)
		}, bwd: func(c *bwdCtx) {
			var x *storage
			if c.op.Attr.InputCopy {
				x = c.alloc(c.numel(0) * c.inDT(0).Size())
			}
			c.gradIn(0)
			c.gradParam(c.op.Weight)
			c.gradParam(c.op.Bias)
			c.m.sim.unref(x)
		}},
		graph.RMSNorm: {out: rmsNormOut, fwd: rmsNormForward, bwd: rmsNormBackward},
		// relu: threshold_backward needs the result (relu_ saves the
		// mutated input, the same storage).
		graph.ReLU: {fwd: saveResult, bwd: gradInput},
		// leaky_relu_backward(grad, self, slope, self_is_result): the input
		// out of place, the result in place (leaky_relu_ overwrote self).
		graph.LeakyReLU: {fwd: func(c *fwdCtx) {
			if c.op.Attr.Inplace {
				saveResult(c)
			} else {
				saveSelf(c)
			}
		}, bwd: gradInput},
		graph.Sigmoid: {fwd: saveResult, bwd: gradInput},
		graph.Tanh:    {fwd: saveResult, bwd: gradInput},
		// sqrt: grad / (2 * result); reciprocal: -grad * result * result,
		// and autocast runs reciprocal in float32 (AT_FORALL_FP32, beside
		// rsqrt and exp) while sqrt keeps the input's dtype.
		graph.Sqrt:       {fwd: saveResult, bwd: gradInput},
		graph.Reciprocal: {cast: castFP32, fwd: saveResult, bwd: gradInput},
		// gelu, silu, hardswish, hardsigmoid, hardtanh (nn.ReLU6):
		// backward needs the input (gelu_backward, silu_backward,
		// hardswish_backward, hardsigmoid_backward, hardtanh_backward all
		// take self). The in-place variants save a copy of the input made
		// before it is overwritten (see saveSelfOrCopy).
		graph.GELU:        {fwd: saveSelfOrCopy, bwd: gradInput},
		graph.GELUTanh:    {fwd: saveSelfOrCopy, bwd: gradInput},
		graph.SiLU:        {fwd: saveSelfOrCopy, bwd: gradInput},
		graph.Hardswish:   {fwd: saveSelfOrCopy, bwd: gradInput},
		graph.Hardsigmoid: {fwd: saveSelfOrCopy, bwd: gradInput},
		graph.Hardtanh:    {fwd: saveSelfOrCopy, bwd: gradInput},
		// erf: 2 / sqrt(pi) * exp(-self^2) * grad needs self.
		graph.Erf: {fwd: saveSelfOrCopy, bwd: gradInput},
		// _softmax / _log_softmax save their result. Under autocast softmax
		// is in fp32_set_opt_dtype: it computes in float32.
		graph.Softmax:    {out: fp32UnderAutocast, fwd: saveResult, bwd: gradInput},
		graph.LogSoftmax: {out: fp32UnderAutocast, fwd: saveResult, bwd: gradInput},
		// In eval mode F.dropout(training=False) returns its input.
		graph.Dropout: {fwd: dropoutForward, bwd: gradInput,
			alias: func(m *micro, c *fwdCtx, out graph.DType) bool { return m.sim.noGrad }},
		// max_pool2d_with_indices saves self and the int64 indices.
		graph.MaxPool2d: {fwd: func(c *fwdCtx) {
			c.save(c.in[0])
			c.saveNew(c.outShape().Numel() * 8)
		}, bwd: gradInput},
		graph.AvgPool2d: {fwd: saveSelf, bwd: gradInput},
		// adaptive_avg_pool2d to (1, 1) is computed as mean over H, W
		// (saves only sizes); otherwise _adaptive_avg_pool2d saves self.
		graph.AdaptiveAvgPool2d: {fwd: func(c *fwdCtx) {
			s := c.outShape()
			if s[2] != 1 || s[3] != 1 {
				c.save(c.in[0])
			}
		}, bwd: gradInput},
		graph.Mean: {fwd: meanForward, bwd: gradInput},
		// Views: no memory. The backward of a view of the same size is a
		// view of the gradient; select, narrow and expand allocate a
		// gradient the size of their input. The view of the gradient is
		// laid out as gradlayout.go says: reordered back for a transpose
		// or permute, reshaped for the others, and where a strided
		// gradient cannot be reshaped as a view, reshape copies it
		// (clone(at::MemoryFormat::Contiguous)): a new gradient.
		graph.View: {bwd: func(c *bwdCtx) {
			out := c.m.g.Tensors[c.op.Output].Shape
			if out.Numel() != c.numel(0) {
				c.gradIn(0)
				return
			}
			in := c.m.g.Tensors[c.op.Inputs[0]].Shape
			if p := c.op.Attr.Perm; len(p) == len(in) && len(p) == len(out) {
				c.passView(0, permuteBack(out, in, c.gst, p))
				return
			}
			if c.gst == nil {
				c.passView(0, nil)
				return
			}
			st, ok := viewStrides(out, c.gst, in)
			if !ok {
				c.gradIn(0)
				return
			}
			c.passView(0, layoutOf(in, st))
		}},
		// A copy saves nothing and passes its gradient through. The
		// .contiguous() of an attention output seen in its query's layout
		// copies nothing where the kernel laid the output out as the
		// query (attentionForward's laidOut).
		graph.Contiguous: {bwd: func(c *bwdCtx) { c.passIn(0) },
			alias: func(m *micro, c *fwdCtx, out graph.DType) bool { return m.contiguousAttention(c.op.Inputs[0]) }},
		// .to(dtype): ToCopyBackward0 allocates the gradient in the source
		// dtype.
		graph.Cast: {out: castOut,
			alias: func(m *micro, c *fwdCtx, out graph.DType) bool { return c.in[0].dt == out && !c.op.Attr.InputCopy },
			bwd: func(c *bwdCtx) {
				if c.inDT(0) == c.m.val[c.op.Output].dt {
					c.passIn(0)
				} else {
					c.gradIn(0)
				}
			}},
		// add saves nothing; each input gets the gradient itself, or its
		// sum over broadcast dims.
		graph.Add: {out: promoteInputs, pre: cpuPromoteCopies, bwd: func(c *bwdCtx) {
			out := c.m.g.Tensors[c.op.Output].Shape.Numel()
			for j := range c.op.Inputs {
				if c.numel(j) == out {
					c.passIn(j)
				} else {
					c.gradIn(j)
				}
			}
		}},
		// mul.Tensor saves other if self requires grad and self if other
		// does; mul by a Python number saves nothing. In backward,
		// grad * other has the output's size; an operand that was broadcast
		// (an SE scale [N, C, 1, 1], ConvNeXt's layer_scale [C, 1, 1]) gets
		// it summed down to its own size by the engine (sum_to), so the
		// full-size product is a temporary.
		graph.Mul: {out: promoteInputs, pre: cpuPromoteCopies, fwd: func(c *fwdCtx) {
			if c.op.Attr.Scalar || len(c.in) < 2 {
				return
			}
			if c.requiresGrad(0) {
				c.save(c.in[1])
			}
			if c.requiresGrad(1) {
				c.save(c.in[0])
			}
		}, bwd: func(c *bwdCtx) {
			out := c.m.g.Tensors[c.op.Output].Shape.Numel()
			for j := range c.op.Inputs {
				if !c.needs(j) {
					continue
				}
				if c.numel(j) < out {
					full := c.alloc(out * c.gdt.Size())
					c.gradIn(j)
					c.m.sim.unref(full)
					continue
				}
				c.gradIn(j)
			}
		}},
		// cat saves sizes; its backward narrows the gradient (views with
		// the gradient's strides over each input's shape).
		graph.Cat: {bwd: func(c *bwdCtx) {
			g := stridesOf(c.m.g.Tensors[c.op.Output].Shape, c.gst)
			for j := range c.op.Inputs {
				c.passView(j, layoutOf(c.m.g.Tensors[c.op.Inputs[j]].Shape, g))
			}
		}},
		// embedding saves the indices; embedding_dense_backward allocates a
		// dense gradient for the whole table.
		graph.Embedding: {out: func(m *micro, c *fwdCtx) graph.DType { return c.w.dt }, fwd: func(c *fwdCtx) {
			c.save(c.in[0])
		}, bwd: func(c *bwdCtx) { c.gradParam(c.op.Weight) }},
		graph.Attention:    {cast: castLower, fwd: attentionForward, bwd: attentionBackward},
		graph.CrossEntropy: {out: lossDType, fwd: crossEntropyForward, bwd: crossEntropyBackward},
		// mse_loss (fp32 under autocast) saves self and target.
		graph.MSELoss: {cast: castFP32, out: lossDType, fwd: func(c *fwdCtx) {
			c.save(c.in[0])
			c.save(c.in[1])
		}, bwd: gradInput},
	}
	rules[graph.NewGELU] = rule{out: newGELUOut, fwd: newGELUForward, bwd: newGELUBackward}
	addVisionRules()
	addReductionRules()
	rules[graph.KVCache] = kvCacheRule()
}

// linearLt says whether F.linear's addmm runs on cuBLASLt with the bias
// in its epilogue: addmm_out_cuda_impl takes the Lt path when
// isInputCompliesAddmmCudaLt (aten/src/ATen/native/cuda/Blas.cpp) holds: a
// 1-D bias of the output's width, a float, half or bfloat16 operand, and
// both matrices larger than one in each dimension. F.linear reaches addmm
// for a 2-D input and, on a 2-D view, for a contiguous N-D one it fuses
// (linearBiasApart covers the rest).
func linearLt(c *fwdCtx) bool {
	if c.op.Bias == graph.None || c.m.sim.s.CPU {
		return false
	}
	switch c.in[0].dt {
	case graph.F32, graph.F16, graph.BF16:
	default:
		return false
	}
	in := c.m.g.Tensors[c.op.Inputs[0]].Shape
	if len(in) > 2 && (c.op.Attr.InputCopy || len(in) > 3 && !c.m.sim.s.Profile.LinearFusedAnyRank) {
		return false
	}
	w := c.m.g.Tensors[c.op.Weight].Shape
	if len(in) == 0 || len(w) != 2 {
		return false
	}
	k := in[len(in)-1]
	rows := in.Numel() / max(k, 1)
	return rows > 1 && k > 1 && w[0] > 1 && w[1] > 1
}

// linearBiasSum is the CUDA reduction that sums a linear layer's output
// gradient [rows, out] down to its bias (sum_to in the engine's
// validate_outputs), after the bias gradient it writes is allocated: its
// staging buffer (reduce_cuda.go).
func (c *bwdCtx) linearBiasSum() {
	b := c.op.Bias
	if b == graph.None || !c.m.g.Tensors[b].RequiresGrad || c.m.pidx[b] < 0 {
		return
	}
	out := c.m.g.Tensors[b].Shape.Numel()
	if out == 0 {
		return
	}
	rows := c.m.g.Tensors[c.op.Output].Shape.Numel() / out
	c.biasGradReduce(rows, out, c.gdt)
}

// linearViewCopy is the copy a linear's N-D output makes of a strided
// gradient: F.linear folds an input of more than two dims into one 2-D
// product and views the result back (_flatten_nd_linear's
// result.view(...), matmul's _unsafe_view; aten/src/ATen/native/Linear.cpp,
// LinearAlgebra.cpp), so its backward first reshapes the gradient to
// [rows, out] (ViewBackward0, UnsafeViewBackward0: grad.reshape), which
// copies a gradient whose strides admit no such view (viewStrides): a
// permuted one, which a reentrant checkpoint's detached input hands the
// layer below (handOnDetached). The copy is the 2-D product's gradient,
// held until that node's apply returns (dropViewCopy); the gradient
// itself goes as the view's node returns (consume). nil where no copy
// is made.
func (c *bwdCtx) linearViewCopy() *storage {
	out := c.m.g.Tensors[c.op.Output].Shape
	if len(out) <= 2 || c.gst == nil || out.Numel() == 0 {
		return nil
	}
	n := out[len(out)-1]
	if _, ok := viewStrides(out, c.gst, graph.Shape{out.Numel() / n, n}); ok {
		return nil
	}
	cp := c.alloc(out.Numel() * c.gdt.Size())
	c.consume()
	return cp
}

// dropViewCopy frees linearViewCopy's copy once the product's backward
// has made its gradients (AddmmBackward0's inputs go when the engine's
// call_function returns, after validate_outputs has summed the bias's).
func (c *bwdCtx) dropViewCopy(cp *storage) {
	if cp != nil {
		c.m.sim.unref(cp)
	}
}

// linearBiasApart: F.linear did not take a fused addmm (aten/src/ATen/
// native/Linear.cpp): the input has more than two dims and was not
// contiguous (matmul's path), or has more than three and the release fuses
// only 3-D inputs; the bias is then added by output.add_(bias).
func linearBiasApart(c *bwdCtx) bool {
	if c.op.Bias == graph.None {
		return false
	}
	rank := len(c.m.g.Tensors[c.op.Inputs[0]].Shape)
	if rank <= 2 {
		return false
	}
	return c.op.Attr.InputCopy || (rank > 3 && !c.m.sim.s.Profile.LinearFusedAnyRank)
}

// normalizedNumel is the element count of a layer norm's normalized_shape:
// the weight's, or, without one (elementwise_affine=False), the input's
// last Attr.Dim dims.
func normalizedNumel(c *fwdCtx) int64 {
	if c.op.Weight != graph.None {
		return c.m.g.Tensors[c.op.Weight].Shape.Numel()
	}
	s := c.m.g.Tensors[c.op.Inputs[0]].Shape
	n := int64(1)
	for _, d := range s[max(len(s)-max(c.op.Attr.Dim, 1), 0):] {
		n *= d
	}
	return max(n, 1)
}

func saveResult(c *fwdCtx) { c.save(c.out) }
func saveSelf(c *fwdCtx)   { c.save(c.in[0]) }

// saveSelfOrCopy is the saving of an activation whose backward formula uses
// self. For the in-place variant (nn.ReLU6(inplace=True) → hardtanh_,
// nn.SiLU(inplace=True) → silu_, nn.Hardswish(inplace=True) → hardswish_)
// the autograd codegen saves self.clone() taken before the kernel
// overwrites self: a new storage of the input's size, while the output
// keeps the input's storage. Observed on torch 1.13 CPU:
// y = F.hardtanh_(x, 0, 6); y.grad_fn._saved_self has its own storage and
// equals the original x (likewise silu_, hardswish_ and hardsigmoid_).
// The codegen takes the copy only where it builds a node (grad mode on
// and an input that requires grad): not under no_grad, so not in a
// reentrant checkpoint's forward, whose recompute takes it.
func saveSelfOrCopy(c *fwdCtx) {
	if c.op.Attr.Inplace && (c.m.sim.noGrad || c.m.gradOff) {
		return // no node, no copy
	}
	if c.op.Attr.Inplace {
		c.saveNew(c.numel(0) * c.in[0].dt.Size())
		return
	}
	c.save(c.in[0])
}

func gradInput(c *bwdCtx) { c.gradIn(0) }

// fp32UnderAutocast: CUDA autocast's fp32_set_opt_dtype policy (softmax,
// log_softmax, sum) passes dtype=float32 to the kernel, which reads the
// half input and writes float32. CPU autocast lists none of them
// (AutocastCPU in aten/src/ATen/autocast_mode.cpp): they run in their
// input's dtype there.
func fp32UnderAutocast(m *micro, c *fwdCtx) graph.DType {
	if m.sim.amp && !m.sim.s.CPU {
		return graph.F32
	}
	return c.in[0].dt
}

func lossDType(m *micro, c *fwdCtx) graph.DType {
	if m.sim.amp {
		return graph.F32
	}
	return c.in[0].dt
}

func promoteInputs(m *micro, c *fwdCtx) graph.DType {
	dt := c.in[0].dt
	for _, v := range c.in[1:] {
		if v.dt == dt {
			continue
		}
		switch {
		case v.dt.IsFloat() && !dt.IsFloat():
			dt = v.dt
		case v.dt.IsFloat() == dt.IsFloat() && v.dt.Size() > dt.Size():
			dt = v.dt
		}
	}
	return dt
}

// cpuPromoteCopies: on the CPU, TensorIterator gives a binary op's kernel
// operands of the common dtype, copying an input of another dtype into a
// temporary before the output is allocated (TensorIteratorBase::
// compute_types, under common_device == kCPU: "Promotes inputs by creating
// temporaries of the correct dtype"); CUDA's kernels cast as they load, with
// no copy. Under autocast that is the float32 residual plus a bfloat16
// layer output: a float32 copy of the layer output, freed when the op
// returns (measured on 1.13 with validation/autocast.py).
func cpuPromoteCopies(c *fwdCtx) {
	if !c.m.sim.s.CPU || len(c.in) < 2 {
		return
	}
	dt := promoteInputs(c.m, c)
	for j, v := range c.in {
		if v.dt != dt && v.dt.IsFloat() {
			c.local(c.numel(j)*dt.Size(), trace.Transient)
		}
	}
}

// dropoutForward: on CUDA, native_dropout returns the output and a mask
// (bool, 1 byte an element) that the node saves. On the CPU, and for the
// in-place variant, _dropout_impl multiplies by a noise tensor of the input
// dtype, which mul saves.
func dropoutForward(c *fwdCtx) {
	if c.m.sim.noGrad {
		return // eval mode: no mask, no noise (see the alias)
	}
	n := c.numel(0)
	if c.m.sim.s.CPU || c.op.Attr.Inplace {
		c.saveNew(n * c.in[0].dt.Size())
		return
	}
	c.saveNew(n * 1)
}

// crossEntropyForward: cross_entropy_loss is CompositeImplicitAutograd
// (aten/src/ATen/native/LossNLL.cpp, cross_entropy_loss_symint):
// nll_loss_nd(log_softmax(x, 1, x.scalar_type()), target). CUDA autocast
// lists neither cross_entropy_loss (AutocastCPU does) nor log_softmax with
// an explicit dtype (fp32_set_opt_dtype leaves a given dtype alone), so
// log_softmax runs in x's dtype and saves its result; nll_loss is on
// AT_FORALL_FP32 (aten/src/ATen/autocast_mode.h), so a half input is cast
// to a float32 copy (ToCopyBackward0), which nll_loss_forward saves with
// the target and total_weight.
func crossEntropyForward(c *fwdCtx) {
	n := c.numel(0)
	dt := c.in[0].dt
	c.saveNew(n * dt.Size())
	if c.m.sim.amp && dt != graph.F32 {
		c.saveNew(n * 4)
	}
	c.save(c.in[1])
	c.saveNew(4) // total_weight
}

// crossEntropyBackward runs the op's nodes in the engine's order, each
// releasing what it saved when it returns (release_variables):
// NllLossBackward0 allocates the zeroed gradient of its input
// (nll_loss_backward) and drops the float32 copy it saved and its
// total_weight, which nothing else holds (4 bytes: measured on 2.5.1, freed
// before LogSoftmaxBackward0 allocates);
// ToCopyBackward0, under autocast with a half input, casts that gradient
// back to the input's dtype; LogSoftmaxBackward0
// (_log_softmax_backward_data) writes the input's gradient and drops the
// log-probabilities.
func crossEntropyBackward(c *bwdCtx) {
	n := c.numel(0)
	dt := c.inDT(0)
	saved := c.m.nodes[c.i]
	var logp, copy32, total *storage
	if len(saved) > 0 {
		logp = saved[0]
	}
	if len(saved) >= 3 {
		// crossEntropyForward saves total_weight last
		total = saved[len(saved)-1]
	}
	half := c.m.sim.amp && dt != graph.F32
	if half && len(saved) > 1 {
		copy32 = saved[1]
	}
	nllDT := dt
	if half {
		nllDT = graph.F32
	}
	g := c.alloc(n * nllDT.Size()) // nll_loss_backward: zeros of the input's size
	c.consume()
	if copy32 != nil {
		c.releaseSaved(copy32)
	}
	if total != nil {
		c.releaseSaved(total)
	}
	if nllDT != dt {
		h := c.alloc(n * dt.Size()) // ToCopyBackward0
		c.m.sim.unref(g)
		g = h
	}
	c.gradIn(0) // _log_softmax_backward_data
	if logp != nil {
		c.releaseSaved(logp)
	}
	c.m.sim.unref(g)
}

// newGELUForward follows Hugging Face's NewGELUActivation, GPT-2's
// "gelu_new": 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))) written as
// separate ops. pow saves x, tanh saves its result t, and the final product
// saves both of its operands, 0.5*x and 1+t.
//
// Under CUDA autocast with a half x, torch.pow(x, 3.0) is on
// AT_FORALL_FP32 (aten/src/ATen/autocast_mode.h): it runs on a float32 copy
// of x, which PowBackward0 saves as self, and type promotion carries
// float32 on: x + 0.044715*x**3, the tanh, 1 + t and the final 0.5*x *
// (1 + t) are float32 (newGELUOut); only 0.5*x stays half. CPU autocast
// does not list pow.
func newGELUForward(c *fwdCtx) {
	if geluUpcast(c.m, c.in[0].dt) {
		newGELUForwardUpcast(c)
		return
	}
	n := c.numel(0) * c.in[0].dt.Size()
	c.save(c.in[0]) // pow(x, 3) saves self
	p := c.local(n, trace.Activation)
	a := c.local(n, trace.Activation) // 0.044715 * x**3
	c.drop(p)
	s := c.local(n, trace.Activation) // x + a
	c.drop(a)
	k := c.local(n, trace.Activation) // sqrt(2/pi) * s
	c.drop(s)
	t := c.saveNew(n) // tanh saves its result
	c.drop(k)
	u := c.local(n, trace.Activation) // 1 + t
	h := c.local(n, trace.Activation) // 0.5 * x
	c.save(value{st: u})
	c.save(value{st: h})
	_ = t
}

// geluUpcast reports that gelu_new's cubic term runs in float32: CUDA
// autocast and a half input.
func geluUpcast(m *micro, dt graph.DType) bool {
	return m.sim.amp && !m.sim.s.CPU && dt.IsFloat() && dt != graph.F32
}

// newGELUOut: the final product of gelu_new is float32 under CUDA
// autocast (see newGELUForward).
func newGELUOut(m *micro, c *fwdCtx) graph.DType {
	if geluUpcast(m, c.in[0].dt) {
		return graph.F32
	}
	return c.in[0].dt
}

func newGELUForwardUpcast(c *fwdCtx) {
	f := c.numel(0) * 4
	hf := c.numel(0) * c.in[0].dt.Size()
	c.saveNew(f)                      // x.to(float32), PowBackward0's self
	p := c.local(f, trace.Activation) // pow(x32, 3)
	a := c.local(f, trace.Activation) // 0.044715 * p
	c.drop(p)
	s := c.local(f, trace.Activation) // x + a, promoted to float32
	c.drop(a)
	k := c.local(f, trace.Activation) // sqrt(2/pi) * s
	c.drop(s)
	c.saveNew(f) // tanh saves its result t
	c.drop(k)
	u := c.local(f, trace.Activation)  // 1 + t
	h := c.local(hf, trace.Activation) // 0.5 * x, half
	c.save(value{st: u})
	c.save(value{st: h})
}

func newGELUBackward(c *bwdCtx) {
	if geluUpcast(c.m, c.inDT(0)) {
		newGELUBackwardUpcast(c)
		return
	}
	n := c.numel(0) * c.inDT(0).Size()
	// grad*u and grad*h, then through tanh, the scalings and pow; the
	// gradient of x arrives twice (0.5*x and the cubic term) and is
	// summed.
	gh := c.alloc(n)
	gu := c.alloc(n)
	gt := c.alloc(n)
	c.m.sim.unref(gu)
	c.temp(n)
	c.m.sim.unref(gt)
	c.gradIn(0)
	c.m.sim.unref(gh)
}

// newGELUBackwardUpcast runs gelu_new's nodes under CUDA autocast in the
// engine's order (the ready node of the highest sequence number first),
// each dropping its input gradient and saved tensors when it returns.
// The three gradients of x (through 0.5*x, through x + a, through the
// float32 copy) are summed in x's InputBuffer.
func newGELUBackwardUpcast(c *bwdCtx) {
	m := c.m
	dt := c.inDT(0)
	f := c.numel(0) * 4
	hf := c.numel(0) * dt.Size()
	saved := append([]*storage(nil), m.nodes[c.i]...) // x32, t, u, h
	release := func(k int) {
		if k < len(saved) {
			c.releaseSaved(saved[k])
		}
	}
	// MulBackward0 (0.5*x * u): grad*u, which validate_outputs casts to
	// h's half dtype, and grad*h (float32).
	tmp := c.alloc(f)
	gh := c.alloc(hf)
	m.sim.unref(tmp)
	gu := c.alloc(f)
	c.consume()
	release(2)
	release(3)
	// MulBackward1 (0.5 * x): x's first share, half.
	gx := c.alloc(hf)
	m.sim.unref(gh)
	// AddBackward1 (1 + t) hands gu on; TanhBackward0: tanh_backward(grad, t).
	gt := c.alloc(f)
	m.sim.unref(gu)
	release(1)
	// MulBackward1 (sqrt(2/pi) * s).
	gs := c.alloc(f)
	m.sim.unref(gt)
	// AddBackward0 (x + a): x's share cast to half (validate_outputs) and
	// summed into x's buffer; a's share is gs itself.
	gx = c.accumulate(gx, c.alloc(hf), hf)
	// MulBackward1 (0.044715 * p).
	gp := c.alloc(f)
	m.sim.unref(gs)
	// PowBackward0: pow_backward = grad * (3 * self.pow(2)), self the
	// float32 copy (FunctionsManual.cpp).
	sq := c.alloc(f)
	sc := c.alloc(f)
	m.sim.unref(sq)
	g32 := c.alloc(f)
	m.sim.unref(sc)
	m.sim.unref(gp)
	release(0)
	// ToCopyBackward0: back to x's dtype, summed into x's buffer.
	g16 := c.alloc(hf)
	m.sim.unref(g32)
	gx = c.accumulate(gx, g16, hf)
	if !c.needs(0) {
		m.sim.unref(gx)
		return
	}
	c.route(0, gx, dt)
}

// accumulate is InputBuffer::accumulate adding gradient add into buf:
// in place when the profile's InputBufferInPlace (can_accumulate_inplace),
// otherwise buf + add, a new tensor.
func (c *bwdCtx) accumulate(buf, add *storage, bytes int64) *storage {
	if c.m.sim.s.Profile.InputBufferInPlace {
		c.m.sim.unref(add)
		return buf
	}
	sum := c.alloc(bytes)
	c.m.sim.unref(buf)
	c.m.sim.unref(add)
	return sum
}

// rmsNormOut: Hugging Face's LlamaRMSNorm returns weight *
// normalized.to(input_dtype); the product promotes to the weight's dtype.
func rmsNormOut(m *micro, c *fwdCtx) graph.DType {
	if c.w.dt.Size() > c.in[0].dt.Size() {
		return c.w.dt
	}
	return c.in[0].dt
}

// rmsNormForward follows LlamaRMSNorm.forward op by op:
// x32 = x.to(float32); var = x32.pow(2).mean(-1, keepdim=True);
// y = x32 * rsqrt(var + eps); out = weight * y.to(x.dtype).
// pow and the multiplication save x32, rsqrt saves its result, and the
// weight product saves the cast y.
func rmsNormForward(c *fwdCtx) {
	n := c.numel(0)
	rows := n / c.shape(0)[len(c.shape(0))-1]
	x32 := c.in[0]
	if x32.dt != graph.F32 {
		x32 = value{st: c.local(n*4, trace.Activation), dt: graph.F32}
	}
	c.save(x32)
	sq := c.local(n*4, trace.Activation)
	if c.m.sim.s.Profile.MeanDimSavesSelf {
		// variance = h.pow(2).mean(-1, keepdim=True): MeanBackward1 keeps
		// the squares where mean.dim saves self (profile.MeanDimSavesSelf)
		c.save(value{st: sq})
	}
	mean := c.local(rows*4, trace.Activation)
	c.drop(sq)
	ve := c.local(rows*4, trace.Activation)
	c.drop(mean)
	c.saveNew(rows * 4) // rsqrt result
	c.drop(ve)
	y := c.local(n*4, trace.Activation)
	if dt := c.in[0].dt; dt != graph.F32 {
		yc := c.local(n*dt.Size(), trace.Activation)
		c.drop(y)
		y = yc
	}
	c.save(value{st: y})
	c.save(c.w)
}

func rmsNormBackward(c *bwdCtx) {
	n := c.numel(0)
	dt := c.inDT(0)
	g1 := c.alloc(n * dt.Size()) // grad of y (weight * grad)
	c.temp(n * c.gdt.Size())     // grad * y before the sum over rows
	c.gradParam(c.op.Weight)
	g2 := c.alloc(n * 4) // back to float32
	c.m.sim.unref(g1)
	c.temp(n * 4) // grad * x32 for the rsqrt branch
	c.gradIn(0)
	c.m.sim.unref(g2)
}
