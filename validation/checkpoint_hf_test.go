package validation

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/capture"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// hfCheckpointFigures are one model's figures under one checkpointing
// mode (validation/checkpoint_hf.py): bytes above the model and the batch.
type hfCheckpointFigures struct {
	SavedBytes   int64 `json:"saved_bytes"`
	ForwardPeak  int64 `json:"forward_peak"`
	ForwardEnd   int64 `json:"forward_end"`
	BackwardPeak int64 `json:"backward_peak"`
}

// checkpointReference is a reference of validation/checkpoint_hf.py
// (testdata/reference/hf-checkpoint-torch2-cpu.json) or of
// checkpoint_capture.py (capture-checkpoint-cpu-torch2.5.json), which adds
// timm's and peft's releases: each model's figures in both modes.
type checkpointReference struct {
	Torch        string `json:"torch"`
	Transformers string `json:"transformers"`
	Timm         string `json:"timm"`
	Peft         string `json:"peft"`
	Batch        int64  `json:"batch"`
	Models       map[string]struct {
		Reentrant    hfCheckpointFigures `json:"reentrant"`
		NonReentrant hfCheckpointFigures `json:"non_reentrant"`
	} `json:"models"`
}

// holdCheckpointReference holds every model of the reference at path
// (which must have at least least of them) in both modes, each under the --checkpoint values
// policies gives (with the capture file to build), with gaps; it logs the
// rows.
func holdCheckpointReference(t *testing.T, path string, least int, policies func(name string) (file, reentrant, nonReentrant string), gaps map[string]checkpointGap) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ref checkpointReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	prof, err := profile.Lookup(ref.Torch)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Models) < least {
		t.Fatalf("%s has %d models, want %d", path, len(ref.Models), least)
	}
	names := make([]string, 0, len(ref.Models))
	for n := range ref.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	var rows []string
	for _, name := range names {
		file, re, non := policies(name)
		for _, mode := range []struct {
			policy string
			want   hfCheckpointFigures
		}{{re, ref.Models[name].Reentrant}, {non, ref.Models[name].NonReentrant}} {
			rows = append(rows, holdCheckpointed(t, ref.Torch, prof, ref.Batch, name, file, mode.policy, mode.want, gaps[name+" "+mode.policy]))
		}
	}
	t.Logf("batchfit / PyTorch %s (transformers %s, timm %s, peft %s), batch %d, on the CPU:\n%s",
		ref.Torch, ref.Transformers, ref.Timm, ref.Peft, ref.Batch, strings.Join(rows, "\n"))
}

// simulateCheckpointHF builds a committed transformers capture for the CPU
// under a checkpointing policy (use_cache off where the policy is the
// library's) and returns the reference's figures as the simulator has
// them: saved bytes after the forward, and from the trace the bytes alive
// beside the parameters, buffers and batch (which the reference made
// before it began to count), at their largest in the first forward and
// backward and at the forward's end.
func simulateCheckpointHF(name string, batch int64, prof *profile.Profile, ck train.Checkpoint) (hfCheckpointFigures, error) {
	var f hfCheckpointFigures
	cm, err := capture.Load("../testdata/capture/" + name + ".bfgraph.gz")
	if err != nil {
		return f, err
	}
	g, err := cm.Build(models.Config{Batch: batch, CPU: true, NoCache: ck.Library, LibraryCheckpointing: ck.Library, InnerBlocks: ck.Timm})
	if err != nil {
		return f, err
	}
	tr, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Checkpoint: ck,
		Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		return f, err
	}
	f.SavedBytes = sum.ActivationsBytes
	live, err := trace.LiveByStep(tr, trace.Parameter, trace.Buffer, trace.Batch)
	if err != nil || len(live) == 0 {
		return f, fmt.Errorf("the trace of %s: %v", name, err)
	}
	fw, bw := live[0].Phases[trace.Forward], live[0].Phases[trace.Backward]
	f.ForwardPeak, f.ForwardEnd, f.BackwardPeak = fw.Peak, fw.End, bw.Peak
	return f, nil
}

