package hf

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

func TestParseQuantizationConfig(t *testing.T) {
	tests := []struct {
		name string
		qc   any
		want graph.Quant
	}{
		{"bnb nf4 double bf16", map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4",
			"bnb_4bit_use_double_quant": true, "bnb_4bit_compute_dtype": "bfloat16", "llm_int8_skip_modules": nil},
			graph.Quant{Format: graph.NF4, Bits: 4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16, Prequantized: true}},
		// BitsAndBytesConfig's defaults: fp4, no double quantization,
		// float32 compute; configs from before quant_method
		{"bnb defaults", map[string]any{"load_in_4bit": true},
			graph.Quant{Format: graph.FP4, Bits: 4, BlockSize: 64, Compute: graph.F32, Prequantized: true}},
		{"bnb int8 skip", map[string]any{"quant_method": "bitsandbytes", "load_in_8bit": true, "llm_int8_skip_modules": []any{"mlp"}},
			graph.Quant{Format: graph.Int8, Bits: 8, Compute: graph.F16, Prequantized: true, Skip: []string{"mlp"}}},
		{"gptq", map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": true},
			graph.Quant{Format: graph.GPTQ, Bits: 4, GroupSize: 128, DescAct: true, Compute: graph.F16, Prequantized: true}},
		{"gptq per row", map[string]any{"quant_method": "gptq", "bits": 8, "group_size": -1},
			graph.Quant{Format: graph.GPTQ, Bits: 8, GroupSize: -1, Compute: graph.F16, Prequantized: true}},
		{"awq", map[string]any{"quant_method": "awq", "bits": 4, "group_size": 128, "version": "GEMM", "zero_point": true},
			graph.Quant{Format: graph.AWQ, Bits: 4, GroupSize: 128, Compute: graph.F16, Prequantized: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(mustJSON(t, with(tinyLlama(), "quantization_config", tc.qc)), cfgName)
			if err != nil {
				t.Fatal(err)
			}
			if c.Quant == nil {
				t.Fatal("no Quant")
			}
			if got := fmt.Sprintf("%+v", *c.Quant); got != fmt.Sprintf("%+v", tc.want) {
				t.Errorf("got %s, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseQuantizationConfigErrors(t *testing.T) {
	tests := []struct {
		qc    any
		field string
		msg   string
	}{
		{"nf4", "quantization_config", "want an object"},
		{map[string]any{"bits": 4}, "quantization_config.quant_method", "missing (supported: awq, bitsandbytes, gptq)"},
		{map[string]any{"quant_method": "gtpq", "bits": 4}, "quantization_config.quant_method", `did you mean "gptq"?`},
		{map[string]any{"quant_method": 4}, "quantization_config.quant_method", "want a string"},
		{map[string]any{"quant_method": "bitsandbytes"}, "quantization_config.load_in_4bit", "neither load_in_4bit nor load_in_8bit"},
		{map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": true}, "quantization_config.load_in_4bit", "both set"},
		{map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": "yes"}, "quantization_config.load_in_4bit", "want true or false"},
		{map[string]any{"load_in_4bit": true, "bnb_4bit_quant_type": "nf5"}, "quantization_config.bnb_4bit_quant_type", `want "nf4" or "fp4"`},
		{map[string]any{"load_in_4bit": true, "bnb_4bit_compute_dtype": "int8"}, "quantization_config.bnb_4bit_compute_dtype", "want float32, float16 or bfloat16"},
		{map[string]any{"load_in_8bit": true, "llm_int8_skip_modules": "lm_head"}, "quantization_config.llm_int8_skip_modules", "want an array of strings"},
		{map[string]any{"quant_method": "gptq"}, "quantization_config.bits", "missing"},
		{map[string]any{"quant_method": "gptq", "bits": 5}, "quantization_config.bits", "bits must be 2, 3, 4 or 8"},
		{map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 0}, "quantization_config.group_size", "want a positive group or -1"},
		{map[string]any{"quant_method": "awq", "bits": 8}, "quantization_config.bits", "4-bit codes only"},
		{map[string]any{"quant_method": "awq", "version": "gemv"}, "quantization_config.version", "only the GEMM layout"},
	}
	for _, tc := range tests {
		_, err := ParseConfig(mustJSON(t, with(tinyLlama(), "quantization_config", tc.qc)), cfgName)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%v: error %v, want a FieldError", tc.qc, err)
			continue
		}
		if fe.File != cfgName || fe.Field != tc.field || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("%v: got %s / %s / %q, want %s / %s / %q", tc.qc, fe.File, fe.Field, fe.Msg, cfgName, tc.field, tc.msg)
		}
	}
}

// bnb4Tensors is tinyLlama's checkpoint as transformers saves it after
// loading in 4 bits with double quantization (Linear4bit's
// _save_to_state_dict): for each of the 14 Linear weights of n elements,
// weight uint8 [n/2, 1], weight.absmax uint8 [n/64], weight.quant_map
// float32 [16], weight.nested_absmax float32 [ceil(n/64/256)],
// weight.nested_quant_map float32 [256] and the packed quant_state JSON
// (uint8, its length immaterial: 100 here); the embeddings, norms and
// lm_head stay bf16.
func bnb4Tensors() []st {
	var ts []st
	for _, t := range tinyLlamaTensors("BF16") {
		if strings.HasSuffix(t.name, "inv_freq") {
			continue
		}
		if !strings.Contains(t.name, "_proj.") {
			ts = append(ts, t)
			continue
		}
		n := t.shape[0] * t.shape[1]
		blocks := n / 64
		ts = append(ts,
			st{t.name, "U8", []int64{n / 2, 1}},
			st{t.name + ".absmax", "U8", []int64{blocks}},
			st{t.name + ".quant_map", "F32", []int64{16}},
			st{t.name + ".nested_absmax", "F32", []int64{(blocks + 255) / 256}},
			st{t.name + ".nested_quant_map", "F32", []int64{256}},
			st{t.name + ".quant_state.bitsandbytes__nf4", "U8", []int64{100}})
	}
	return ts
}

var bnb4Config = map[string]any{"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type": "nf4",
	"bnb_4bit_use_double_quant": true, "bnb_4bit_compute_dtype": "bfloat16"}

// A 4-bit checkpoint's tensors agree with its config's format. tinyLlama
// has per layer q_proj and o_proj [64, 64] (n = 4096), k_proj and v_proj
// [32, 64] (2048), gate_proj, up_proj and down_proj (8192). Stored per
// weight: n/2 codes + 64 (quant_map) + n/64 uint8 absmax + 4 (one nested
// absmax) + 1024 (nested quant_map): 3204, 2148 and 5316 bytes; per layer
// 2·3204 + 2·2148 + 3·5316 = 26652, two layers 53304, plus 14 quant_state
// tensors of 100 bytes. The bf16 rest: embeddings and lm_head 2·256·64·2 =
// 65536, norms (2·2 + 1)·64·2 = 640. The simulator's pieces are the same
// plus bitsandbytes' 0-d offset per weight (14·4 = 56), which the
// checkpoint keeps in the JSON.
func TestOpenQuantizedCheckpoint(t *testing.T) {
	m, err := Open(modelDir(t, with(tinyLlama(), "quantization_config", bnb4Config), bnb4Tensors()))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(53304 + 1400 + 65536 + 640); m.StoredBytes != want {
		t.Errorf("stored %d bytes, want %d", m.StoredBytes, want)
	}
	if !strings.Contains(m.Note(), "nf4 (block 64, double quantization, compute bfloat16)") {
		t.Errorf("note %q", m.Note())
	}
	g, err := m.Build(models.Config{Batch: 1, Adapters: &graph.Adapters{Rank: 4, Alpha: 8, Targets: []string{"q_proj"}}})
	if err != nil {
		t.Fatal(err)
	}
	var stored, n int64
	for _, id := range g.Params() {
		if p := g.Tensor(id); p.Quant != nil {
			stored += p.Quant.StoredBytes(p.Shape[0], p.Shape[1])
			n++
		}
	}
	if n != 14 || stored != 53304+56 {
		t.Errorf("%d quantized weights storing %d bytes, want 14 and %d", n, stored, 53304+56)
	}
}

// Sharded, the same checkpoint gives the same figures, and a wrong piece
// is named with the shard holding it.
func TestOpenQuantizedSharded(t *testing.T) {
	ts := bnb4Tensors()
	third := len(ts) / 3
	m, err := Open(shardedDir(t, with(tinyLlama(), "quantization_config", bnb4Config), ts[:third], ts[third:2*third], ts[2*third:]))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(53304 + 1400 + 65536 + 640); len(m.Checkpoint.Files) != 3 || m.StoredBytes != want {
		t.Errorf("%d files, %d bytes; want 3 and %d", len(m.Checkpoint.Files), m.StoredBytes, want)
	}
	last := ts[len(ts)-1-6] // a layer-1 down_proj piece, in the third shard
	for i := range ts {
		if ts[i].name == last.name {
			ts[i].shape = append([]int64{2}, ts[i].shape...)
		}
	}
	_, err = Open(shardedDir(t, with(tinyLlama(), "quantization_config", bnb4Config), ts[:third], ts[third:2*third], ts[2*third:]))
	if err == nil || !strings.Contains(err.Error(), "model-00003-of-00003.safetensors: "+last.name+" holds") {
		t.Errorf("error %v, want one naming %s in the third shard", err, last.name)
	}
}

func TestOpenQuantizedDisagrees(t *testing.T) {
	// double quantization stores a uint8 absmax: a float32 one is 4·64
	// bytes where the format has 64
	ts := bnb4Tensors()
	for i := range ts {
		if ts[i].name == "model.layers.0.self_attn.q_proj.weight.absmax" {
			ts[i].dtype = "F32"
		}
	}
	_, err := Open(modelDir(t, with(tinyLlama(), "quantization_config", bnb4Config), ts))
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.self_attn.q_proj.weight.absmax holds 256 bytes") || !strings.Contains(err.Error(), "stores 64") {
		t.Errorf("error %v", err)
	}
	// a GPTQ config over the 4-bit checkpoint: no qweight, which for the
	// [64, 64] q_proj is [64·4/32 = 8, 64] int32 = 2048 bytes
	gptq := map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128}
	_, err = Open(modelDir(t, with(tinyLlama(), "quantization_config", gptq), bnb4Tensors()))
	if err == nil || !strings.Contains(err.Error(), "has no model.layers.0.self_attn.q_proj.qweight (gptq stores 2048 bytes there") {
		t.Errorf("error %v", err)
	}
}

// A GPTQ checkpoint (auto-gptq's QuantLinear, 4 bits, group 128): for a
// [out, in] weight qweight int32 [in/8, out], qzeros int32 [ceil(in/128),
// out/8], scales fp16 [ceil(in/128), out], g_idx int32 [in].
func TestOpenGPTQCheckpoint(t *testing.T) {
	var ts []st
	for _, t := range tinyLlamaTensors("F16") {
		if !strings.Contains(t.name, "_proj.") {
			ts = append(ts, t)
			continue
		}
		out, in := t.shape[0], t.shape[1]
		mod := strings.TrimSuffix(t.name, ".weight")
		g := (in + 127) / 128
		ts = append(ts, st{mod + ".qweight", "I32", []int64{in / 8, out}}, st{mod + ".qzeros", "I32", []int64{g, out / 8}},
			st{mod + ".scales", "F16", []int64{g, out}}, st{mod + ".g_idx", "I32", []int64{in}})
	}
	cfg := with(tinyLlama(), "quantization_config", map[string]any{"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": false})
	if _, err := Open(modelDir(t, cfg, ts)); err != nil {
		t.Fatal(err)
	}
	for i := range ts {
		if strings.HasSuffix(ts[i].name, "layers.1.mlp.down_proj.scales") {
			ts[i].shape = []int64{2, 64} // as if group 64: in = 128 has two groups
		}
	}
	_, err := Open(modelDir(t, cfg, ts))
	if err == nil || !strings.Contains(err.Error(), "down_proj.scales holds 256 bytes (F16 [2, 64]), but gptq 4-bit (group 128) stores 128") {
		t.Errorf("error %v", err)
	}
}

// ParseConfig never panics on a quantization_config, and one it accepts
// always passes graph.Quant.Check.
func FuzzParseQuantizationConfig(f *testing.F) {
	for _, s := range []string{`{"load_in_4bit": true}`, `{"quant_method": "gptq", "bits": 4, "group_size": -1}`,
		`{"quant_method": "awq", "bits": 4, "version": "gemm"}`, `{"quant_method": "bitsandbytes", "load_in_8bit": true, "llm_int8_skip_modules": ["x"]}`,
		`[]`, `null`, `{"quant_method": null}`} {
		f.Add(s)
	}
	base := string(mustJSON(f, tinyLlama()))
	f.Fuzz(func(t *testing.T, qc string) {
		data := base[:len(base)-1] + `,"quantization_config":` + qc + `}`
		c, err := ParseConfig([]byte(data), cfgName)
		if err != nil || c.Quant == nil {
			return
		}
		if err := c.Quant.Check(); err != nil {
			t.Errorf("accepted %s: %v", qc, err)
		}
	})
}
