package cli

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// One rank of FSDP over 8 GPUs holds an eighth of each of the seed MLP's
// tensors (ceil(n/8) elements of the flat parameter), in float32: 784·1024
// and 3·1024·1024 weights, four 1024 biases, a 10×1024 head and its 10
// biases (ceil(10/8) = 2) — 495,364 elements, 1,981,456 bytes.
func TestEstimateFSDPJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "mlp", "--batch", "32", "--gpus", "8", "--strategy", "fsdp", "--optimizer", "sgd", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got report.EstimateJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	shard := int64(784*1024/8 + 3*1024*1024/8 + 4*1024/8 + 10*1024/8 + 2)
	if got.Strategy != "fsdp" || got.GPUs != 8 || got.Sharding != "full" || got.ParametersBytes != 4*shard {
		t.Errorf("strategy %q on %d, sharding %q, parameters %d; want fsdp on 8, full, %d", got.Strategy, got.GPUs, got.Sharding, got.ParametersBytes, 4*shard)
	}
	// the step time is the compute and the communication's exposed part
	// (the T4's PCIe link is in the catalog)
	if got.Time == nil || got.Time.Comm == nil {
		t.Fatal("no step time with its communication under FSDP")
	}
	var compute float64
	for _, s := range got.Time.PartSeconds {
		compute += s
	}
	c := got.Time.Comm
	if c.ExposedSeconds > c.Seconds || c.ExposedSeconds <= 0 || math.Abs(got.Time.StepSeconds-compute-c.ExposedSeconds) > 1e-9 {
		t.Errorf("step %g s, compute %g s, communication %g s of which %g s exposed: want 0 < exposed ≤ all, step = compute + exposed",
			got.Time.StepSeconds, compute, c.Seconds, c.ExposedSeconds)
	}
}

func TestParallelFlagErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "fdsp"}, "unknown strategy"},
		{[]string{"--strategy", "ddp", "--sharding", "grad-op"}, "FSDP's"},
		{[]string{"--gpus", "0"}, "--gpus must be"},
		{[]string{"--strategy", "single", "--gpus", "4"}, "one GPU"},
		{[]string{"--strategy", "ddp", "--offload"}, "offload"},
		{[]string{"--strategy", "zero2", "--offload-params"}, "zero3"},
		{[]string{"--reduce-bucket", "-1", "--strategy", "zero2"}, "--reduce-bucket"},
		{[]string{"--bucket-mb", "0"}, "--bucket-mb"},
		{[]string{"--strategy", "ddp", "--gpus", "2", "--no-sync"}, "FSDP1"},
	} {
		_, errs, code := run(append([]string{"estimate", "mlp"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errs, c.want)
		}
	}
}

// Without --stage, a pipeline answers with every stage and the breakdown
// of the one that fits worst: with 1F1B the first stage holds the most
// micro-batches in flight.
func TestEstimatePipelineStages(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "Llama-3.2-1B", "--batch", "1", "--seq", "256", "--pp", "4", "--tp", "2", "--accumulate", "8", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got report.EstimateJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Stages) != 4 || got.PP != 4 || got.TP != 2 {
		t.Fatalf("stages %d, pp %d, tp %d", len(got.Stages), got.PP, got.TP)
	}
	for _, s := range got.Stages {
		if s.DeviceTotalBytes > got.DeviceTotalBytes {
			t.Errorf("stage %d needs %d, more than the answer's %d", s.Stage, s.DeviceTotalBytes, got.DeviceTotalBytes)
		}
	}
	if _, errs, code := run("estimate", "resnet50", "--pp", "2"); code == 0 || !strings.Contains(errs, "Llama family") {
		t.Errorf("resnet50 split into stages: exit %d, %q", code, errs)
	}
	if _, errs, code := run("estimate", "Llama-3.2-1B", "--stage", "1"); code != 2 || !strings.Contains(errs, "need --pp") {
		t.Errorf("--stage without --pp: exit %d, %q", code, errs)
	}
}

// The parallelism flags never panic: any spelling ends in an answer, a
// failure or a usage error.
func FuzzParallelFlags(f *testing.F) {
	f.Add("fsdp", "grad-op", "8", "2", "4,4", "1")
	f.Add("zero3", "full", "3", "1", "", "0")
	f.Add("", "hybrid", "0", "-1", "x,1", "9")
	f.Fuzz(func(t *testing.T, strategy, sharding, gpus, tp, layers, stage string) {
		_, _, code := run("estimate", "Llama-3.2-1B", "--seq", "16", "--layers", "2", "--batch", "1", "--steps", "1",
			"--strategy="+strategy, "--sharding="+sharding, "--gpus="+gpus, "--tp="+tp, "--pp=2", "--stage-layers="+layers, "--stage="+stage)
		if code < 0 || code > 2 {
			t.Errorf("exit %d", code)
		}
	})
}

// FSDP with accumulation but without --no-sync says that a loop
// accumulating inside no_sync() needs more; with --no-sync it does not.
func TestEstimateNoSyncNote(t *testing.T) {
	t.Parallel()
	const note = "inside FSDP's no_sync()"
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"--strategy", "fsdp", "--gpus", "2", "--accumulate", "2"}, true},
		{[]string{"--strategy", "fsdp", "--gpus", "2", "--accumulate", "2", "--no-sync"}, false},
		{[]string{"--strategy", "fsdp", "--gpus", "2"}, false},
		{[]string{"--strategy", "ddp", "--gpus", "2", "--accumulate", "2"}, false},
	} {
		out, errs, code := run(append([]string{"estimate", "mlp"}, c.args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		if got := strings.Contains(out, note); got != c.want {
			t.Errorf("%v: note printed %v, want %v", c.args, got, c.want)
		}
	}
}
