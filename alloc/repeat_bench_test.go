package alloc_test

import (
	"fmt"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// BenchmarkPipelineAccumulate simulates and replays a step of a pipeline
// stage of Llama-3-8B (2 stages, bf16-mixed, batch 1 of 1024 tokens) with
// 1024 micro-batches, the most --pp allows: the 1F1B pairs are one
// repeated run, and the replay skips their copies once the allocator's
// state recurs. Stage 0 keeps a micro-batch in flight between its pairs,
// stage 1 none.
func BenchmarkPipelineAccumulate(b *testing.B) {
	m, err := models.Lookup("Llama-3-8B")
	if err != nil {
		b.Fatal(err)
	}
	for stage := range 2 {
		cfg := models.Config{Batch: 1, Seq: 1024, PP: 2, Stage: int64(stage)}
		g, err := m.Build(cfg)
		if err != nil {
			b.Fatal(err)
		}
		s := train.Setup{Accumulate: 1024, Stages: 2, Stage: stage, Precision: train.MixedBF16}
		b.Run(fmt.Sprintf("stage-%d", stage), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				sim, err := train.NewValidated(g, s)
				if err != nil {
					b.Fatal(err)
				}
				for range sim.Setup().Steps {
					if err := sim.Step(g); err != nil {
						b.Fatal(err)
					}
				}
				tl, err := alloc.Replay(sim.CompactTrace(), alloc.Config{}, alloc.Device{Capacity: 1 << 40}, alloc.ReplayOptions{})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(tl.Skipped), "skipped-events")
				sim.CompactTrace().Release()
			}
		})
	}
}
