package validation

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// capturePolicies are the --checkpoint values that are the reference's
// two modes, by the capture's prefix: timm's set_grad_checkpointing,
// transformers' checkpointing of the peft model's base, and
// torch.utils.checkpoint around each block of the capture examples.
func capturePolicies(name string) (file, reentrant, nonReentrant string) {
	switch {
	case strings.HasPrefix(name, "timm-"):
		return name, "timm", "timm-non-reentrant"
	case strings.HasPrefix(name, "peft-"):
		return name, "hf", "hf-non-reentrant"
	}
	// the examples as PyTorch 2.5 captured them
	return "torch2.5/" + name, "full-reentrant", "full"
}

// capturePolicies113 are capturePolicies for 1.13's reference, which has
// the capture examples only (Debian's 1.13 has neither timm, peft nor
// transformers): each as 1.13 captured it (testdata/capture/NAME).
func capturePolicies113(name string) (file, reentrant, nonReentrant string) {
	return name, "full-reentrant", "full"
}

// TestCheckpointCaptured holds timm models under timm's own
// checkpointing (--checkpoint timm, and timm-non-reentrant), the peft
// LoRA Llama under transformers' (hf, hf-non-reentrant) and the capture
// examples under torch.utils.checkpoint around each block (full-reentrant,
// full) to real PyTorch 2.5 on the CPU (validation/checkpoint_capture.py),
// with TestCheckpointHF's limits: saved bytes and the forward's end to the
// byte but for the known gaps (captureCheckpointGaps), the forward's and
// the backward's peaks within 0.1 % (docs/accuracy.md §12).
func TestCheckpointCaptured(t *testing.T) {
	holdCheckpointReference(t, captureCheckpointFile(t, "2.5"), 10, capturePolicies, captureCheckpointGaps)
}

// captureCheckpointGaps are the differences TestCheckpointCaptured
// expects, each explained (docs/accuracy.md §12): a difference that
// changes is an error, as a new one is.
var captureCheckpointGaps = map[string]checkpointGap{}

// TestCheckpointCaptured113 holds the capture examples as Debian's
// PyTorch 1.13 captured them (testdata/capture/capture-*.bfgraph.gz)
// under torch.utils.checkpoint around each block (full-reentrant, full)
// to 1.13 on the CPU (validation/checkpoint_capture.py under
// /usr/bin/python3, capture-checkpoint-cpu.json), under the --torch 1.13
// profile, with TestCheckpointCaptured's limits and a gap table of its
// own (captureCheckpointGaps113). 1.13's non-reentrant checkpoint is
// _checkpoint_without_reentrant, whose recomputation runs the whole
// function (train/earlystop.go).
func TestCheckpointCaptured113(t *testing.T) {
	holdCheckpointReference(t, captureCheckpointFile(t, "1.13"), 2, capturePolicies113, captureCheckpointGaps113)
}

// captureCheckpointGaps113 are the differences TestCheckpointCaptured113
// expects, each explained (docs/accuracy.md §12): none. (The backward
// peaks are 8 bytes low but for the reentrant encoder, within the 0.1 %:
// the 0-d double of the attention's scaling, a Python number, which
// 1.13's inner_pack stores with the recomputed tensors and the capture
// does not record.)
var captureCheckpointGaps113 = map[string]checkpointGap{}

// captureCheckpointFile is checkpoint_capture.py's file of a release
// (refname.py: 1.13's capture-checkpoint-cpu.json, 2.5's carries
// "-torch2.5"), once its torch field says that release made it.
func captureCheckpointFile(t *testing.T, version string) string {
	t.Helper()
	for _, r := range torchReleases {
		if r.version != version {
			continue
		}
		path := r.file("capture-checkpoint-cpu.json")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var ref checkpointReference
		if err := json.Unmarshal(data, &ref); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if _, err := r.profile(ref.Torch); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return path
	}
	t.Fatalf("no committed release %s", version)
	return ""
}

// TestCheckpointCapturedCheck measures the reference again under PyTorch
// 2.x, timm, peft and transformers (BATCHFIT_PYENV) and compares it with
// the committed one, as TestCheckpointHFCheck does.
func TestCheckpointCapturedCheck(t *testing.T) {
	checkUnderPyenv(t, "checkpoint_capture.py", "torch", "transformers", "timm", "peft")
}
