package validation

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// hfReference is testdata/reference/hf-torch2-cpu.json, written by
// validation/capture_hf.py: autograd's saved bytes after the forward pass
// of small real transformers models on the CPU.
type hfReference struct {
	Torch        string `json:"torch"`
	Transformers string `json:"transformers"`
	Batch        int64  `json:"batch"`
	Seq          int64  `json:"seq"`
	Models       map[string]struct {
		Attention  string `json:"attention"`
		SavedBytes int64  `json:"saved_bytes"`
	} `json:"models"`
}

func loadHFReference(t *testing.T) hfReference {
	t.Helper()
	data, err := os.ReadFile("../testdata/reference/hf-torch2-cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref hfReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("hf-torch2-cpu.json: %v", err)
	}
	return ref
}

// TestCapturedHF holds real transformers models (Llama, Mistral, Qwen2,
// Gemma, GPT-2, BERT, ViT, T5, Whisper; eager and SDPA attention), captured by the
// capture module under PyTorch 2.x, to what autograd saved in real
// PyTorch of that release on the CPU: the captured graph, built at a batch
// the capture never ran and simulated under the CPU rules of the
// reference's runtime profile, keeps exactly the bytes PyTorch kept.
func TestCapturedHF(t *testing.T) {
	ref := loadHFReference(t)
	prof, err := profile.Lookup(ref.Torch)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Models) < 8 {
		t.Fatalf("the reference has %d models, want at least 8", len(ref.Models))
	}
	names := make([]string, 0, len(ref.Models))
	for n := range ref.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	var rows []string
	for _, name := range names {
		want := ref.Models[name].SavedBytes
		cm, err := capture.Load("../testdata/capture/" + name + ".bfgraph.gz")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		g, err := cm.Build(models.Config{Batch: ref.Batch, CPU: true})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got := sum.ActivationsBytes
		rows = append(rows, fmt.Sprintf("%-20s saved %9d, PyTorch %s %9d (%+d)", name, got, ref.Torch, want, got-want))
		if got != want {
			t.Errorf("%s b%d: saved %d bytes, PyTorch %s keeps %d (%+d)", name, ref.Batch, got, ref.Torch, want, got-want)
		}
	}
	t.Logf("captured transformers models vs PyTorch %s on the CPU:\n%s", ref.Torch, strings.Join(rows, "\n"))
}

// TestCaptureHFCheck regenerates the transformers captures and their CPU
// figures under PyTorch 2.x (BATCHFIT_PYENV, the environment .ci/run makes
// from python/requirements-test.txt) and compares them with the committed
// ones, so that a change of the capture module or of the pinned releases
// shows here.
func TestCaptureHFCheck(t *testing.T) {
	checkUnderPyenv(t, "capture_hf.py", "torch", "transformers")
}