// checkpointGap is a known difference of a checkpointed capture from
// PyTorch's figures, in bytes of the saved tensors and of the forward's
// end; forward, backward: its forward's or backward's peak is not held.
type checkpointGap struct {
	saved, end        int64
	forward, backward bool
}

// holdCheckpointed simulates capture file (name in the reference) under
// --checkpoint policy and holds it to want: saved bytes and the forward's
// end to the byte but for gap, the forward's and backward's peaks within
// 0.1 % unless gap.forward, gap.backward. It returns the row the tests
// log.
func holdCheckpointed(t *testing.T, torch string, prof *profile.Profile, batch int64, name, file, policy string, want hfCheckpointFigures, gap checkpointGap) string {
	t.Helper()
	ck, err := train.ParseCheckpoint(policy)
	if err != nil {
		t.Fatal(err)
	}
	got, err := simulateCheckpointHF(file, batch, prof, ck)
	if err != nil {
		t.Errorf("%s %s: %v", name, policy, err)
		return ""
	}
	d := float64(got.BackwardPeak-want.BackwardPeak) / float64(want.BackwardPeak)
	fd := float64(got.ForwardPeak-want.ForwardPeak) / float64(want.ForwardPeak)
	for _, c := range []struct {
		what           string
		got, want, gap int64
	}{
		{"saved bytes", got.SavedBytes, want.SavedBytes, gap.saved},
		{"forward end", got.ForwardEnd, want.ForwardEnd, gap.end},
	} {
		if c.got-c.want != c.gap {
			t.Errorf("%s --checkpoint %s: %s %d, PyTorch %s %d (%+d, known %+d)", name, policy, c.what, c.got, torch, c.want, c.got-c.want, c.gap)
		}
	}
	// the recomputation follows the rules of train/micro.go's recompute,
	// and the reentrant backward those of holdNested and deliverDetached
	if !gap.backward && math.Abs(d) > 0.001 {
		t.Errorf("%s --checkpoint %s: backward peak %d, PyTorch %s %d (%+.2f%%)", name, policy, got.BackwardPeak, torch, want.BackwardPeak, 100*d)
	}
	if !gap.forward && math.Abs(fd) > 0.001 {
		t.Errorf("%s --checkpoint %s: forward peak %d, PyTorch %s %d (%+.2f%%)", name, policy, got.ForwardPeak, torch, want.ForwardPeak, 100*fd)
	}
	return fmt.Sprintf("%-34s %-18s saved %8d/%8d  fwd peak %8d/%8d  fwd end %8d/%8d  bwd peak %10d/%10d (%+.2f%%)",
		name, policy, got.SavedBytes, want.SavedBytes, got.ForwardPeak, want.ForwardPeak,
		got.ForwardEnd, want.ForwardEnd, got.BackwardPeak, want.BackwardPeak, 100*d)
}

// TestCheckpointHF holds the captured transformers models under
// transformers' own gradient checkpointing (--checkpoint hf, reentrant as
// transformers 4.44's default, and hf-non-reentrant) to real PyTorch 2.5
// on the CPU (validation/checkpoint_hf.py): what the checkpoints and
// autograd keep after the forward, and the bytes alive at the forward's
// end, to the byte but for the known gaps (hfCheckpointGaps); the
// forward's and the backward's peaks within 0.1 % in both modes
// (docs/accuracy.md §12).
func TestCheckpointHF(t *testing.T) {
	holdCheckpointReference(t, "../testdata/reference/hf-checkpoint-torch2-cpu.json", 12,
		func(name string) (string, string, string) { return name, "hf", "hf-non-reentrant" }, hfCheckpointGaps)
}

// hfCheckpointGaps are the differences TestCheckpointHF expects, each
// explained (docs/accuracy.md §12, "Transformers' own checkpointing"):
// a difference that changes is an error, as a new one is.
var hfCheckpointGaps = map[string]checkpointGap{}

// TestCheckpointHFCheck measures the reference again under PyTorch 2.x
// and transformers (BATCHFIT_PYENV) and compares it with the committed
// one, as TestCaptureHFCheck does for the captures.
func TestCheckpointHFCheck(t *testing.T) {
	checkUnderPyenv(t, "checkpoint_hf.py", "torch", "transformers")
}
