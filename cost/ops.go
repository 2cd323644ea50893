package cost

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// The kernels of each op kind. Arithmetic counts multiply-adds as two
// operations and leaves out the elementwise work of ops dominated by their
// traffic; traffic counts each operand read once and each result written
// once per kernel, in the dtype the simulation ran it in.

func numel(g *graph.Graph, id graph.TensorID) float64 {
	if id == graph.None {
		return 0
	}
	return float64(g.Tensors[id].Shape.Numel())
}

func size(dt graph.DType) float64 { return float64(dt.Size()) }

func needsGrad(g *graph.Graph, id graph.TensorID) bool {
	return id != graph.None && g.Tensors[id].RequiresGrad
}

// matmulDims returns the rows, inner size and columns of a Linear's
// product: x [..., K] @ w^T [K, N].
func linearDims(g *graph.Graph, op *graph.Op) (m, k, n float64) {
	xs := g.Tensors[op.Inputs[0]].Shape
	k = float64(xs[len(xs)-1])
	m = numel(g, op.Inputs[0]) / max(k, 1)
	n = numel(g, op.Output) / max(m, 1)
	return
}

func forward(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	e, eo := size(run.In), size(run.Out)
	out := numel(g, op.Output)
	casts(t, g, op, run)
	var in float64
	for _, id := range op.Inputs {
		in += numel(g, id)
	}
	switch op.Kind {
	case graph.View, graph.Slice, graph.Release, graph.Custom, graph.RNNState:
		// views and Python scope ends launch nothing (a custom Function's
		// forward is its own ops, an RNN's states are its call's)
	case graph.RNN:
		rnnForward(t, op, run)
	case graph.Linear:
		m, k, n := linearDims(g, op)
		t.product(gemm, run.In, m, k, n, 1, (m*k+k*n+numel(g, op.Bias))*e+m*n*eo)
	case graph.MatMul:
		rows, k, cols, batch := matmulDims(g, op)
		t.product(gemm, run.In, rows, k, cols, batch, in*e+out*eo)
	case graph.Conv2d:
		bytes := (in+numel(g, op.Weight))*e + out*eo
		if c := convShape(g, op); c.groups > 1 {
			if t.cudnnGrouped(g, op, run.In) {
				t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			}
			t.grouped(conv, run.In, op.Attr.ChannelsLast, convFLOPs(g, op), bytes)
		} else if n, hw, ok := pointwiseConv(g, op); !ok || !t.pointwise(run.In, op.Attr.ChannelsLast,
			[3]float64{c.pixels, c.patch, c.cout}, [4]float64{c.cout, c.cin, hw, n},
			in*e+out*eo, bytes) {
			// implicit GEMM: (N·OH·OW) × C_out, over C_in·kh·kw, with the
			// input, filter and output transposed in NCHW
			t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			t.product(conv, run.In, c.pixels, c.patch, c.cout, 1, bytes)
		}
	case graph.ConvTranspose2d:
		// the backward-data pass of the mirrored convolution: the input's
		// pixels × C_out·kh·kw, over C_in
		bytes := (in+numel(g, op.Weight))*e + out*eo
		c := convTShape(g, op)
		if c.groups > 1 {
			t.grouped(conv, run.In, op.Attr.ChannelsLast, convTFLOPs(g, op), bytes)
		} else {
			t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			t.product(conv, run.In, c.pixels, c.cout*c.patch/c.cin, c.cin, 1, bytes)
		}
	case graph.Attention:
		attentionForward(t, g, op, run)
	case graph.Embedding:
		t.kernel(vector, run.Out, 0, out*eo+in*8)
	case graph.BatchNorm:
		// statistics, then normalisation: the input read twice
		if !t.spatialBatchNorm(g, op, run.In, 3) {
			t.kernel(vector, run.In, 0, 2*in*e+out*eo)
		}
		if t.host.PerOp && len(op.Buffers) > 0 {
			// _BatchNorm.forward (torch/nn/modules/batchnorm.py) counts
			// the batches in training when it tracks running
			// statistics: self.num_batches_tracked.add_(1), an op of
			// its own on a one-element int64 buffer, outside autograd
			if t.part == Forward {
				t.est.Ops++
			}
			t.kernelsAt(t.host.NoGrad, 1, vector, graph.I64, 0, 16)
		}
	case graph.InstanceNorm:
		// the affine parameters repeated to N×C, then batch norm over
		// the input seen as N×C channels
		t.kernels(affine(g, op), vector, graph.F32, 0, 2*instances(g, op)*4)
		t.kernel(vector, run.In, 0, 2*in*e+out*eo)
	case graph.LayerNorm:
		t.layerNorm(g, op, run.In, in*e+out*eo)
	case graph.RMSNorm:
		// LlamaRMSNorm op by op: to(float32), pow, mean, add, rsqrt, mul,
		// to(dtype), mul by the weight
		rmsNorm(t, in, e, eo, 8, 6)
	case graph.NewGELU:
		// gelu_new as eight Python-level elementwise ops
		t.kernels(8, vector, run.In, 0, 8*2*in*e)
	case graph.Dropout:
		if op.Attr.P > 0 {
			t.kernel(vector, run.In, 0, in*e+out*eo+out)
		}
	case graph.CrossEntropy:
		// log_softmax, then nll_loss
		t.kernel(vector, run.In, 0, numel(g, op.Inputs[0])*(e+eo))
		t.kernel(vector, run.Out, 0, numel(g, op.Inputs[0])*eo)
	case graph.MSELoss:
		t.kernels(2, vector, run.In, 0, in*e)
	case graph.Full, graph.Rand:
		t.kernel(vector, run.Out, 0, out*eo)
	default:
		// elementwise ops, reductions, copies and pools: one kernel that
		// reads its operands and writes its result
		t.kernel(vector, run.In, 0, in*e+out*eo)
	}
}

