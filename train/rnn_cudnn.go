package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// nn.LSTM, nn.GRU and nn.RNN on a GPU: one call of aten::_cudnn_rnn
// (aten/src/ATen/native/cudnn/RNN.cpp), whose node
// (CudnnRnnBackward0, tools/autograd/derivatives.yaml) saves input, the
// weights, weight_buf (result4), hx, cx, output (result0) and the reserve
// (result3), and whose backward, _cudnn_rnn_backward, runs
// _cudnn_rnn_backward_input and then _cudnn_rnn_backward_weight.

// CudnnRNNReserveConst is the part of cuDNN's training reserve that does
// not scale with the shape: 256 bytes in every one of the 389 shapes of
// testdata/measured/h200-torch2.11-rnn-cudnn.json.gz (cuDNN 9.19).
const CudnnRNNReserveConst = 256

// CudnnRNNReserveBytes is the size of the reserve _cudnn_rnn allocates in
// training (reserve = at::empty(reserve_size, kByte), reserve_size from
// cudnnGetRNNTempSpaceSizes with CUDNN_FWD_MODE_TRAINING): what cuDNN
// keeps for the backward pass, per layer, direction, time step and batch
// row, in the data type's elements (elem bytes):
//
//   - per layer and direction, the cell's activations at every step:
//     LSTM 5·hidden (the four gates i, f, g, o and the cell state c_t),
//     GRU 6·hidden (the gates r, z, n and the three blocks of the
//     recurrent product W_h·h_{t-1} + b_h, which n's gradient reads
//     through r), RNN 1·hidden (the activation);
//   - the output of every layer but the last, directions·hidden: the next
//     layer's input, which output (the last layer's) does not hold;
//   - with an LSTM projection, per layer and direction hidden + proj: h_t
//     before W_hr (the projection's gradient reads it) and the projected
//     r_t;
//   - CudnnRNNReserveConst.
//
// The rule gives every row of the measured grid to the byte (LSTM, GRU,
// RNN_TANH; hidden 64, 100, 256, 512; 1 and 2 layers; one and two
// directions; batch 8 and 32; sequence 16 and 50; float32 and float16;
// projections 32 and 64 at hidden 256; batch_first), checked by
// validation's TestRNNCudnnReserve. RNN_RELU was not measured: it takes
// RNN_TANH's rule, cuDNN's RNN cell with another activation.
func CudnnRNNReserveBytes(r *graph.RNNAttr, elem int64) int64 {
	var cell int64
	switch r.Mode {
	case graph.LSTM:
		cell = 5
	case graph.GRU:
		cell = 6
	default:
		cell = 1
	}
	h := r.Hidden
	per := r.Layers*cell*h + (r.Layers-1)*h
	if r.Proj > 0 {
		per += r.Layers * (h + r.Proj)
	}
	return CudnnRNNReserveConst + r.Seq*r.Batch*r.Directions()*elem*per
}

// rnnWeights returns where the flat weights start among the op's inputs
// (after x, hx and an LSTM's cx) and their elements: the module's flat
// weights, which nn.RNNBase keeps as views of one buffer
// (flatten_parameters, called by _apply when the module moves to the
// GPU), so that try_get_weight_buf in RNN.cpp hands _cudnn_rnn that
// buffer itself and nothing is copied.
func rnnWeights(c *fwdCtx) (first int, numel int64) {
	first = 2
	if c.op.Attr.RNN.Mode == graph.LSTM {
		first = 3
	}
	for j := first; j < len(c.op.Inputs); j++ {
		numel += c.numel(j)
	}
	return first, numel
}

