package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// A 70B job on 8 data-parallel GPUs: the tensor and pipeline levers offer
// plans on 8 × tp × pp GPUs, so every plan says how many it takes, and the
// best plan that keeps the job's 8 is shown whatever its rank.
func TestPlanShowsGPUsAndTheSameGPUPlan(t *testing.T) {
	t.Parallel()
	args := []string{"plan", "Llama-3-70B", "--gpus", "8", "--strategy", "fsdp", "--gpu", "h100-80gb", "--global-batch", "8"}
	out, errs, code := run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var ans struct {
		GPUsTotal int64 `json:"gpus_total"`
		Best      []struct {
			Strategy  string `json:"strategy"`
			TP        int64  `json:"tp"`
			PP        int64  `json:"pp"`
			GPUsTotal int64  `json:"gpus_total"`
			SameGPUs  bool   `json:"same_gpus"`
		} `json:"best"`
		SameGPUs *struct {
			GPUsTotal int64 `json:"gpus_total"`
			Fits      bool  `json:"fits"`
		} `json:"same_gpus_plan"`
	}
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatal(err)
	}
	if ans.GPUsTotal != 8 {
		t.Errorf("current setup: gpus_total %d, want 8 (--gpus 8, no tensor or pipeline parallelism)", ans.GPUsTotal)
	}
	if ans.SameGPUs == nil || ans.SameGPUs.GPUsTotal != 8 || !ans.SameGPUs.Fits {
		t.Errorf("same_gpus_plan %+v, want a plan on 8 GPUs that fits", ans.SameGPUs)
	}
	if len(ans.Best) == 0 {
		t.Fatal("no plan")
	}
	for i, p := range ans.Best {
		if want := 8 * max(p.TP, 1) * max(p.PP, 1); p.GPUsTotal != want {
			t.Errorf("plan %d (%s, tp %d, pp %d): gpus_total %d, want %d", i+1, p.Strategy, p.TP, p.PP, p.GPUsTotal, want)
		}
	}

	out, errs, code = run(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, ", 8 GPUs — ") {
		t.Errorf("the current setup's line does not say its 8 GPUs:\n%s", out)
	}
	// the table: a GPUs column, and a row on 8 of them
	cols := regexp.MustCompile(`\s{2,}`)
	gpusAt, rowsOn8 := -1, 0
	for _, line := range strings.Split(out, "\n") {
		f := cols.Split(strings.TrimRight(line, " "), -1)
		if len(f) < 3 || f[0] != "" {
			continue
		}
		if f[1] == "#" {
			for i, h := range f {
				if h == "GPUs" {
					gpusAt = i
				}
			}
			continue
		}
		if gpusAt > 0 && gpusAt < len(f) && regexp.MustCompile(`^[0-9]*=?\*?$`).MatchString(f[1]) && f[gpusAt] == "8" {
			rowsOn8++
		}
	}
	if gpusAt < 0 {
		t.Fatalf("no GPUs column in the table:\n%s", out)
	}
	if rowsOn8 == 0 {
		t.Errorf("no plan on the job's 8 GPUs shown:\n%s", out)
	}
}
