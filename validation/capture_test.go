package validation

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// captureFigures are what the zoo comparison holds: autograd's saved bytes
// after the forward pass, and each phase's peak over two whole steps.
type captureFigures struct {
	saved int64
	peaks []int64 // per step: overall, forward, backward, optimizer, zero_grad
}

func captureRun(g *graph.Graph, prof *profile.Profile, optimizer string, nnpack bool) (captureFigures, error) {
	var f captureFigures
	_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		return f, err
	}
	f.saved = sum.ActivationsBytes
	live, _, err := simulateLive(g, prof, 2, optimizer, nnpack)
	if err != nil {
		return f, err
	}
	for _, s := range live {
		f.peaks = append(f.peaks, s.Peak)
		for _, ph := range s.Phases {
			f.peaks = append(f.peaks, ph.Peak)
		}
	}
	return f, nil
}

// TestCapturedZoo holds every torchvision model of the zoo, captured by
// the capture module from torchvision's own code (testdata/capture, made
// by validation/capture_zoo.py), to the zoo's builder: the saved bytes and
// every whole-step peak within 0.1 %, at the captured batch and at one
// the capture never ran (the batch dimension is found by the capture).
func TestCapturedZoo(t *testing.T) {
	forEachRelease(t, capturedZoo)
}

// capturedZoo is TestCapturedZoo for the captures of one release, under
// its profile.
func capturedZoo(t *testing.T, r torchRelease) {
	ref, prof := loadStepReference(t, r)
	files, _ := filepath.Glob(r.captureDir() + "/*.bfgraph.gz")
	have := map[string]string{}
	for _, f := range files {
		have[strings.TrimSuffix(filepath.Base(f), ".bfgraph.gz")] = f
	}
	var names []string
	for _, m := range models.All() {
		if m.Family == "torchvision" {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	var rows []string
	for _, name := range names {
		path, ok := have[name]
		if !ok {
			t.Errorf("%s: no capture in %s (run validation/capture_zoo.py)", name, r.captureDir())
			continue
		}
		cm, err := capture.Load(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, batch := range []int64{2, 5} {
			for _, opt := range []string{"sgd_momentum", "adam"} {
				zoo, cfg := ZooModel(name, batch)
				cfg.Image = 32
				zg, _, err := models.Build(zoo, cfg)
				if err != nil {
					t.Errorf("%s: zoo: %v", name, err)
					continue
				}
				cg, err := cm.Build(models.Config{Batch: batch, CPU: true})
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if zg.ParamCount() != cg.ParamCount() {
					t.Errorf("%s: captured %d parameters, the zoo builds %d", name, cg.ParamCount(), zg.ParamCount())
				}
				want, err := captureRun(zg, prof, opt, ref.NNPACK)
				if err != nil {
					t.Errorf("%s: zoo: %v", name, err)
					continue
				}
				got, err := captureRun(cg, prof, opt, ref.NNPACK)
				if err != nil {
					t.Errorf("%s b%d: captured: %v", name, batch, err)
					continue
				}
				worst := rel(got.saved, want.saved)
				for i := range want.peaks {
					if i < len(got.peaks) {
						if d := rel(got.peaks[i], want.peaks[i]); math.Abs(d) > math.Abs(worst) {
							worst = d
						}
					}
				}
				rows = append(rows, fmt.Sprintf("%-20s b%d %-12s saved %12d vs %12d, peak %12d vs %12d, worst %+.4f%%",
					name, batch, opt, got.saved, want.saved, got.peaks[0], want.peaks[0], 100*worst))
				check(t, r, "CapturedZoo", name, math.Abs(worst) <= 0.001 && len(got.peaks) == len(want.peaks),
					"%s b%d %s: captured graph differs from the zoo's by %+.3f%% (saved %d vs %d; peaks %v vs %v)",
					name, batch, opt, 100*worst, got.saved, want.saved, got.peaks, want.peaks)
			}
		}
	}
	t.Logf("captured vs zoo:\n%s", strings.Join(rows, "\n"))
	if os.Getenv("BATCHFIT_CAPTURE_TABLE") != "" {
		fmt.Println(strings.Join(rows, "\n"))
	}
}

func rel(got, want int64) float64 {
	if want == 0 {
		if got == 0 {
			return 0
		}
		return 1
	}
	return float64(got-want) / float64(want)
}

// TestCapturedExamples holds the capture examples no builder covers
// (examples/capture: a transformer written with einsum and a hand-written
// softmax, a recurrent model with a Python loop, a U-Net with skip
// concatenations, a custom autograd.Function, in-place activations,
// in-place tensor methods under a loss of three terms, a layer norm
// without weights beside weights the forward computes and an unused
// parameter, a
// zoo model with a new head and a frozen backbone, and nnU-Net 2D with
// instance norm, LeakyReLU and transposed convolutions) to real PyTorch: their
// captured graphs, simulated under the CPU rules, give the whole-step CPU
// reference's bytes alive before each step and every phase's peak and end
// within 0.1 % (validation/step.py's capture-* cases).
func TestCapturedExamples(t *testing.T) {
	forEachRelease(t, capturedExamples)
}

// capturedExamples is TestCapturedExamples for one release: its captures
// held to its step reference under its profile.
func capturedExamples(t *testing.T, r torchRelease) {
	ref, prof := loadStepReference(t, r)
	ids := make([]string, 0, len(ref.Cases))
	for id, c := range ref.Cases {
		if strings.HasPrefix(c.Model, "capture-") {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) < 9*3 {
		t.Fatalf("the step reference has %d capture cases, want 27 (nine examples, three setups)", len(ids))
	}
	var rows []string
	for _, id := range ids {
		c := ref.Cases[id]
		cm, err := capture.Load(r.captureDir() + "/" + c.Model + ".bfgraph.gz")
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		g, err := cm.Build(models.Config{Batch: c.Batch, CPU: true})
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		live, _, err := simulateLive(g, prof, ref.Steps, c.Optimizer, ref.NNPACK)
		if err != nil {
			t.Errorf("%s: %v", id, err)
			continue
		}
		if len(live) != len(c.Steps) {
			t.Errorf("%s: %d simulated steps, PyTorch ran %d", id, len(live), len(c.Steps))
			continue
		}
		for s, want := range c.Steps {
			got := live[s]
			if got.Before != want.AliveBefore {
				t.Errorf("%s step %d: %d bytes alive before the step, PyTorch %d (%+d)", id, s, got.Before, want.AliveBefore, got.Before-want.AliveBefore)
			}
			line := fmt.Sprintf("%-34s step %d: peak %10d, PyTorch %10d (%+.4f%%)", id, s, got.Peak, want.Peak, 100*rel(got.Peak, want.Peak))
			for _, ph := range []trace.Phase{trace.Forward, trace.Backward, trace.OptimizerStep, trace.ZeroGrad} {
				w, ok := want.Phases[ph.String()]
				if !ok {
					t.Errorf("%s step %d: the reference has no %s phase", id, s, ph)
					continue
				}
				gp := got.Phases[ph]
				line += fmt.Sprintf("; %s %+.3f%%", ph, 100*rel(gp.Peak, w.Peak))
				if d := rel(gp.Peak, w.Peak); math.Abs(d) > 0.001 {
					t.Errorf("%s step %d: %s peak %d, PyTorch %d (%+.3f%%)", id, s, ph, gp.Peak, w.Peak, 100*d)
				}
				if d := rel(gp.End, w.End); math.Abs(d) > 0.001 {
					t.Errorf("%s step %d: %s ends with %d alive, PyTorch %d (%+.3f%%)", id, s, ph, gp.End, w.End, 100*d)
				}
			}
			rows = append(rows, line)
		}
	}
	t.Logf("captured examples vs the CPU reference:\n%s", strings.Join(rows, "\n"))
}
