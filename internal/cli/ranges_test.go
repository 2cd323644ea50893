package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
)

// Bad numbers on the command line are usage errors (exit 2) that name the
// flag: a pipeline stage with no layers, a float flag that is NaN, ±Inf or
// out of its library's range, an explicit 0 or negative for a flag whose
// default means "the model's", and GPUs per node that are none or do not
// divide the world of a hybrid-sharded job. Each was accepted before, or
// ended in an internal error.
func TestFlagRangesRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		flag string
	}{
		// a stage of no layers holds no block (item: "storage released
		// more often than held")
		{[]string{"estimate", "Llama-3-8B", "--pp", "2", "--gpus", "2", "--stage-layers", "0,32"}, "--stage-layers"},
		{[]string{"estimate", "Llama-3-8B", "--pp", "4", "--gpus", "4", "--stage-layers", "16,16,0,0"}, "--stage-layers"},
		// torch.optim.SGD: momentum ≥ 0; below 1 so the buffer decays
		{[]string{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "NaN"}, "--momentum"},
		{[]string{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "Inf"}, "--momentum"},
		{[]string{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "-0.1"}, "--momentum"},
		{[]string{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "1"}, "--momentum"},
		// torch.optim: weight_decay ≥ 0; -1 written out is not "default"
		{[]string{"estimate", "mlp", "--weight-decay", "-1"}, "--weight-decay"},
		{[]string{"estimate", "mlp", "--weight-decay", "NaN"}, "--weight-decay"},
		{[]string{"estimate", "mlp", "--weight-decay", "+Inf"}, "--weight-decay"},
		// PEFT: dropout in [0, 1), scaling alpha/r with alpha > 0
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-dropout", "NaN"}, "--lora-dropout"},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-dropout", "1"}, "--lora-dropout"},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-dropout", "-0.5"}, "--lora-dropout"},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-alpha", "NaN"}, "--lora-alpha"},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-alpha", "-Inf"}, "--lora-alpha"},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-alpha", "0"}, "--lora-alpha"},
		// dist.new_subgroups: the world a multiple of the group
		{[]string{"estimate", "mlp", "--gpus", "16", "--strategy", "fsdp", "--sharding", "hybrid", "--node-gpus", "0"}, "--node-gpus"},
		{[]string{"estimate", "mlp", "--gpus", "16", "--strategy", "fsdp", "--sharding", "hybrid", "--node-gpus", "3"}, "--node-gpus"},
		{[]string{"estimate", "mlp", "--gpus", "16", "--strategy", "fsdp", "--node-gpus", "-8"}, "--node-gpus"},
		// an explicit 0 or negative is not the default
		{[]string{"estimate", "gpt2", "--seq", "0"}, "--seq"},
		{[]string{"estimate", "mlp", "--layers", "0"}, "--layers"},
		{[]string{"estimate", "mlp", "--hidden", "0"}, "--hidden"},
		{[]string{"estimate", "resnet18", "--image", "0"}, "--image"},
		{[]string{"sweep", "mlp", "--batch", "1:2", "--layers", "-3"}, "--layers"},
		{[]string{"maxbatch", "mlp", "--limit", "0"}, "--limit"},
		{[]string{"maxbatch", "mlp", "--limit", "-1"}, "--limit"},
		{[]string{"plan", "mlp", "--batch", "8", "--global-batch", "0"}, "--global-batch"},
	} {
		_, errs, code := run(c.args...)
		if code != 2 || !strings.Contains(errs, c.flag) {
			t.Errorf("%v: exit %d, %q; want exit 2 naming %s", c.args, code, errs, c.flag)
		}
	}
}

