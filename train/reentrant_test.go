package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// stackedMLP is a batch of n rows of d features through two checkpointable
// blocks (Linear(d→d), ReLU) and a head Linear(d→2) under cross-entropy.
// With embed the features come from a frozen nn.Embedding(16, d) of n
// token ids instead of the batch itself; with stem from a frozen
// Linear(d→d) of the batch (a vision model's patch embedding); gradIn
// makes the batch require grad (x.requires_grad_()).
func stackedMLP(t *testing.T, n, d int64, embed, gradIn bool) *graph.Graph {
	return stackedWith(t, n, d, embed, false, gradIn)
}

func stackedWith(t *testing.T, n, d int64, embed, stem, gradIn bool) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("stack")
	var x graph.TensorID
	switch {
	case embed:
		b.Adapters = &graph.Adapters{Freeze: []string{"embed"}}
		ids := b.Input("ids", graph.Shape{n}, graph.I64)
		x = b.Embedding("embed", ids, 16, d)
	case stem:
		b.Adapters = &graph.Adapters{Freeze: []string{"embed"}}
		x = b.Linear("embed", b.Input("x", graph.Shape{n, d}, graph.F32), d, true)
	default:
		x = b.Input("x", graph.Shape{n, d}, graph.F32)
		b.TensorAt(x).RequiresGrad = gradIn
	}
	y := b.Target("y", graph.Shape{n}, graph.I64)
	for _, name := range []string{"l0", "l1"} {
		b.Block(name, func() {
			x = b.Act(graph.ReLU, "relu", b.Linear("fc", x, d, true), false)
		})
	}
	b.CrossEntropy("loss", b.Linear("head", x, 2, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestReentrantCutOff holds AutogradGraph and CutOff to
// torch.utils.checkpoint's rules: under use_reentrant=True a region handed
// no tensor that requires grad makes outputs that require none, and the
// next region, handed those, is cut off in turn; without reentrance, or
// with an input that requires grad, nothing changes; transformers'
// checkpointing (hf) makes the input embeddings' output require grad
// (enable_input_require_grads), so its layers train under reentrance
// where torch.utils.checkpoint's alone does not.
func TestReentrantCutOff(t *testing.T) {
	// d = 8: each block's Linear has 8·8 + 8 = 72 parameters, the head
	// 8·2 + 2 = 18.
	const block, head = 72, 18
	for _, c := range []struct {
		name                string
		embed, stem, gradIn bool
		policy              string
		cut, regions        int32
		params              int64
	}{
		{"batch, reentrant", false, false, false, "full-reentrant", 2, 2, 2 * block},
		{"batch, every second block reentrant", false, false, false, "every-2-reentrant", 1, 1, block},
		{"batch, non-reentrant", false, false, false, "full", 0, 0, 0},
		{"batch requiring grad, reentrant", false, false, true, "full-reentrant", 0, 0, 0},
		{"frozen embedding, reentrant", true, false, false, "full-reentrant", 2, 2, 2 * block},
		{"frozen embedding, hf", true, false, false, "hf", 0, 0, 0},
		{"frozen embedding, hf non-reentrant", true, false, false, "hf-non-reentrant", 0, 0, 0},
		{"frozen patch embedding, reentrant", false, true, false, "full-reentrant", 2, 2, 2 * block},
		{"frozen patch embedding, hf", false, true, false, "hf", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := stackedWith(t, 4, 8, c.embed, c.stem, c.gradIn)
			ck, err := ParseCheckpoint(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			before := make([]bool, len(g.Tensors))
			for i := range g.Tensors {
				before[i] = g.Tensors[i].RequiresGrad
			}
			cut, regions, params := CutOff(g, ck)
			if cut != c.cut || regions != c.regions || params != c.params {
				t.Errorf("CutOff = %d of %d regions, %d parameters; want %d of %d, %d", cut, regions, params, c.cut, c.regions, c.params)
			}
			a := AutogradGraph(g, ck)
			var trained int64
			for _, id := range a.Params() {
				if a.Tensor(id).RequiresGrad {
					trained += a.Tensor(id).Shape.Numel()
				}
			}
			if want := 2*block + head - c.params; trained != want {
				t.Errorf("%d parameters require grad, want %d", trained, want)
			}
			if !a.Tensor(a.Loss).RequiresGrad {
				t.Error("the loss does not require grad: the head trains in every case")
			}
			if c.cut == 0 && !c.embed && !c.stem && a != g {
				t.Error("a policy that changes nothing gave a copy of the graph")
			}
			if (c.embed || c.stem) && ck.Library {
				// the hooked output is the first op's
				if out := a.Ops[0].Output; !a.Tensor(out).RequiresGrad {
					t.Errorf("the input embeddings' output %s does not require grad under transformers' checkpointing", a.Tensor(out).Name)
				}
			}
			for i := range g.Tensors {
				if g.Tensors[i].RequiresGrad != before[i] {
					t.Fatalf("%s was changed in the graph handed in", g.Tensors[i].Name)
				}
			}
		})
	}
}

// TestReentrantCutOffSimulated: a step of the stack under full-reentrant
// trains the head only, as PyTorch does. Adam's state is then the head's
// 18 parameters' two float32 moments, 144 B, and a float32 step tensor
// for each of its two parameters (2.x's state_steps), 8 B: none for any
// other parameter. Nothing is recomputed, and the forward keeps for
// backward only what the head and the loss save, as the same stack with
// both blocks frozen and no checkpoint does (its parameters get no
// gradient either: the two runs are the same autograd graph), so their
// backward peaks are the same too.
func TestReentrantCutOffSimulated(t *testing.T) {
	g := stackedMLP(t, 4, 8, false, false)
	ck, err := ParseCheckpoint("full-reentrant")
	if err != nil {
		t.Fatal(err)
	}
	prof := mustProfile(t, "2.5")
	_, sum, err := Simulate(g, Setup{CPU: true, Profile: prof, Steps: 1, Checkpoint: ck, Optimizer: Optimizer{Kind: Adam}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.TrainableParamCount != 18 || sum.OptimizerStateBytes != 144+8 {
		t.Errorf("trained %d parameters with %d B of Adam state, want 18 and 152", sum.TrainableParamCount, sum.OptimizerStateBytes)
	}
	fb := graph.NewBuilder("stack")
	fb.Adapters = &graph.Adapters{Freeze: []string{"l0", "l1"}}
	x := fb.Input("x", graph.Shape{4, 8}, graph.F32)
	y := fb.Target("y", graph.Shape{4}, graph.I64)
	for _, name := range []string{"l0", "l1"} {
		fb.Block(name, func() {
			x = fb.Act(graph.ReLU, "relu", fb.Linear("fc", x, 8, true), false)
		})
	}
	fb.CrossEntropy("loss", fb.Linear("head", x, 2, true), y)
	frozen, err := fb.Graph()
	if err != nil {
		t.Fatal(err)
	}
	_, want, err := Simulate(frozen, Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: Optimizer{Kind: Adam}})
	if err != nil {
		t.Fatal(err)
	}
	bwd, wantBwd := sum.PhasePeakRequested[trace.Backward], want.PhasePeakRequested[trace.Backward]
	if sum.ActivationsBytes != want.ActivationsBytes || bwd != wantBwd {
		t.Errorf("saved %d B, backward peak %d B; the frozen stack without checkpointing saves %d B and peaks at %d B in backward",
			sum.ActivationsBytes, bwd, want.ActivationsBytes, wantBwd)
	}
}
