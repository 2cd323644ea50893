package validation

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// timmReference is testdata/reference/timm-torch2-cpu.json, written by
// validation/capture_timm.py: autograd's saved bytes after the forward
// pass of real timm models and of a peft LoRA Llama on the CPU.
type timmReference struct {
	Torch        string `json:"torch"`
	Timm         string `json:"timm"`
	Peft         string `json:"peft"`
	Transformers string `json:"transformers"`
	Batch        int64  `json:"batch"`
	Models       map[string]struct {
		Family     string `json:"family"`
		Image      int64  `json:"image"`
		Attention  string `json:"attention"`
		SavedBytes int64  `json:"saved_bytes"`
	} `json:"models"`
}

// timmKnownMisses are the models whose saved bytes batchfit does not yet
// hold to PyTorch's, with why. TestCapturedTimm fails when one of them
// matches, so that the list is kept to the models that still miss.
var timmKnownMisses = map[string]string{}

// TestCapturedTimm holds real timm models (ResNet variants, ConvNeXt,
// EfficientNet, MobileNet, RegNet, DenseNet, ViT, Swin and more) and a
// peft LoRA Llama, captured by the capture module under PyTorch 2.x, to
// what autograd saved in real PyTorch of that release on the CPU: each
// captured graph, built at a batch the capture never ran and simulated
// under the CPU rules of the reference's runtime profile, keeps exactly the
// bytes PyTorch kept.
func TestCapturedTimm(t *testing.T) {
	data, err := os.ReadFile("../testdata/reference/timm-torch2-cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref timmReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("timm-torch2-cpu.json: %v", err)
	}
	prof, err := profile.Lookup(ref.Torch)
	if err != nil {
		t.Fatal(err)
	}
	timm := 0
	names := make([]string, 0, len(ref.Models))
	for n := range ref.Models {
		names = append(names, n)
		if strings.HasPrefix(n, "timm-") {
			timm++
		}
	}
	if timm < 30 {
		t.Fatalf("the reference has %d timm models, want at least 30", timm)
	}
	for n := range timmKnownMisses {
		if _, ok := ref.Models[n]; !ok {
			t.Errorf("known miss %s is not in the reference", n)
		}
	}
	sort.Strings(names)
	var rows []string
	exact := 0
	for _, name := range names {
		m := ref.Models[name]
		why, known := timmKnownMisses[name]
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
			if !known {
				t.Errorf("%s: %v", name, err)
			}
			rows = append(rows, fmt.Sprintf("%-36s %v", name, err))
			continue
		}
		got, want := sum.ActivationsBytes, m.SavedBytes
		rows = append(rows, fmt.Sprintf("%-36s %-12s %2dpx saved %9d, PyTorch %s %9d (%+d)", name, m.Family, m.Image, got, ref.Torch, want, got-want))
		switch {
		case got == want && known:
			t.Errorf("%s now matches PyTorch (%d bytes): take it off timmKnownMisses (%s)", name, got, why)
		case got == want:
			exact++
		case !known:
			t.Errorf("%s b%d: saved %d bytes, PyTorch %s keeps %d (%+d)", name, ref.Batch, got, ref.Torch, want, got-want)
		}
	}
	t.Logf("captured timm and peft models vs PyTorch %s on the CPU, %d of %d exact:\n%s", ref.Torch, exact, len(names), strings.Join(rows, "\n"))
}

// TestCaptureTimmCheck regenerates the timm and peft captures and their CPU
// figures under PyTorch 2.x (BATCHFIT_PYENV, the environment .ci/run makes
// from python/requirements-test.txt, which pins timm and peft) and compares
// them with the committed ones.
func TestCaptureTimmCheck(t *testing.T) {
	py := os.Getenv("BATCHFIT_PYENV")
	ok := py != "" && exec.Command(py, "-c", "import torch, transformers, timm, peft").Run() == nil
	if !ok {
		if os.Getenv("BATCHFIT_REQUIRE_PYENV") != "" {
			t.Fatal("BATCHFIT_PYENV names no interpreter with torch, transformers, timm and peft, and BATCHFIT_REQUIRE_PYENV is set")
		}
		t.Skip("no interpreter with torch, transformers, timm and peft (set BATCHFIT_PYENV; BATCHFIT_REQUIRE_PYENV to fail instead)")
	}
	start := time.Now()
	out, err := exec.Command(py, "capture_timm.py", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("capture_timm.py --check: %v\n%s", err, out)
	}
	t.Logf("%s(%.1f s)", out, time.Since(start).Seconds())
}
