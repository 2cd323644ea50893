package cli

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	// no environment: the answers are the flags' alone
	code := RunWith(args, &out, &errb, Options{})
	return out.String(), errb.String(), code
}

// Golden files pin the presentation (layout, wording, units) of the text
// output; the figures in them are checked against the semantics by the
// train, alloc and validation tests, not here. Refresh with -update.
func TestGolden(t *testing.T) {
	// The shell's allocator settings reach only the command line's entry
	// (Run): a test runs without them, whatever its shell says.
	t.Setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
	cases := []struct {
		name string
		args []string
	}{
		{"estimate_mlp", []string{"estimate", "mlp", "--batch", "32", "--gpu", "t4"}},
		{"estimate_schedule", []string{"estimate", "simpleconv", "--batch", "64,8,32,4", "--gpu", "t4", "--optimizer", "sgd"}},
		{"estimate_schedule_empty_cache", []string{"estimate", "simpleconv", "--batch", "64,8,32,4", "--gpu", "t4", "--optimizer", "sgd", "--empty-cache"}},
		{"sweep_simpleconv", []string{"sweep", "simpleconv", "--batch", "1:64", "--gpu", "t4"}},
		{"maxbatch_mlp_layers", []string{"maxbatch", "mlp", "--solve", "layers", "--batch", "32", "--gpu", "1GiB", "--context", "0"}},
		{"maxbatch_gpt2_seq", []string{"maxbatch", "gpt2", "--solve", "seq", "--batch", "1", "--gpu", "t4"}},
		{"maxbatch_tinygpt_seq", []string{"maxbatch", "../../examples/tinygpt.yaml", "--solve", "seq", "--batch", "1", "--gpu", "t4"}},
		{"maxbatch_gpt2_hidden", []string{"maxbatch", "gpt2", "--solve", "hidden", "--batch", "1", "--seq", "128", "--gpu", "4GiB"}},
		{"gpus", []string{"gpus"}},
		{"plan_gpt2", []string{"plan", "gpt2", "--seq", "1024", "--gpu", "a10g", "--global-batch", "64", "--batch", "64", "--top", "3"}},
		{"estimate_suggestions", []string{"estimate", "gpt2", "--seq", "1024", "--batch", "32", "--gpu", "a10g"}},
		{"maxbatch_throughput", []string{"maxbatch", "resnet18", "--gpu", "t4", "--precision", "16-mixed", "--objective", "throughput"}},
		{"estimate_qlora", []string{"estimate", "Llama-3.2-1B", "--quant", "nf4", "--double-quant", "--lora", "16", "--lora-targets", "q_proj,k_proj,v_proj,o_proj",
			"--precision", "bf16-true", "--batch", "2", "--seq", "512", "--gpu", "t4"}},
	}
	// a job that does not fit prints its answer and exits 1
	wantCode := map[string]int{"estimate_suggestions": 1}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := run(c.args...)
			if code != wantCode[c.name] {
				t.Fatalf("exit %d: %s", code, errs)
			}
			path := filepath.Join("testdata", c.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s (run go test ./internal/cli -update after checking):\n%s", path, lineDiff(path, string(want), "output", out))
			}
		})
	}
}

// The JSON of estimate carries the fields programs rely on, with bytes as
// integers, and they are consistent with each other.
func TestEstimateJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "mlp", "--batch", "32", "--gpu", "t4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"param_count", "parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "activations_bytes",
		"batch_data_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "gpu_capacity_bytes", "fits"} {
		if _, ok := m[k]; !ok {
			t.Errorf("missing %q", k)
		}
	}
	// The seed MLP's figures, worked out in train/sim_test.go.
	const params = 3962890
	if m["param_count"].(float64) != params || m["parameters_bytes"].(float64) != 4*params || m["optimizer_state_bytes"].(float64) != 8*params {
		t.Errorf("param figures: %v %v %v", m["param_count"], m["parameters_bytes"], m["optimizer_state_bytes"])
	}
	if m["activations_bytes"].(float64) != 525572 {
		t.Errorf("activations_bytes = %v, want 525572", m["activations_bytes"])
	}
	pa, pr, dt := m["peak_allocated_bytes"].(float64), m["peak_reserved_bytes"].(float64), m["device_total_bytes"].(float64)
	if !(pa <= pr && pr < dt) || m["fits"] != true {
		t.Errorf("peak allocated %v, reserved %v, device total %v, fits %v", pa, pr, dt, m["fits"])
	}
	out, _, code = run("maxbatch", "resnet18", "--gpu", "t4", "--json")
	if code != 0 || !strings.Contains(out, `"max_batch"`) {
		t.Errorf("maxbatch --json: exit %d, %s", code, out)
	}
}

