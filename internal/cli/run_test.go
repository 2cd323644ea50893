package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchfit/batchfit/internal/report"
)

func requireTorch(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		if os.Getenv("BATCHFIT_REQUIRE_TORCH") != "" {
			t.Fatalf("Debian's python3-torch is not installed: %v", err)
		}
		t.Skip("Debian's python3-torch is not installed")
	}
	return py
}

const scripts = "../../record/testdata/"

func TestRunCommand(t *testing.T) {
	py := requireTorch(t)
	out := filepath.Join(t.TempDir(), "run.jsonl")
	stdout, stderr, code := run("run", "--model", "mlp", "--out", out, "--", py, scripts+"train.py")
	if code != 0 || stdout != "trained\n" {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	for _, want := range []string{
		"batchfit: recording · PyTorch 1.13",
		"step 5 (SGD) · batch 8 × 2 micro-batches · resident",
		"batchfit: 5 optimizer steps recorded; the command ended with exit status 0",
		"forward passes a step  2",
		// the prediction takes the batch, the accumulation, the optimizer
		// and the PyTorch release the run showed (1.13's SGD defaults to
		// the for-loop implementation)
		"batchfit's prediction (mlp · batch 8 · 32-true · sgd (forloop) · accumulate 2 · PyTorch 1.13+ rules",
		"the run was on the CPU, so there is nothing of CUDA's to compare with",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("no %q in:\n%s", want, stderr)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var kinds []string
	for sc.Scan() {
		var r struct {
			Kind string            `json:"kind"`
			Args []string          `json:"args"`
			Job  map[string]string `json:"job"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, r.Kind)
		if r.Kind == "run" && strings.Join(r.Args, " ") != "--model mlp --out "+out {
			t.Errorf("recorded args %q", r.Args)
		}
		// the job as its fields: --out is run's own, not the job's
		if r.Kind == "run" && (len(r.Job) != 1 || r.Job["model"] != "mlp") {
			t.Errorf("recorded job %v, want model mlp alone", r.Job)
		}
	}
	if got := strings.Join(kinds, " "); got != "run start step step step step step exit" {
		t.Errorf("recording %s", got)
	}
	// A CPU run has nothing of CUDA's for validate.
	if _, errs, code := run("validate", out); code != 1 || !strings.Contains(errs, "no CUDA figures") {
		t.Errorf("validate of a CPU run: exit %d: %s", code, errs)
	}
}

func TestRunExitStatus(t *testing.T) {
	py := requireTorch(t)
	for _, c := range []struct {
		script string
		code   int
		want   string
	}{
		{"exit3.py", 3, "the command ended with exit status 3"},
		{"killed.py", 137, "killed by signal 9, killed (status 137)"},
		{"notorch.py", 0, "no Python process it started imported torch: nothing was recorded"},
	} {
		_, stderr, code := run("run", "--", py, scripts+c.script)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d (want %d): %s", c.script, code, c.code, stderr)
		}
	}
	if _, stderr, code := run("run", "--", "batchfit-no-such-command", "x"); code != 127 || !strings.Contains(stderr, `starting batchfit-no-such-command: exec: "batchfit-no-such-command": executable file not found`) {
		t.Errorf("missing command: exit %d: %s", code, stderr)
	}
	for _, args := range [][]string{{"run", "python", "x.py"}, {"run", "--"}, {"run", "--bacth", "3", "--", "true"}, {"run", "--model", "resnet5O", "--", "true"}, {"run", "--every", "0", "--", "true"}} {
		if _, stderr, code := run(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, stderr)
		}
	}
}

// An out-of-memory end is explained by the allocator's rules, and with the
// model the smallest changes that fit that GPU are given.
func TestRunOOM(t *testing.T) {
	py := requireTorch(t)
	_, stderr, code := run("run", "--model", "gpt2", "--seq", "1024", "--batch", "32", "--", py, scripts+"oom.py")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		"ValueError: the training loop failed", // the traceback, untouched
		"the run ended with an out-of-memory error:",
		"tried to allocate          2.00 GiB",
		"(run again with --snapshot for a memory snapshot of the failure)",
		"smallest change",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("no %q in:\n%s", want, stderr)
		}
	}
}

// A recording of a GPU run is a measured case: validate compares the
// recorded peaks with the prediction of the recorded job on the recorded
// GPU, which is what estimate predicts for the same job.
func TestValidateRecording(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu.jsonl")
	rec := `{"kind":"run","command":["python","train.py"],"args":["--model","resnet18","--precision","bf16-mixed","--out","gpu.jsonl"]}
{"kind":"start","pid":1,"torch":"2.4.1","cuda":true,"device":"NVIDIA H100 80GB HBM3","device_total":85520809984,"capability":"9.0"}
{"kind":"step","seq":1,"step":1,"micro_batches":1,"batch":64,"time":100.0,"allocated":1,"max_allocated":2900000000,"reserved":3200000000,"max_reserved":3200000000,"device_free":81800000000,"device_total":85520809984}
{"kind":"step","seq":2,"step":2,"micro_batches":1,"batch":64,"time":100.1,"allocated":1,"max_allocated":2950000000,"reserved":3200000000,"max_reserved":3300000000,"device_free":81800000000,"device_total":85520809984}
{"kind":"exit","code":0}
`
	if err := os.WriteFile(path, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := run("validate", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var v struct {
		Cases []struct {
			ID                 string `json:"id"`
			PredictedAllocated int64  `json:"predicted_peak_allocated_bytes"`
			MeasuredAllocated  int64  `json:"measured_peak_allocated_bytes"`
			PredictedReserved  int64  `json:"predicted_peak_reserved_bytes"`
			MeasuredReserved   int64  `json:"measured_peak_reserved_bytes"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Cases) != 1 {
		t.Fatalf("%v: %s", err, out)
	}
	c := v.Cases[0]
	if c.MeasuredAllocated != 2950000000 || c.MeasuredReserved != 3300000000 {
		t.Errorf("measured %d %d, want the recording's largest max_memory_allocated and max_memory_reserved", c.MeasuredAllocated, c.MeasuredReserved)
	}
	// outside PyTorch: 85520809984 − 81800000000 − 3200000000
	est, errs, code := run("estimate", "resnet18", "--batch", "64", "--precision", "bf16-mixed", "--gpu", "h100-80gb", "--torch", "2.4.1",
		"--context", "520809984B", "--json")
	if code != 0 {
		t.Fatalf("estimate: %s", errs)
	}
	var e report.EstimateJSON
	json.Unmarshal([]byte(est), &e)
	if c.PredictedAllocated != e.PeakAllocatedBytes || c.PredictedReserved != e.PeakReservedBytes || !strings.Contains(c.ID, "resnet18 · batch 64 · bf16-mixed") {
		t.Errorf("validate predicted %d %d (%s), estimate %d %d", c.PredictedAllocated, c.PredictedReserved, c.ID, e.PeakAllocatedBytes, e.PeakReservedBytes)
	}
	// The same job recorded as its fields (what run writes now) is read
	// back through the job's table to the same prediction; a field the
	// table has no entry for is refused by name.
	byFields := strings.Replace(rec, `"args":["--model","resnet18","--precision","bf16-mixed","--out","gpu.jsonl"]`,
		`"args":["--out","gpu.jsonl"],"job":{"model":"resnet18","precision":"bf16-mixed"}`, 1)
	os.WriteFile(path, []byte(byFields), 0o644)
	out2, errs, code := run("validate", path, "--json")
	if code != 0 || out2 != out {
		t.Errorf("validate of the job's fields: exit %d %s\n%s\nwant\n%s", code, errs, out2, out)
	}
	os.WriteFile(path, []byte(strings.Replace(byFields, `"precision":`, `"precison":`, 1)), 0o644)
	if _, errs, code := run("validate", path); code != 2 || !strings.Contains(errs, `job field "precison"`) || !strings.Contains(errs, "did you mean precision?") {
		t.Errorf("an unknown job field: exit %d: %s", code, errs)
	}
	os.WriteFile(path, []byte(strings.Replace(byFields, `"bf16-mixed"`, `"bf17"`, 1)), 0o644)
	if _, errs, code := run("validate", path); code != 2 || !strings.Contains(errs, "job field precision") {
		t.Errorf("a job field's bad value: exit %d: %s", code, errs)
	}
	os.WriteFile(path, []byte(rec), 0o644)
	// A recording without a model has nothing to predict.
	os.WriteFile(path, []byte(strings.Replace(rec, `"--model","resnet18",`, "", 1)), 0o644)
	if _, errs, code := run("validate", path); code != 1 || !strings.Contains(errs, "recorded without --model") {
		t.Errorf("no model: exit %d: %s", code, errs)
	}
}

// SIGTERM sent to batchfit reaches the job, whose own status comes back.
func TestRunForwardsSIGTERM(t *testing.T) {
	py := requireTorch(t)
	if os.Getenv("BATCHFIT_RUN_HELPER") != "" {
		os.Exit(Run([]string{"run", "--", py, scripts + "sigterm.py", os.Getenv("BATCHFIT_RUN_HELPER")}, os.Stdout, os.Stderr))
	}
	marker := filepath.Join(t.TempDir(), "marker")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRunForwardsSIGTERM$")
	cmd.Env = append(os.Environ(), "BATCHFIT_RUN_HELPER="+marker)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the job never became ready")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("batchfit ended with %v, want the job's status 7", err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "terminated" {
		t.Errorf("the job's SIGTERM handler did not run: %v", err)
	}
}
