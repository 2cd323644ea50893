package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// scaledStack is stackedMLP with x * 0.5 after each block's Linear: with
// number, the op keeps the wrapped Python number, an 8-byte double
// (graph.Attr.Number), as mul.Tensor's MulBackward0 does.
func scaledStack(t *testing.T, number bool) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("scaled")
	x := b.Input("x", graph.Shape{4, 8}, graph.F32)
	b.TensorAt(x).RequiresGrad = true
	y := b.Target("y", graph.Shape{4}, graph.I64)
	for _, name := range []string{"l0", "l1"} {
		b.Block(name, func() {
			h := b.Linear("fc", x, 8, true)
			if number {
				h = b.ScaleNumber("half", h, false, graph.WrappedDouble)
			} else {
				h = b.Scale("half", h)
			}
			x = b.Act(graph.ReLU, "relu", h, false)
		})
	}
	b.CrossEntropy("loss", b.Linear("head", x, 2, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// forwardEnd is the bytes alive at the end of the first forward, beside
// the parameters and the batch.
func forwardEnd(tr *trace.Trace) int64 { return figuresOf(tr).fwdEnd }

// TestWrappedNumberKept holds keepNumber to what PyTorch does with the
// 0-d tensor a Python number becomes (x * 0.5), measured on the CPU with
// the allocator's events (8 bytes each): a node keeps it to backward
// without checkpointing and, under 2.5 (SavedVariable skips the hooks for
// a wrapped number), in a non-reentrant region too, where 1.13 packs it
// and lets it go; a reentrant region's forward builds no node and keeps
// none; a GPU run counts no host memory. Two blocks: 16 bytes or none.
func TestWrappedNumberKept(t *testing.T) {
	for _, c := range []struct {
		release, policy string
		cpu             bool
		want            int64
	}{
		{"2.5", "none", true, 16},
		{"2.5", "full", true, 16},
		{"1.13", "none", true, 16},
		{"1.13", "full", true, 0},
		{"2.5", "full-reentrant", true, 0},
		{"2.5", "none", false, 0},
		{"2.5", "full", false, 0},
	} {
		ck, err := ParseCheckpoint(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		s := Setup{CPU: c.cpu, Profile: mustProfile(t, c.release), Steps: 1, Checkpoint: ck, Optimizer: Optimizer{Kind: SGD}}
		var ends, saved [2]int64
		for k, number := range []bool{false, true} {
			tr, sum, err := Simulate(scaledStack(t, number), s)
			if err != nil {
				t.Fatal(err)
			}
			ends[k], saved[k] = forwardEnd(tr), sum.ActivationsBytes
		}
		if saved[0] != saved[1] {
			// the saved bytes are what the hooks pack, as the references
			// count them
			t.Errorf("%s --checkpoint %s cpu=%v: saved %d B with the numbers, %d B without", c.release, c.policy, c.cpu, saved[1], saved[0])
		}
		if got := ends[1] - ends[0]; got != c.want {
			t.Errorf("%s --checkpoint %s cpu=%v: the numbers keep %d B at the forward's end, want %d", c.release, c.policy, c.cpu, got, c.want)
		}
	}
}

// TestHandedKept: a checkpointed block keeps every tensor its call is
// handed (graph.Graph.BlockArgs), read or not, as torch.utils.checkpoint
// keeps its function's arguments: here u, [4, 8] float32, 128 bytes, which
// the block is handed but only the head reads. Without checkpointing the
// arguments change nothing.
func TestHandedKept(t *testing.T) {
	build := func(handed bool) *graph.Graph {
		b := graph.NewBuilder("handed")
		x := b.Input("x", graph.Shape{4, 8}, graph.F32)
		b.TensorAt(x).RequiresGrad = true
		u := b.Scale("u", x)
		h := x
		b.Block("l0", func() {
			if handed {
				b.Handed(h, u)
			}
			h = b.Act(graph.ReLU, "relu", b.Linear("fc", h, 8, true), false)
		})
		y := b.Target("y", graph.Shape{4}, graph.I64)
		b.CrossEntropy("loss", b.Linear("head", b.Add("add", h, u), 2, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	for _, c := range []struct {
		policy string
		want   int64
	}{{"full", 128}, {"full-reentrant", 128}, {"none", 0}} {
		ck, err := ParseCheckpoint(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		s := Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Checkpoint: ck, Optimizer: Optimizer{Kind: SGD}}
		var saved, ends [2]int64
		for k, handed := range []bool{false, true} {
			tr, sum, err := Simulate(build(handed), s)
			if err != nil {
				t.Fatal(err)
			}
			saved[k], ends[k] = sum.ActivationsBytes, forwardEnd(tr)
		}
		if saved[1]-saved[0] != c.want || ends[1]-ends[0] != c.want {
			t.Errorf("--checkpoint %s: handing u keeps %d B more saved and %d B more at the forward's end, want %d", c.policy, saved[1]-saved[0], ends[1]-ends[0], c.want)
		}
	}
}
