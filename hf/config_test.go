package hf

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
)

// tinyLlama is a 2-layer LlamaForCausalLM config: hidden 64, 4 heads of 16
// with 2 key/value heads, MLP 128, vocabulary 256, 128 positions.
func tinyLlama() map[string]any {
	return map[string]any{
		"architectures":           []any{"LlamaForCausalLM"},
		"model_type":              "llama",
		"vocab_size":              256,
		"hidden_size":             64,
		"intermediate_size":       128,
		"num_hidden_layers":       2,
		"num_attention_heads":     4,
		"num_key_value_heads":     2,
		"max_position_embeddings": 128,
		"rms_norm_eps":            1e-5,
		"tie_word_embeddings":     false,
		"torch_dtype":             "bfloat16",
	}
}

func tinyGPT2() map[string]any {
	return map[string]any{
		"model_type": "gpt2", "vocab_size": 100, "n_embd": 32, "n_layer": 2, "n_head": 4,
		"n_positions": 64, "n_inner": nil, "activation_function": "gelu_new",
		"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
	}
}

func tinyBERT(mt string) map[string]any {
	return map[string]any{
		"model_type": mt, "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 66,
		"type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
		"attention_probs_dropout_prob": 0.1, "pad_token_id": 1,
	}
}

func tinyT5() map[string]any {
	return map[string]any{
		"model_type": "t5", "vocab_size": 100, "d_model": 32, "d_kv": 8, "d_ff": 64,
		"num_layers": 2, "num_heads": 4, "relative_attention_num_buckets": 8,
		"feed_forward_proj": "relu", "dropout_rate": 0.1,
	}
}

func tinyNeoX() map[string]any {
	return map[string]any{
		"model_type": "gpt_neox", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 64,
		"rotary_pct": 0.25, "use_parallel_residual": true,
	}
}

func tinyOPT() map[string]any {
	return map[string]any{
		"model_type": "opt", "vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 2,
		"num_attention_heads": 4, "ffn_dim": 128, "max_position_embeddings": 64,
		"word_embed_proj_dim": 32, "do_layer_norm_before": true, "enable_bias": true, "dropout": 0.1,
	}
}

// tinyViT is a 2-layer ViTForImageClassification config: hidden 32, 4
// heads, MLP 64, 32-pixel images in 8-pixel patches (16 patches and the
// class token), three labels named by id2label.
func tinyViT() map[string]any {
	return map[string]any{
		"architectures": []any{"ViTForImageClassification"}, "model_type": "vit",
		"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
		"hidden_act": "gelu", "image_size": 32, "patch_size": 8, "num_channels": 3,
		"id2label": map[string]any{"0": "cat", "1": "dog", "2": "bird"},
		"label2id": map[string]any{"cat": 0, "dog": 1, "bird": 2},
	}
}

func with(m map[string]any, kv ...any) map[string]any {
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		if kv[i+1] == remove {
			delete(m, k)
		} else {
			m[k] = kv[i+1]
		}
	}
	return m
}

