package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// CPU convolution, as aten runs it without oneDNN (torch 1.13,
// aten/src/ATen/native/Convolution.cpp: ConvBackend::Slow2d, and
// ConvolutionMM2d.cpp: _slow_conv2d_forward / _slow_conv2d_backward). These
// are device data: the CUDA path (cuDNN) has workspaces instead
// (conv_cudnn.go). Measured on torch 1.13 with torch.backends.mkldnn
// disabled (validation/step.py), one allocation at a time:
//
//   - forward, one group: the im2col columns [N, C·kh·kw, oh·ow] are made
//     before the output and freed after it; a 1×1 kernel with stride 1 and
//     no padding reads the input in place and makes none;
//   - forward, G > 1 groups: _convolution loops over the groups: a
//     contiguous copy of the group's input slice, its columns, its output;
//     the columns and the input copy die with the group, the outputs live
//     until at::cat has joined them into the result;
//   - backward, one group: grad_input, grad_bias, grad_weight, then the
//     columns again for the weight gradient;
//   - a channels-last input with a contiguous weight (one group):
//     thnn_conv_use_channels_last holds, and forward and backward each
//     make a channels-last copy of the weight first, freed when the kernel
//     returns; the weight gradient comes out channels-last, so
//     AccumulateGrad copies it into the parameter's layout rather than
//     stealing it. Both only where the contiguous weight is not already
//     channels-last contiguous (clWeightCopy): a 1×1 kernel's is (2.5.1,
//     measured: a 1×1 convolution on a permuted input makes neither);
//   - backward, G > 1: per group, contiguous copies of the grad_output and
//     input slices, the group's grad_input, grad_bias and grad_weight, and
//     its columns; the copies and columns die with the group, the
//     per-group gradients after the cat of each.
//
// The oneDNN path is not modelled: it reorders tensors to blocked layouts
// whose padding depends on the processor's vector width.
//
// A build with NNPACK (Setup.NNPACK) takes ConvBackend::NnpackSpatial
// instead of Slow2d where ConvParams::use_nnpack holds (Convolution.cpp,
// _select_conv_backend, v2.5.1): a float32 4-D input, not dilated, not
// transposed, a kernel under 17×17 and a batch of 16 or more. Its forward
// (NNPACK.cpp, _nnpack_spatial_convolution) makes the output and nothing
// else through c10 (its workspace comes from posix_memalign and stays with
// the thread): no columns. Its backward has no kernel of its own
// (_convolution_backward_nogroup_backend: "nnpack backward does not
// support strided convolutions; use slow impl instead") and runs
// slow_conv_dilated2d_backward_cpu (NaiveDilatedConvolution.cpp): grad_input,
// grad_weight and grad_bias, then the columns of one sample [C·kh·kw,
// oh·ow], reused across the batch, and per sample grad_output_n.sum(dims),
// a [C_out] tensor added into grad_bias and freed (one at a time and
// alike: one is simulated). Measured on 2.5.1 with
// validation/step.py (simpleconv at batch 32) and one convolution at a
// time: exactly these events. A channels-last input is not modelled on
// this path (NNPACK makes the input contiguous and returns a contiguous
// output).

// convColumns is the byte size of _slow_conv2d's im2col buffer for one
// group, 0 where the kernel reads its input in place.
func convColumns(in, out graph.Shape, a graph.Attr, dt graph.DType) int64 {
	if a.Kernel == [2]int64{1, 1} && a.Stride == [2]int64{1, 1} && a.Padding == [2]int64{} {
		return 0
	}
	g := max(a.Groups, 1)
	return in[0] * (in[1] / g) * a.Kernel[0] * a.Kernel[1] * out[2] * out[3] * dt.Size()
}

// clWeightCopy says a convolution on a channels-last input copies its
// contiguous weight: view_weight_2d (ConvolutionMM2d.cpp) takes
// weight_.contiguous(ChannelsLast), which returns the weight itself where
// it is already channels-last contiguous (TensorBase::contiguous,
// is_contiguous(memory_format)); c10's compute_channels_last_contiguous_2d
// (c10/core/Contiguity.h) skips dims of size 1, so a [O, I, 1, 1] weight,
// or a [O, 1, kh, kw] one, is both. The weight gradient, made channels-last
// like it (empty_like), then has the parameter's strides on every dim of
// size above 1, which is what AccumulateGrad's obeys_layout_contract
// (torch/csrc/autograd/utils/grad_layout_contract.h) compares: it steals
// it, where it clones the others.
func clWeightCopy(a graph.Attr, w graph.Shape) bool {
	if !a.ChannelsLast || len(w) != 4 {
		return false
	}
	st := contiguousStrides(w)
	want := int64(1)
	for _, d := range []int{1, 3, 2, 0} {
		if w[d] == 1 {
			continue
		}
		if st[d] != want {
			return true
		}
		want *= w[d]
	}
	return false
}

