package predict

import (
	"context"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// cuDNN's workspaces lie between none and the bound: the answer replays
// both ends and keeps the one that reserves more (or runs out of memory),
// never the lesser. The ends are replayed here by hand and compared with
// what Run answers.
func TestWorkspaceEndsTakeTheWorse(t *testing.T) {
	m, err := models.Lookup("resnet50")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gpu.Lookup("a100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int64{32, 64, 128} {
		req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: batch}, GPU: g, Context: 0}
		res, err := Run(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var ends [2]int64
		for i, none := range []bool{false, true} {
			setup, err := train.Setup{ConvWorkspaceNone: none}.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			setup.ComputeMajor = g.Major
			sim, _, err := simulateTraining(context.Background(), req, setup)
			if err != nil {
				t.Fatal(err)
			}
			tl, err := alloc.Replay(sim.CompactTrace(), alloc.Config{}, alloc.Device{Capacity: g.Capacity, Total: g.Capacity}, alloc.ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ends[i] = tl.PeakReserved
		}
		if want := max(ends[0], ends[1]); res.Timeline.PeakReserved != want || res.WorkspaceLowEnd != (ends[1] > ends[0]) {
			t.Errorf("batch %d: reserved %d (low end %v); the ends reserve %d with the bound, %d without", batch, res.Timeline.PeakReserved, res.WorkspaceLowEnd, ends[0], ends[1])
		}
		if res.Summary.ConvWorkspaceBytes == 0 {
			t.Errorf("batch %d: no workspace bound", batch)
		}
	}
}
