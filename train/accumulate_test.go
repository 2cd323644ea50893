package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// A weight read twice has its two gradients summed in its AccumulateGrad
// node's input buffer (InputBuffer::accumulate). torch 1.13 always sums
// into a new tensor; 2.5 adds the second into the first in place, unless
// something else holds the first. A linear's weight gradient is a view
// (mm_mat2_backward's grad.t().mm(mat1).t() of the column-major W.t(),
// then TBackward0's .t()), whose autograd meta holds its base: summed into
// a new tensor in 2.5 too. An embedding's gradient (embedding_dense_backward)
// is a tensor of its own: added in place in 2.5.
//
// The shared weight is [64, 64] float32, 16,384 bytes; counted are the
// backward's allocations of that size: one gradient per use, and the sum
// where it is a new tensor.
func TestAccumulateViewGradient(t *testing.T) {
	const wBytes = 64 * 64 * 4
	for _, c := range []struct {
		version, uses string
		want          int
	}{
		{"1.13", "linear", 3},
		{"2.5", "linear", 3}, // the first gradient is a view: out of place
		{"1.13", "embedding", 3},
		{"2.5", "embedding", 2}, // in place
	} {
		b := graph.NewBuilder("shared")
		w := b.Param("w", graph.Shape{64, 64})
		y := b.Target("y", graph.Shape{8}, graph.I64)
		var h graph.TensorID
		if c.uses == "linear" {
			x := b.Input("x", graph.Shape{8, 64}, graph.F32)
			h = b.LinearWith("l2", b.LinearWith("l1", x, w, graph.None), w, graph.None)
		} else {
			ids := b.Input("ids", graph.Shape{8}, graph.I64)
			h = b.Add("add", b.EmbeddingWith("e1", ids, w), b.EmbeddingWith("e2", ids, w))
		}
		b.CrossEntropy("loss", b.Linear("head", h, 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, c.version), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range tr.Events {
			if e.Action == trace.Alloc && e.Phase == trace.Backward && e.Size == wBytes {
				n++
			}
		}
		if n != c.want {
			t.Errorf("%s, weight read by two %ss: %d allocations of its size in backward, want %d", c.version, c.uses, n, c.want)
		}
	}
}