// The ranges' edges that are allowed stay allowed, and a flag left out
// still means its default.
func TestFlagRangesAccepted(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "0.9"},
		{"estimate", "mlp", "--optimizer", "sgd", "--momentum", "0"},
		{"estimate", "mlp", "--weight-decay", "0"},
		{"estimate", "mlp", "--lora", "8", "--lora-targets", "linear", "--lora-dropout", "0", "--lora-alpha", "0.5"},
		// 16 GPUs in two nodes of 8; 4 GPUs on one node of the default 8
		{"estimate", "mlp", "--gpus", "16", "--strategy", "fsdp", "--sharding", "hybrid", "--node-gpus", "8"},
		{"estimate", "mlp", "--gpus", "4", "--strategy", "fsdp", "--sharding", "hybrid"},
		{"estimate", "mlp", "--layers", "2", "--hidden", "64"},
		{"maxbatch", "mlp", "--limit", "64"},
	} {
		if _, errs, code := run(args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}

// validate never opens a model path written inside a recording (it may be
// a device or a file built to cost gigabytes): the user names it with
// --model, and a zoo name in the recording is taken as before
// (TestValidateRecording). A recorded path that exists and would load is
// refused all the same, so the refusal is not a failure to read it.
func TestValidateRecordedPathNotOpened(t *testing.T) {
	t.Parallel()
	spec, err := filepath.Abs("testdata/one_linear.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec := func(model string, maxAlloc string) string {
		return `{"kind":"run","command":["python","train.py"],"args":["--model",` + model + `,"--batch","8","--out","gpu.jsonl"]}
{"kind":"start","pid":1,"torch":"2.4.1","cuda":true,"device":"NVIDIA H100 80GB HBM3","device_total":85520809984,"capability":"9.0"}
{"kind":"step","seq":1,"step":1,"micro_batches":1,"batch":8,"time":100.0,"allocated":1,"max_allocated":` + maxAlloc + `,"reserved":3200000,"max_reserved":3200000,"device_free":81800000000,"device_total":85520809984}
{"kind":"exit","code":0}
`
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name, body string
		extra      []string
		code       int
		want       string
	}{
		{"path", rec(`"`+spec+`"`, "2900000"), nil, 2, "--model PATH"},
		{"device", rec(`"/dev/zero.onnx"`, "2900000"), nil, 2, "--model PATH"},
		{"named", rec(`"`+spec+`"`, "2900000"), []string{"--model", spec}, 0, ""},
		{"zoo-overridden", rec(`"/dev/zero.onnx"`, "2900000"), []string{"--model", "mlp"}, 0, ""},
		// PyTorch's max_memory_allocated counts bytes
		{"negative", rec(`"mlp"`, "-5"), nil, 1, "max_allocated"},
	} {
		p := filepath.Join(dir, c.name+".jsonl")
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errs, code := run(append([]string{"validate", p}, c.extra...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, %q; want %d and %q", c.name, code, errs, c.code, c.want)
		}
	}
	// --model is a recording's: a measure.py file names its own models
	m := filepath.Join(dir, "m.json")
	os.WriteFile(m, []byte(`{"results":[{"id":"a","status":"ok","case":{"model":"mlp","batch":8}}]}`), 0o644)
	if _, errs, code := run("validate", m, "--model", spec); code != 2 || !strings.Contains(errs, "--model") {
		t.Errorf("--model with a measure.py file: exit %d, %q", code, errs)
	}
}

// validate refuses a measure.py case it could not have written, naming the
// file and the field, instead of printing errors of −1964103780 %.
func TestValidateImpossibleCase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := `"environment": {"gpu_name": "test GPU", "gpu_total_memory": 17179869184, "gpu_capability": "8.0", "torch": "2.5.0"}`
	for _, c := range []struct{ name, result, field string }{
		{"accum", `{"id": "a", "status": "ok", "case": {"model": "mlp", "batch": 64, "accum": -5}, "max_memory_allocated": 50000000, "max_memory_reserved": 60000000}`, "case.accum"},
		{"accum0", `{"id": "a", "status": "ok", "case": {"model": "mlp", "batch": 64, "accum": 0}, "max_memory_allocated": 50000000, "max_memory_reserved": 60000000}`, "case.accum"},
		{"alloc", `{"id": "a", "status": "ok", "case": {"model": "mlp", "batch": 64}, "max_memory_allocated": -5, "max_memory_reserved": 60000000}`, "max_memory_allocated"},
		{"reserved", `{"id": "a", "status": "ok", "case": {"model": "mlp", "batch": 64}, "max_memory_allocated": 5, "max_memory_reserved": -5}`, "max_memory_reserved"},
	} {
		p := filepath.Join(dir, c.name+".json")
		os.WriteFile(p, []byte(`{`+env+`, "results": [`+c.result+`]}`), 0o644)
		out, errs, code := run("validate", p)
		if code == 0 || !strings.Contains(errs, p) || !strings.Contains(errs, c.field) || strings.Contains(out, "%") {
			t.Errorf("%s: exit %d, %q %q; want a refusal naming %s and %s", c.name, code, errs, out, p, c.field)
		}
	}
}

// --cuda: a build for a CUDA runtime before 11.7 has the eager context
// (gpu.EagerContextSize) in place of the GPU family's lazy one; 11.7 and
// later change nothing; a 2.x release has no such build, and a version
// that is not one is a usage error.
func TestCUDAEagerContext(t *testing.T) {
	t.Parallel()
	ctx := func(args ...string) int64 {
		t.Helper()
		out, errs, code := run(append([]string{"estimate", "resnet18", "--batch", "8", "--gpu", "a100-40gb", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var e report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatal(err)
		}
		return e.ContextBytes
	}
	a100, err := gpu.Lookup("a100-40gb")
	if err != nil {
		t.Fatal(err)
	}
	lazy := ctx("--torch", "1.13")
	if got := ctx("--torch", "1.13", "--cuda", "11.3") - lazy; got != gpu.EagerContextSize-a100.ContextSize {
		t.Errorf("--cuda 11.3 adds %d bytes to the context, want %d", got, gpu.EagerContextSize-a100.ContextSize)
	}
	if got := ctx("--torch", "1.13", "--cuda", "11.7"); got != lazy {
		t.Errorf("--cuda 11.7: context %d, want the lazy %d", got, lazy)
	}
	if got := ctx("--torch", "1.13", "--cuda", "11.3", "--context", "1GiB") - ctx("--torch", "1.13", "--context", "1GiB"); got != 0 {
		t.Errorf("--context given: --cuda 11.3 moves it by %d bytes", got)
	}
	for _, args := range [][]string{{"--cuda", "11.3"}, {"--torch", "1.13", "--cuda", "eleven"}} {
		if _, errs, code := run(append([]string{"estimate", "resnet18", "--gpu", "a100-40gb"}, args...)...); code != 2 || !strings.Contains(errs, "--cuda") {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}