// Bad input gets a clear message and a non-zero exit, never a panic.
func TestBadInput(t *testing.T) {
	t.Parallel()
	gen := func(more ...string) []string {
		return append([]string{"estimate", "Llama-3.2-1B", "--layers", "2", "--mode", "generate"}, more...)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"estimate", "resnet5O"}, 2, `did you mean "resnet50"`},
		{[]string{"estimate", "mlp", "--gpu", "h1OO"}, 2, "unknown gpu"},
		{[]string{"estimate", "mlp", "--batch", "0"}, 2, "not a positive integer"},
		{[]string{"estimate", "mlp", "--batch", "-3"}, 2, "not a positive integer"},
		{[]string{"estimate", "mlp", "--precision", "fp8"}, 2, "unknown precision"},
		{[]string{"estimate", "mlp", "--optimizer", "lion"}, 2, "unknown optimizer"},
		{[]string{"estimate", "mlp", "--alloc-conf", "max_split_size:64"}, 2, "max_split_size_mb"},
		{[]string{"estimate", "mlp", "--torch", "0.4"}, 2, "no runtime profile"},
		{[]string{"estimate"}, 2, "one model"},
		{[]string{"estimat", "mlp"}, 2, `did you mean estimate`},
		// vgg16's 138M float32 parameters with Adam's two states and the
		// gradients hold 2.06 GiB before any activation: not on 1 GiB
		{[]string{"estimate", "vgg16", "--batch", "1", "--gpu", "1GiB", "--context", "0"}, 1, "even at batch 1"},
		// a bare number is bytes, and no GPU is that small
		{[]string{"estimate", "mlp", "--gpu", "80"}, 2, "at least 1 GiB"},
		{[]string{"estimate", "mlp", "--gpu", "24GB", "--like", "h100"}, 2, "did you mean"},
		{[]string{"estimate", "mlp", "--gpu", "t4", "--like", "l4"}, 2, "--like applies to a size"},
		{[]string{"estimate", "mlp", "--foreach", "--fused"}, 2, "exclude each other"},
		{[]string{"maxbatch", "resnet18", "--solve", "layers"}, 1, "cannot vary"},
		{[]string{"maxbatch", "vgg16", "--gpu", "1GiB", "--context", "0"}, 1, "does not fit"},
		{[]string{"estimate", "no/such/file.yaml"}, 1, "no/such/file.yaml"},
		{[]string{"estimate", "mlp", "--checkpoint", "sometimes"}, 2, "unknown checkpointing policy"},
		{[]string{"estimate", "mlp", "--loop-overhead", "-2ms"}, 2, "--loop-overhead -2ms: want a duration from 0 to 1m"},
		{[]string{"estimate", "mlp", "--loop-overhead", "8"}, 2, "invalid value"},
		{[]string{"estimate", "mlp", "--checkpointing", "--checkpoint", "every-2"}, 2, "exclude each other"},
		{[]string{"plan", "mlp", "--levers", "accumulate,precisoin"}, 2, "did you mean precision"},
		{[]string{"plan", "mlp", "--global-batch", "8", "--min-micro-batch", "16"}, 2, "global batch of 8"},
		{[]string{"plan", "mlp", "--global-batch", "-8"}, 2, "must be positive"},
		{[]string{"plan", "mlp", "--margin", "120%"}, 2, "--margin"},
		// without the levers that change what is trained: QLoRA fits it
		{[]string{"plan", "Llama-3-70B", "--gpu", "h100-80gb", "--global-batch", "8", "--levers", "accumulate,precision,checkpoint,optimizer,allocator"}, 1, "several GPUs that shard"},
		{[]string{"maxbatch", "mlp", "--objective", "speed"}, 2, "want memory or throughput"},
		{[]string{"maxbatch", "mlp", "--solve", "layers", "--objective", "throughput"}, 2, "answers for the batch"},
		{[]string{"estimate", "mlp", "--quant-via", "fabrik"}, 2, "want transformers, fabric or torchao"},
		{[]string{"estimate", "mlp", "--quant-via", "fabric"}, 2, "--quant-via needs --quant"},
		{[]string{"estimate", "mlp", "--lora-impl", "litgpt"}, 2, "need --lora R"},
		{[]string{"estimate", "mlp", "--lora", "2", "--lora-targets", "linear", "--quant", "fp4", "--quant-via", "torchao"}, 2, "torchao's NF4Tensor"},
		{[]string{"estimate", "mlp", "--lora", "2", "--lora-targets", "linear", "--quant", "nf4", "--quant-via", "torchao", "--bnb-version", "0.42"}, 2, "--bnb-version is bitsandbytes'"},
		{[]string{"estimate", "mlp", "--lora", "2", "--lora-impl", "hf"}, 2, "want peft, litgpt or torchtune"},
		{[]string{"estimate", "resnet18", "--transformers", "4.39"}, 2, "--transformers applies to models run by transformers' modeling code"},
		{[]string{"estimate", "resnet18", "--loss-from-logits"}, 2, "--loss-from-logits applies to language models run by transformers' modeling code"},
		{[]string{"estimate", "gpt2", "--loss-from-logits", "--mode", "eval"}, 2, "--loss-from-logits is for training"},
		{[]string{"estimate", "gpt2", "--transformers", "4.30"}, 2, "oldest release batchfit follows is 4.36"},
		{[]string{"estimate", "gpt2", "--transformers", "7.1"}, 2, "newer than any release"},
		{[]string{"estimate", "gpt2", "--transformers", "four"}, 2, "--transformers: transformers version"},
		{[]string{"estimate", "gpt2", "--transformers", "4.40"}, 1, "gpt2 is followed from 4.44"},
		{[]string{"estimate", "mlp", "--mode", "eval", "--keep-output"}, 2, "--keep-output is for training"},
		// inference (--mode)
		{[]string{"estimate", "mlp", "--new-tokens", "5"}, 2, "--new-tokens is for --mode generate"},
		{[]string{"estimate", "mlp", "--mode", "eval", "--beams", "2"}, 2, "--beams is for --mode generate"},
		{[]string{"estimate", "mlp", "--mode", "generat"}, 2, "did you mean generate"},
		{[]string{"estimate", "mlp", "--mode", "infer"}, 2, "want train, eval or generate"},
		{gen(), 2, "needs --new-tokens"},
		{gen("--new-tokens", "4", "--cache", "paged"), 2, "want dynamic or static"},
		{gen("--new-tokens", "4", "--beams", "0"), 2, "at least 1"},
		{gen("--new-tokens", "-4"), 2, "needs --new-tokens"},
		{gen("--new-tokens", "4", "--prompt", "8", "--seq", "16"), 2, "disagree"},
		{[]string{"estimate", "mlp", "--mode", "eval", "--accumulate", "2"}, 2, "for training"},
		{[]string{"estimate", "mlp", "--mode", "eval", "--checkpoint", "full"}, 2, "for training"},
		{[]string{"estimate", "resnet18", "--mode", "generate", "--new-tokens", "4"}, 1, "has no key/value cache"},
		{[]string{"estimate", "gpt2", "--mode", "generate", "--new-tokens", "4"}, 1, "llama-style decoders"},
		{[]string{"estimate", "mlp", "--mode", "eval", "--batch", "4,8"}, 1, "inference takes one batch size"},
		{[]string{"plan", "mlp", "--mode", "eval"}, 2, "for estimate, sweep and maxbatch"},
		{[]string{"maxbatch", "mlp", "--mode", "eval", "--objective", "throughput"}, 2, "ranks training steps"},
	}
	for _, c := range cases {
		_, errs, code := run(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
		if strings.Contains(errs, "goroutine") || strings.Contains(errs, "panic") {
			t.Errorf("%v: stack trace in output: %s", c.args, errs)
		}
	}
}

