package validation

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// TestCS336AgainstTorchCPU holds the zoo's CS336 model, op by op, to the
// same model on the CPU (validation/cs336.py) under each release's profile:
// the parameter count and the bytes autograd saves for backward through
// the forward and the loss, exactly. (2.x saves less: mean over a dim
// keeps only its input's sizes, profile.MeanDimSavesSelf, and every
// RMSNorm squares its input for it.)
func TestCS336AgainstTorchCPU(t *testing.T) {
	forEachRelease(t, func(t *testing.T, r torchRelease) {
		data, err := os.ReadFile(r.file("cs336-cpu.json"))
		if err != nil {
			t.Fatal(err)
		}
		var ref struct {
			Torch string `json:"torch"`
			Cases []struct {
				DModel     int64 `json:"d_model"`
				Layers     int64 `json:"layers"`
				Batch      int64 `json:"batch"`
				Seq        int64 `json:"seq"`
				ParamCount int64 `json:"param_count"`
				SavedBytes int64 `json:"saved_bytes"`
			} `json:"cases"`
		}
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatal(err)
		}
		prof, err := r.profile(ref.Torch)
		if err != nil {
			t.Fatal(err)
		}
		if len(ref.Cases) == 0 {
			t.Fatal("no cases")
		}
		for _, c := range ref.Cases {
			if c.DModel != 768 {
				t.Fatalf("d_model %d: only cs336-small's width is in the reference", c.DModel)
			}
			g, _, err := models.Build("cs336-small", models.Config{Batch: c.Batch, Seq: c.Seq, Layers: c.Layers})
			if err != nil {
				t.Fatal(err)
			}
			if got := g.ParamCount(); got != c.ParamCount {
				t.Errorf("%d layers: %d parameters, PyTorch has %d", c.Layers, got, c.ParamCount)
			}
			_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
			if err != nil {
				t.Fatal(err)
			}
			if sum.ActivationsBytes != c.SavedBytes {
				t.Errorf("%d layers, batch %d, seq %d: saved %d bytes, PyTorch %d (%+d)", c.Layers, c.Batch, c.Seq,
					sum.ActivationsBytes, c.SavedBytes, sum.ActivationsBytes-c.SavedBytes)
			}
		}
	})
}
