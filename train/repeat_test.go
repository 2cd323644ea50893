package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/models"
)

// With gradient accumulation, the micro-batches after the third are
// copies of the fourth: the trace built that way equals, event for event
// and id for id, the one simulated micro-batch by micro-batch, for every
// zoo model under setups that exercise autocast, the grad scaler,
// checkpointing and the optimizers' implementations.
func TestRepeatedMicroBatchesEqualSimulated(t *testing.T) {
	setups := []Setup{
		{Steps: 2, Accumulate: 7},
		{Steps: 2, Accumulate: 6, Precision: Mixed16, Checkpoint: FullCheckpoint},
		{Steps: 3, Accumulate: 9, Precision: MixedBF16, Optimizer: Optimizer{Kind: SGD, Momentum: 0.9}, Checkpoint: Checkpoint{Every: 2, Attention: true}},
		{Steps: 2, Accumulate: 5, Precision: TrueBF16, Optimizer: Optimizer{Kind: AdamW, Impl: ForLoop, WeightDecay: 0.1}, Profile: mustProfile(t, "1.13")},
	}
	repeated := 0
	for _, m := range models.All() {
		cfg := m.Small(2, 16)
		g, err := m.Build(cfg)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		for _, s := range setups {
			repeatMicroBatches = true
			sim, err := New(g, s)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < sim.Setup().Steps; i++ {
				if err := sim.Step(g); err != nil {
					t.Fatalf("%s: %v", m.Name, err)
				}
			}
			fsum := sim.Summary()
			compact := sim.CompactTrace()
			repeats := len(compact.Repeats)
			if err := compact.Validate(); err != nil {
				t.Errorf("%s: %v", m.Name, err)
			}
			fastEv := slices.Clone(sim.Trace().Events)
			repeatMicroBatches = false
			full, sum, err := Simulate(g, s)
			repeatMicroBatches = true
			if err != nil {
				t.Fatalf("%s: %v", m.Name, err)
			}
			if !slices.Equal(fastEv, full.Events) {
				i := 0
				for i < len(fastEv) && i < len(full.Events) && fastEv[i] == full.Events[i] {
					i++
				}
				t.Errorf("%s, accumulate %d: traces differ from event %d (of %d and %d)", m.Name, s.Accumulate, i, len(fastEv), len(full.Events))
			}
			if fsum.PeakRequested != sum.PeakRequested {
				t.Errorf("%s: requested peak %d with repetition, %d without", m.Name, fsum.PeakRequested, sum.PeakRequested)
			}
			if repeats > 0 {
				repeated++
			}
		}
	}
	// every step of every case should have repeated
	if want := len(models.All()) * len(setups); repeated != want {
		t.Errorf("repetition used in %d of %d cases", repeated, want)
	}
}