// The seed's OOM message: 8.74 GiB requested, 6.32 GiB free and 8.86 −
// 8.84 = 0.02 GiB cached, so the request exceeds what there was.
func TestOOMCommand(t *testing.T) {
	msg := "Traceback (most recent call last):\n  File \"train.py\", line 9\nRuntimeError: CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)\n"
	t.Parallel()
	var outb, errb bytes.Buffer
	code := RunWith([]string{"oom", "--json"}, &outb, &errb, Options{Stdin: strings.NewReader(msg)})
	out, errs := outb.String(), errb.String()
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var ex map[string]any
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatal(err)
	}
	if ex["cached_could_serve"] != false || ex["deficit_bytes"].(float64) <= 0 {
		t.Errorf("explanation: cached_could_serve %v, deficit %v", ex["cached_could_serve"], ex["deficit_bytes"])
	}
	_, errs, code = run("oom", "everything is fine")
	if code != 1 || !strings.Contains(errs, "out of memory") {
		t.Errorf("non-OOM text: exit %d, %q", code, errs)
	}
	_, errs, code = run("snapshot", "testdata/estimate_mlp.golden")
	if code != 1 || !strings.Contains(errs, "estimate_mlp.golden") {
		t.Errorf("non-pickle snapshot: exit %d, %q", code, errs)
	}
}

