package predict

import (
	"context"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// Gradient accumulation is simulated once and replayed once a period: a
// micro-batch's copies are skipped as soon as the allocator's state comes
// back. ResNet-50 at batch 4 takes tens of runs to come back (small blocks
// walk through a free block of the small pool before their places
// repeat), which the replay once gave up on after eight, replaying all
// 4,096 micro-batches of a step. The figures must be those of a replay of
// every event (ReplayOptions.Record turns skipping off), and nearly all
// of the copies skipped.
func TestAccumulationReplayedOncePerPeriod(t *testing.T) {
	m, err := models.Lookup("resnet50")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gpu.Lookup("a100-40gb")
	if err != nil {
		t.Fatal(err)
	}
	s, err := train.Setup{Accumulate: 4096}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	s.ComputeMajor = g.Major
	req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: 4}, GPU: g, Context: 0, Setup: s}
	sim, _, err := simulateTraining(context.Background(), req, s)
	if err != nil {
		t.Fatal(err)
	}
	tr := sim.CompactTrace()
	dev := alloc.Device{Capacity: g.Capacity, Total: g.Capacity}
	fast, err := alloc.Replay(tr, alloc.Config{}, dev, alloc.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	full, err := alloc.Replay(tr, alloc.Config{}, dev, alloc.ReplayOptions{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if fast.PeakAllocated != full.PeakAllocated || fast.PeakReserved != full.PeakReserved || fast.Final != full.Final || len(fast.Steps) != len(full.Steps) {
		t.Errorf("skipping changed the figures: peaks %d/%d against %d/%d, final %+v against %+v",
			fast.PeakAllocated, fast.PeakReserved, full.PeakAllocated, full.PeakReserved, fast.Final, full.Final)
	}
	for i := range min(len(fast.Steps), len(full.Steps)) {
		if fast.Steps[i] != full.Steps[i] {
			t.Errorf("step %d: %+v, replayed whole %+v", i, fast.Steps[i], full.Steps[i])
		}
	}
	if n := tr.Len(); fast.Skipped < n*9/10 {
		t.Errorf("%d of %d events skipped, want at least nine tenths", fast.Skipped, n)
	}
}
