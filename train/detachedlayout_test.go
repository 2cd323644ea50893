package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// TestObeysLayout is obeys_layout_contract
// (torch/csrc/autograd/utils/grad_layout_contract.h) for a dense
// variable: the gradient's strides equal the variable's in every dim of
// more than one element.
func TestObeysLayout(t *testing.T) {
	for _, c := range []struct {
		s        graph.Shape
		gst, vst []int64
		want     bool
	}{
		{graph.Shape{4, 16, 64}, nil, nil, true},
		// a contiguous gradient of Whisper's permuted [B, L, D] (memory
		// order B, D, L)
		{graph.Shape{4, 16, 64}, nil, []int64{1024, 1, 16}, false},
		{graph.Shape{4, 16, 64}, []int64{1024, 1, 16}, []int64{1024, 1, 16}, true},
		{graph.Shape{4, 16, 64}, []int64{1024, 1, 16}, nil, false},
		// a dim of size 1 may have any stride
		{graph.Shape{1, 16, 64}, []int64{7, 64, 1}, nil, true},
	} {
		if got := obeysLayout(c.s, c.gst, c.vst); got != c.want {
			t.Errorf("obeysLayout(%v, %v, %v) = %v, want %v", c.s, c.gst, c.vst, got, c.want)
		}
	}
}

// linearThenPermute is x [2, 3, 4] → Linear(4→4) → permute(0, 2, 1) →
// contiguous → view [8, 3] → cross-entropy: the Linear's output gradient
// is the permute's backward, grad.permute back, strides (12, 1, 3) over
// [2, 3, 4]. Without permute the output is viewed as [6, 4] directly and
// its gradient is contiguous.
func linearThenPermute(t *testing.T, permute bool) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("lp")
	x := b.Input("x", graph.Shape{2, 3, 4}, graph.F32)
	b.TensorAt(x).RequiresGrad = true
	y := b.Linear("fc", x, 4, true)
	var logits, target graph.TensorID
	if permute {
		p := b.Contiguous("copy", b.Permute("perm", y, 0, 2, 1))
		logits = b.Reshape("flat", p, 8, 3)
		target = b.Target("t", graph.Shape{8}, graph.I64)
	} else {
		logits = b.Reshape("flat", y, 6, 4)
		target = b.Target("t", graph.Shape{6}, graph.I64)
	}
	b.CrossEntropy("loss", logits, target)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// backwardAllocs are the sizes the backward allocates at site name, in
// order.
func backwardAllocs(tr *trace.Trace, name string) []int64 {
	var out []int64
	for _, e := range tr.Events {
		if e.Phase == trace.Backward && e.Action == trace.Alloc && tr.SiteName(e.Site) == name {
			out = append(out, e.Size)
		}
	}
	return out
}

// TestLinearViewCopy: F.linear of a 3-D input views its 2-D product back
// (_flatten_nd_linear's result.view), so a gradient permuted back to the
// output's shape, which no view reshapes to [6, 4], is copied first
// (ViewBackward0's grad.reshape): 2·3·4 float32, 96 bytes, before the
// product's gradients (the input's, 96 bytes; the weight's, 64; the
// bias's, 16).
func TestLinearViewCopy(t *testing.T) {
	s := Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}}
	for _, c := range []struct {
		permute bool
		want    []int64
	}{
		{false, []int64{96, 64, 16}},
		{true, []int64{96, 96, 64, 16}},
	} {
		tr, _, err := Simulate(linearThenPermute(t, c.permute), s)
		if err != nil {
			t.Fatal(err)
		}
		got := backwardAllocs(tr, "fc")
		if len(got) != len(c.want) {
			t.Errorf("permute %v: the linear's backward allocates %v, want %v", c.permute, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("permute %v: the linear's backward allocates %v, want %v", c.permute, got, c.want)
				break
			}
		}
	}
}

// TestDetachedLeafLayout: under reentrance the detached input of a
// region laid out in another order than its dims (graph.Tensor.Strides)
// gets its .grad copied to those strides by AccumulateGrad
// (clone_obey_contract) when the gradient that reaches it is contiguous:
// one copy of the input, 2·3·4 float32, more than where the input is
// contiguous; without reentrance there is no detached leaf.
func TestDetachedLeafLayout(t *testing.T) {
	build := func(strided bool) *graph.Graph {
		b := graph.NewBuilder("leaf")
		a := b.Input("a", graph.Shape{2, 4, 3}, graph.F32)
		b.TensorAt(a).RequiresGrad = true
		h := b.Scale("h", b.Permute("perm", a, 0, 2, 1))
		if strided {
			// a TensorIterator result of the permuted view keeps its order
			b.TensorAt(h).Strides = []int64{12, 1, 3}
		}
		b.Block("l0", func() {
			h = b.Act(graph.ReLU, "relu", b.Linear("fc", h, 4, true), false)
		})
		y := b.Target("y", graph.Shape{6}, graph.I64)
		b.CrossEntropy("loss", b.Reshape("flat", h, 6, 4), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		policy string
		extra  int
	}{{"full-reentrant", 1}, {"full", 0}, {"none", 0}} {
		ck, err := ParseCheckpoint(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		s := Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Checkpoint: ck, Optimizer: Optimizer{Kind: SGD}}
		var n [2]int
		for k, strided := range []bool{false, true} {
			tr, _, err := Simulate(build(strided), s)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tr.Events {
				if e.Phase == trace.Backward && e.Action == trace.Alloc && e.Size == 96 {
					n[k]++
				}
			}
		}
		if n[1]-n[0] != c.extra {
			t.Errorf("--checkpoint %s: %d input-sized allocations in backward with the input strided, %d without; want %d more",
				c.policy, n[1], n[0], c.extra)
		}
	}
}