// validate runs every case of a measure.py file; the figures here are set
// by hand to exercise the command, they are not measurements.
func TestValidateCommand(t *testing.T) {
	t.Parallel()
	doc := `{"environment": {"gpu_name": "test GPU", "gpu_total_memory": 17179869184, "gpu_capability": "8.0", "torch": "2.5.0"},
 "results": [
  {"id": "mlp-b64", "status": "ok", "case": {"model": "mlp", "batch": 64, "optimizer": "sgd", "steps": 3},
   "max_memory_allocated": 50000000, "max_memory_reserved": 60000000, "context": {"context_bytes": 400000000}},
  {"id": "vgg-huge", "status": "oom", "case": {"model": "vgg16", "batch": 4096, "steps": 3}}]}`
	path := filepath.Join(t.TempDir(), "m.json")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, code := run("validate", path)
	if code != 0 || !strings.Contains(out, "mlp-b64") || !strings.Contains(out, "predicted: does not fit") {
		t.Errorf("exit %d, %s\n%s", code, errs, out)
	}
	if _, errs, code := run("validate", "testdata/gpus.golden"); code != 1 || !strings.Contains(errs, "gpus.golden") {
		t.Errorf("bad file: exit %d, %s", code, errs)
	}
}

// A Hugging Face config.json is a model like any other: GPT-2's public
// config gives GPT2LMHeadModel's 124,439,808 parameters.
func TestHFConfigSource(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "../../hf/testdata/configs/gpt2/config.json", "--batch", "2", "--seq", "128", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m["param_count"].(float64) != 124439808 {
		t.Errorf("param_count %v", m["param_count"])
	}
	if _, errs, code := run("estimate", filepath.Join(t.TempDir(), "config.json")); code != 1 || !strings.Contains(errs, "config.json") {
		t.Errorf("missing config: exit %d, %s", code, errs)
	}
}

// An ONNX export is a model like any other: resnet18 exported by
// validation/onnx/export.py has torchvision's 11,689,512 parameters.
func TestONNXSource(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "../../testdata/onnx/resnet18.onnx", "--batch", "2", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m["param_count"].(float64) != 11689512 {
		t.Errorf("param_count %v", m["param_count"])
	}
	bad := filepath.Join(t.TempDir(), "bad.onnx")
	os.WriteFile(bad, []byte("not a protobuf"), 0o644)
	if _, errs, code := run("estimate", bad); code != 1 || !strings.Contains(errs, "bad.onnx") {
		t.Errorf("bad file: exit %d, %s", code, errs)
	}
}

