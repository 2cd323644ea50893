package cli

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/internal/servertest"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// goldenSVG runs a command that writes a chart to the file named after
// the flag, compares it with testdata/name.svg (rewritten with -update)
// and returns the chart read back.
func goldenSVG(t *testing.T, name string, args ...string) *chart.Doc {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".svg")
	if _, errs, code := run(append(args, path)...); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", name+".svg")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if want, err := os.ReadFile(golden); err != nil {
		t.Fatalf("%v (run go test -update)", err)
	} else if string(want) != string(got) {
		t.Errorf("%s differs from %s (run go test ./internal/cli -update after checking):\n%s", path, golden, lineDiff(golden, string(want), path, string(got)))
	}
	d, err := chart.Inspect(got)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The sweep chart shows the sweep's own figures, the GPU's capacity, and
// marks the largest swept batch that fits: the largest one at or below
// what maxbatch's search finds.
func TestSweepChart(t *testing.T) {
	t.Parallel()
	d := goldenSVG(t, "sweep_resnet50", "sweep", "resnet50", "--batch", "1:512", "--gpu", "a100-40gb", "--svg")
	out, errs, code := run("sweep", "resnet50", "--batch", "1:512", "--gpu", "a100-40gb", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var pts []report.EstimateJSON
	if err := json.Unmarshal([]byte(out), &pts); err != nil {
		t.Fatal(err)
	}
	if got := d.Axes["x"].Ticks; len(got) != 10 || got[0] != 1 || got[9] != 512 {
		t.Errorf("x ticks %v, want the ten powers of two 1…512", got)
	}
	for name, field := range map[string]func(e report.EstimateJSON) float64{
		"peak allocated": func(e report.EstimateJSON) float64 { return float64(e.PeakAllocatedBytes) },
		"peak reserved":  func(e report.EstimateJSON) float64 { return float64(e.PeakReservedBytes) },
		"device total":   func(e report.EstimateJSON) float64 { return float64(e.DeviceTotalBytes) },
		"step time":      func(e report.EstimateJSON) float64 { return e.Time.StepSeconds },
	} {
		s := d.Lines[name]
		if len(s.Points) != len(pts) {
			t.Fatalf("%s: %d points, want %d", name, len(s.Points), len(pts))
		}
		for i, p := range s.Points {
			if p.X != float64(pts[i].Batch) || p.Y != field(pts[i]) {
				t.Errorf("%s at %d: chart (%g, %g), sweep (%d, %g)", name, i, p.X, p.Y, pts[i].Batch, field(pts[i]))
			}
		}
	}
	// A batch that runs out of memory is drawn with what it needs, more
	// than the GPU has.
	g0, _ := gpu.Lookup("a100-40gb")
	var oom []float64
	for _, p := range pts {
		if p.OOM != "" {
			oom = append(oom, float64(p.Batch))
		}
	}
	need := d.Lines["needs at least (out of memory)"]
	if len(oom) == 0 || len(need.Points) != len(oom) {
		t.Errorf("%d batches ran out of memory, the chart shows %d needs", len(oom), len(need.Points))
	}
	for i, p := range need.Points {
		if p.X != oom[i] || p.Y <= float64(g0.Capacity) {
			t.Errorf("need at %g: %g, want batch %g and more than the %d the GPU has", p.X, p.Y, oom[i], g0.Capacity)
		}
	}
	if d.Lines["step time"].Axis != "right" || d.Axes["y2"].Label == "" {
		t.Error("step time is not on a second axis")
	}
	g, _ := gpu.Lookup("a100-40gb")
	// the capacity, and the capacity less the margin the fits column
	// (and the marker) are held to
	if m := pts[0].MarginBytes; m <= 0 || len(d.Rules) != 2 || d.Rules[0].Value != float64(g.Capacity) ||
		d.Rules[1].Class != "margin" || d.Rules[1].Value != float64(g.Capacity-m) {
		t.Errorf("rules %+v, want the capacity %d and it less the margin %d", d.Rules, g.Capacity, m)
	}
	out, errs, code = run("maxbatch", "resnet50", "--gpu", "a100-40gb", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var mb struct {
		Max int64 `json:"max_batch"`
	}
	if err := json.Unmarshal([]byte(out), &mb); err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	for _, p := range pts {
		if p.Batch <= mb.Max {
			want = max(want, p.Batch)
		}
	}
	if len(d.Markers) != 1 || d.Markers[0].X != float64(want) {
		t.Errorf("markers %+v, want one at batch %d (maxbatch: %d)", d.Markers, want, mb.Max)
	}
}

// The timeline chart thins millions of events to a few hundred stretches;
// whatever it keeps, the peaks it draws are the replay's, at the replay's
// event, and the layers at the peak are the breakdown at the peak.
func TestTimelineChartKeepsThePeaks(t *testing.T) {
	t.Parallel()
	cases := []struct {
		model string
		batch int64
		setup func(*train.Setup)
	}{
		{"mlp", 32, func(*train.Setup) {}},
		{"simpleconv", 64, func(s *train.Setup) { s.Optimizer.Kind = train.SGD }},
		{"resnet18", 16, func(s *train.Setup) { s.Precision = train.MixedBF16 }},
		{"gpt2", 4, func(s *train.Setup) { s.Accumulate = 6; s.Checkpoint = train.FullCheckpoint }},
	}
	for _, c := range cases {
		t.Run(c.model, func(t *testing.T) {
			m, err := models.Lookup(c.model)
			if err != nil {
				t.Fatal(err)
			}
			g, _ := gpu.Lookup("h100-80gb")
			prof, _ := profile.Lookup("")
			s := train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.Adam}, Accumulate: 1, Steps: 3, Profile: prof}
			c.setup(&s)
			rec := alloc.NewStepRecorder(20) // few stretches: thinning is exercised
			res, err := predict.Run(context.Background(), predict.Request{Source: predict.Zoo{M: m}, Config: m.Small(c.batch, 256), Setup: s, GPU: g, Context: -1, Observe: rec.Observe})
			if err != nil {
				t.Fatal(err)
			}
			svg, err := report.TimelineChart(res, rec).SVG()
			if err != nil {
				t.Fatal(err)
			}
			d, err := chart.Inspect(svg)
			if err != nil {
				t.Fatal(err)
			}
			tl := res.Timeline
			if len(rec.Buckets()) > 40 {
				t.Errorf("%d stretches kept, want at most 40", len(rec.Buckets()))
			}
			var top, reserved float64
			var atPeak int64
			for k, b := range rec.Buckets() {
				var sum int64
				for _, n := range b.ByCategory {
					sum += n
				}
				if sum != b.Allocated {
					t.Fatalf("stretch %d: categories sum to %d, allocated %d", k, sum, b.Allocated)
				}
				top = math.Max(top, float64(sum))
				reserved = math.Max(reserved, float64(b.Reserved))
				if b.From <= tl.PeakAllocatedEvent && tl.PeakAllocatedEvent < b.To {
					atPeak = sum
					for cat, n := range b.ByCategory {
						if n != tl.AtPeak[cat] {
							t.Errorf("category %d at the peak: chart %d, breakdown %d", cat, n, tl.AtPeak[cat])
						}
					}
				}
			}
			if top != float64(tl.PeakAllocated) || atPeak != tl.PeakAllocated || reserved != float64(tl.PeakReserved) {
				t.Errorf("chart peaks: allocated %g (at the peak's stretch %d), reserved %g; replay %d, %d", top, atPeak, reserved, tl.PeakAllocated, tl.PeakReserved)
			}
			if d.Lines["reserved"].Count == 0 || len(d.Layers) == 0 {
				t.Errorf("lines %v layers %v", d.Lines, d.Layers)
			}
			if len(d.Markers) == 0 || d.Markers[0].X != float64(tl.PeakAllocatedEvent) || d.Markers[0].Y != float64(tl.PeakAllocated) {
				t.Errorf("markers %+v, want the peak at event %d", d.Markers, tl.PeakAllocatedEvent)
			}
			// Every simulated step has its forward, backward and optimizer
			// bands, in order; plain SGD updates in place and allocates
			// nothing in its step, so it has no optimizer events to band.
			var phases []string
			for _, b := range d.Bands {
				if b.Class == "forward" || b.Class == "backward" || b.Class == "optimizer" {
					if len(phases) == 0 || phases[len(phases)-1] != b.Label {
						phases = append(phases, b.Label)
					}
				}
			}
			var want []string
			for st := 1; st <= 3; st++ {
				for range s.Accumulate {
					want = append(want, "forward "+strconv.Itoa(st), "backward "+strconv.Itoa(st))
				}
				if s.Optimizer.Kind != train.SGD {
					want = append(want, "optimizer "+strconv.Itoa(st))
				}
			}
			if strings.Join(phases, ",") != strings.Join(want, ",") {
				t.Errorf("bands %v, want %v", phases, want)
			}
		})
	}
}

