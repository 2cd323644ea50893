package alloc_test

import (
	"reflect"
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
		cfg := models.Config{Batch: 4, Layers: 2}
		if m.DefaultSeq > 0 {
			cfg.Seq = 32
		}
		if m.Family == "seed" {
			cfg.Layers = 0
		}
		hasLayers := false
		for _, d := range m.Dims {
			hasLayers = hasLayers || d == models.DimLayers
		}
		if !hasLayers {
			cfg.Layers = 0
		}
		g, err := m.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range setups {
			tr, _, err := train.Simulate(g, s)
			if err != nil {
				t.Fatal(err)
			}
			if len(tr.Repeats) == 0 {
				t.Fatalf("%s: no repetition marked", m.Name)
			}
			plain := &trace.Trace{Events: tr.Events, Sites: tr.Sites}
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
				cases++
				if !reflect.DeepEqual(fast, full) {
					t.Errorf("%s, %q, accumulate %d: skipping changed the timeline:\n%+v\n%+v", m.Name, conf, s.Accumulate, fast.Steps, full.Steps)
				}
				if skippedAny(tr, c, dev) {
					skipped++
				}
			}
		}
	}
	if skipped < cases*3/4 {
		t.Errorf("copies skipped in %d of %d replays", skipped, cases)
	}
}

// skippedAny tells whether the replay skipped the copies: it replays the
// trace with the ninth copy of the first repetition corrupted (a free of
// an unknown id), which fails if that copy is replayed.
func skippedAny(tr *trace.Trace, c alloc.Config, dev alloc.Device) bool {
	r := tr.Repeats[0]
	n := r.End - r.Start
	bad := &trace.Trace{Events: append([]trace.Event(nil), tr.Events...), Sites: tr.Sites, Repeats: tr.Repeats}
	// run 9 (the template is run 0): the state is looked up at the first
	// eight boundaries, and whole periods after that are skipped
	run := r.Start + 9*n
	for i := run; i < run+n; i++ {
		if bad.Events[i].Action == trace.Free {
			bad.Events[i].ID = -12345 // a free of an unknown id: replaying it fails
			break
		}
	}
	_, err := alloc.Replay(bad, c, dev, alloc.ReplayOptions{})
	return err == nil
}
