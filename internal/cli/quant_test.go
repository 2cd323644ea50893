package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

func TestQuantFlags(t *testing.T) {
	t.Parallel()
	lora := []string{"--lora", "4", "--lora-targets", "linear"}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--quant", "nf4"}, 2, "never trained: fine-tune with adapters"},
		{append([]string{"--quant", "nf5"}, lora...), 2, `did you mean "nf4"`},
		{[]string{"--double-quant"}, 2, "need --quant nf4 or fp4"},
		{[]string{"--quant-blocksize", "128"}, 2, "need --quant nf4 or fp4"},
		{append([]string{"--quant", "int8", "--quant-compute", "bf16"}, lora...), 2, "not int8's"},
		{append([]string{"--quant", "awq"}, lora...), 2, "quantization_config"},
		{append([]string{"--quant", "nf4", "--quant-blocksize", "100"}, lora...), 2, "block size must be"},
		{append([]string{"--quant", "nf4", "--quant-compute", "fp64"}, lora...), 2, "want bf16, fp16 or fp32"},
	}
	for _, c := range cases {
		_, errs, code := run(append([]string{"estimate", "mlp", "--batch", "8"}, c.args...)...)
		if code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errs, c.code, c.want)
		}
	}
	// simpleconv builds its Linear without a quantizing builder
	if _, errs, code := run("estimate", "simpleconv", "--batch", "8", "--quant", "nf4", "--lora", "4", "--lora-targets", "fc"); code != 1 || !strings.Contains(errs, "no Linear weight of this model is stored nf4") {
		t.Errorf("simpleconv: exit %d, %s", code, errs)
	}
}

// The seed MLP (784 → 1024, 3 × 1024 → 1024, 1024 → 10) in NF4 with block
// 64 and no double quantization: per weight of n elements n/2 bytes of
// codes, n/64 float32 absmax and the 64-byte code:
// 802816/2 + 802816/64·4 + 64 = 451648; 3 × (524288 + 65536 + 64) =
// 1769664; 5120 + 640 + 64 = 5824; in all 2227136 bytes.
func TestQuantEstimateJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "mlp", "--batch", "8", "--quant", "nf4", "--lora", "4", "--lora-targets", "linear", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	if m["quantized_bytes"] != float64(2227136) || m["quantization"] != "nf4 (block 64, compute float32)" {
		t.Errorf("quantized_bytes %v, quantization %v", m["quantized_bytes"], m["quantization"])
	}
}

// A config.json with a quantization_config sets the format; --quant beside
// it is a conflict.
func TestQuantFromConfig(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../hf/testdata/configs/Llama-3.2-1B/config.json")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["quantization_config"] = map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false}
	dir := filepath.Join(t.TempDir(), "llama-gptq")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	out, errs, code := run("estimate", path, "--batch", "1", "--seq", "128", "--lora", "8", "--lora-targets", "q_proj,v_proj")
	if code != 0 || !strings.Contains(out, "quantized gptq 4-bit (group 128)") || !strings.Contains(out, "quantized Linear weights") {
		t.Errorf("exit %d, %s%s", code, errs, out)
	}
	if _, errs, code := run("estimate", path, "--batch", "1", "--quant", "nf4", "--lora", "8", "--lora-targets", "q_proj"); code != 2 || !strings.Contains(errs, "stores gptq 4-bit (group 128) weights (its quantization_config): drop --quant") {
		t.Errorf("conflict: exit %d, %s", code, errs)
	}
	if _, errs, code := run("estimate", path, "--batch", "1"); code != 2 || !strings.Contains(errs, "never trained") {
		t.Errorf("no adapters: exit %d, %s", code, errs)
	}
}

// --bnb-version picks bitsandbytes' 4-bit rule: before 0.43.2 every
// quantized layer also keeps its input, so the saved activations grow; the
// flag is bitsandbytes' 4-bit formats' alone, and a malformed release is a
// usage error.
func TestBnbVersion(t *testing.T) {
	t.Parallel()
	saved := func(extra ...string) int64 {
		args := append([]string{"estimate", "Llama-3.2-1B", "--seq", "64", "--layers", "2", "--quant", "nf4", "--lora", "4", "--lora-targets", "q_proj,v_proj",
			"--precision", "bf16-true", "--json"}, extra...)
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, errs)
		}
		var e report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatal(err)
		}
		return e.ActivationsBytes
	}
	now, old, boundary := saved(), saved("--bnb-version", "0.41.1"), saved("--bnb-version", "0.43.2")
	if old <= now || boundary != now {
		t.Errorf("saved activations: current %d, 0.41.1 %d, 0.43.2 %d; want 0.41.1 above the others", now, old, boundary)
	}
	for _, c := range [][]string{{"--bnb-version", "0.4x"}, {"--bnb-version", "1"}, {"--quant", "int8", "--bnb-version", "0.41.1"}} {
		args := append([]string{"estimate", "Llama-3.2-1B", "--seq", "64", "--lora", "4", "--lora-targets", "q_proj", "--quant", "nf4"}, c...)
		if _, errs, code := run(args...); code != 2 || !strings.Contains(errs, "--bnb-version") {
			t.Errorf("%v: exit %d, %q; want a usage error naming --bnb-version", c, code, errs)
		}
	}
}
