package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// tiedLM is an embedding of V×H tied to its output layer, as Gemma and
// GPT-2 tie them, at batch 2 and sequence 3. With scaled, the embedding's
// output is multiplied by a 0-d constant made "like" the weight, as a
// capture records Gemma's normalizer (torch.tensor(hidden**0.5)): a
// constant whose only operand is the parameter.
func tiedLM(t *testing.T, scaled bool) *graph.Graph {
	const V, H, B, L = 8, 4, 2, 3
	b := graph.NewBuilder("tied")
	ids := b.Input("ids", graph.Shape{B, L}, graph.I64)
	y := b.Target("labels", graph.Shape{B * L}, graph.I64)
	w := b.Param("embed", graph.Shape{V, H})
	x := b.EmbeddingWith("embed", ids, w)
	if scaled {
		x = b.Mul("scale", x, b.Const("normalizer", w, graph.F32))
	}
	logits := b.LinearWith("lm_head", x, w, graph.None)
	b.CrossEntropy("loss", b.Reshape("flat", logits, B*L, V), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A constant made like a parameter is no use of it: only an op whose
// output requires grad records a node with an edge to the parameter's
// AccumulateGrad (compute_requires_grad in the generated VariableType
// kernels), so the tied weight's two gradients (lm_head's and the
// embedding's) make its .grad, and zero_grad frees it. Worked by hand for
// one step with SGD under 2.5 (zero_grad sets the gradients to None):
//
//	parameter 8·4·4 = 128 bytes; batch: ids 2·3·8 = 48, labels 6·8 = 48;
//	the loss 4, kept by the loop: 228 bytes alive after the step;
//	the gradient, one of the parameter's size: 128 bytes.
//
// Counting the constant as a third use, AccumulateGrad would wait for a
// gradient that never comes: no .grad (0 gradient bytes) and 128 bytes
// more alive after zero_grad.
func TestConstantLikeParameterIsNoEdge(t *testing.T) {
	for _, scaled := range []bool{false, true} {
		tr, sum, err := Simulate(tiedLM(t, scaled), Setup{CPU: true, Profile: mustProfile(t, "2.5"), Optimizer: Optimizer{Kind: SGD}, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		var freed int64
		sizes := map[int64]int64{}
		for _, e := range tr.Events {
			switch {
			case e.Action == trace.Alloc:
				sizes[e.ID] = e.Size
			case e.Action == trace.Free && e.Phase == trace.ZeroGrad && e.Category == trace.Gradient:
				freed += sizes[e.ID]
			}
		}
		checks := []struct {
			name      string
			got, want int64
		}{
			{"gradient bytes", sum.GradientsBytes, 128},
			{"gradients freed by zero_grad", freed, 128},
			{"alive after the step", liveAtEnd(tr), 228},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("scaled %v: %s = %d, want %d", scaled, c.name, c.got, c.want)
			}
		}
	}
}
