package validation

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/train"
)

// Each field of measure.py's case maps to the same job in batchfit.
func TestRequestMapping(t *testing.T) {
	env := &Environment{GPUName: "NVIDIA H100 80GB HBM3", TotalMemory: 85_000_000_000, ComputeCapability: "9.0", Torch: "2.5.1+cu124"}
	yes := true
	r := MeasuredResult{ID: "c", Case: MeasuredCase{Model: "mlp-L1-H256", Batches: []int64{64, 8, 32, 4}, Precision: "amp_fp16",
		Optimizer: "sgd_momentum", Foreach: &yes, Accum: 2, Checkpoint: true, EmptyCache: true, CudnnBenchmark: true,
		Env: map[string]string{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}}
	r.Context.Bytes = 500 << 20
	q, err := Request(r, env)
	if err != nil {
		t.Fatal(err)
	}
	s := q.Setup
	if q.Source.Name() != "mlp" || q.Config.Layers != 1 || q.Config.Hidden != 256 || len(q.Schedule) != 4 || q.Config.Batch != 64 {
		t.Errorf("model and sizes: %s %+v %v", q.Source.Name(), q.Config, q.Schedule)
	}
	if s.Precision != train.Mixed16 || s.Optimizer.Kind != train.SGD || s.Optimizer.Momentum != 0.9 || s.Optimizer.Impl != train.Foreach ||
		s.Accumulate != 2 || s.Checkpoint != train.FullCheckpoint || !s.EmptyCache || !s.CudnnBenchmark || s.Profile.Version != "2.5" {
		t.Errorf("setup: %+v", s)
	}
	if q.GPU.Capacity != 85_000_000_000 || q.GPU.Major != 9 || q.Context != 500<<20 || !q.Alloc.ExpandableSegments {
		t.Errorf("device: %+v context %d alloc %+v", q.GPU, q.Context, q.Alloc)
	}
	// the release measured picks its own profile: 2.11's from 2.11.0
	env.Torch = "2.11.0+cu130"
	if q, err := Request(r, env); err != nil || q.Setup.Profile.Version != "2.11" {
		t.Errorf("torch 2.11.0+cu130: profile %v, %v; want 2.11", q.Setup.Profile, err)
	}
	r.Case.Precision = "fp8"
	if _, err := Request(r, env); err == nil {
		t.Error("unknown precision: want an error")
	}
}

// Summaries over hand-set comparisons: errors of +1 %, −2 %, +3 % give a
// median |error| of 2 % and a worst under-prediction of −2 %; a measured
// OOM predicted to fit is counted.
func TestSummarize(t *testing.T) {
	cs := []Comparison{
		{ID: "a", Status: "ok", PredictedAllocated: 101, MeasuredAllocated: 100, PredictedReserved: 100, MeasuredReserved: 100},
		{ID: "b", Status: "ok", PredictedAllocated: 98, MeasuredAllocated: 100, PredictedReserved: 110, MeasuredReserved: 100},
		{ID: "c", Status: "ok", PredictedAllocated: 103, MeasuredAllocated: 100, PredictedReserved: 96, MeasuredReserved: 100},
		{ID: "d", Status: "oom", PredictedFits: true},
		{ID: "e", Status: "oom", PredictedFits: false},
	}
	s := Summarize(cs)
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	if s.Cases != 3 || !near(s.MedianAbsErrAllocated, 0.02) || !near(s.MedianAbsErrReserved, 0.04) ||
		!near(s.WorstUnderAllocated, -0.02) || s.WorstUnderCase != "b" || s.OOMMissed != 1 {
		t.Errorf("summary %+v", s)
	}
}

// Step times: a measured case's steady time is the median of its steps
// after the first; over three timed cases with errors −50 %, +10 % and
// +20 %, the median |error| is 20 %; of the three pairs, a–b (1 s, 2 s)
// is predicted in order (0.5, 2.2), a–c (1 s, 1.02 s) is within 5 % and
// left out, b–c (2 s, 1.02 s) is predicted in order (2.2 > 1.224): two of
// two.
func TestStepTimes(t *testing.T) {
	r := MeasuredResult{Steps: []MeasuredStep{{0, 8, 9.0, 0}, {1, 8, 1.0, 0}, {2, 8, 3.0, 0}, {3, 8, 2.0, 0}}}
	if got := r.StepSeconds(); got != 2.0 {
		t.Errorf("steady step time %g, want 2 (the median of 1, 3, 2)", got)
	}
	if got := (MeasuredResult{Steps: []MeasuredStep{{0, 8, 1, 0}}}).StepSeconds(); got != 0 {
		t.Errorf("one step: %g, want 0 (unknown)", got)
	}
	cs := []Comparison{
		{ID: "a", Status: "ok", PredictedSeconds: 0.5, MeasuredSeconds: 1},
		{ID: "b", Status: "ok", PredictedSeconds: 2.2, MeasuredSeconds: 2},
		{ID: "c", Status: "ok", PredictedSeconds: 1.224, MeasuredSeconds: 1.02},
		{ID: "d", Status: "ok"}, // no time: left out
	}
	s := Summarize(cs)
	if s.TimedCases != 3 || math.Abs(s.MedianAbsErrSeconds-0.2) > 1e-12 || s.PairsOrdered != 1 {
		t.Errorf("summary %+v", s)
	}
	cs[0].PredictedSeconds = 3 // now a is predicted slower than b: one pair of two wrong
	if s := Summarize(cs); s.PairsOrdered != 0.5 {
		t.Errorf("pairs ordered %g, want 0.5", s.PairsOrdered)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{"empty.json": `{"results": []}`, "bad.json": `{"results": [`} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		if _, err := Load(p); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file: want an error")
	}
}

// Load refuses a case measure.py could not have written (its check_case:
// accum ≥ 1; PyTorch's peaks count bytes, allocated within reserved),
// naming the file and the field; an accum left out is measure.py's
// default 1.
func TestLoadImpossibleFigures(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, result, field string }{
		{"accum", `"case": {"model": "mlp", "batch": 8, "accum": -5}`, "case.accum"},
		{"accum0", `"case": {"model": "mlp", "batch": 8, "accum": 0}`, "case.accum"},
		{"batches", `"case": {"model": "mlp", "batches": [8, 0]}`, "case.batches"},
		{"alloc", `"case": {"model": "mlp", "batch": 8}, "max_memory_allocated": -5`, "max_memory_allocated"},
		{"context", `"case": {"model": "mlp", "batch": 8}, "context": {"context_bytes": -1}`, "context.context_bytes"},
		{"over", `"case": {"model": "mlp", "batch": 8}, "max_memory_allocated": 10, "max_memory_reserved": 5`, "max_memory_allocated"},
	} {
		p := filepath.Join(dir, c.name+".json")
		os.WriteFile(p, []byte(`{"results": [{"id": "x", "status": "ok", `+c.result+`}]}`), 0o644)
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: %v; want an error naming %s and %s", c.name, err, p, c.field)
		}
	}
	p := filepath.Join(dir, "default.json")
	os.WriteFile(p, []byte(`{"results": [{"id": "x", "status": "ok", "case": {"model": "mlp", "batch": 8}}]}`), 0o644)
	if m, err := Load(p); err != nil || m.Results[0].Case.Accum != 1 {
		t.Errorf("accum left out: %v, %+v; want measure.py's default 1", err, m)
	}
}

