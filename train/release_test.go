package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// A release inside a checkpointed block of a tensor made before it and
// not handed to it (a stage's input, which the caller's loop variable
// holds until the stage's last block returns: timm Swin's) is Python
// letting go in the forward. The block's recompute in backward reruns the
// function, which holds no such reference: it lets go of nothing. Each
// storage is freed once, in both checkpointing modes.
func TestReleaseInRecomputedBlock(t *testing.T) {
	for _, reentrant := range []bool{false, true} {
		b := graph.NewBuilder("stage")
		x := b.Input("x", graph.Shape{4, 8}, graph.F32)
		y := b.Target("y", graph.Shape{4}, graph.I64)
		a := b.Linear("prev", x, 8, true)
		// an add keeps nothing for backward: only Python holds a
		d := b.Add("down", a, a)
		var h graph.TensorID
		b.Block("blocks.0", func() {
			h = b.Linear("fc", d, 8, true)
			b.Release("release", a)
		})
		b.CrossEntropy("loss", b.Linear("head", h, 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD},
			Checkpoint: Checkpoint{Every: 1, Reentrant: reentrant}})
		if err != nil {
			t.Fatalf("reentrant %v: %v", reentrant, err)
		}
		freed := map[int64]bool{}
		for _, e := range tr.Events {
			if e.Action != trace.Free {
				continue
			}
			if freed[e.ID] {
				t.Errorf("reentrant %v: block %d freed twice (%s, %s)", reentrant, e.ID, tr.SiteName(e.Site), e.Phase)
			}
			freed[e.ID] = true
		}
	}
}
