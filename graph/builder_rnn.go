package graph

import (
	"fmt"
	"slices"
)

// RNNMode is the cell of a recurrent layer, as cuDNN names it
// (cudnnRNNMode_t, which RNNDescriptorParams::set_mode in
// aten/src/ATen/native/cudnn/RNN.cpp takes from the module's mode).
type RNNMode uint8

const (
	RNNTanh RNNMode = iota // nn.RNN(nonlinearity="tanh"): CUDNN_RNN_TANH
	RNNReLU                // nn.RNN(nonlinearity="relu"): CUDNN_RNN_RELU
	LSTM                   // nn.LSTM: CUDNN_LSTM
	GRU                    // nn.GRU: CUDNN_GRU
)

func (m RNNMode) String() string {
	switch m {
	case RNNTanh:
		return "RNN_TANH"
	case RNNReLU:
		return "RNN_RELU"
	case LSTM:
		return "LSTM"
	case GRU:
		return "GRU"
	}
	return fmt.Sprintf("rnn_mode(%d)", uint8(m))
}

// Gates is the number of gate blocks in a layer's weight_ih and weight_hh
// rows (nn.LSTM's 4·hidden_size rows: input, forget, cell, output gates;
// nn.GRU's 3: reset, update, new; nn.RNN's 1), half of cuDNN's linear
// layers per layer (_num_linear_layers in RNN.cpp: 8, 6, 2).
func (m RNNMode) Gates() int64 {
	switch m {
	case LSTM:
		return 4
	case GRU:
		return 3
	}
	return 1
}

// RNNAttr is one nn.LSTM / nn.GRU / nn.RNN call: the arguments of
// torch._VF.lstm (input, hx, params, has_biases, num_layers, dropout,
// train, bidirectional, batch_first) and the sizes _cudnn_impl reads from
// its tensors.
type RNNAttr struct {
	Mode RNNMode
	// Input is input_size, Hidden hidden_size, Proj proj_size (an LSTM's
	// projection of h, 0 without).
	Input, Hidden, Proj int64
	Layers              int64
	Bidirectional       bool
	BatchFirst          bool
	// Biases is has_biases (bias=True): four weights per layer and
	// direction instead of two (five and three with a projection).
	Biases bool
	// Dropout is the probability between layers; Train is the module's
	// training flag (fn_train), which asks cuDNN for the reserve.
	Dropout float64
	Train   bool
	// Seq and Batch are the sequence length and batch of the input.
	Seq, Batch int64
}

// Directions is 2 for a bidirectional RNN, 1 otherwise.
func (r *RNNAttr) Directions() int64 {
	if r.Bidirectional {
		return 2
	}
	return 1
}

// Out is the size of h: proj_size when the LSTM projects, hidden_size
// otherwise (real_hidden_size in torch/nn/modules/rnn.py).
func (r *RNNAttr) Out() int64 {
	if r.Proj > 0 {
		return r.Proj
	}
	return r.Hidden
}

// WeightStride is the number of flat weights per layer and direction
// (weight_stride0 of _cudnn_rnn): w_ih, w_hh, then b_ih, b_hh with
// biases, then w_hr with a projection.
func (r *RNNAttr) WeightStride() int {
	n := 2
	if r.Biases {
		n = 4
	}
	if r.Proj > 0 {
		n++
	}
	return n
}

// StateShape is h_0's and h_n's shape, [layers·directions, batch, out];
// CellShape is c_0's and c_n's, [layers·directions, batch, hidden].
func (r *RNNAttr) StateShape() Shape { return Shape{r.Layers * r.Directions(), r.Batch, r.Out()} }
func (r *RNNAttr) CellShape() Shape  { return Shape{r.Layers * r.Directions(), r.Batch, r.Hidden} }

// OutShape is the output's shape: [seq, batch, directions·out], batch
// first when BatchFirst.
func (r *RNNAttr) OutShape() Shape {
	if r.BatchFirst {
		return Shape{r.Batch, r.Seq, r.Directions() * r.Out()}
	}
	return Shape{r.Seq, r.Batch, r.Directions() * r.Out()}
}

// RNN adds one recurrent module's forward in the form PyTorch runs on a
// GPU, aten::_cudnn_rnn (see Kind RNN): x is the input ([seq, batch,
// input], or [batch, seq, input] with r.BatchFirst), hx is h_0 and cx c_0
// (None unless r.Mode is LSTM), ws the module's flat weights in the order
// of its _flat_weights. Seq, Batch and Input are taken from x. It returns
// the output, h_n and c_n (None unless LSTM); h_n and c_n are RNNState
// ops, so that a model reading them (a classifier of the last hidden
// state) reads what the call wrote.
func (b *Builder) RNN(name string, x, hx, cx TensorID, ws []TensorID, r RNNAttr) (y, hy, cy TensorID) {
	y, hy, cy = None, None, None
	all := append([]TensorID{x, hx}, ws...)
	if r.Mode == LSTM {
		all = append(all, cx)
	}
	if !b.ok(all...) {
		return
	}
	s := b.Shape(x)
	if len(s) != 3 {
		b.Fail("%s: an RNN's input is [seq, batch, input], got %v", b.path(name), s)
		return
	}
	r.Seq, r.Batch, r.Input = s[0], s[1], s[2]
	if r.BatchFirst {
		r.Seq, r.Batch = s[1], s[0]
	}
	if r.Layers < 1 || r.Hidden < 1 || r.Proj < 0 || (r.Proj > 0 && (r.Mode != LSTM || r.Proj >= r.Hidden)) {
		b.Fail("%s: %s with %d layers, hidden size %d and projection %d is not a module PyTorch builds", b.path(name), r.Mode, r.Layers, r.Hidden, r.Proj)
		return
	}
	if want := int64(r.WeightStride()) * r.Layers * r.Directions(); int64(len(ws)) != want {
		b.Fail("%s: %s of %d layers and %d directions has %d flat weights, got %d", b.path(name), r.Mode, r.Layers, r.Directions(), want, len(ws))
		return
	}
	if hs := b.Shape(hx); !slices.Equal(hs, r.StateShape()) {
		b.Fail("%s: h_0 is %v, want %v", b.path(name), hs, r.StateShape())
		return
	}
	in := []TensorID{x, hx}
	if r.Mode == LSTM {
		if cs := b.Shape(cx); !slices.Equal(cs, r.CellShape()) {
			b.Fail("%s: c_0 is %v, want %v", b.path(name), cs, r.CellShape())
			return
		}
		in = append(in, cx)
	}
	in = append(in, ws...)
	dt := b.DTypeOf(x)
	rc := r
	y = b.op(RNN, name, in, None, None, r.OutShape(), dt, None, true, Attr{RNN: &rc, P: r.Dropout})
	hy = b.op(RNNState, name+".h_n", []TensorID{y}, None, None, r.StateShape(), dt, None, true, Attr{Slot: 0})
	if r.Mode == LSTM {
		cy = b.op(RNNState, name+".c_n", []TensorID{y}, None, None, r.CellShape(), dt, None, true, Attr{Slot: 1})
	}
	return y, hy, cy
}
