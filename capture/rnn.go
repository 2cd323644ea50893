package capture

import (
	"github.com/batchfit/batchfit/graph"
)

// rnnModes are the torch functions nn.LSTM, nn.GRU and nn.RNN call
// (torch._VF.lstm, gru, rnn_tanh, rnn_relu in torch/nn/modules/rnn.py),
// recorded by the capture's TorchFunctionMode as torch.NAME.
var rnnModes = map[string]graph.RNNMode{
	"torch.lstm":     graph.LSTM,
	"torch.gru":      graph.GRU,
	"torch.rnn_tanh": graph.RNNTanh,
	"torch.rnn_relu": graph.RNNReLU,
}

// rnn maps a recurrent module's call to the form PyTorch runs on a GPU,
// one aten::_cudnn_rnn (graph.RNN). The meta device, like the CPU, runs
// aten::lstm's composite instead, a few ops per layer, direction and time
// step (thousands for one module): the recording keeps them, and a graph
// built for the CPU (Config.CPU) maps them one by one. The call is
//
//	_VF.lstm(input, (h_0, c_0), flat_weights, bias, num_layers, dropout,
//	         training, bidirectional, batch_first)
//	_VF.gru(input, h_0, flat_weights, ...)                  (and rnn_tanh, rnn_relu)
//
// returning (output, h_n, c_n) or (output, h_n). A packed sequence's call
// (data, batch_sizes, hx, ...) is left to the per-timestep ops: its
// reserve follows batch_sizes, which the grid did not measure.
func (x *bctx) rnn(o *op, mode graph.RNNMode) bool {
	as := o.FnArgs
	if len(as) != 9 || len(o.FnKwargs) != 0 || len(as[2].Ts) == 0 {
		return false
	}
	xt, ok := as[0].tensor()
	if !ok {
		return false
	}
	var hs []int
	if t, ok := as[1].tensor(); ok {
		hs = []int{t}
	} else {
		for _, t := range as[1].Ts {
			if t == nil {
				return false
			}
			hs = append(hs, *t)
		}
	}
	if want := 1 + btoi(mode == graph.LSTM); len(hs) != want || len(o.FnOut) != want+1 {
		return false
	}
	var ws []graph.TensorID
	for _, t := range as[2].Ts {
		if t == nil {
			return false
		}
		w := x.in(o, *t)
		if w == graph.None || x.b.TensorAt(w).Role != graph.Parameter {
			return false
		}
		ws = append(ws, w)
	}
	var flags [4]bool // has_biases, training, bidirectional, batch_first
	for i, k := range []int{3, 6, 7, 8} {
		v, ok := as[k].boolean()
		if !ok {
			return false
		}
		flags[i] = v
	}
	layers, ok := x.ints(as[4])
	if !ok || len(layers) != 1 {
		return false
	}
	dropout, ok := as[5].float()
	if !ok {
		return false
	}
	in := x.in(o, xt)
	hx := x.in(o, hs[0])
	cx := graph.None
	if mode == graph.LSTM {
		cx = x.in(o, hs[1])
	}
	if x.err != nil {
		return true
	}
	hxs := x.b.Shape(hx)
	if len(hxs) != 3 {
		return false
	}
	r := graph.RNNAttr{Mode: mode, Hidden: hxs[2], Layers: layers[0], Biases: flags[0], Dropout: dropout,
		Train: flags[1], Bidirectional: flags[2], BatchFirst: flags[3]}
	if cx != graph.None {
		// an LSTM with projections: h is proj_size wide, c hidden_size
		// (_cudnn_impl in aten/src/ATen/native/cudnn/RNN.cpp)
		if cs := x.b.Shape(cx); len(cs) == 3 && cs[2] != hxs[2] {
			r.Hidden, r.Proj = cs[2], hxs[2]
		}
	}
	y, hy, cy := x.b.RNN(x.name(o), in, hx, cx, ws, r)
	x.set(o.FnOut[0], y)
	x.set(o.FnOut[1], hy)
	if mode == graph.LSTM {
		x.set(o.FnOut[2], cy)
	}
	return true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