// remove deletes a key in with.
var remove = &struct{}{}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const cfgName = "models/tiny/config.json"

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  map[string]any
		want func(models.TransformerConfig) bool
		seq  int64
	}{
		{"llama", tinyLlama(), func(tc models.TransformerConfig) bool {
			return tc.Arch == "llama" && tc.Hidden == 64 && tc.KVHeads == 2 && tc.Intermediate == 128 &&
				!tc.TieEmbeddings && tc.Activation == "silu" && !tc.QKVBias && tc.NormEps == 1e-5
		}, 128},
		{"llama kv heads absent", with(tinyLlama(), "num_key_value_heads", remove), func(tc models.TransformerConfig) bool {
			return tc.KVHeads == 0 // models: 0 = num_attention_heads
		}, 128},
		{"llama kv heads null", with(tinyLlama(), "num_key_value_heads", nil), func(tc models.TransformerConfig) bool {
			return tc.KVHeads == 0
		}, 128},
		{"llama biases", with(tinyLlama(), "attention_bias", true, "mlp_bias", true, "head_dim", 32), func(tc models.TransformerConfig) bool {
			return tc.QKVBias && tc.OutBias && tc.MLPBias && tc.HeadDim == 32
		}, 128},
		{"llama long context", with(tinyLlama(), "max_position_embeddings", 131072), func(tc models.TransformerConfig) bool {
			return tc.MaxPositions == 131072
		}, 4096},
		{"mistral", with(tinyLlama(), "model_type", "mistral", "sliding_window", 32), func(tc models.TransformerConfig) bool {
			return tc.SlidingWindow == 32
		}, 128},
		{"mistral no window", with(tinyLlama(), "model_type", "mistral", "sliding_window", nil), func(tc models.TransformerConfig) bool {
			return tc.SlidingWindow == 0
		}, 128},
		{"qwen2", with(tinyLlama(), "model_type", "qwen2", "sliding_window", 64, "use_sliding_window", false), func(tc models.TransformerConfig) bool {
			return tc.QKVBias && !tc.OutBias && tc.SlidingWindow == 0
		}, 128},
		{"gemma", with(tinyLlama(), "model_type", "gemma", "hidden_act", "gelu", "hidden_activation", nil, "tie_word_embeddings", remove), func(tc models.TransformerConfig) bool {
			return tc.Activation == "gelu_pytorch_tanh" && tc.HeadDim == 256 && tc.TieEmbeddings
		}, 128},
		{"phi3", with(tinyLlama(), "model_type", "phi3", "resid_pdrop", 0.1, "sliding_window", 63), func(tc models.TransformerConfig) bool {
			return tc.DropoutP == 0.1 && tc.SlidingWindow == 63 && !tc.TieEmbeddings
		}, 128},
		{"gpt2", tinyGPT2(), func(tc models.TransformerConfig) bool {
			return tc.Intermediate == 128 && tc.TieEmbeddings && tc.DropoutP == 0.1 && tc.AttnDropoutP == 0.1 &&
				tc.Activation == "gelu_new" && tc.MaxPositions == 64
		}, 64},
		{"gpt2 n_inner", with(tinyGPT2(), "n_inner", 48, "tie_word_embeddings", false), func(tc models.TransformerConfig) bool {
			return tc.Intermediate == 48 && !tc.TieEmbeddings
		}, 64},
		{"bert", tinyBERT("bert"), func(tc models.TransformerConfig) bool {
			return tc.TypeVocabSize == 2 && tc.TieEmbeddings && tc.PadTokenID == 1 && tc.DropoutP == 0.1
		}, 66},
		{"roberta", tinyBERT("roberta"), func(tc models.TransformerConfig) bool {
			return tc.Arch == "roberta" && tc.MaxPositions == 66
		}, 64}, // positions after padding_idx 1
		{"t5", tinyT5(), func(tc models.TransformerConfig) bool {
			return tc.HeadDim == 8 && tc.DecoderLayers == 0 && tc.Activation == "relu" && tc.TieEmbeddings && tc.RelAttnMaxDist == 128
		}, 512},
		{"t5 v1.1", with(tinyT5(), "feed_forward_proj", "gated-gelu", "tie_word_embeddings", false, "num_decoder_layers", 3), func(tc models.TransformerConfig) bool {
			return tc.FeedForwardProj == "gated-gelu" && tc.Activation == "gelu_new" && !tc.TieEmbeddings && tc.DecoderLayers == 3
		}, 512},
		{"gpt_neox", tinyNeoX(), func(tc models.TransformerConfig) bool {
			return tc.RotaryPct == 0.25 && tc.ParallelResidual && !tc.TieEmbeddings && tc.Activation == "gelu"
		}, 64},
		{"gpt_neox both spellings", with(tinyNeoX(), "partial_rotary_factor", 0.25), func(tc models.TransformerConfig) bool {
			return tc.RotaryPct == 0.25
		}, 64},
		{"gpt_neox new spelling", with(tinyNeoX(), "rotary_pct", remove, "partial_rotary_factor", 0.5), func(tc models.TransformerConfig) bool {
			return tc.RotaryPct == 0.5
		}, 64},
		{"opt", tinyOPT(), func(tc models.TransformerConfig) bool {
			return tc.Intermediate == 128 && tc.TieEmbeddings && tc.Activation == "relu" && tc.DropoutP == 0.1
		}, 64},
		// ViTConfig's defaults: qkv_bias true, dropouts 0, image 224 in
		// 16-pixel patches of 3 channels; the labels are id2label's.
		{"vit", tinyViT(), func(tc models.TransformerConfig) bool {
			return tc.Arch == "vit" && tc.QKVBias && tc.DropoutP == 0 && tc.AttnDropoutP == 0 && tc.NormEps == 1e-12 &&
				tc.ImageSize == 32 && tc.PatchSize == 8 && tc.NumChannels == 3 && tc.NumLabels == 3 && tc.ProblemType == ""
		}, 0},
		{"vit defaults", with(tinyViT(), "image_size", remove, "patch_size", remove, "num_channels", remove, "id2label", remove, "label2id", remove),
			func(tc models.TransformerConfig) bool {
				return tc.ImageSize == 224 && tc.PatchSize == 16 && tc.NumChannels == 3 && tc.NumLabels == 2
			}, 0},
		{"vit num_labels", with(tinyViT(), "id2label", remove, "num_labels", 10, "qkv_bias", false, "hidden_dropout_prob", 0.1),
			func(tc models.TransformerConfig) bool { return tc.NumLabels == 10 && !tc.QKVBias && tc.DropoutP == 0.1 }, 0},
		{"vit id2label wins", with(tinyViT(), "num_labels", 10), func(tc models.TransformerConfig) bool { return tc.NumLabels == 3 }, 0},
		{"vit square pair", with(tinyViT(), "image_size", []any{64, 64}, "patch_size", []any{16, 16}), func(tc models.TransformerConfig) bool {
			return tc.ImageSize == 64 && tc.PatchSize == 16
		}, 0},
		{"vit regression", with(tinyViT(), "id2label", remove, "num_labels", 1), func(tc models.TransformerConfig) bool {
			return tc.NumLabels == 1 && tc.ProblemType == ""
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig(mustJSON(t, tt.cfg), cfgName)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c.Transformer) {
				t.Errorf("converted to %+v", c.Transformer)
			}
			if c.DefaultSeq != tt.seq {
				t.Errorf("DefaultSeq %d, want %d", c.DefaultSeq, tt.seq)
			}
			if c.Zoo != "" {
				t.Errorf("a tiny model identified as zoo entry %s", c.Zoo)
			}
			if _, err := models.BuildTransformer("tiny", c.Transformer, models.Config{Batch: 2, Seq: 8}); err != nil {
				t.Error(err)
			}
		})
	}
}

