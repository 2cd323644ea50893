package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
)

// TestRecomputeByRelease holds a non-reentrant checkpoint's
// recomputation to each release's torch/utils/checkpoint.py. The block,
// on a batch x of n = 64 rows of h = 8 features that requires no grad,
// is y = l2(l1(x)) with bias-free Linears l1 (h→h) and l2 (h→H, H = 256),
// then cat([y, y], 1); the loss is its mean. In bytes: a1 = l1's output
// 2,048, y 65,536, the cat's output 131,072, the CPU generator state R =
// 5,056. The forward keeps R (the stashed state) and the 4-byte loss.
// Backward: the seed (4), MeanBackward0's gradient of the cat's output
// (131,072), CatBackward0's two narrow views summed out of place into
// y's gradient (65,536): R + 8 + 131,072 + 65,536 = 201,672; then the
// mean's gradient goes. l2's node is the first to unpack (l1 and l2 pack
// their inputs; the cat packs nothing), and recomputes there, after the
// cat's backward: fork_rng copies the state (R) and l1 runs again
// (2,048). 2.5 stops at l2's packs, before l2 computes
// (_StopRecomputationError), so its peak is the 201,672 above. 1.13
// reruns the whole function: y' (65,536) and the cat's output (131,072)
// are made and dropped beside y's gradient: R + 8 + 65,536 + R + 2,048 +
// 65,536 + 131,072 = 274,312. Measured on the CPU (checkpoint_hf.py's
// timeline), Debian's 1.13 and 2.5.1 give these two peaks to the byte.
func TestRecomputeByRelease(t *testing.T) {
	const n, h, H = 64, 8, 256
	b := graph.NewBuilder("recompute")
	x := b.Input("x", graph.Shape{n, h}, graph.F32)
	var y graph.TensorID
	b.Block("block", func() {
		y = b.Linear("l2", b.Linear("l1", x, h, false), H, false)
		y = b.Cat("cat", 1, y, y)
	})
	b.Output(b.MeanAll("loss", y))
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		torch    string
		backward int64
	}{
		{"1.13", 274312},
		{"2.0", 274312},
		{"2.5", 201672},
		{"2.11", 201672},
	} {
		prof, err := profile.Lookup(c.torch)
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: prof, Checkpoint: FullCheckpoint, Optimizer: Optimizer{Kind: SGD}, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		if peak := figuresOf(tr).bwdPeak; peak != c.backward {
			t.Errorf("--torch %s: backward peak %d bytes above the model and batch, want %d", c.torch, peak, c.backward)
		}
	}
}