// rnnPre runs before _cudnn_rnn's output is allocated: under autocast,
// _cudnn_rnn_cast_reflatten (aten/src/ATen/cudnn/AutocastRNN.cpp)
// copies the weights into a new float16 flat buffer
// (copy_weights_to_flat_buf_views: at::zeros(num_weights, kHalf)) and
// casts input, hx and cx to float16 (cached_cast(at::kHalf, ...): float16
// whatever autocast's dtype, a new tensor for each activation); and with
// batch_first, _cudnn_rnn copies the transposed input to a contiguous
// [seq, batch, input] x (input.contiguous()), freed when the call returns.
func rnnPre(c *fwdCtx) {
	m := c.m
	r := c.op.Attr.RNN
	if m.sim.s.CPU || r == nil {
		return
	}
	if m.sim.amp {
		first, n := rnnWeights(c)
		c.w = value{st: c.local(n*graph.F16.Size(), trace.Activation), dt: graph.F16}
		m.wCast[c.i] = true
		m.run.ParamCasts++
		m.run.ParamCastBytes += n * (m.val[c.op.Inputs[first]].dt.Size() + graph.F16.Size())
		if m.sim.phase != trace.Backward {
			// the weights' gradients reach AccumulateGrad through the
			// copies into the float16 buffer (CopySlices, then
			// ToCopyBackward), not directly
			for j := first; j < len(c.op.Inputs); j++ {
				t := c.op.Inputs[j]
				if p := m.pidx[t]; p >= 0 && m.g.Tensors[t].RequiresGrad {
					m.direct[p]--
					m.viaCast[p]++
				}
			}
		}
		for j := 0; j < first; j++ {
			if v := c.in[j]; v.dt != graph.F16 {
				c.in[j] = value{st: c.local(c.numel(j)*graph.F16.Size(), trace.Transient), dt: graph.F16}
				m.casts[c.i] = append(m.casts[c.i], inputCast{input: j, from: v.dt})
				m.run.InputCasts |= 1 << j
				m.run.CastFrom = v.dt
			}
		}
	}
	if r.BatchFirst {
		c.local(c.numel(0)*c.in[0].dt.Size(), trace.Transient)
	}
}

// rnnOut: the output has the kernel's dtype (float16 under autocast).
func rnnOut(m *micro, c *fwdCtx) graph.DType { return c.in[0].dt }

// rnnForward is _cudnn_rnn in training: after the output, hy and cy
// (at::empty of hidden_size and cell_size; a GRU's or RNN's cy is
// at::empty({0}), nothing), then the workspace and the reserve, which the
// node saves with input, hx, cx, the weight buffer and the output.
//
// The workspace (cudnnGetRNNTempSpaceSizes' workSpaceSize), freed when the
// call returns, is not modelled: the grid measured 8 to 112 MiB of it on an
// H200, about 8 MiB for each layer and direction and the rest growing
// with seq·batch, through the allocator's rounding, with no rule that
// gives every row.
func rnnForward(c *fwdCtx) {
	m := c.m
	sim := m.sim
	r := c.op.Attr.RNN
	if r == nil {
		sim.fail("op %s: an RNN op without its layers (graph.Attr.RNN)", c.op.Name)
		return
	}
	if sim.s.CPU {
		sim.fail("op %s: %s in its cuDNN form (aten::_cudnn_rnn) has no CPU rule: the CPU runs its per-timestep ops, which a graph built with Config.CPU holds", c.op.Name, r.Mode)
		return
	}
	dt := c.out.dt
	states := [2]*storage{}
	for k, s := range []graph.Shape{r.StateShape(), r.CellShape()} {
		if k == 1 && r.Mode != graph.LSTM {
			break
		}
		st := sim.alloc(s.Numel()*dt.Size(), trace.Activation)
		st.refs = 1
		states[k] = st
	}
	if m.rnnStates == nil {
		m.rnnStates = map[graph.TensorID][2]*storage{}
	}
	if old, ok := m.rnnStates[c.op.Output]; ok {
		// a recomputed call's states replace the first run's
		for _, st := range old {
			sim.unref(st)
		}
	}
	m.rnnStates[c.op.Output] = states
	first, _ := rnnWeights(c)
	for j := 0; j < first; j++ {
		c.save(c.in[j])
	}
	if c.w.st != nil {
		// autocast's float16 buffer, whose views are the weights the
		// node keeps
		c.save(c.w)
	} else {
		for j := first; j < len(c.op.Inputs); j++ {
			c.save(c.in[j])
		}
	}
	c.save(c.out)
	if r.Train && !sim.noGrad {
		c.saveNew(CudnnRNNReserveBytes(r, dt.Size()))
	}
}

// rnnStateStorage: h_n and c_n are the tensors _cudnn_rnn wrote.
func rnnStateStorage(c *fwdCtx) *storage {
	states, ok := c.m.rnnStates[c.op.Inputs[0]]
	if !ok || c.op.Attr.Slot < 0 || c.op.Attr.Slot > 1 {
		return nil
	}
	return states[c.op.Attr.Slot]
}

// rnnStateForward: the state's tensor now belongs to the op that returns
// it, not to the call that made it.
func rnnStateForward(c *fwdCtx) {
	y := c.op.Inputs[0]
	states, ok := c.m.rnnStates[y]
	if !ok || states[c.op.Attr.Slot] == nil {
		c.m.sim.fail("op %s: the RNN state was not made by the RNN call it reads", c.op.Name)
		return
	}
	c.m.sim.unref(states[c.op.Attr.Slot])
	states[c.op.Attr.Slot] = nil
	if states[0] == nil && states[1] == nil {
		delete(c.m.rnnStates, y)
	} else {
		c.m.rnnStates[y] = states
	}
}