// A grouped-query case of validation/cases-gqa.json, as measure.py writes
// it: the config.json is rebuilt from the recorded text under the case's
// path (the name is its directory's, as 'batchfit estimate
// testdata/hf/llama-gqa-small/config.json' names it), the sequence and
// the transformers release are the run's, and each sdpa_backend is the
// --attention kernel of the same name; none under sdpa is auto, eager
// is eager.
func TestRequestHFConfig(t *testing.T) {
	const result = `{
 "id": "llama-gqa-b4-s1024-ampbf16-adamw-sdpa-flash", "status": "ok",
 "case": {"model": "hf_config", "hf_config": "testdata/hf/llama-gqa-small/config.json",
  "batch": 4, "seq_len": 1024, "steps": 3, "precision": "amp_bf16", "optimizer": "adamw",
  "attn_implementation": "sdpa", "sdpa_backend": "flash", "foreach": null, "fused": null, "env": {}},
 "max_memory_allocated": 4000000000, "max_memory_reserved": 4500000000,
 "context": {"context_bytes": 536870912},
 "env": {"gpu_name": "NVIDIA H200", "gpu_total_memory": 150095020032, "gpu_capability": "9.0",
  "torch": "2.11.0+cu130", "transformers": "4.44.2"},
 "model": {"kind": "lm", "transformers": "4.44.2", "attn_implementation": "sdpa",
  "hf_config": "testdata/hf/llama-gqa-small/config.json",
  "hf_config_json": "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 1024, \"num_attention_heads\": 16, \"num_key_value_heads\": 4, \"num_hidden_layers\": 4, \"intermediate_size\": 2816, \"vocab_size\": 32000, \"max_position_embeddings\": 4096, \"tie_word_embeddings\": false, \"torch_dtype\": \"float32\"}"}
}`
	var base MeasuredResult
	if err := json.Unmarshal([]byte(result), &base); err != nil {
		t.Fatal(err)
	}
	// 32000·1024 embedding + the same untied head + 4 layers of
	// q, o (1024·1024 each), k, v (1024·256 each: 4 heads of 64),
	// gate, up, down (3·1024·2816) and two norms (2·1024), + final norm
	const params = 2*32000*1024 + 4*(2*1024*1024+2*1024*256+3*1024*2816+2*1024) + 1024
	for _, c := range []struct {
		backend, impl string
		want          train.Attention
	}{
		{"math", "sdpa", train.AttentionMath},
		{"efficient", "sdpa", train.AttentionEfficient},
		{"flash", "sdpa", train.AttentionFlash},
		{"cudnn", "sdpa", train.AttentionCudnn},
		{"", "sdpa", train.AttentionAuto},
		{"", "eager", train.AttentionEager},
	} {
		r := base
		r.Case.SDPABackend, r.Case.Attention = c.backend, c.impl
		q, err := Request(r, nil)
		if err != nil {
			t.Fatalf("%s/%s: %v", c.impl, c.backend, err)
		}
		if q.Setup.Attention != c.want {
			t.Errorf("%s/%s: attention %q, want %q", c.impl, c.backend, q.Setup.Attention, c.want)
		}
		if q.Source.Name() != "llama-gqa-small" || q.Config.Batch != 4 || q.Config.Seq != 1024 ||
			q.Config.Transformers != "4.44.2" || !q.Config.LossFromLogits {
			t.Errorf("%s/%s: model %s config %+v", c.impl, c.backend, q.Source.Name(), q.Config)
		}
		m, ok := q.Source.(*hf.Model)
		if !ok || m.ParamCount != params || m.Config.Transformer.KVHeads != 4 || m.Config.Transformer.Heads != 16 {
			t.Errorf("%s/%s: source %T, want the config's Llama with %d parameters, 16 heads, 4 key-value heads", c.impl, c.backend, q.Source, params)
		}
		if q.Setup.Precision != train.MixedBF16 || q.Setup.Optimizer.Kind != train.AdamW || q.Setup.Steps != 3 || q.Setup.Profile.Version != "2.11" {
			t.Errorf("%s/%s: setup %+v", c.impl, c.backend, q.Setup)
		}
	}
	// refused: a backend under eager attention, an unknown backend, a
	// result without the config's text, a path that leaves the root
	for _, c := range []struct {
		name string
		edit func(*MeasuredResult)
		want string
	}{
		{"eager+flash", func(r *MeasuredResult) { r.Case.Attention = "eager" }, "eager attention calls no SDPA kernel"},
		{"unknown", func(r *MeasuredResult) { r.Case.SDPABackend = "xformers" }, `unknown sdpa_backend "xformers"`},
		{"no text", func(r *MeasuredResult) { r.Model.HFConfigJSON = "" }, "records no model.hf_config_json"},
		{"dotdot", func(r *MeasuredResult) { r.Case.HFConfig = "../config.json" }, "relative to the repository root"},
	} {
		r := base
		c.edit(&r)
		if _, err := Request(r, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.want)
		}
	}
}
