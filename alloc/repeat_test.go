package alloc_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// Skipping the copies of repeated micro-batches gives the timeline of
// replaying every event: the same peaks, where they were reached, the
// per-step figures, the categories at the peak and the counters, for
// every zoo model under several allocator settings.
func TestSkippedRepeatsEqualReplayed(t *testing.T) {
	confs := []string{"", "expandable_segments:True", "max_split_size_mb:64", "roundup_power2_divisions:4"}
	setups := []train.Setup{
		{Steps: 2, Accumulate: 24},
		{Steps: 2, Accumulate: 20, Precision: train.MixedBF16, Checkpoint: train.FullCheckpoint},
	}
	skipped, cases := 0, 0
	for _, m := range models.All() {
		cfg := m.Small(4, 32)
		g, err := m.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range setups {
			sim, err := train.New(g, s)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < s.Steps; i++ {
				if err := sim.Step(g); err != nil {
					t.Fatal(err)
				}
			}
			tr := sim.CompactTrace()
			if len(tr.Repeats) == 0 {
				t.Fatalf("%s: no repetition marked", m.Name)
			}
			plain := &trace.Trace{Events: slices.Clone(tr.Events), Sites: tr.Sites, Repeats: slices.Clone(tr.Repeats)}
			plain.Expand()
			for _, conf := range confs {
				c, err := alloc.ParseConfig(conf)
				if err != nil {
					t.Fatal(err)
				}
				dev := alloc.Device{Capacity: 1 << 40}
				fast, err := alloc.Replay(tr, c, dev, alloc.ReplayOptions{Segments: true})
				if err != nil {
					t.Fatal(err)
				}
				full, err := alloc.Replay(plain, c, dev, alloc.ReplayOptions{Segments: true})
				if err != nil {
					t.Fatal(err)
				}
				if conf == "" {
					// An observed replay of the compact trace sees every
					// event of the sequence, in order, and the allocator's
					// own account by category adds up to what is allocated.
					seen, bad := 0, 0
					obs, err := alloc.Replay(tr, c, dev, alloc.ReplayOptions{Segments: true, Observe: func(o alloc.Observation) {
						var sum int64
						for _, n := range o.ByCategory {
							sum += n
						}
						if o.Event != seen || sum != o.Allocated || *o.E != plain.Events[o.Event] {
							bad++
						}
						seen++
					}})
					if err != nil {
						t.Fatal(err)
					}
					if seen != plain.Len() || bad > 0 || obs.Skipped != 0 || !reflect.DeepEqual(obs, full) {
						t.Errorf("%s: observed %d of %d events, %d wrong, %d skipped", m.Name, seen, plain.Len(), bad, obs.Skipped)
					}
				}
				cases++
				if fast.Skipped > 0 {
					skipped++
				}
				if full.Skipped != 0 {
					t.Fatalf("a trace without repetitions skipped %d events", full.Skipped)
				}
				fast.Skipped = 0
				if !reflect.DeepEqual(fast, full) {
					t.Errorf("%s, %q, accumulate %d: skipping changed the timeline:\n%+v\n%+v", m.Name, conf, s.Accumulate, fast.Steps, full.Steps)
				}
			}
		}
	}
	if skipped < cases*3/4 {
		t.Errorf("copies skipped in %d of %d replays", skipped, cases)
	}
}