// estimate, sweep and maxbatch work on every input form: a zoo name, a
// YAML spec, a Hugging Face config and an ONNX file. The answers must be
// consistent: maxbatch's answer fits and the next batch does not, and the
// sweep's peaks rise with the batch.
// tinyLlamaDir writes a Hugging Face model directory, as save_pretrained
// leaves it, for a two-layer Llama: config.json and model.safetensors in
// bfloat16 (zeros: only the header is read). Its parameters: embed_tokens
// and lm_head 64·32 each, the final norm 32, and per layer q_proj and
// o_proj 32·32, k_proj and v_proj 16·32 (2 kv heads of 8), gate_proj,
// up_proj and down_proj 32·64, two norms of 32: 22,688.
func tinyLlamaDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-llama")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64,
	"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
	"num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
	"tie_word_embeddings": false, "torch_dtype": "bfloat16"}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	type tensor struct {
		name  string
		shape []int64
	}
	ts := []tensor{{"model.embed_tokens.weight", []int64{64, 32}}}
	for i := 0; i < 2; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts, tensor{p + "self_attn.q_proj.weight", []int64{32, 32}}, tensor{p + "self_attn.k_proj.weight", []int64{16, 32}},
			tensor{p + "self_attn.v_proj.weight", []int64{16, 32}}, tensor{p + "self_attn.o_proj.weight", []int64{32, 32}},
			tensor{p + "mlp.gate_proj.weight", []int64{64, 32}}, tensor{p + "mlp.up_proj.weight", []int64{64, 32}},
			tensor{p + "mlp.down_proj.weight", []int64{32, 64}},
			tensor{p + "input_layernorm.weight", []int64{32}}, tensor{p + "post_attention_layernorm.weight", []int64{32}})
	}
	ts = append(ts, tensor{"model.norm.weight", []int64{32}}, tensor{"lm_head.weight", []int64{64, 32}})
	hdr := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, x := range ts {
		n := int64(2)
		for _, d := range x.shape {
			n *= d
		}
		hdr[x.name] = map[string]any{"dtype": "BF16", "shape": x.shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(hdr)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	file = append(append(file, h...), make([]byte, off)...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), file, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// estimate, sweep and maxbatch take every input form: a zoo name, a YAML
// spec, a Hugging Face config.json or model directory, an ONNX file.
func TestInputForms(t *testing.T) {
	t.Parallel()
	forms := []struct{ name, model string }{
		{"zoo", "simpleconv"},
		{"spec", "../../examples/simpleconv.yaml"},
		{"hf", "../../hf/testdata/configs/bert-base-uncased/config.json"},
		{"dir", tinyLlamaDir(t)},
		{"onnx", "../../testdata/onnx/simpleconv.onnx"},
	}
	maxes := map[string]int64{}
	for _, f := range forms {
		args := []string{"--gpu", "4GiB", "--context", "0"}
		switch f.name {
		case "hf":
			args = append(args, "--seq", "64", "--gpu", "24GiB")
		case "dir":
			args = append(args, "--seq", "64")
		}
		out, errs, code := run(append([]string{"estimate", f.model, "--batch", "2", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%s estimate: exit %d: %s", f.name, code, errs)
		}
		var est report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &est); err != nil || !est.Fits || est.ParamCount <= 0 {
			t.Fatalf("%s estimate: %v %s", f.name, err, out)
		}
		if f.name == "dir" {
			if est.ParamCount != 22688 {
				t.Errorf("dir estimate: %d parameters, want 22,688", est.ParamCount)
			}
			if !strings.Contains(est.SourceNote, "stored as BF16") {
				t.Errorf("dir estimate: note %q does not report the stored dtype", est.SourceNote)
			}
		}
		out, errs, code = run(append([]string{"sweep", f.model, "--batch", "1,2,4", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%s sweep: exit %d: %s", f.name, code, errs)
		}
		var pts []report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &pts); err != nil || len(pts) != 3 {
			t.Fatalf("%s sweep: %v %s", f.name, err, out)
		}
		for i := 1; i < len(pts); i++ {
			if pts[i].ActivationsBytes <= pts[i-1].ActivationsBytes {
				t.Errorf("%s sweep: activations do not rise: %d then %d", f.name, pts[i-1].ActivationsBytes, pts[i].ActivationsBytes)
			}
		}
		out, errs, code = run(append([]string{"maxbatch", f.model, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%s maxbatch: exit %d: %s", f.name, code, errs)
		}
		var mb report.MaxBatchJSON
		if err := json.Unmarshal([]byte(out), &mb); err != nil {
			t.Fatal(err)
		}
		maxes[f.name] = mb.MaxBatch
		if mb.MaxBatch < 1 || mb.AtMax == nil || !mb.AtMax.Fits || mb.AtNext == nil || mb.AtNext.Fits || mb.AtNext.Batch != mb.MaxBatch+1 {
			t.Errorf("%s maxbatch: %d, at max %+v, next %+v", f.name, mb.MaxBatch, mb.AtMax != nil && mb.AtMax.Fits, mb.AtNext)
		}
	}
	// The seed CNN from the zoo, its YAML spec and its ONNX export are one
	// graph: one answer.
	if maxes["zoo"] != maxes["spec"] || maxes["zoo"] != maxes["onnx"] {
		t.Errorf("simpleconv max batch: zoo %d, spec %d, onnx %d", maxes["zoo"], maxes["spec"], maxes["onnx"])
	}
}

// --model names the model as the positional argument does; naming two is a
// usage error.
func TestModelFlag(t *testing.T) {
	t.Parallel()
	pos, _, code := run("estimate", "../../testdata/onnx/simpleconv.onnx", "--batch", "4", "--gpu", "t4", "--json")
	if code != 0 {
		t.Fatalf("positional: exit %d", code)
	}
	flagged, errs, code := run("estimate", "--model", "../../testdata/onnx/simpleconv.onnx", "--batch", "4", "--gpu", "t4", "--json")
	if code != 0 {
		t.Fatalf("--model: exit %d: %s", code, errs)
	}
	if pos != flagged {
		t.Errorf("--model and the positional argument differ:\n%s\n%s", pos, flagged)
	}
	if _, errs, code := run("estimate", "--model", "mlp", "simpleconv"); code != 2 || !strings.Contains(errs, "got 2") {
		t.Errorf("two models: exit %d, %q", code, errs)
	}
}

// estimate, sweep and maxbatch answer for every zoo member through the
// command line (sequence models at a short sequence, to keep it quick):
// estimate's figures are the ones sweep reports for the same batch, and
// maxbatch's answer fits with the next batch not fitting.
func TestEveryZooModel(t *testing.T) {
	out, _, code := run("models", "--json")
	if code != 0 {
		t.Fatal("models failed")
	}
	var zoo []struct {
		Name       string `json:"name"`
		ParamCount int64  `json:"param_count"`
	}
	if err := json.Unmarshal([]byte(out), &zoo); err != nil || len(zoo) == 0 {
		t.Fatalf("models --json: %v", err)
	}
	for _, m := range zoo {
		m := m
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			args := []string{m.Name, "--gpu", "h100-80gb", "--precision", "bf16-mixed", "--steps", "2", "--json"}
			if zm, err := models.Lookup(m.Name); err == nil && slices.Contains(zm.Dims, models.DimSeq) {
				args = append(args, "--seq", "32") // a vision model has none: --seq is refused
			}
			out, errs, code := run(append([]string{"estimate", "--batch", "2"}, args...)...)
			if code != 0 && code != 1 {
				t.Fatalf("estimate: exit %d: %s", code, errs)
			}
			var est report.EstimateJSON
			if err := json.Unmarshal([]byte(out), &est); err != nil || est.ParamCount != m.ParamCount {
				t.Fatalf("estimate: %v, %d parameters, models says %d", err, est.ParamCount, m.ParamCount)
			}
			// exit 1 answers that it does not fit, and only that
			if (code == 1) == est.Fits {
				t.Fatalf("estimate: exit %d, fits %v: %s", code, est.Fits, errs)
			}
			// the same request: sweep's default margin runs it on a smaller device
			out, errs, code = run(append([]string{"sweep", "--batch", "1,2", "--margin", "0"}, args...)...)
			// exit 1 answers that batch 1 does not fit, which a batch 2 that
			// does not fit allows
			if code != 0 && (code != 1 || est.Fits) {
				t.Fatalf("sweep: exit %d: %s", code, errs)
			}
			var pts []report.EstimateJSON
			if err := json.Unmarshal([]byte(out), &pts); err != nil || len(pts) != 2 || pts[1].PeakAllocatedBytes != est.PeakAllocatedBytes {
				t.Fatalf("sweep: %v, %d points, batch 2 does not repeat estimate's peak %d", err, len(pts), est.PeakAllocatedBytes)
			}
			out, errs, code = run(append([]string{"maxbatch"}, args...)...)
			if code != 0 && code != 1 {
				t.Fatalf("maxbatch: exit %d: %s", code, errs)
			}
			var mb report.MaxBatchJSON
			if err := json.Unmarshal([]byte(out), &mb); err != nil {
				t.Fatalf("maxbatch: %v: %s", err, out)
			}
			if mb.MaxBatch > 0 && (mb.AtMax == nil || !mb.AtMax.Fits || mb.AtNext == nil || mb.AtNext.Fits) {
				t.Errorf("maxbatch %d: the answer does not fit or the next one does", mb.MaxBatch)
			}
		})
	}
}

// parseMargin never panics and never returns a margin outside [0, capacity).
func FuzzParseMargin(f *testing.F) {
	for _, s := range []string{"5%", "0%", "99.9%", "2GiB", "100%", "-1%", "1e400%", "80GB", "x", "band"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		const capacity = 80 << 30
		m, err := parseMargin(s, capacity, predict.SafetyBand)
		if err == nil && (m < 0 || m >= capacity) {
			t.Errorf("%q: margin %d outside the device", s, m)
		}
	})
}

// plan's current setup is the job as given: --batch is its micro-batch,
// the accumulation what makes --global-batch from it when --accumulate is
// not given; the global batch counts every rank's samples.
func TestPlanCurrentSetup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--global-batch", "64", "--batch", "8"}, 0, []string{"global batch 64 ·", "current: micro-batch 8 × 8,"}},
		{[]string{"--batch", "8", "--gpus", "8"}, 0, []string{"global batch 64 (8 a rank × 8 GPUs)", "current: micro-batch 8 × 1, ddp"}},
		{[]string{"--global-batch", "64", "--batch", "4", "--gpus", "8"}, 0, []string{"global batch 64 (8 a rank × 8 GPUs)", "current: micro-batch 4 × 2, ddp"}},
		{[]string{"--global-batch", "60", "--batch", "8"}, 2, []string{"not a multiple of --batch 8"}},
		{[]string{"--global-batch", "64", "--batch", "8", "--accumulate", "2"}, 2, []string{"makes 16 samples a step, not the global batch 64"}},
	} {
		args := append([]string{"plan", "gpt2", "--seq", "256", "--gpu", "a10g", "--top", "1"}, c.args...)
		out, errs, code := run(args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d: %s", c.args, code, c.code, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(out+errs, w) {
				t.Errorf("%v: no %q in\n%s%s", c.args, w, out, errs)
			}
		}
	}
}

// On several GPUs the largest batch is a rank's micro-batch, and the
// answer says so with the samples over all ranks.
func TestMaxBatchSaysARank(t *testing.T) {
	t.Parallel()
	out, errs, code := run("maxbatch", "gpt2", "--gpus", "8", "--gpu", "a10g", "--seq", "128", "--limit", "4")
	if code != 0 || !strings.Contains(out, ": 4 a rank (32 samples a micro-batch over the 8 ranks) (the search limit)") {
		t.Errorf("exit %d: %s%s", code, out, errs)
	}
}