func TestTimelineGolden(t *testing.T) {
	t.Parallel()
	d := goldenSVG(t, "estimate_simpleconv_timeline", "estimate", "simpleconv", "--batch", "64", "--gpu", "t4", "--optimizer", "sgd", "--timeline")
	if len(d.Markers) != 1 || !strings.HasPrefix(d.Markers[0].Label, "peak ") {
		t.Errorf("markers %+v", d.Markers)
	}
}

// The snapshot chart draws the replay TestSnapshotCommand works out by
// hand: 13.5 MiB allocated at the peak, 32 MiB reserved, 20 MiB with
// expandable segments.
func TestSnapshotChart(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	d := goldenSVG(t, "snapshot_timeline", "snapshot", servertest.WriteSnapshotFixture(t), "--timeline")
	for name, want := range map[string]float64{"allocated": 27 * mib / 2, "reserved": 32 * mib, "reserved with expandable_segments:True": 20 * mib} {
		if l, ok := d.Lines[name]; !ok || l.Max != want {
			t.Errorf("line %q: %+v, want its largest value %g", name, l, want)
		}
	}
	if len(d.Markers) != 1 || d.Markers[0].Y != 27*mib/2 || !strings.Contains(d.Markers[0].Label, "train.py:10:forward") {
		t.Errorf("markers %+v", d.Markers)
	}
	if top := d.Axes["y"].Ticks; top[len(top)-1] < 32*mib {
		t.Errorf("y axis %v ends below the reserved peak", top)
	}
}
