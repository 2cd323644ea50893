package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// siteEvents are the sizes of the events at site in phase, allocations
// positive, frees negative.
func siteEvents(tr *trace.Trace, site string, phase trace.Phase) []int64 {
	size := map[int64]int64{}
	var out []int64
	for _, e := range tr.Events {
		if e.Action == trace.Alloc {
			size[e.ID] = e.Size
		}
		if tr.SiteName(e.Site) != site || e.Phase != phase || (e.Action != trace.Alloc && e.Action != trace.Free) {
			continue
		}
		d := size[e.ID]
		if e.Action == trace.Free {
			d = -d
		}
		out = append(out, d)
	}
	return out
}

// h * 0.5 (and h - 2.0) from Python on the CPU, h a [4, 64] float32 that
// requires grad, worked out from runOp and keepNumber: the binding wraps
// the float in a float64 0-d tensor (8 bytes) before the op; inside it the
// scalar is cast to float32 (4 bytes) and freed after the 1,024-byte
// output is made. mul's node keeps the wrapped tensor (MulBackward0 saves
// other for self) until its backward releases it (after the 1,024-byte
// gradient and the incoming one's free); sub's goes once the op returns.
// Without checkpointing h's last use frees it (−1,024). Under reentrance
// the forward makes no node; the recompute, inside fork_rng's copy of the
// generator state (5,056, freed when it returns), wraps the number again
// and its node keeps it to its backward. (Without reentrance the node
// would pack nothing through the hooks, so PyTorch would not recompute
// the block: TestWrappedNumberKept holds that mode's forward.)
func TestWrappedNumber(t *testing.T) {
	for _, c := range []struct {
		name     string
		kept     bool
		ck       Checkpoint
		fwd, bwd []int64
	}{
		{"mul", true, Checkpoint{},
			[]int64{8, 4, 1024, -4, -1024}, []int64{1024, -1024, -8}},
		{"sub", false, Checkpoint{},
			[]int64{8, 4, 1024, -4, -8, -1024}, []int64{1024, -1024}},
		{"mul, reentrant", true, Checkpoint{Every: 1, Reentrant: true},
			[]int64{8, 4, 1024, -4, -8}, []int64{8, 4, 1024, -4, -5056, 1024, -8, -1024, -1024, -1024}},
	} {
		b := graph.NewBuilder("scale")
		x := b.Input("x", graph.Shape{4, 64}, graph.F32)
		y := b.Target("y", graph.Shape{4}, graph.I64)
		h := b.Linear("fc", x, 64, true)
		var s graph.TensorID
		b.Block("blocks.0", func() {
			s = b.ScaleNumber("scale", h, false, graph.Number{Wrapped: true, DType: graph.F64, Kept: c.kept})
		})
		b.CrossEntropy("loss", b.Linear("head", s, 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}, Checkpoint: c.ck})
		if err != nil {
			t.Fatal(err)
		}
		fwd, bwd := siteEvents(tr, "blocks.0.scale", trace.Forward), siteEvents(tr, "blocks.0.scale", trace.Backward)
		if !slices.Equal(fwd, c.fwd) || !slices.Equal(bwd, c.bwd) {
			t.Errorf("%s: forward %v, backward %v; want %v, %v", c.name, fwd, bwd, c.fwd, c.bwd)
		}
	}
}

// fc2 = Linear(16, 8) on a GELU's output g ([4, 16] float32, 256 bytes,
// which only fc2's node saves) in a checkpointed block, on the CPU:
// AddmmBackward0 makes grad_input (256) and grad_weight (8·16·4 = 512);
// the engine then sums the bias gradient (32) in validate_outputs. Without
// reentrance the unpack hook handed the node the recomputed g and the
// frame let go of it, so g dies as apply() returns, before the bias
// gradient; under reentrance the node's SavedVariable holds g until
// release_variables(), after it. Before these the recompute ends, and
// fork_rng's copy of the generator state goes (5,056): without reentrance
// it stops before fc2's kernel (fc2 packs only its input, the last pack:
// earlystop.go), and the incoming gradient goes last; under reentrance it
// remakes fc2's output (128), which CheckpointFunction.backward holds as
// the function's output.
func TestUnpackedDieWithApply(t *testing.T) {
	for _, c := range []struct {
		name string
		ck   Checkpoint
		want []int64
	}{
		{"non-reentrant", Checkpoint{Every: 1}, []int64{-5056, 256, 512, -256, 32, -128}},
		{"reentrant", Checkpoint{Every: 1, Reentrant: true}, []int64{128, -5056, 256, 512, 32, -256}},
	} {
		b := graph.NewBuilder("mlp")
		x := b.Input("x", graph.Shape{4, 8}, graph.F32)
		y := b.Target("y", graph.Shape{4}, graph.I64)
		// a block handed a tensor that requires grad (reentrant_test.go)
		p := b.Linear("in", x, 8, true)
		var o graph.TensorID
		b.Block("blocks.0", func() {
			h := b.Linear("fc1", p, 16, true)
			h = b.Act(graph.GELU, "act", h, false)
			o = b.Linear("fc2", h, 8, true)
		})
		b.CrossEntropy("loss", b.Linear("head", o, 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}, Checkpoint: c.ck})
		if err != nil {
			t.Fatal(err)
		}
		if got := siteEvents(tr, "blocks.0.fc2", trace.Backward); !slices.Equal(got, c.want) {
			t.Errorf("%s: fc2's backward events %v, want %v", c.name, got, c.want)
		}
	}
}

// cross_entropy of [2, 10] float32 logits on the CPU (80 bytes), worked out
// from crossEntropyBackward: NllLossBackward0 makes the zeroed gradient of
// the log-probabilities (80) and, once it returns, release_variables()
// drops its total_weight (4), which no other node holds, before
// LogSoftmaxBackward0 makes the logits' gradient (80) and drops the
// log-probabilities (80); the first gradient goes last. Measured on 2.5.1:
// the 4 bytes go between the two allocations.
func TestCrossEntropyReleasesTotalWeight(t *testing.T) {
	b := graph.NewBuilder("ce")
	x := b.Input("x", graph.Shape{2, 8}, graph.F32)
	y := b.Target("y", graph.Shape{2}, graph.I64)
	b.CrossEntropy("loss", b.Linear("head", x, 10, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{80, -4, 80, -80, -80}
	if got := siteEvents(tr, "loss", trace.Backward); !slices.Equal(got, want) {
		t.Errorf("cross_entropy's backward events %v, want %v", got, want)
	}
}