func backward(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	e, eo := size(run.In), size(run.Out)
	out := numel(g, op.Output)
	// the cast nodes hand their gradients back in the original dtype
	casts(t, g, op, run)
	switch op.Kind {
	case graph.View, graph.Release, graph.Full, graph.Rand, graph.Compare, graph.RNNState:
		return
	case graph.RNN:
		rnnBackward(t, g, op, run)
	case graph.Slice:
		// SliceBackward: zeros of the input's size, the gradient copied in
		if needsGrad(g, op.Inputs[0]) {
			t.kernels(2, vector, run.In, 0, numel(g, op.Inputs[0])*e+out*eo*2)
		}
	case graph.Linear:
		m, k, n := linearDims(g, op)
		if needsGrad(g, op.Inputs[0]) {
			// dx = dy · W: [m, n] by [n, k]
			t.product(gemm, run.In, m, n, k, 1, (m*n+k*n)*eo+m*k*e)
		}
		if needsGrad(g, op.Weight) {
			// dW = dyᵀ · x: [n, m] by [m, k], split over m
			t.product(gemm, run.In, n, m, k, 1, (m*n+m*k)*e+k*n*e)
		}
		if needsGrad(g, op.Bias) {
			t.kernel(vector, run.In, m*n, m*n*eo+n*e)
		}
	case graph.MatMul:
		rows, k, cols, batch := matmulDims(g, op)
		for j, id := range op.Inputs[:2] {
			if needsGrad(g, id) {
				bytes := (out+numel(g, op.Inputs[1-j]))*e + numel(g, id)*e
				if j == 0 {
					// da = dout · bᵀ
					t.product(gemm, run.In, rows, cols, k, batch, bytes)
				} else if len(g.Tensors[op.Inputs[1]].Shape) == 2 {
					// a shared b: aᵀ · dout over every row of every batch
					t.product(gemm, run.In, k, rows*batch, cols, 1, bytes)
				} else {
					t.product(gemm, run.In, k, rows, cols, batch, bytes)
				}
			}
		}
	case graph.Conv2d:
		// dgrad: the output's pixels × C_in, over C_out·kh·kw
		c := convShape(g, op)
		convGrads(t, g, op, run, c, convFLOPs(g, op), [3]float64{c.pixels, c.cout * c.patch / c.cin, c.cin})
	case graph.ConvTranspose2d:
		// the mirrored convolution's forward for the input's gradient
		c := convTShape(g, op)
		convGrads(t, g, op, run, c, convTFLOPs(g, op), [3]float64{c.pixels, c.patch, c.cout})
	case graph.Attention:
		attentionBackward(t, g, op, run)
	case graph.Embedding:
		// embedding_dense_backward: the weight's gradient zeroed, the
		// indices sorted, the rows accumulated
		if needsGrad(g, op.Weight) {
			w := numel(g, op.Weight)
			idx := numel(g, op.Inputs[0])
			t.kernel(vector, run.Out, 0, w*eo)
			t.kernels(2, vector, graph.I64, 0, 4*idx*8)
			t.kernel(vector, run.Out, out, 2*out*eo+idx*8)
		}
	case graph.BatchNorm:
		x := numel(g, op.Inputs[0])
		if !t.spatialBatchNorm(g, op, run.In, 5) {
			t.kernel(vector, run.In, 0, (3*x+out)*e)
		}
	case graph.InstanceNorm:
		// batch norm's backward, then the repeated parameters' gradients
		// summed over the batch
		x := numel(g, op.Inputs[0])
		t.kernel(vector, run.In, 0, (3*x+out)*e)
		t.kernels(affine(g, op), vector, graph.F32, 0, 2*instances(g, op)*4)
	case graph.LayerNorm:
		x := numel(g, op.Inputs[0])
		t.kernel(vector, run.In, 0, 3*x*e)
		if needsGrad(g, op.Weight) {
			t.kernel(vector, run.In, 0, 2*x*e)
		}
	case graph.RMSNorm:
		rmsNorm(t, numel(g, op.Inputs[0]), e, eo, 10, 9)
	case graph.NewGELU:
		t.kernels(10, vector, run.In, 0, 10*3*out*e)
	case graph.CrossEntropy:
		x := numel(g, op.Inputs[0])
		t.kernel(vector, run.Out, 0, 2*x*eo)
		t.kernel(vector, run.Out, 0, 3*x*eo)
	case graph.Add, graph.Cat:
		// the gradient passes through, or narrows into views; a
		// broadcast operand sums it down
		for _, id := range op.Inputs {
			if needsGrad(g, id) && numel(g, id) != out && op.Kind == graph.Add {
				t.kernel(vector, run.Out, out, out*eo+numel(g, id)*e)
			}
		}
	default:
		// one kernel per operand needing a gradient: the incoming
		// gradient and what was saved read, the operand's gradient written
		var in float64
		for _, id := range op.Inputs {
			in += numel(g, id)
		}
		for _, id := range op.Inputs {
			if needsGrad(g, id) {
				t.kernel(vector, run.In, 0, out*eo+in*e+numel(g, id)*e)
			}
		}
		for _, id := range []graph.TensorID{op.Weight, op.Bias} {
			if needsGrad(g, id) && id != graph.None {
				t.kernel(vector, run.In, out, out*eo+in*e)
			}
		}
	}
}

