package graph

import (
	"slices"
	"strings"
	"testing"
)

// An RNN op's shapes follow torch/nn/modules/rnn.py: output [T, B, D·out]
// (batch first: [B, T, D·out]), h [L·D, B, out], c [L·D, B, hidden], out
// being proj_size when an LSTM projects; weight_stride0 flat weights per
// layer and direction.
func TestBuilderRNN(t *testing.T) {
	for _, c := range []struct {
		name       string
		r          RNNAttr
		x          Shape
		weights    int
		y, hy, cy  Shape
		wantStates int
		err        string
	}{
		{"lstm", RNNAttr{Mode: LSTM, Hidden: 20, Layers: 2, Biases: true}, Shape{7, 3, 10}, 8,
			Shape{7, 3, 20}, Shape{2, 3, 20}, Shape{2, 3, 20}, 2, ""},
		{"lstm proj bidir batch first", RNNAttr{Mode: LSTM, Hidden: 20, Proj: 5, Layers: 2, Bidirectional: true, BatchFirst: true, Biases: true},
			Shape{3, 7, 10}, 20, Shape{3, 7, 10}, Shape{4, 3, 5}, Shape{4, 3, 20}, 2, ""},
		{"gru no bias", RNNAttr{Mode: GRU, Hidden: 8, Layers: 1}, Shape{4, 2, 6}, 2,
			Shape{4, 2, 8}, Shape{1, 2, 8}, nil, 1, ""},
		{"rnn weights missing", RNNAttr{Mode: RNNTanh, Hidden: 8, Layers: 2, Biases: true}, Shape{4, 2, 6}, 4,
			nil, nil, nil, 0, "has 8 flat weights, got 4"},
		{"gru projection", RNNAttr{Mode: GRU, Hidden: 8, Proj: 4, Layers: 1, Biases: true}, Shape{4, 2, 6}, 4,
			nil, nil, nil, 0, "is not a module PyTorch builds"},
	} {
		b := NewBuilder("t")
		x := b.Input("x", c.x, F32)
		r := c.r
		seq, batch := c.x[0], c.x[1]
		if r.BatchFirst {
			seq, batch = batch, seq
		}
		r.Batch = batch
		hx := b.Input("h0", r.StateShape(), F32)
		cx := None
		if r.Mode == LSTM {
			cx = b.Input("c0", r.CellShape(), F32)
		}
		var ws []TensorID
		for i := 0; i < c.weights; i++ {
			ws = append(ws, b.Param("w", Shape{4}))
		}
		y, hy, cy := b.RNN("rnn", x, hx, cx, ws, c.r)
		if c.err != "" {
			if b.Err() == nil || !strings.Contains(b.Err().Error(), c.err) {
				t.Errorf("%s: error %v, want one saying %q", c.name, b.Err(), c.err)
			}
			continue
		}
		if b.Err() != nil {
			t.Fatalf("%s: %v", c.name, b.Err())
		}
		if !slices.Equal(b.Shape(y), c.y) || !slices.Equal(b.Shape(hy), c.hy) {
			t.Errorf("%s: output %v and h_n %v, want %v and %v", c.name, b.Shape(y), b.Shape(hy), c.y, c.hy)
		}
		if (cy == None) != (c.cy == nil) || (cy != None && !slices.Equal(b.Shape(cy), c.cy)) {
			t.Errorf("%s: c_n %d, want shape %v", c.name, cy, c.cy)
		}
		states := 0
		for _, op := range b.g.Ops {
			if op.Kind == RNNState {
				states++
			}
			if op.Kind == RNN && (op.Attr.RNN == nil || op.Attr.RNN.Seq != seq || op.Attr.RNN.Batch != batch) {
				t.Errorf("%s: the RNN op's sequence length and batch are not its input's", c.name)
			}
		}
		if states != c.wantStates {
			t.Errorf("%s: %d state ops, want %d", c.name, states, c.wantStates)
		}
	}
}
