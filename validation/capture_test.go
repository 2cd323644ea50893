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
	"github.com/batchfit/batchfit/train"
)

// captureFigures are what the zoo comparison holds: autograd's saved bytes
// after the forward pass, and each phase's peak over two whole steps.
type captureFigures struct {
	saved int64
	peaks []int64 // per step: overall, forward, backward, optimizer, zero_grad
}

func captureRun(g *graph.Graph, prof *profile.Profile, optimizer string) (captureFigures, error) {
	var f captureFigures
	_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		return f, err
	}
	f.saved = sum.ActivationsBytes
	live, _, err := simulateLive(g, prof, 2, optimizer)
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
	ref := loadStepReference(t)
	prof, err := profile.Lookup(ref.Torch)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("../testdata/capture/*.bfgraph.gz")
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
			t.Errorf("%s: no capture in testdata/capture (run validation/capture_zoo.py)", name)
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
				cg, err := cm.Build(models.Config{Batch: batch})
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if zg.ParamCount() != cg.ParamCount() {
					t.Errorf("%s: captured %d parameters, the zoo builds %d", name, cg.ParamCount(), zg.ParamCount())
				}
				want, err := captureRun(zg, prof, opt)
				if err != nil {
					t.Errorf("%s: zoo: %v", name, err)
					continue
				}
				got, err := captureRun(cg, prof, opt)
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
				if math.Abs(worst) > 0.001 || len(got.peaks) != len(want.peaks) {
					t.Errorf("%s b%d %s: captured graph differs from the zoo's by %+.3f%% (saved %d vs %d; peaks %v vs %v)",
						name, batch, opt, 100*worst, got.saved, want.saved, got.peaks, want.peaks)
				}
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