// casts times autocast's copies around an op: of its operands, sized by
// this graph's shapes, and of its parameters.
func casts(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	n := int64(run.ParamCasts)
	bytes := float64(run.ParamCastBytes)
	for j, id := range op.Inputs {
		if j < 64 && run.InputCasts&(1<<j) != 0 {
			n++
			bytes += numel(g, id) * (size(run.CastFrom) + size(run.In))
		}
	}
	if n > 0 {
		t.kernelsAt(t.castCost(n), n, vector, graph.F32, 0, bytes)
	}
}

// rmsNorm times Hugging Face's op-by-op RMSNorm: n kernels, passes reads
// and writes of the input in float32.
func rmsNorm(t *timer, x, e, eo float64, n int64, passes float64) {
	t.kernels(n, vector, graph.F32, 0, passes*x*4+x*(e+eo))
}

// matmulDims returns a MatMul's rows, inner size, columns and number of
// products: a [..., rows, K] @ b [..., K, cols]; a b of rank 2 is shared
// by every row of a, one product.
func matmulDims(g *graph.Graph, op *graph.Op) (rows, k, cols, batch float64) {
	a, b := g.Tensors[op.Inputs[0]].Shape, g.Tensors[op.Inputs[1]].Shape
	k = float64(a[len(a)-1])
	cols = float64(b[len(b)-1])
	all := numel(g, op.Output) / max(cols, 1)
	if len(b) == 2 || len(a) < 2 {
		return all, k, cols, 1
	}
	rows = float64(a[len(a)-2])
	return rows, k, cols, all / max(rows, 1)
}

