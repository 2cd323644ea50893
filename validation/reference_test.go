package validation

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

type reference struct {
	Torch  string `json:"torch"`
	Models map[string]struct {
		ParamCount  int64 `json:"param_count"`
		BufferBytes int64 `json:"buffer_bytes"`
		Batches     []struct {
			Batch      int64 `json:"batch"`
			SavedBytes int64 `json:"saved_bytes"`
			// WrappedScalarBytes are Python numbers autograd keeps as
			// 0-d float64 CPU tensors: host memory on a GPU, and not
			// simulated.
			WrappedScalarBytes int64 `json:"wrapped_scalar_bytes"`
		} `json:"batches"`
	} `json:"models"`
}

// build maps reference entries to zoo builds.
func build(t *testing.T, name string, batch int64) (models.Config, string) {
	zoo, cfg := ZooModel(name, batch)
	return cfg, zoo
}

// TestTorchReference compares parameter counts (exactly) and saved
// activation bytes (within 1 %) with what CPU PyTorch reported, for each
// release's reference (torch-cpu.json of 1.13, torch-cpu-torch2.5.json of
// 2.5), simulated under the runtime profile of the PyTorch that produced
// it.
func TestTorchReference(t *testing.T) {
	forEachRelease(t, func(t *testing.T, r torchRelease) {
		data, err := os.ReadFile(r.file("torch-cpu.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ref reference
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		prof, err := r.profile(ref.Torch)
		if err != nil {
			t.Fatal(err)
		}
		if len(ref.Models) < 6 {
			t.Fatalf("reference has %d models, want at least 6", len(ref.Models))
		}
		// Every torchvision member of the zoo is held against PyTorch: one
		// added to the zoo but not to reference.py fails here.
		for _, m := range models.All() {
			if _, ok := ref.Models[m.Name]; m.Family == "torchvision" && !ok {
				t.Errorf("%s: not in the PyTorch reference (add it to validation/reference.py)", m.Name)
			}
		}
		for name, m := range ref.Models {
			for _, b := range m.Batches {
				cfg, zoo := build(t, name, b.Batch)
				g, _, err := models.Build(zoo, cfg)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					continue
				}
				if got := g.ParamCount(); got != m.ParamCount {
					t.Errorf("%s: %d parameters, PyTorch has %d", name, got, m.ParamCount)
				}
				_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
				if err != nil {
					t.Errorf("%s batch %d: %v", name, b.Batch, err)
					continue
				}
				rel := float64(sum.ActivationsBytes-b.SavedBytes) / float64(b.SavedBytes)
				t.Logf("%-12s batch %3d: saved %12d, PyTorch %12d (%+.3f%%)", name, b.Batch, sum.ActivationsBytes, b.SavedBytes, 100*rel)
				// The LoRA cases are held exactly: every saved tensor but the
				// wrapped scalars.
				if strings.HasPrefix(name, "lora-") && sum.ActivationsBytes != b.SavedBytes-b.WrappedScalarBytes {
					t.Errorf("%s batch %d: saved %d bytes, PyTorch %d besides %d bytes of wrapped scalars", name, b.Batch, sum.ActivationsBytes,
						b.SavedBytes-b.WrappedScalarBytes, b.WrappedScalarBytes)
				}
				if math.Abs(rel) > 0.01 {
					t.Errorf("%s batch %d: saved activations %d bytes, PyTorch saved %d (%+.2f%%, limit 1%%)", name, b.Batch, sum.ActivationsBytes, b.SavedBytes, 100*rel)
				}
			}
		}
	})
}
