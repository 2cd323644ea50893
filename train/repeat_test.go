package train

import (
	"fmt"
	"reflect"
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

// Under a pipeline the steady 1F1B pairs are copies of one pair: the
// trace built that way equals, event for event and id for id, the
// schedule simulated pair by pair, for every stage of 2 and 4 stages
// (warm-ups of 0 to 3 forwards, so pairs that free what the forward 1 to 3
// pairs before saved) and accumulations too short to repeat and long
// enough to. The template is pair 2·lag+1 after the warm-up, so pairs
// repeat once more than 2·lag+2 of them run: with 33 micro-batches on
// every stage.
func TestRepeatedPipelinePairsEqualSimulated(t *testing.T) {
	m, err := models.Lookup("Qwen2.5-0.5B")
	if err != nil {
		t.Fatal(err)
	}
	setups := []Setup{
		{Steps: 2, Optimizer: Optimizer{Kind: SGD, Momentum: 0.9}},
		{Steps: 2, Precision: MixedBF16, Checkpoint: FullCheckpoint},
	}
	for _, pp := range []int{2, 4} {
		for stage := range pp {
			cfg := m.Small(2, 16)
			cfg.Layers, cfg.PP, cfg.Stage = 4, int64(pp), int64(stage)
			g, err := m.Build(cfg)
			if err != nil {
				t.Fatalf("pp %d stage %d: %v", pp, stage, err)
			}
			for _, acc := range []int{4, 8, 33} {
				for i, s := range setups {
					s.Stages, s.Stage, s.Accumulate = pp, stage, acc
					name := fmt.Sprintf("pp %d stage %d accumulate %d setup %d", pp, stage, acc, i)
					repeatMicroBatches = true
					sim, err := New(g, s)
					if err != nil {
						t.Fatal(err)
					}
					for range s.Steps {
						if err := sim.Step(g); err != nil {
							t.Fatalf("%s: %v", name, err)
						}
					}
					fsum := sim.Summary()
					compact := sim.CompactTrace()
					repeats := len(compact.Repeats)
					if err := compact.Validate(); err != nil {
						t.Errorf("%s: %v", name, err)
					}
					// warm-up min(pp-stage-1, acc) forwards; lag max(warm, 1)
					warm := min(pp-stage-1, acc)
					if want := acc-warm > 2*max(warm, 1)+2; (repeats > 0) != want {
						t.Errorf("%s: %d repetitions, want some: %v", name, repeats, want)
					}
					fastEv := slices.Clone(sim.Trace().Events)
					repeatMicroBatches = false
					full, sum, err := Simulate(g, s)
					repeatMicroBatches = true
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !slices.Equal(fastEv, full.Events) {
						i := 0
						for i < len(fastEv) && i < len(full.Events) && fastEv[i] == full.Events[i] {
							i++
						}
						t.Errorf("%s: traces differ from event %d (of %d and %d)", name, i, len(fastEv), len(full.Events))
					}
					fv, sv := reflect.ValueOf(fsum), reflect.ValueOf(sum)
					for f := range fv.NumField() {
						if !reflect.DeepEqual(fv.Field(f).Interface(), sv.Field(f).Interface()) {
							t.Errorf("%s: summary's %s with repetition %v, without %v", name, fv.Type().Field(f).Name, fv.Field(f), sv.Field(f))
						}
					}
				}
			}
		}
	}
}