// convGEMM is a convolution as an implicit GEMM (cuDNN's
// IMPLICIT_PRECOMP_GEMM): pixels = N·OH·OW rows, cout columns, patch =
// C_in/groups·kh·kw deep.
type convGEMM struct{ pixels, cout, patch, cin, groups float64 }

func convShape(g *graph.Graph, op *graph.Op) convGEMM {
	w := g.Tensors[op.Weight].Shape // [Cout, Cin/groups, kh, kw]
	o := g.Tensors[op.Output].Shape // [N, Cout, OH, OW]
	x := g.Tensors[op.Inputs[0]].Shape
	c := convGEMM{cout: float64(w[0]), patch: float64(w.Numel()) / float64(max(w[0], 1)), cin: float64(x[1])}
	c.pixels = float64(o.Numel()) / max(c.cout, 1)
	c.groups = max(1, c.cin/float64(max(w[1], 1)))
	return c
}

// pointwiseConv reports a 1×1, stride-1, unpadded, ungrouped 2-D
// convolution, with its batch and pixels per image: the convolution that
// is a product per image over an NCHW tensor's [C, H·W] planes.
func pointwiseConv(g *graph.Graph, op *graph.Op) (n, hw float64, ok bool) {
	if op.Kind != graph.Conv2d {
		return 0, 0, false
	}
	w := g.Tensors[op.Weight].Shape
	x := g.Tensors[op.Inputs[0]].Shape
	a := op.Attr
	if len(w) != 4 || len(x) != 4 || w[2] != 1 || w[3] != 1 || w[1] != x[1] ||
		a.Stride[0] > 1 || a.Stride[1] > 1 || a.Padding != [2]int64{} || a.Dilation[0] > 1 || a.Dilation[1] > 1 {
		return 0, 0, false
	}
	return float64(x[0]), float64(x[2] * x[3]), true
}

func convFLOPs(g *graph.Graph, op *graph.Op) float64 {
	w := g.Tensors[op.Weight].Shape // [Cout, Cin/groups, kh, kw]
	perOut := float64(w.Numel()) / float64(max(w[0], 1))
	return 2 * numel(g, op.Output) * perOut
}

// attentionDims: q [B, H, L, D], k [B, Hkv, S, D].
func attentionDims(g *graph.Graph, op *graph.Op) (bh, l, s, d float64) {
	q := g.Tensors[op.Inputs[0]].Shape
	k := g.Tensors[op.Inputs[1]].Shape
	return float64(q[0] * q[1]), float64(q[2]), float64(k[2]), float64(q[3])
}

// The two products, scores = q·kᵀ and out = p·v, are 4·B·H·L·S·D
// operations. Flash and memory-efficient kernels skip the tiles above the
// diagonal of a causal mask (half, for L = S); their backward does five
// products of that size where the forward does two (FlashAttention-2, Dao
// 2023, §3.2). cuDNN's fused attention computes the same products without
// materialising the scores (its backward takes the forward's row
// statistics and a dQ accumulator, as flash's does: run_cudnn_SDP_bprop,
// aten/src/ATen/native/cudnn/MHA.cpp) and is timed as flash: no published
// rate of its own is known here. The math path materialises the [B, H, L, S] scores and
// probabilities and runs each step as its own kernel.
func attentionForward(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	bh, l, sl, d := attentionDims(g, op)
	e := size(run.In)
	qkvo := (2*bh*l*d + 2*numel(g, op.Inputs[1])) * e
	switch run.Kernel {
	case train.AttentionCudnn, train.AttentionFlash, train.AttentionEfficient:
		f := 4 * bh * l * sl * d
		if op.Attr.Causal {
			f /= 2
		}
		t.kernel(gemm, run.In, f, qkvo+bh*l*4)
	default:
		scores := bh * l * sl
		// the products run in the simulation's dtype (the math kernel may
		// upcast half inputs), softmax in its own
		ce, pe := size(run.Scores), size(run.Probs)
		if run.Scores != run.In {
			t.kernels(3, vector, run.In, 0, (2*bh*l*d+2*numel(g, op.Inputs[1]))*(e+ce)) // the upcast copies
		}
		t.kernel(vector, run.Scores, 0, 2*bh*l*d*ce)                  // the scaled copy of q
		t.kernel(gemm, run.Scores, 2*scores*d, 2*bh*l*d*ce+scores*ce) // q·kᵀ
		if op.Attr.Causal {
			t.kernel(vector, run.Scores, 0, 2*scores*ce) // the mask
		}
		t.kernel(vector, run.Scores, 0, scores*(ce+pe)) // softmax
		if op.Attr.P > 0 {
			t.kernel(vector, run.Scores, 0, scores*(2*pe+1))
		}
		if pe != ce {
			t.kernel(vector, run.Scores, 0, scores*(pe+ce)) // the probabilities cast back
		}
		t.kernel(gemm, run.Scores, 2*scores*d, scores*ce+2*bh*sl*d*ce) // p·v
	}
}

