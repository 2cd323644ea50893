package record

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The recorder runs inside Debian's CPU PyTorch (1.13): CI installs it and
// sets BATCHFIT_REQUIRE_TORCH, so there these tests cannot skip.
func python(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		msg := "Debian's python3-torch is not installed: " + err.Error()
		if os.Getenv("BATCHFIT_REQUIRE_TORCH") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

func runScript(t *testing.T, env []string, script string, args ...string) (*Result, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := Run(Options{Command: append([]string{python(t), filepath.Join("testdata", script)}, args...), Env: env,
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatal(err)
	}
	return res, out.String(), errb.String()
}

func steps(recs []Record) []Record {
	var out []Record
	for _, r := range recs {
		if r.Kind == KindStep {
			out = append(out, r)
		}
	}
	return out
}

// A plain loop with gradient accumulation: five steps, each after two
// forward passes of 8 (the no_grad evaluation pass between steps is not a
// micro-batch), the script's own output untouched, exit status 0.
func TestRecorderTrainingLoop(t *testing.T) {
	res, out, errs := runScript(t, nil, "train.py")
	if res.Code != 0 || out != "trained\n" {
		t.Fatalf("exit %d, output %q, errors %s", res.Code, out, errs)
	}
	if res.Records[0].Kind != KindStart || res.Records[0].Torch == "" || *res.Records[0].CUDA {
		t.Errorf("start %+v", res.Records[0])
	}
	st := steps(res.Records)
	if len(st) != 5 {
		t.Fatalf("%d steps recorded, want 5: %+v", len(st), res.Records)
	}
	for i, s := range st {
		if s.Step != i+1 || s.Seq != i+1 || s.OptimizerClass != "SGD" || s.Batch == nil || *s.Batch != 8 || s.MicroBatches != 2 {
			t.Errorf("step %d: %+v", i+1, s)
		}
		// on the CPU: no CUDA figures, the resident set instead
		if s.MaxAllocated != nil || s.RSS == nil || *s.RSS <= 0 {
			t.Errorf("step %d: memory figures %v %v", i+1, s.MaxAllocated, s.RSS)
		}
	}
	if last := res.Records[len(res.Records)-1]; last.Kind != KindExit || *last.Code != 0 {
		t.Errorf("last record %+v", last)
	}
}

// Two optimizers in turn: each step reported, each optimizer numbered in
// the order it first stepped.
func TestRecorderTwoOptimizers(t *testing.T) {
	res, _, errs := runScript(t, nil, "gan.py")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, errs)
	}
	var seq []string
	for _, s := range steps(res.Records) {
		seq = append(seq, s.OptimizerClass+string(rune('0'+s.Optimizer))+"/"+string(rune('0'+s.Step)))
	}
	if got := strings.Join(seq, " "); got != "AdamW0/1 Adam1/1 AdamW0/2 Adam1/2 AdamW0/3 Adam1/3" {
		t.Errorf("steps %s", got)
	}
}

// A Lightning-style loop calling optimizer.step(closure): one report per
// step, the forward pass inside the closure counted.
func TestRecorderClosureLoop(t *testing.T) {
	res, _, errs := runScript(t, nil, "lightning_style.py")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, errs)
	}
	st := steps(res.Records)
	if len(st) != 4 {
		t.Fatalf("%d steps, want 4", len(st))
	}
	// the first step also counts the forward pass that materialised the
	// lazy layer
	for i, s := range st {
		want := 1
		if i == 0 {
			want = 2
		}
		if s.OptimizerClass != "RMSprop" || *s.Batch != 5 || s.MicroBatches != want {
			t.Errorf("step %d: %+v", i+1, s)
		}
	}
}

// The user's sitecustomize still runs, and the recorder with it.
func TestRecorderChainsSitecustomize(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "marker")
	site, _ := filepath.Abs(filepath.Join("testdata", "usersite"))
	env := append(os.Environ(), "PYTHONPATH="+site, "USERSITE_MARKER="+marker)
	res, _, errs := runScript(t, env, "train.py")
	if res.Code != 0 {
		t.Fatalf("exit %d: %s", res.Code, errs)
	}
	b, err := os.ReadFile(marker)
	if err != nil || string(b) != "user sitecustomize ran" {
		t.Errorf("the user's sitecustomize did not run: %v", err)
	}
	if len(steps(res.Records)) != 5 {
		t.Error("the recorder did not record beside it")
	}
}