// Size-0 allocations (PyTorch hands out a null pointer for them) survive a
// skip under their own ids: alloc 10 (0 B) and 11 outlive the prologue;
// the template allocates 12 (0 B), frees 10, allocates 13, frees 11, and
// its ten copies take the ids up to 33.
func TestSkipKeepsZeroSizeIDs(t *testing.T) {
	ev := []trace.Event{
		{Action: trace.Alloc, ID: 1, Size: 1 << 20},
		{Action: trace.Alloc, ID: 10, Size: 0},
		{Action: trace.Alloc, ID: 11, Size: 100},
		{Action: trace.Alloc, ID: 12, Size: 0}, {Action: trace.Free, ID: 10},
		{Action: trace.Alloc, ID: 13, Size: 100}, {Action: trace.Free, ID: 11},
		{Action: trace.Free, ID: 32}, {Action: trace.Free, ID: 33}, {Action: trace.StepEnd},
	}
	tr := &trace.Trace{Events: ev, Repeats: []trace.Repeat{{Start: 3, End: 7, Times: 10, Base: 12, Delta: 2}}}
	full := &trace.Trace{Events: slices.Clone(ev), Repeats: slices.Clone(tr.Repeats)}
	full.Expand()
	want, err := alloc.Replay(full, alloc.Config{}, alloc.Device{}, alloc.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := alloc.Replay(tr, alloc.Config{}, alloc.Device{}, alloc.ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Skipped == 0 {
		t.Error("nothing skipped")
	}
	got.Skipped = 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("skipping: %+v\nreplaying: %+v", got, want)
	}
}

// A pipeline stage's steady 1F1B pairs are a repetition whose template
// frees what the pairs before it saved (trace.Repeat.Lag): skipping its
// copies gives the timeline of replaying them all (the same peaks, where
// they were reached, the per-step figures, the categories at the peak,
// the counters and the segments), on every stage of 2 and 4 stages, with
// and without expandable segments.
func TestSkippedPipelinePairsEqualReplayed(t *testing.T) {
	m, err := models.Lookup("Qwen2.5-0.5B")
	if err != nil {
		t.Fatal(err)
	}
	skipped, cases := 0, 0
	for _, pp := range []int{2, 4} {
		for stage := range pp {
			cfg := m.Small(2, 32)
			cfg.Layers, cfg.PP, cfg.Stage = 4, int64(pp), int64(stage)
			g, err := m.Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, acc := range []int{8, 33, 300} {
				s := train.Setup{Steps: 2, Accumulate: acc, Stages: pp, Stage: stage, Precision: train.MixedBF16}
				sim, err := train.New(g, s)
				if err != nil {
					t.Fatal(err)
				}
				for range s.Steps {
					if err := sim.Step(g); err != nil {
						t.Fatal(err)
					}
				}
				tr := sim.CompactTrace()
				plain := &trace.Trace{Events: slices.Clone(tr.Events), Sites: tr.Sites, Repeats: slices.Clone(tr.Repeats)}
				plain.Expand()
				for _, conf := range []string{"", "expandable_segments:True"} {
					c, err := alloc.ParseConfig(conf)
					if err != nil {
						t.Fatal(err)
					}
					dev := alloc.Device{Capacity: 1 << 40}
					fast, err := alloc.Replay(tr, c, dev, alloc.ReplayOptions{Segments: true})
					if err != nil {
						t.Fatal(err)
					}
					full, err := alloc.Replay(plain, c, dev, alloc.ReplayOptions{Segments: true})
					if err != nil {
						t.Fatal(err)
					}
					if acc == 300 && pp-stage-1 <= 2 {
						cases++
						if fast.Skipped > 0 {
							skipped++
						}
					}
					fast.Skipped = 0
					if !reflect.DeepEqual(fast, full) {
						t.Errorf("pp %d stage %d accumulate %d %q: skipping changed the timeline:\n%+v\n%+v", pp, stage, acc, conf, fast.Steps, full.Steps)
					}
				}
			}
		}
	}
	// A stage with micro-batches in flight between its pairs reaches a
	// state that recurs only after tens of pairs (small blocks walk
	// through the small pool's free space as under plain accumulation,
	// stateWindow), the more the more are in flight: skipping is asked of
	// the long accumulation on stages with at most 2 in flight (the first
	// of 4 stages, with 3, settles later than its 300 pairs here).
	if skipped != cases {
		t.Errorf("copies skipped in %d of %d replays of 300 micro-batches", skipped, cases)
	}
}