func attentionBackward(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	bh, l, sl, d := attentionDims(g, op)
	e := size(run.In)
	qkvo := (2*bh*l*d + 2*numel(g, op.Inputs[1])) * e
	switch run.Kernel {
	case train.AttentionCudnn, train.AttentionFlash, train.AttentionEfficient:
		f := 10 * bh * l * sl * d
		if op.Attr.Causal {
			f /= 2
		}
		t.kernel(vector, run.In, 0, 2*bh*l*d*e)           // rowsum(dO ∘ O)
		t.kernel(gemm, run.In, f, 2*qkvo+bh*l*d*4+bh*l*4) // dq (float32 accumulator), dk, dv
	default:
		scores := bh * l * sl
		ce, pe := size(run.Scores), size(run.Probs)
		t.kernels(2, gemm, run.Scores, 4*scores*d, 2*scores*ce+4*bh*sl*d*ce) // dp, dv
		if op.Attr.P > 0 {
			t.kernel(vector, run.Scores, 0, scores*(2*pe+1))
		}
		t.kernel(vector, run.Scores, 0, 3*scores*pe)                        // softmax backward
		t.kernels(2, gemm, run.Scores, 4*scores*d, 2*scores*ce+4*bh*l*d*ce) // dq, dk
		t.kernel(vector, run.Scores, 0, 2*bh*l*d*ce)                        // the scale
	}
}

// affine counts an instance norm's affine parameters (0 to 2).
func affine(g *graph.Graph, op *graph.Op) int64 {
	var n int64
	for _, p := range []graph.TensorID{op.Weight, op.Bias} {
		if p != graph.None {
			n++
		}
	}
	return n
}

// instances is N×C of an instance norm's input.
func instances(g *graph.Graph, op *graph.Op) float64 {
	s := g.Tensors[op.Inputs[0]].Shape
	return float64(s[0] * s[1])
}

// convTShape is a transposed convolution as the convolution it mirrors,
// which maps the transposed one's output shape to its input's: C_out of
// that convolution is the transposed one's C_in, its output pixels the
// transposed one's input pixels.
func convTShape(g *graph.Graph, op *graph.Op) convGEMM {
	w := g.Tensors[op.Weight].Shape // [Cin, Cout/groups, kh, kw]
	x := g.Tensors[op.Inputs[0]].Shape
	o := g.Tensors[op.Output].Shape
	c := convGEMM{cout: float64(w[0]), patch: float64(w.Numel()) / float64(max(w[0], 1)), cin: float64(o[1])}
	c.pixels = float64(x.Numel()) / max(c.cout, 1)
	c.groups = max(1, c.cin/float64(max(w[1], 1)))
	return c
}

func convTFLOPs(g *graph.Graph, op *graph.Op) float64 {
	c := convTShape(g, op)
	return 2 * c.pixels * c.cout * c.patch
}