// An out-of-memory error that is the cause of what ends the program is
// reported, the traceback still reaches stderr whole, and the status is
// Python's.
func TestRecorderOOM(t *testing.T) {
	res, _, errs := runScript(t, nil, "oom.py")
	if res.Code != 1 {
		t.Errorf("exit %d, want 1", res.Code)
	}
	if !strings.Contains(errs, "Traceback (most recent call last)") || !strings.Contains(errs, "ValueError: the training loop failed") ||
		!strings.Contains(errs, "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB") {
		t.Errorf("the traceback was changed:\n%s", errs)
	}
	var oom *Record
	for i := range res.Records {
		if res.Records[i].Kind == KindOOM {
			oom = &res.Records[i]
		}
	}
	if oom == nil || !strings.HasPrefix(oom.Message, "CUDA out of memory. Tried to allocate 2.00 GiB.") {
		t.Errorf("out-of-memory record %+v", oom)
	}
}

// Exit statuses and signals pass through; a script that never imports
// torch is run and recorded as such.
func TestRecorderExits(t *testing.T) {
	res, _, _ := runScript(t, nil, "exit3.py")
	if res.Code != 3 || res.Signal != nil {
		t.Errorf("exit3.py: code %d signal %v", res.Code, res.Signal)
	}
	res, _, _ = runScript(t, nil, "killed.py")
	if res.Code != 128+int(syscall.SIGKILL) || res.Signal != syscall.SIGKILL {
		t.Errorf("killed.py: code %d signal %v", res.Code, res.Signal)
	}
	if len(steps(res.Records)) != 1 {
		t.Errorf("killed.py: the step before the kill was not recorded: %+v", res.Records)
	}
	if ex := res.Records[len(res.Records)-1]; ex.Signal != "killed" {
		t.Errorf("exit record %+v", ex)
	}
	res, out, _ := runScript(t, nil, "notorch.py")
	if res.Code != 0 || out != "no torch here\n" || len(res.Records) != 1 || Summarize(res.Records).Started {
		t.Errorf("notorch.py: code %d, output %q, records %+v", res.Code, out, res.Records)
	}
	if _, err := Run(Options{Command: []string{"batchfit-no-such-command"}}); err == nil || !strings.Contains(err.Error(), "executable file not found") {
		t.Errorf("a missing command: %v", err)
	}
}

// The recorder survives what libraries and training loops do around it:
// a find_spec probe before the import, checkpointed blocks whose forward
// reruns in backward, a model called with keywords alone, and a child
// process that must not write into this run's reports.
func TestRecorderAroundLibraries(t *testing.T) {
	for _, c := range []struct {
		script       string
		steps, micro int
		batch        int64
		class        string
	}{
		{"probe.py", 2, 1, 5, "SGD"},
		{"ckpt.py", 3, 1, 6, "SGD"},
		{"kwargs.py", 2, 1, 7, "AdamW"},
		{"child.py", 1, 1, 2, "SGD"},
	} {
		res, _, errs := runScript(t, nil, c.script)
		if res.Code != 0 {
			t.Errorf("%s: exit %d: %s", c.script, res.Code, errs)
			continue
		}
		st := steps(res.Records)
		if len(st) != c.steps {
			t.Errorf("%s: %d steps recorded, want %d", c.script, len(st), c.steps)
			continue
		}
		for _, s := range st {
			if s.MicroBatches != c.micro || s.Batch == nil || *s.Batch != c.batch || s.OptimizerClass != c.class {
				t.Errorf("%s: step %+v, want %d micro-batch of %d", c.script, s, c.micro, c.batch)
			}
		}
		starts := 0
		for _, r := range res.Records {
			if r.Kind == KindStart {
				starts++
			}
		}
		if starts != 1 {
			t.Errorf("%s: %d start records", c.script, starts)
		}
	}
}