// nnpack says the CPU convolution runs NNPACK's kernel (ConvParams::use_nnpack).
func nnpack(s *Setup, in graph.Shape, a graph.Attr, dt graph.DType) bool {
	return s.CPU && s.NNPACK && dt == graph.F32 && len(in) == 4 && in[0] >= 16 &&
		a.Kernel[0] < 17 && a.Kernel[1] < 17 && max(a.Dilation[0], 1) == 1 && max(a.Dilation[1], 1) == 1 && !a.ChannelsLast
}

func convCPUForward(c *fwdCtx) {
	if !c.m.sim.s.CPU {
		return
	}
	in, out := c.shape(0), c.outShape()
	dt := c.in[0].dt
	cols := convColumns(in, out, c.op.Attr, dt)
	if nnpack(&c.m.sim.s, in, c.op.Attr, dt) {
		cols = 0
		if c.op.Bias == graph.None {
			// bias_ = at::zeros({C_out}) for the kernel, freed when it returns
			c.local(out[1]/max(c.op.Attr.Groups, 1)*dt.Size(), trace.Transient)
		}
	}
	g := max(c.op.Attr.Groups, 1)
	if g == 1 {
		if w := c.m.g.Tensors[c.op.Weight].Shape; clWeightCopy(c.op.Attr, w) {
			c.local(w.Numel()*c.w.dt.Size(), trace.Transient)
		}
		if cols > 0 {
			c.local(cols, trace.Transient)
		}
		return
	}
	inG, outG := in.Numel()/g*dt.Size(), out.Numel()/g*dt.Size()
	for i := int64(0); i < g; i++ {
		x := c.local(inG, trace.Transient)
		var col *storage
		if cols > 0 {
			col = c.local(cols, trace.Transient)
		}
		c.local(outG, trace.Transient) // joined by the cat, then freed
		if col != nil {
			c.drop(col)
		}
		c.drop(x)
	}
}

func convBackward(c *bwdCtx) {
	if !c.m.sim.s.CPU {
		convCUDABackward(c)
		return
	}
	m := c.m
	in := m.g.Tensors[c.op.Inputs[0]].Shape
	out := m.g.Tensors[c.op.Output].Shape
	dt := c.inDT(0)
	cols := convColumns(in, out, c.op.Attr, dt)
	g := max(c.op.Attr.Groups, 1)
	// dilated backward's columns, one sample's, and its per-sample bias sum
	var sampleCols, biasSum int64
	if nnpack(&m.sim.s, in, c.op.Attr, dt) {
		sampleCols = in[1] / g * c.op.Attr.Kernel[0] * c.op.Attr.Kernel[1] * out[2] * out[3] * dt.Size()
		if c.op.Bias != graph.None {
			biasSum = out[1] / g * dt.Size()
		}
	}
	columns := func() {
		if sampleCols == 0 {
			c.temp(cols)
			return
		}
		st := c.alloc(sampleCols)
		c.temp(biasSum)
		m.sim.unref(st)
	}
	if g == 1 {
		// _slow_conv2d_backward's halves each read
		// grad_output_.contiguous(memory_format)
		// (slow_conv2d_backward_out_cpu_template before it resizes
		// grad_input, slow_conv2d_backward_weight_out_cpu_template before
		// compute_columns2d): a strided gradient, such as a patch
		// embedding's that came back through a transpose and a cat, is
		// copied by each half and freed when it returns. A channels-last
		// convolution's memory format is channels-last, and the layout of
		// its gradient is not followed: no copy is charged there, nor on
		// NNPACK's path (slow_conv_dilated2d_backward_cpu).
		copies := c.stridedGrad() && !c.op.Attr.ChannelsLast && sampleCols == 0
		var wcopy *storage
		if w := m.g.Tensors[c.op.Weight].Shape; clWeightCopy(c.op.Attr, w) {
			wcopy = c.alloc(w.Numel() * dt.Size())
		}
		if copies && c.needs(0) {
			gcopy := c.gradCopy()
			c.gradIn(0)
			m.sim.unref(gcopy)
		} else {
			c.gradIn(0)
		}
		c.gradParam(c.op.Weight)
		if wcopy != nil && len(c.out) > 0 {
			c.out[len(c.out)-1].clone = true
		}
		c.gradParam(c.op.Bias)
		var gcopy *storage
		if copies && m.g.Tensors[c.op.Weight].RequiresGrad {
			gcopy = c.gradCopy()
		}
		columns()
		m.sim.unref(gcopy)
		m.sim.unref(wcopy)
		return
	}
	inG, outG := in.Numel()/g*dt.Size(), out.Numel()/g*dt.Size()
	wG := m.g.Tensors[c.op.Weight].Shape.Numel() / g * dt.Size()
	var kept []*storage
	for i := int64(0); i < g; i++ {
		gout := c.alloc(outG)
		x := c.alloc(inG)
		if c.needs(0) {
			kept = append(kept, c.alloc(inG))
		}
		if c.op.Bias != graph.None {
			kept = append(kept, c.alloc(out[1]/g*dt.Size()))
		}
		kept = append(kept, c.alloc(wG))
		columns()
		m.sim.unref(gout)
		m.sim.unref(x)
	}
	c.gradIn(0)
	c.gradParam(c.op.Weight)
	c.gradParam(c.op.Bias)
	for _, st := range kept {
		m.sim.unref(st)
	}
}
