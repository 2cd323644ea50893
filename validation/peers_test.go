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
)

// peersReference is testdata/reference/peers-cpu.json, written by
// validation/peers.py: the measured peak of two real CPU training steps
// with Adam, and what PyTorch's MemTracker, accelerate's estimate-memory
// and DeepSpeed's ZeRO estimators say of the same steps.
type peersReference struct {
	Versions map[string]string `json:"versions"`
	Steps    int               `json:"steps"`
	Models   map[string]struct {
		Batch     int64  `json:"batch"`
		Seq       int64  `json:"seq"`
		Image     int64  `json:"image"`
		Attention string `json:"attention"`
		Real      struct {
			Peak       int64              `json:"peak"`
			StepPeaks  []int64            `json:"step_peaks"`
			PhasePeaks []map[string]int64 `json:"phase_peaks"`
			ParamBytes int64              `json:"param_bytes"`
		} `json:"real"`
		MemTracker struct {
			Peak  int64  `json:"peak"`
			Error string `json:"error"`
		} `json:"memtracker"`
		Accelerate struct {
			TrainingAdam int64 `json:"training_adam"`
		} `json:"accelerate"`
		DeepSpeed struct {
			Zero2 int64 `json:"zero2"`
			Zero3 int64 `json:"zero3"`
		} `json:"deepspeed"`
	} `json:"models"`
}

// peerTools are the columns of the comparison, batchfit first.
var peerTools = []string{"batchfit", "memtracker", "accelerate", "deepspeed-zero2", "deepspeed-zero3"}

// peerRow is one model's figures per tool, and the measured peak.
type peerRow struct {
	name    string
	real    int64
	figures map[string]int64 // a tool that cannot answer has none
	// the phases' peaks of the last step: measured, and batchfit's
	realPhases, phases map[string]int64
}

func (r peerRow) err(tool string) float64 {
	return float64(r.figures[tool]-r.real) / float64(r.real)
}

// peerRows simulates every model of the peers' reference with batchfit
// (the capture of a transformers model, the zoo's torchvision model) under
// the CPU rules of the reference's PyTorch, and puts its peak beside the
// peers' figures.
func peerRows(t *testing.T) ([]peerRow, peersReference) {
	t.Helper()
	data, err := os.ReadFile("../testdata/reference/peers-cpu.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref peersReference
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatalf("peers-cpu.json: %v", err)
	}
	prof, err := profile.Lookup(ref.Versions["torch"])
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(ref.Models))
	for n := range ref.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	var rows []peerRow
	for _, name := range names {
		m := ref.Models[name]
		var live []trace.StepLive
		if tv, ok := strings.CutPrefix(name, "tv-"); ok {
			live, _, err = simulateStepCase(prof, ref.Steps, stepCase{Model: tv, Batch: m.Batch, Image: m.Image, Optimizer: "adam"}, false)
		} else {
			var cm *capture.Model
			cm, err = capture.Load("../testdata/capture/" + name + ".bfgraph.gz")
			if err == nil {
				g, berr := cm.Build(models.Config{Batch: m.Batch, CPU: true})
				if berr != nil {
					err = berr
				} else {
					live, _, err = simulateLive(g, prof, ref.Steps, "adam", false)
				}
			}
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var peak int64
		for _, s := range live {
			peak = max(peak, s.Peak)
		}
		row := peerRow{name: name, real: m.Real.Peak, figures: map[string]int64{
			"batchfit":        peak,
			"accelerate":      m.Accelerate.TrainingAdam,
			"deepspeed-zero2": m.DeepSpeed.Zero2,
			"deepspeed-zero3": m.DeepSpeed.Zero3,
		}, phases: map[string]int64{}}
		if m.MemTracker.Error == "" {
			row.figures["memtracker"] = m.MemTracker.Peak
		}
		if n := len(m.Real.PhasePeaks); n > 0 {
			row.realPhases = m.Real.PhasePeaks[n-1]
		}
		if len(live) > 0 {
			last := live[len(live)-1]
			for _, ph := range []trace.Phase{trace.Forward, trace.Backward, trace.OptimizerStep, trace.ZeroGrad} {
				row.phases[ph.String()] = last.Phases[ph].Peak
			}
		}
		rows = append(rows, row)
	}
	return rows, ref
}

// peersKnownMisses are the models on which batchfit's prediction is not yet
// as close as the closest peer's, with what its rules miss. The test fails
// when one of them stops missing, so that the entry goes.
var peersKnownMisses = map[string]string{}

// TestPeers holds batchfit to the peers on the same real CPU training
// steps: on every model its prediction of the step's peak is at least as
// close to the measured peak as the closest peer's.
func TestPeers(t *testing.T) {
	rows, ref := peerRows(t)
	if len(rows) < 12 {
		t.Fatalf("the peers' reference has %d models, want at least 12", len(rows))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %10s", "model", "measured")
	for _, tool := range peerTools {
		fmt.Fprintf(&b, " %16s", tool)
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "\n%-22s %10d", r.name, r.real)
		for _, tool := range peerTools {
			if _, ok := r.figures[tool]; !ok {
				fmt.Fprintf(&b, " %16s", "no answer")
				continue
			}
			fmt.Fprintf(&b, " %+15.3f%%", 100*r.err(tool))
		}
		fmt.Fprintf(&b, " (batchfit %+d B", r.figures["batchfit"]-r.real)
		if f, ok := r.figures["memtracker"]; ok {
			fmt.Fprintf(&b, ", memtracker %+d B", f-r.real)
		}
		b.WriteString(")")
		// The closest peer, in bytes off the measured peak.
		best, bestTool := int64(math.MaxInt64), ""
		for _, tool := range peerTools[1:] {
			if f, ok := r.figures[tool]; ok && abs64(f-r.real) < best {
				best, bestTool = abs64(f-r.real), tool
			}
		}
		// A tie within 64 bytes is a tie: the CPU run keeps 8-byte scalars
		// (a Python number made a 0-d tensor, Adam's step count) that on a
		// GPU live in host memory, and TestStepReference allows the same.
		off := abs64(r.figures["batchfit"] - r.real)
		miss := off > best && off-best > 64
		if why, ok := peersKnownMisses[r.name]; ok {
			if !miss {
				t.Errorf("%s: batchfit is now as close as the closest peer (%+d bytes, %s %+d): drop it from peersKnownMisses",
					r.name, r.figures["batchfit"]-r.real, bestTool, r.figures[bestTool]-r.real)
			} else {
				t.Logf("%s: known miss, batchfit %+d bytes, %s %+d: %s", r.name, r.figures["batchfit"]-r.real, bestTool, r.figures[bestTool]-r.real, why)
			}
			continue
		}
		if miss {
			t.Errorf("%s: batchfit predicts %d bytes (%+d, %+.3f%%), %s %d (%+d), measured %d; phase peaks of the last step: batchfit %v, measured %v",
				r.name, r.figures["batchfit"], r.figures["batchfit"]-r.real, 100*r.err("batchfit"), bestTool, r.figures[bestTool], r.figures[bestTool]-r.real, r.real, r.phases, r.realPhases)
		}
	}
	t.Logf("peak of %d CPU training steps with Adam vs PyTorch %s, error per tool:\n%s", ref.Steps, ref.Versions["torch"], b.String())
}

// TestPeersCheck regenerates the peers' figures under PyTorch 2.x
// (BATCHFIT_PYENV, the environment .ci/run makes from
// python/requirements-test.txt) and compares them with the committed ones.
func TestPeersCheck(t *testing.T) {
	checkUnderPyenv(t, "peers.py", "torch", "torchvision", "transformers", "accelerate", "deepspeed")
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
