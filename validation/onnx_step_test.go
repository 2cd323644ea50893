package validation

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// simulateSteps runs two steps of g with SGD (momentum 0.9), as step.py's
// batch-2 cases do, and returns the live bytes per step.
func simulateSteps(t *testing.T, g *graph.Graph, prof *profile.Profile) []trace.StepLive {
	t.Helper()
	live, _, err := simulateLive(g, prof, 2, "sgd_momentum", false)
	if err != nil {
		t.Fatalf("%s: %v", g.Name, err)
	}
	return live
}

// zooExports is testdata/onnx/zoo/exports.json: per torchvision model, the
// image side it was exported at, or the exporter's refusal.
type zooExports struct {
	Models map[string]struct {
		Image   int64  `json:"image"`
		Refused string `json:"refused"`
	} `json:"models"`
}

// TestONNXZooSteps: every torchvision model of the zoo is exported by torch
// 1.13 in training mode (validation/onnx/export.py, testdata/onnx/zoo) or
// listed with the exporter's refusal; each export, imported and simulated,
// gives the step peaks of the zoo's own builder at the same image size,
// and, where validation/step.py measured the same case (batch 2, SGD with
// momentum), PyTorch's within 0.1 %.
func TestONNXZooSteps(t *testing.T) {
	data, err := os.ReadFile("../testdata/onnx/zoo/exports.json")
	if err != nil {
		t.Fatal(err)
	}
	var idx zooExports
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatalf("exports.json: %v", err)
	}
	for _, m := range models.All() {
		if _, ok := idx.Models[m.Name]; m.Family == "torchvision" && !ok {
			t.Errorf("%s: not in testdata/onnx/zoo/exports.json (add it to validation/onnx/export.py)", m.Name)
		}
	}
	// torch 1.13 exported the models (validation/onnx/export.py)
	ref, prof := loadStepReference(t, torchReleases[0])
	const batch = 2
	exported := 0
	for name, e := range idx.Models {
		f := filepath.Join("..", "testdata", "onnx", "zoo", name+".onnx")
		if e.Refused != "" {
			t.Logf("%s: torch's exporter refuses it: %s", name, e.Refused)
			if _, err := os.Stat(f); err == nil {
				t.Errorf("%s: refused, yet %s exists", name, f)
			}
			continue
		}
		exported++
		t.Run(name, func(t *testing.T) {
			m, err := onnx.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			g, err := m.Build(models.Config{Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			if image := g.Tensor(g.Inputs[0]).Shape[2]; image != e.Image {
				t.Fatalf("input side %d, exports.json says %d", image, e.Image)
			}
			zg, _, err := models.Build(name, models.Config{Batch: batch, Image: e.Image})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := g.ParamCount(), zg.ParamCount(); got != want {
				t.Errorf("%d parameters imported, the zoo has %d", got, want)
			}
			got, want := simulateSteps(t, g, prof), simulateSteps(t, zg, prof)
			c, measured := ref.Cases[name+"/b2/sgd_momentum"]
			measured = measured && c.Image == e.Image
			for s := range want {
				t.Logf("step %d: imported %d in %s, zoo %d in %s", s, got[s].Peak, got[s].PeakPhase, want[s].Peak, want[s].PeakPhase)
				if got[s].Peak != want[s].Peak || got[s].PeakPhase != want[s].PeakPhase {
					t.Errorf("step %d: peak %d in %s, the zoo's builder %d in %s (%+d)", s, got[s].Peak, got[s].PeakPhase, want[s].Peak, want[s].PeakPhase, got[s].Peak-want[s].Peak)
				}
				if measured {
					p := c.Steps[s]
					if d := float64(got[s].Peak-p.Peak) / float64(p.Peak); math.Abs(d) > 0.001 || got[s].PeakPhase.String() != p.PeakPhase {
						t.Errorf("step %d: peak %d in %s, PyTorch %d in %s (%+.3f%%)", s, got[s].Peak, got[s].PeakPhase, p.Peak, p.PeakPhase, 100*d)
					}
				}
			}
		})
	}
	if exported < 20 {
		t.Errorf("%d exported zoo models, want at least 20", exported)
	}
}