// rnnStateBackward hands the gradient of h_n or c_n to the call's node,
// which takes it as grad_hy or grad_cy beside grad_output. A node that
// has no gradient for its output receives zeros_like(output) instead
// (_cudnn_rnn_backward: grad_output_r.defined() ? grad_output_r :
// at::zeros_like(output)), made here, just before the call's backward.
func rnnStateBackward(c *bwdCtx) {
	m := c.m
	y := c.op.Inputs[0]
	if !m.g.Tensors[y].RequiresGrad {
		return
	}
	if m.grads[y] == nil {
		dt := m.val[y].dt
		m.grads[y], m.gradDT[y] = c.alloc(m.g.Tensors[y].Shape.Numel()*dt.Size()), dt
	}
	if m.rnnGrads == nil {
		m.rnnGrads = map[graph.TensorID][2]*storage{}
	}
	g := m.rnnGrads[y]
	m.sim.ref(c.gout)
	g[c.op.Attr.Slot] = c.gout
	m.rnnGrads[y] = g
}

// rnnBackward is _cudnn_rnn_backward: zeros for the state gradients that
// did not arrive, then _cudnn_rnn_backward_input (the batch-first input
// and gradient made contiguous, dx = empty_like(input), dhx, dcx), then,
// when a weight needs one, _cudnn_rnn_backward_weight (x contiguous
// again, dw = at::zeros(weight_buf)), whose gradients are views of dw
// (_viewParams): every weight's .grad shares that one buffer. Their
// workspaces are not modelled (see rnnForward).
func rnnBackward(c *bwdCtx) {
	m := c.m
	sim := m.sim
	r := c.op.Attr.RNN
	y := c.op.Output
	dt := c.gdt
	got := m.rnnGrads[y]
	delete(m.rnnGrads, y)
	var held []*storage
	for k, s := range []graph.Shape{r.StateShape(), r.CellShape()} {
		if k == 1 && r.Mode != graph.LSTM {
			break
		}
		if got[k] != nil {
			held = append(held, got[k])
			continue
		}
		held = append(held, c.alloc(s.Numel()*dt.Size()))
	}
	first := 2
	if r.Mode == graph.LSTM {
		first = 3
	}
	in := m.g.Tensors[c.op.Inputs[0]].Shape.Numel()
	xdt := c.inDT(0)
	var copies []*storage
	if r.BatchFirst {
		copies = append(copies, c.alloc(in*xdt.Size()), c.alloc(m.g.Tensors[y].Shape.Numel()*dt.Size()))
	}
	dx := c.alloc(in * xdt.Size())
	var ds []*storage
	for k, s := range []graph.Shape{r.StateShape(), r.CellShape()} {
		if k == 1 && r.Mode != graph.LSTM {
			break
		}
		ds = append(ds, c.alloc(s.Numel()*dt.Size()))
	}
	for _, st := range copies {
		sim.unref(st)
	}
	var params []int32
	for j := first; j < len(c.op.Inputs); j++ {
		t := c.op.Inputs[j]
		if p := m.pidx[t]; p >= 0 && m.g.Tensors[t].RequiresGrad {
			params = append(params, p)
		}
	}
	if len(params) > 0 {
		var x *storage
		if r.BatchFirst {
			x = c.alloc(in * xdt.Size())
		}
		var n int64
		for j := first; j < len(c.op.Inputs); j++ {
			n += c.numel(j)
		}
		wdt := m.val[c.op.Inputs[first]].dt
		if m.wCast[c.i] {
			wdt = graph.F16
		}
		cat := m.gradCategory(params[0])
		if m.wCast[c.i] {
			// autocast's float16 gradients, cast to each weight's dtype
			cat = trace.Transient
		}
		dw := sim.alloc(n*wdt.Size(), cat)
		sim.unref(x)
		for _, p := range params {
			sim.ref(dw)
			c.out = append(c.out, gradOut{p: p, st: dw, dt: wdt, viaCast: m.wCast[c.i]})
		}
	}
	for _, st := range held {
		sim.unref(st)
	}
	// dx, dhx and dcx go to the inputs that need them; the others are
	// dropped with the node's result
	for j, st := range append([]*storage{dx}, ds...) {
		if j < first && c.needs(j) {
			c.route(j, st, c.inDT(j))
			continue
		}
		sim.unref(st)
	}
}

func init() {
	rules[graph.RNN] = rule{pre: rnnPre, out: rnnOut, fwd: rnnForward, bwd: rnnBackward}
	rules[graph.RNNState] = rule{storage: rnnStateStorage, fwd: rnnStateForward, bwd: rnnStateBackward}
}
