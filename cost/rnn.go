package cost

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// A cuDNN RNN (graph.RNN) is one eager op, aten::_cudnn_rnn, that launches
// many kernels: CUDNN_RNN_ALGO_STANDARD, the algorithm _cudnn_rnn asks
// for (get_algo in aten/src/ATen/native/cudnn/RNN.cpp, unless a packed or
// persistent case applies), runs each layer and direction as one product
// of the whole sequence by W_ih, then, step by step, the product of h_{t-1}
// by W_hh (and, with a projection, of h_t by W_hr) and the cell's
// pointwise kernel; its backward-data pass walks the steps back the same
// way and ends with the product for dx, and its backward-weights pass
// takes W_ih's, W_hh's and W_hr's gradients as one product each over all
// the steps (cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8). The
// small per-step products cost a kernel's least time each: at a small
// batch a recurrent layer is bound by its steps, not its arithmetic.

// call gathers one eager op's kernels.
type call struct {
	t   *timer
	dt  graph.DType
	n   int64
	dev float64
}

// product adds count products of [rows, inner] by [inner, cols], one
// after the other, each reading its operands and writing its result.
func (c *call) product(rows, inner, cols, count float64) {
	if count <= 0 || rows <= 0 || inner <= 0 || cols <= 0 {
		return
	}
	e := size(c.dt)
	bytes := (rows*inner + inner*cols + rows*cols) * e
	k := int64(count)
	p := c.t.bound(k, gemm, c.dt, 2*rows*inner*cols*count, bytes*count)
	secs, extra := c.t.m.gemmTime(p, c.t.m.gemm, rows, inner, cols, 1, p != c.t.r.FP32)
	c.dev += count * max(secs, (bytes+extra)/c.t.m.bw)
	c.n += k
}

// pointwise adds count elementwise kernels, each moving bytes.
func (c *call) pointwise(count, bytes float64) {
	if count <= 0 {
		return
	}
	k := int64(count)
	c.t.bound(k, vector, c.dt, 0, bytes*count)
	c.dev += count * bytes / c.t.m.bw
	c.n += k
}

func (c *call) issue() {
	cpu := c.t.op
	if c.t.host.PerOp {
		cpu = c.t.hostCost(c.n)
	}
	c.t.issue(cpu, c.n, c.dev)
}

// rnnDims are a layer's sizes: the gates' rows G·hidden, h's width and the
// input width of layer l.
func rnnDims(r *graph.RNNAttr, l int64) (gh, out, in float64) {
	gh = float64(r.Mode.Gates() * r.Hidden)
	out = float64(r.Out())
	in = float64(r.Input)
	if l > 0 {
		in = float64(r.Directions()) * out
	}
	return
}

func rnnForward(t *timer, op *graph.Op, run train.OpRun) {
	r := op.Attr.RNN
	if r == nil {
		return
	}
	c := call{t: t, dt: run.In}
	e := size(run.In)
	tb, steps, b, h := float64(r.Seq*r.Batch), float64(r.Seq), float64(r.Batch), float64(r.Hidden)
	for l := int64(0); l < r.Layers; l++ {
		gh, out, in := rnnDims(r, l)
		for d := int64(0); d < r.Directions(); d++ {
			c.product(tb, in, gh, 1)
			c.product(b, out, gh, steps)
			// the gates read, the states and the reserve written
			c.pointwise(steps, (3*b*gh+3*b*h)*e)
			if r.Proj > 0 {
				c.product(b, h, out, steps)
			}
		}
	}
	c.issue()
}

func rnnBackward(t *timer, g *graph.Graph, op *graph.Op, run train.OpRun) {
	r := op.Attr.RNN
	if r == nil {
		return
	}
	c := call{t: t, dt: run.In}
	e := size(run.In)
	tb, steps, b, h := float64(r.Seq*r.Batch), float64(r.Seq), float64(r.Batch), float64(r.Hidden)
	// backward data, last layer first
	for l := r.Layers - 1; l >= 0; l-- {
		gh, out, in := rnnDims(r, l)
		for d := int64(0); d < r.Directions(); d++ {
			if r.Proj > 0 {
				c.product(b, out, h, steps)
			}
			c.pointwise(steps, (3*b*gh+3*b*h)*e)
			c.product(b, gh, out, steps)
			if l > 0 || needsGrad(g, op.Inputs[0]) {
				c.product(tb, gh, in, 1)
			}
		}
	}
	// backward weights: one product per weight over every step
	weights := false
	for _, id := range op.Inputs[2:] {
		weights = weights || (g.Tensors[id].Role == graph.Parameter && g.Tensors[id].RequiresGrad)
	}
	if weights {
		for l := int64(0); l < r.Layers; l++ {
			gh, out, in := rnnDims(r, l)
			for d := int64(0); d < r.Directions(); d++ {
				c.product(gh, tb, in, 1)
				c.product(gh, tb, out, 1)
				if r.Proj > 0 {
					c.product(out, tb, h, 1)
				}
				if r.Biases {
					c.pointwise(1, tb*gh*e)
				}
			}
		}
	}
	c.issue()
}