// A config with a zoo model's parameters gets the zoo's default sequence:
// Llama-3.1-8B is Llama-3-8B with a longer rotary context.
func TestParseConfigZooSizes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "configs", "Llama-3-8B", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	with(m, "max_position_embeddings", 131072, "rope_scaling", map[string]any{"rope_type": "llama3", "factor": 8.0})
	c, err := ParseConfig(mustJSON(t, m), "Llama-3.1-8B/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Zoo != "Llama-3-8B" || c.DefaultSeq != 8192 {
		t.Errorf("zoo %q, default sequence %d; want Llama-3-8B, 8192", c.Zoo, c.DefaultSeq)
	}
	with(m, "num_hidden_layers", 31)
	if c, err = ParseConfig(mustJSON(t, m), "Llama-3.1-8B/config.json"); err != nil {
		t.Fatal(err)
	}
	if c.Zoo != "" || c.DefaultSeq != 4096 {
		t.Errorf("31 layers: zoo %q, default sequence %d; want none, 4096", c.Zoo, c.DefaultSeq)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		cfg   map[string]any
		field string
		msg   string
	}{
		{"missing hidden", with(tinyLlama(), "hidden_size", remove), "hidden_size", "missing"},
		{"null hidden", with(tinyLlama(), "hidden_size", nil), "hidden_size", "missing"},
		{"string hidden", with(tinyLlama(), "hidden_size", "64"), "hidden_size", `want an integer, got the string "64"`},
		{"fractional hidden", with(tinyLlama(), "hidden_size", 64.5), "hidden_size", "want an integer"},
		{"float hidden", with(tinyLlama(), "hidden_size", json.Number("64.0")), "hidden_size", "want an integer"},
		{"negative hidden", with(tinyLlama(), "hidden_size", -64), "hidden_size", "must be positive"},
		{"zero layers", with(tinyLlama(), "num_hidden_layers", 0), "num_hidden_layers", "must be positive"},
		{"absurd vocab", with(tinyLlama(), "vocab_size", int64(1)<<40), "vocab_size", "beyond any real model"},
		{"absurd layers", with(tinyLlama(), "num_hidden_layers", 100000), "num_hidden_layers", "beyond any real model"},
		{"hidden not divisible", with(tinyLlama(), "hidden_size", 66), "hidden_size", "not divisible by num_attention_heads (4)"},
		{"kv heads", with(tinyLlama(), "num_key_value_heads", 3), "num_key_value_heads", "do not divide num_attention_heads (4)"},
		{"more kv heads", with(tinyLlama(), "num_key_value_heads", 8), "num_key_value_heads", "do not divide"},
		{"bool as string", with(tinyLlama(), "tie_word_embeddings", "false"), "tie_word_embeddings", "want true or false"},
		{"dropout", with(tinyLlama(), "attention_dropout", 1.5), "attention_dropout", "[0, 1)"},
		{"dropout type", with(tinyLlama(), "attention_dropout", []any{0.1}), "attention_dropout", "want a number, got an array"},
		{"eps", with(tinyLlama(), "rms_norm_eps", 0), "rms_norm_eps", "must be positive"},
		{"activation", with(tinyLlama(), "hidden_act", "mish"), "hidden_act", `unsupported activation "mish"`},
		{"torch_dtype", with(tinyLlama(), "torch_dtype", "float17"), "torch_dtype", "unknown dtype"},
		{"architectures", with(tinyLlama(), "architectures", "LlamaForCausalLM"), "architectures", "want an array of strings"},
		{"no model_type", with(tinyLlama(), "model_type", remove), "model_type", "missing"},
		{"model_type type", with(tinyLlama(), "model_type", 7), "model_type", "want a string"},
		{"typo", with(tinyLlama(), "model_type", "lama"), "model_type", `unknown model_type "lama"; did you mean "llama"?`},
		{"unknown", with(tinyLlama(), "model_type", "mamba"), "model_type", "supported: bert, gemma, gpt2, gpt_neox, llama, mistral, opt, phi3, qwen2, roberta, t5, vit"},
		{"vit typo", with(tinyViT(), "model_type", "vti"), "model_type", `did you mean "vit"?`},
		{"vit missing", with(tinyViT(), "intermediate_size", remove), "intermediate_size", "missing"},
		{"vit heads", with(tinyViT(), "num_attention_heads", 5), "hidden_size", "not divisible by num_attention_heads (5)"},
		{"vit patch", with(tinyViT(), "patch_size", 64), "patch_size", "larger than image_size 32"},
		{"vit patches", with(tinyViT(), "image_size", 4096, "patch_size", 2), "patch_size", "beyond any real model"},
		{"vit image type", with(tinyViT(), "image_size", "224"), "image_size", "want an integer"},
		{"vit rectangle", with(tinyViT(), "image_size", []any{32, 64}), "image_size", "square images"},
		{"vit bad pair", with(tinyViT(), "image_size", []any{32}), "image_size", "[height, width] pair"},
		{"vit channels", with(tinyViT(), "num_channels", 0), "num_channels", "must be positive"},
		{"vit no labels", with(tinyViT(), "id2label", map[string]any{}), "id2label", "at least one label"},
		{"vit label ids", with(tinyViT(), "id2label", map[string]any{"cat": "cat"}), "id2label", "not an integer"},
		{"vit id2label type", with(tinyViT(), "id2label", []any{"cat"}), "id2label", "want an object"},
		{"vit multi-label", with(tinyViT(), "problem_type", "multi_label_classification"), "problem_type", "not supported"},
		{"vit problem", with(tinyViT(), "problem_type", "ranking"), "problem_type", `unknown "ranking"`},
		{"vit activation", with(tinyViT(), "hidden_act", "mish"), "hidden_act", "unsupported activation"},
		{"vit dropout", with(tinyViT(), "attention_probs_dropout_prob", 1.0), "attention_probs_dropout_prob", "[0, 1)"},
		{"gemma activation", with(tinyLlama(), "model_type", "gemma", "hidden_activation", "gelu_fast"), "hidden_activation", "unsupported activation"},
		{"phi3 partial rotary", with(tinyLlama(), "model_type", "phi3", "partial_rotary_factor", 1.5), "partial_rotary_factor", "(0, 1]"},
		{"gpt2 missing", with(tinyGPT2(), "n_positions", remove), "n_positions", "missing"},
		{"gpt2 heads", with(tinyGPT2(), "n_head", 5), "n_embd", "not divisible by n_head (5)"},
		{"gpt2 n_inner", with(tinyGPT2(), "n_inner", -1), "n_inner", "must be positive"},
		{"gpt2 dropouts", with(tinyGPT2(), "embd_pdrop", 0.0), "embd_pdrop", "one hidden dropout"},
		{"gpt2 cross-attention", with(tinyGPT2(), "add_cross_attention", true), "add_cross_attention", "not supported"},
		{"bert positions", with(tinyBERT("bert"), "position_embedding_type", "relative_key"), "position_embedding_type", "only absolute"},
		{"bert decoder", with(tinyBERT("bert"), "is_decoder", true), "is_decoder", "not supported"},
		{"bert pad", with(tinyBERT("bert"), "pad_token_id", -1), "pad_token_id", "must not be negative"},
		{"bert intermediate", with(tinyBERT("bert"), "intermediate_size", remove), "intermediate_size", "missing"},
		{"roberta positions", with(tinyBERT("roberta"), "max_position_embeddings", 2), "max_position_embeddings", "leaves no positions"},
		{"t5 d_kv", with(tinyT5(), "d_kv", remove), "d_kv", "missing"},
		{"t5 gated silu", with(tinyT5(), "feed_forward_proj", "gated-silu"), "feed_forward_proj", "gated-gelu"},
		{"t5 bad proj", with(tinyT5(), "feed_forward_proj", "dense-relu-dense"), "feed_forward_proj", "not of the form"},
		{"t5 bad act", with(tinyT5(), "feed_forward_proj", "mish"), "feed_forward_proj", `activation "mish"`},
		{"neox rotary", with(tinyNeoX(), "rotary_pct", 0), "rotary_pct", "(0, 1]"},
		{"neox rotary tiny", with(tinyNeoX(), "rotary_pct", 0.1), "rotary_pct", "nothing to rotate"},
		{"neox contradiction", with(tinyNeoX(), "partial_rotary_factor", 0.5), "partial_rotary_factor", "contradicts rotary_pct 0.25"},
		{"neox bias", with(tinyNeoX(), "attention_bias", false), "attention_bias", "not supported"},
		{"opt projection", with(tinyOPT(), "word_embed_proj_dim", 16), "word_embed_proj_dim", "project_in"},
		{"opt post-LN", with(tinyOPT(), "do_layer_norm_before", false), "do_layer_norm_before", "opt-350m"},
		{"opt bias", with(tinyOPT(), "enable_bias", false), "enable_bias", "not supported"},
		{"opt activation dropout", with(tinyOPT(), "activation_dropout", 0.1), "activation_dropout", "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig(mustJSON(t, tt.cfg), cfgName)
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a FieldError", err)
			}
			if fe.Field != tt.field || fe.File != cfgName {
				t.Errorf("error names %s in %s, want %s in %s", fe.Field, fe.File, tt.field, cfgName)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, cfgName+": "+tt.field+": ") || !strings.Contains(msg, tt.msg) {
				t.Errorf("error %q, want %q about %s", msg, tt.msg, tt.field)
			}
		})
	}
}

func TestParseConfigNotJSON(t *testing.T) {
	for _, data := range []string{"", "not json", "[1, 2]", "null", `{"model_type": "llama"`, "\"llama\""} {
		_, err := ParseConfig([]byte(data), cfgName)
		if err == nil || !strings.HasPrefix(err.Error(), cfgName+": ") {
			t.Errorf("%q: error %v, want one naming %s", data, err, cfgName)
		}
	}
	big := make([]byte, MaxConfigSize+1)
	if _, err := ParseConfig(big, cfgName); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized config: error %v", err)
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, mustJSON(t, tinyLlama()), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != path || c.TorchDType != "bfloat16" || len(c.Architectures) != 1 {
		t.Errorf("config %+v", c)
	}
	if err := os.WriteFile(path, mustJSON(t, with(tinyLlama(), "num_key_value_heads", 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.HasPrefix(err.Error(), path+": num_key_value_heads: ") {
		t.Errorf("error %v, want one naming the file and num_key_value_heads", err)
	}
	// The 1 MiB cap applies while reading.
	huge := append([]byte(`{"model_type": "llama", "pad": "`), make([]byte, MaxConfigSize)...)
	if err := os.WriteFile(path, huge, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: error %v", err)
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing file loaded")
	}
}