// convGrads times a convolution's gradients: the input's by the product
// dgrad (rows, inner, columns), the weight's by the backward-filter product
// (C_out × C_in·kh·kw over the output's pixels, of the convolution c
// describes), the bias's as a sum; grouped convolutions by their
// arithmetic f.
func convGrads(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun, c convGEMM, f float64, dgrad [3]float64) {
	e := size(run.In)
	out := numel(g, op.Output)
	x, w := numel(g, op.Inputs[0]), numel(g, op.Weight)
	bytes := (out + w + x) * e
	viaCudnn := c.groups > 1 && op.Kind == graph.Conv2d && t.cudnnGrouped(g, op, run.In)
	if needsGrad(g, op.Inputs[0]) {
		if c.groups > 1 {
			if viaCudnn {
				t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			}
			t.grouped(conv, run.In, op.Attr.ChannelsLast, f, bytes)
		} else if n, hw, ok := pointwiseConv(g, op); !ok || !t.pointwise(run.In, op.Attr.ChannelsLast,
			dgrad, [4]float64{c.cin, c.cout, hw, n}, (out+x)*e, bytes) {
			t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			t.product(conv, run.In, dgrad[0], dgrad[1], dgrad[2], 1, bytes)
		}
	}
	if needsGrad(g, op.Weight) {
		if c.groups > 1 {
			if viaCudnn {
				t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			}
			t.grouped(conv, run.In, op.Attr.ChannelsLast, f, bytes)
		} else if n, hw, ok := pointwiseConv(g, op); !ok || !t.pointwise(run.In, op.Attr.ChannelsLast,
			[3]float64{c.cout, c.pixels, c.patch}, [4]float64{c.cout, hw, c.cin, n}, (out+x)*e, bytes) {
			t.transposes(run.In, op.Attr.ChannelsLast, 3, bytes)
			t.product(conv, run.In, c.cout, c.pixels, c.patch, 1, bytes)
		}
	}
	if needsGrad(g, op.Bias) {
		t.kernel(vector, run.In, out, out*e)
	}
}

// cudnnGrouped reports whether PyTorch sends a grouped convolution to
// cuDNN rather than to its own depthwise kernel (conv_depthwise2d,
// aten/src/ATen/native/cuda/DepthwiseConv2d.cu), as
// aten/src/ATen/native/Convolution.cpp's _select_conv_backend decides: a
// grouped convolution that is not depthwise goes to cuDNN (use_cudnn); a
// depthwise one (groups = C_in, C_out a multiple of it) goes there in
// channels-last layout always (use_cudnn_depthwise), and in NCHW only in
// float16, undilated, with equal strides (or a height of 1) and at least
// 32 channels, where check_cudnn_depthwise_workload_with_filter (cuDNN 8.2
// and later) says so: a 1-high input at stride 1; otherwise square 1×1,
// 3×3 or 5×5 filters on inputs at least 7 wide, every one at stride 1,
// and at stride 2 a 3×3 or 5×5 one at batch 1, a 1×1 one at batch 1 up to
// width 28 or at batches up to 16 with 128 channels up to width 7, and
// above batch 1 a 3×3 or 5×5 one with 512 channels, or 256 from width 28.
func (t *timer) cudnnGrouped(g *graph.Graph, op *graph.Op, dt graph.DType) bool {
	x := g.Tensors[op.Inputs[0]].Shape
	w := g.Tensors[op.Weight].Shape
	a := op.Attr
	if len(x) != 4 || len(w) != 4 || a.Groups != x[1] || w[0]%x[1] != 0 {
		return true // grouped, not depthwise: cuDNN
	}
	if t.nhwc || a.ChannelsLast {
		return true
	}
	dilated := a.Dilation[0] > 1 || a.Dilation[1] > 1
	if dt != graph.F16 || dilated || x[1] < 32 || (a.Stride[0] != a.Stride[1] && x[2] != 1) {
		return false
	}
	if x[2] == 1 && a.Stride[1] == 1 {
		return true
	}
	k := w[3]
	if w[2] != k || (k != 1 && k != 3 && k != 5) || x[3] < 7 {
		return false
	}
	switch a.Stride[1] {
	case 1:
		return true
	case 2:
		if x[0] == 1 {
			return k != 1 || x[3] <= 28
		}
		if k == 1 {
			return x[0] <= 16 && x[1] >= 128 && x[3] <= 7
		}
		return x[1] >= 512 || (x[1] >= 256 && x[3] >= 28)
	}
	return false
}
