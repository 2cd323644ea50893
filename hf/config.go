package hf

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/suggest"
)

// MaxConfigSize bounds a config.json: real ones are a few kilobytes.
const MaxConfigSize = 1 << 20

// Bounds on sizes read from a config, far beyond any real model; they keep
// the graph's element counts well inside int64 whatever a file says.
const (
	maxVocab     = 1 << 24
	maxWidth     = 1 << 20 // hidden, intermediate, head_dim, heads × head_dim
	maxHeads     = 1 << 16
	maxLayers    = 1 << 10
	maxPositions = 1 << 30
	maxImage     = 1 << 16 // image_size, patch_size (pixels per side)
	maxPatchRow  = 1 << 10 // image_size / patch_size: patches per side
	maxChannels  = 1 << 8
	maxLabels    = 1 << 24 // num_labels, id2label entries
)

// Config is a config.json converted to the zoo's transformers description.
type Config struct {
	// Path is the file it was read from (the name given to ParseConfig).
	Path string
	// ModelType is config.json's model_type.
	ModelType string
	// Architectures is config.json's architectures: the class the
	// checkpoint was saved from, and the class the graph is built as
	// (Transformer.Head): the language-model class (*ForCausalLM,
	// BertForMaskedLM, RobertaForMaskedLM, T5ForConditionalGeneration,
	// ViTForImageClassification; also when architectures is absent or
	// names the headless base model), or a task class models builds for
	// the model type (BERT and RoBERTa sequence and token classification
	// and question answering, the Llama family's sequence
	// classification). Any other class is refused by name.
	Architectures []string
	// TorchDType is torch_dtype (transformers 5 writes dtype): the
	// checkpoint's storage type, "" when absent. It is not the training
	// dtype; Transformer.DType stays float32.
	TorchDType string
	// Quant is the stored format of the Linear weights its
	// quantization_config describes (nil without one): the stored tensors
	// are packed and their element counts are not parameter counts.
	Quant *graph.Quant
	// Transformer is the architecture, ready for models.BuildTransformer.
	Transformer models.TransformerConfig
	// DefaultSeq is the sequence length used when none is given (see
	// Open's documentation for the rule); 0 for vit, whose sequence is
	// its patches.
	DefaultSeq int64
	// Zoo names the zoo entry with exactly this model's parameters (names
	// and shapes), "" when there is none.
	Zoo string
	// Notes are facts about the config that the graph does not model.
	Notes []string

	paramCount int64 // of the graph ParseConfig built
}

// LoadConfig reads a Hugging Face config.json (at most MaxConfigSize
// bytes) and converts it; see ParseConfig.
func LoadConfig(path string) (*Config, error) { return loadConfig(osFiles{}, path) }

func loadConfig(fsys fs.FS, path string) (*Config, error) {
	data, err := readAll(fsys, path, MaxConfigSize, "a config.json")
	if err != nil {
		return nil, err
	}
	return ParseConfig(data, path)
}

// ParseConfig converts the bytes of a config.json; name stands for the
// file in errors. It reads the fields each model_type's configuration
// class defines in transformers (see the package documentation), applies
// that class's defaults to the optional ones, rejects missing, mistyped,
// out-of-range and contradictory fields with a *FieldError, and builds the
// graph once (batch 1, the default sequence) so that a Config it returns
// always builds.
func ParseConfig(data []byte, name string) (*Config, error) {
	if len(data) > MaxConfigSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a config.json", name, MaxConfigSize)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %v", name, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s: not a JSON object", name)
	}
	f := &fields{file: name, m: m}
	mt := f.str("model_type", "")
	if f.err != nil {
		return nil, f.err
	}
	if mt == "" {
		return nil, &FieldError{File: name, Field: "model_type", Msg: "missing (supported: " + strings.Join(SupportedTypes(), ", ") + ")"}
	}
	fam, ok := families[mt]
	if !ok {
		return nil, &FieldError{File: name, Field: "model_type", Msg: unsupportedType(mt)}
	}
	c := &Config{Path: name, ModelType: mt}
	c.Transformer = fam.parse(f, mt, c)
	c.Transformer.Arch = mt
	c.Architectures = f.strings("architectures")
	c.Transformer.Head = parseHead(f, mt, c)
	parseHeadFields(f, mt, c)
	c.TorchDType = f.str("torch_dtype", "")
	if c.TorchDType == "" {
		c.TorchDType = f.str("dtype", "")
	}
	if c.TorchDType != "" && f.err == nil {
		if _, err := graph.ParseDType(c.TorchDType); err != nil {
			key := "torch_dtype"
			if !f.has(key) {
				key = "dtype"
			}
			f.fail(key, "%v", err)
		}
	}
	c.Quant = parseQuant(f)
	if f.err != nil {
		return nil, f.err
	}
	if c.Quant != nil {
		c.Notes = append(c.Notes, "quantization_config: the Linear weights are stored as "+c.Quant.String())
	}
	c.DefaultSeq = fam.defaultSeq(c.Transformer)
	g, err := models.BuildTransformer(c.name(), c.Transformer, models.Config{Batch: 1, Seq: c.DefaultSeq})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.paramCount = g.ParamCount()
	if zoo, ok := zooMatch(g); ok {
		c.Zoo, c.DefaultSeq = zoo.Name, zoo.DefaultSeq
	}
	return c, nil
}

// name is the model's name for graphs and messages: the directory holding
// the config, or the file name when it has none.
func (c *Config) name() string {
	return modelName(c.Path)
}

// SupportedTypes lists the model_type values LoadConfig accepts.
func SupportedTypes() []string {
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func unsupportedType(mt string) string {
	supported := strings.Join(SupportedTypes(), ", ")
	msg := fmt.Sprintf("unknown model_type %q", mt)
	if near := suggest.Nearest(mt, SupportedTypes(), 3); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", near[0])
	}
	return msg + " (supported: " + supported + ")"
}

// family converts one model_type's fields.
type family struct {
	parse      func(f *fields, mt string, c *Config) models.TransformerConfig
	defaultSeq func(tc models.TransformerConfig) int64
}

var families = map[string]family{
	"llama":    {parseLlama, capSeq},
	"mistral":  {parseLlama, capSeq},
	"qwen2":    {parseLlama, capSeq},
	"gemma":    {parseLlama, capSeq},
	"phi3":     {parseLlama, capSeq},
	"gpt2":     {parseGPT2, capSeq},
	"gpt_neox": {parseGPTNeoX, capSeq},
	"opt":      {parseOPT, capSeq},
	"bert":     {parseBERT, capSeq},
	"roberta":  {parseBERT, robertaSeq},
	"t5":       {parseT5, capSeq},
	"vit":      {parseViT, noSeq},
}

// seqCap bounds the default sequence of models not in the zoo.
const seqCap = 4096

// capSeq is min(max_position_embeddings, 4096) (T5: n_positions, 512 when
// absent).
func capSeq(tc models.TransformerConfig) int64 { return min(tc.MaxPositions, seqCap) }

// noSeq: a vision model's sequence follows from its image size.
func noSeq(models.TransformerConfig) int64 { return 0 }

// robertaSeq: RoBERTa's positions start after padding_idx, so
// max_position_embeddings - pad_token_id - 1 of them serve tokens (512 of
// roberta-base's 514).
func robertaSeq(tc models.TransformerConfig) int64 {
	return min(tc.MaxPositions-tc.PadTokenID-1, seqCap)
}

// activations are the ACT2FN names models.BuildTransformer runs.
var activations = []string{"gelu_new", "gelu", "gelu_pytorch_tanh", "silu", "swish", "relu", "tanh", "sigmoid"}

func (f *fields) activation(key, def string) string {
	a := f.str(key, def)
	for _, s := range activations {
		if a == s {
			return a
		}
	}
	if f.err == nil {
		f.fail(key, "unsupported activation %q (supported: %s)", a, strings.Join(activations, ", "))
	}
	return a
}

// unsupported rejects a field whose value selects a variant the graph
// builders do not have.
func (f *fields) unsupported(key string, bad bool, format string, args ...any) {
	if bad {
		f.fail(key, "not supported: "+format, args...)
	}
}

// heads checks the attention geometry: hidden divisible by heads unless
// head_dim is given, kv heads dividing heads, and heads × head_dim bounded.
func (f *fields) heads(tc *models.TransformerConfig, hiddenKey, headsKey, kvKey string) {
	if f.err != nil {
		return
	}
	if tc.HeadDim == 0 && tc.Hidden%tc.Heads != 0 {
		f.fail(hiddenKey, "%d is not divisible by %s (%d)", tc.Hidden, headsKey, tc.Heads)
		return
	}
	if tc.KVHeads > 0 && tc.Heads%tc.KVHeads != 0 {
		f.fail(kvKey, "%d key/value heads do not divide %s (%d)", tc.KVHeads, headsKey, tc.Heads)
		return
	}
	d := tc.HeadDim
	if d == 0 {
		d = tc.Hidden / tc.Heads
	}
	if tc.Heads*d > maxWidth {
		f.fail(headsKey, "%d heads of %d is beyond any real model", tc.Heads, d)
	}
}

// parseLlama reads LlamaConfig, MistralConfig, Qwen2Config, GemmaConfig
// and Phi3Config.
func parseLlama(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	f.standardSizes(&tc)
	tc.KVHeads = f.size("num_key_value_heads", 0, maxHeads) // null or absent: num_attention_heads
	headDim := int64(0)                                     // hidden_size // num_attention_heads
	if mt == "gemma" {
		headDim = 256 // GemmaConfig's default
	}
	tc.HeadDim = f.size("head_dim", headDim, maxWidth)
	eps := 1e-6
	if mt == "phi3" {
		eps = 1e-5
	}
	tc.NormEps = f.positiveFloat("rms_norm_eps", eps)
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", mt == "gemma")
	tc.AttnDropoutP = f.prob("attention_dropout", 0)
	tc.Activation = "silu"
	switch mt {
	case "llama":
		tc.Activation = f.activation("hidden_act", "silu")
		bias := f.boolean("attention_bias", false) // q, k, v and o
		tc.QKVBias, tc.OutBias = bias, bias
		tc.MLPBias = f.boolean("mlp_bias", false)
	case "gemma":
		// GemmaMLP runs hidden_activation; hidden_act is ignored (early
		// checkpoints say "gelu" there and carry hidden_activation: null,
		// which transformers reads as gelu_pytorch_tanh).
		tc.Activation = f.activation("hidden_activation", "gelu_pytorch_tanh")
		bias := f.boolean("attention_bias", false)
		tc.QKVBias, tc.OutBias = bias, bias
	case "mistral":
		tc.Activation = f.activation("hidden_act", "silu")
		tc.SlidingWindow = f.size("sliding_window", 0, maxPositions)
	case "qwen2":
		tc.Activation = f.activation("hidden_act", "silu")
		tc.QKVBias = true // Qwen2Attention: q, k, v with bias, o without
		if f.boolean("use_sliding_window", false) {
			tc.SlidingWindow = f.size("sliding_window", 0, maxPositions)
		}
	case "phi3":
		tc.Activation = f.activation("hidden_act", "silu")
		tc.DropoutP = f.prob("resid_pdrop", 0) // resid_attn_dropout, resid_mlp_dropout
		f.prob("embd_pdrop", 0)                // no embedding dropout in the current Phi3Model
		tc.SlidingWindow = f.size("sliding_window", 0, maxPositions)
		if p := f.float("partial_rotary_factor", 1); p != 1 {
			if p <= 0 || p > 1 {
				f.fail("partial_rotary_factor", "must lie in (0, 1], got %g", p)
			}
			tc.RotaryPct = p
			c.Notes = append(c.Notes, fmt.Sprintf("partial_rotary_factor %g: the llama-family graph rotates whole heads (the rotary constants and the products that save them are %g× too large)", p, 1/p))
		}
	}
	f.heads(&tc, "hidden_size", "num_attention_heads", "num_key_value_heads")
	return tc
}

// parseGPT2 reads GPT2Config.
func parseGPT2(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	tc.VocabSize = f.size("vocab_size", required, maxVocab)
	tc.Hidden = f.size("n_embd", required, maxWidth)
	tc.Layers = f.size("n_layer", required, maxLayers)
	tc.Heads = f.size("n_head", required, maxHeads)
	tc.MaxPositions = f.size("n_positions", required, maxPositions)
	tc.Intermediate = f.size("n_inner", 0, maxWidth) // null: 4 * n_embd
	if tc.Intermediate == 0 {
		tc.Intermediate = 4 * tc.Hidden
	}
	tc.Activation = f.activation("activation_function", "gelu_new")
	resid := f.prob("resid_pdrop", 0.1)
	embd := f.prob("embd_pdrop", 0.1)
	// One hidden dropout in TransformerConfig: what autograd keeps depends
	// only on whether p is zero, so equal zero-ness is what must agree.
	if (resid == 0) != (embd == 0) {
		f.fail("embd_pdrop", "not supported: %g with resid_pdrop %g (the graph has one hidden dropout; both zero or both non-zero)", embd, resid)
	}
	tc.DropoutP = resid
	tc.AttnDropoutP = f.prob("attn_pdrop", 0.1)
	tc.NormEps = f.positiveFloat("layer_norm_epsilon", 1e-5)
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", true)
	f.unsupported("add_cross_attention", f.boolean("add_cross_attention", false), "cross-attention layers")
	f.heads(&tc, "n_embd", "n_head", "n_head")
	return tc
}

// parseGPTNeoX reads GPTNeoXConfig.
func parseGPTNeoX(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	f.standardSizes(&tc)
	key := "rotary_pct"
	if !f.has(key) && f.has("partial_rotary_factor") {
		key = "partial_rotary_factor" // the newer spelling
	}
	tc.RotaryPct = f.float(key, 0.25)
	if tc.RotaryPct <= 0 || tc.RotaryPct > 1 {
		f.fail(key, "must lie in (0, 1], got %g", tc.RotaryPct)
	}
	// GPTNeoXConfig.to_dict writes both; the attention reads rotary_pct,
	// the rotary embedding partial_rotary_factor.
	if key == "rotary_pct" && f.has("partial_rotary_factor") {
		if p := f.float("partial_rotary_factor", 0); p != tc.RotaryPct {
			f.fail("partial_rotary_factor", "%g contradicts rotary_pct %g", p, tc.RotaryPct)
		}
	}
	tc.ParallelResidual = f.boolean("use_parallel_residual", true)
	tc.Activation = f.activation("hidden_act", "gelu")
	tc.DropoutP = f.prob("hidden_dropout", 0)
	tc.AttnDropoutP = f.prob("attention_dropout", 0)
	tc.NormEps = f.positiveFloat("layer_norm_eps", 1e-5)
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", false)
	f.unsupported("attention_bias", !f.boolean("attention_bias", true), "query_key_value and dense without bias")
	f.heads(&tc, "hidden_size", "num_attention_heads", "num_attention_heads")
	if f.err == nil {
		if d := tc.Hidden / tc.Heads; int64(float64(d)*tc.RotaryPct) < 2 {
			f.fail(key, "%g of the %d channels of a head leaves nothing to rotate", tc.RotaryPct, d)
		}
	}
	return tc
}

// parseOPT reads OPTConfig for the pre-LayerNorm models without
// projections (125m, 1.3b and larger; not 350m).
func parseOPT(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	tc.VocabSize = f.size("vocab_size", required, maxVocab)
	tc.Hidden = f.size("hidden_size", required, maxWidth)
	tc.Layers = f.size("num_hidden_layers", required, maxLayers)
	tc.Heads = f.size("num_attention_heads", required, maxHeads)
	tc.Intermediate = f.size("ffn_dim", required, maxWidth)
	tc.MaxPositions = f.size("max_position_embeddings", required, maxPositions)
	if p := f.size("word_embed_proj_dim", tc.Hidden, maxWidth); f.err == nil {
		f.unsupported("word_embed_proj_dim", p != tc.Hidden, "%d differs from hidden_size %d (project_in and project_out are not built)", p, tc.Hidden)
	}
	f.unsupported("do_layer_norm_before", !f.boolean("do_layer_norm_before", true), "post-LayerNorm OPT (opt-350m)")
	f.unsupported("enable_bias", !f.boolean("enable_bias", true), "linear layers without bias")
	f.unsupported("layer_norm_elementwise_affine", !f.boolean("layer_norm_elementwise_affine", true), "LayerNorms without weights")
	f.unsupported("_remove_final_layer_norm", f.boolean("_remove_final_layer_norm", false), "a decoder without its final LayerNorm")
	tc.Activation = f.activation("activation_function", "relu")
	tc.DropoutP = f.prob("dropout", 0.1)
	tc.AttnDropoutP = f.prob("attention_dropout", 0)
	if p := f.prob("activation_dropout", 0); p > 0 {
		f.unsupported("activation_dropout", true, "%g (the graph has no dropout after fc1)", p)
	}
	tc.NormEps = 1e-5
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", true)
	f.heads(&tc, "hidden_size", "num_attention_heads", "num_attention_heads")
	return tc
}

// parseBERT reads BertConfig and RobertaConfig.
func parseBERT(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	f.standardSizes(&tc)
	tc.TypeVocabSize = f.size("type_vocab_size", 2, maxVocab)
	tc.Activation = f.activation("hidden_act", "gelu")
	tc.DropoutP = f.prob("hidden_dropout_prob", 0.1)
	tc.AttnDropoutP = f.prob("attention_probs_dropout_prob", 0.1)
	pad := int64(0)
	if mt == "roberta" {
		pad = 1
	}
	tc.PadTokenID = f.nonNegative("pad_token_id", pad)
	tc.NormEps = f.positiveFloat("layer_norm_eps", 1e-12)
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", true)
	if p := f.str("position_embedding_type", "absolute"); f.err == nil {
		f.unsupported("position_embedding_type", p != "absolute", "%q (only absolute)", p)
	}
	f.unsupported("is_decoder", f.boolean("is_decoder", false), "a causal (decoder) %s", mt)
	f.unsupported("add_cross_attention", f.boolean("add_cross_attention", false), "cross-attention layers")
	if mt == "roberta" && f.err == nil && tc.MaxPositions-tc.PadTokenID-1 < 1 {
		f.fail("max_position_embeddings", "%d leaves no positions after pad_token_id %d (RoBERTa positions start at pad_token_id + 1)", tc.MaxPositions, tc.PadTokenID)
	}
	f.heads(&tc, "hidden_size", "num_attention_heads", "num_attention_heads")
	return tc
}

// parseT5 reads T5Config.
func parseT5(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	tc.VocabSize = f.size("vocab_size", required, maxVocab)
	tc.Hidden = f.size("d_model", required, maxWidth)
	tc.HeadDim = f.size("d_kv", required, maxWidth)
	tc.Intermediate = f.size("d_ff", required, maxWidth)
	tc.Layers = f.size("num_layers", required, maxLayers)
	tc.DecoderLayers = f.size("num_decoder_layers", 0, maxLayers) // null or absent: num_layers
	tc.Heads = f.size("num_heads", required, maxHeads)
	tc.RelAttnBuckets = f.size("relative_attention_num_buckets", 32, maxPositions)
	tc.RelAttnMaxDist = f.size("relative_attention_max_distance", 128, maxPositions)
	// n_positions only documents the trained length (512) for T5.
	tc.MaxPositions = f.size("n_positions", 512, maxPositions)
	tc.DropoutP = f.prob("dropout_rate", 0.1)
	tc.NormEps = f.positiveFloat("layer_norm_epsilon", 1e-6)
	tc.TieEmbeddings = f.boolean("tie_word_embeddings", true)
	tc.DecoderStartToken = f.nonNegative("decoder_start_token_id", 0)
	// T5Config: act_info = feed_forward_proj.split("-"), "gated-{ACT}" or
	// "{ACT}", with "gated-gelu" meaning gelu_new.
	ffp := f.str("feed_forward_proj", "relu")
	parts := strings.Split(ffp, "-")
	gated := parts[0] == "gated"
	act := parts[len(parts)-1]
	switch {
	case (len(parts) > 1 && !gated) || len(parts) > 2 || act == "":
		f.fail("feed_forward_proj", "%q is not of the form gated-{ACT_FN} or {ACT_FN}", ffp)
	case ffp == "gated-gelu":
		act = "gelu_new"
	case gated:
		f.unsupported("feed_forward_proj", true, "%q (the T5 graph gates gelu only: gated-gelu)", ffp)
	}
	if f.err == nil {
		ok := false
		for _, s := range activations {
			ok = ok || s == act
		}
		f.unsupported("feed_forward_proj", !ok, "activation %q (supported: %s)", act, strings.Join(activations, ", "))
	}
	tc.FeedForwardProj, tc.Activation = ffp, act
	if f.err == nil && tc.Heads*tc.HeadDim > maxWidth {
		f.fail("num_heads", "%d heads of %d is beyond any real model", tc.Heads, tc.HeadDim)
	}
	return tc
}

// parseViT reads ViTConfig for ViTForImageClassification. num_labels
// follows PretrainedConfig: the length of id2label when the config has one
// (a num_labels beside it that disagrees is ignored, as transformers does
// with a warning), else num_labels, else 2. encoder_stride (the masked
// image modelling decoder's) and pooler_output_size and pooler_act
// (ViTModel's pooler, which the classifier class has not) shape nothing
// here and are not read.
func parseViT(f *fields, mt string, c *Config) models.TransformerConfig {
	var tc models.TransformerConfig
	tc.Hidden = f.size("hidden_size", required, maxWidth)
	tc.Layers = f.size("num_hidden_layers", required, maxLayers)
	tc.Heads = f.size("num_attention_heads", required, maxHeads)
	tc.Intermediate = f.size("intermediate_size", required, maxWidth)
	tc.Activation = f.activation("hidden_act", "gelu")
	tc.DropoutP = f.prob("hidden_dropout_prob", 0)
	tc.AttnDropoutP = f.prob("attention_probs_dropout_prob", 0)
	tc.NormEps = f.positiveFloat("layer_norm_eps", 1e-12)
	tc.ImageSize = f.side("image_size", 224, maxImage)
	tc.PatchSize = f.side("patch_size", 16, maxImage)
	tc.NumChannels = f.size("num_channels", 3, maxChannels)
	tc.QKVBias = f.boolean("qkv_bias", true)
	tc.NumLabels = f.numLabels(c)
	switch pt := f.str("problem_type", ""); pt {
	case "", "single_label_classification", "regression":
		tc.ProblemType = pt
	case "multi_label_classification":
		f.unsupported("problem_type", true, "%q (BCEWithLogitsLoss)", pt)
	default:
		f.fail("problem_type", "unknown %q (transformers accepts regression, single_label_classification, multi_label_classification)", pt)
	}
	if f.err == nil {
		switch {
		case tc.PatchSize > tc.ImageSize:
			f.fail("patch_size", "%d is larger than image_size %d", tc.PatchSize, tc.ImageSize)
		case tc.ImageSize/tc.PatchSize > maxPatchRow:
			f.fail("patch_size", "%d-pixel patches of a %d-pixel image make %d patches a side, beyond any real model", tc.PatchSize, tc.ImageSize, tc.ImageSize/tc.PatchSize)
		}
	}
	f.heads(&tc, "hidden_size", "num_attention_heads", "num_attention_heads")
	return tc
}

// side reads an image or patch side: an integer, or a [height, width]
// pair of equal integers (ViTConfig accepts both; the graph takes square
// images).
func (f *fields) side(key string, def, max int64) int64 {
	r, ok := f.raw(key)
	if !ok || r[0] != '[' {
		return f.size(key, def, max)
	}
	var pair []json.RawMessage
	if err := json.Unmarshal(r, &pair); err != nil || len(pair) != 2 {
		f.fail(key, "want an integer or a [height, width] pair, got %s", describe(r))
		return def
	}
	var hw [2]int64
	for i, p := range pair {
		v, err := strconv.ParseInt(string(p), 10, 64)
		if err != nil {
			f.fail(key, "want an integer or a [height, width] pair, got %s", describe(r))
			return def
		}
		if v <= 0 || v > max {
			f.fail(key, "sides must lie in [1, %d], got %d", max, v)
			return def
		}
		hw[i] = v
	}
	if hw[0] != hw[1] {
		f.fail(key, "not supported: %d×%d (the graph takes square images)", hw[0], hw[1])
		return def
	}
	return hw[0]
}

// numLabels is PretrainedConfig.num_labels: len(id2label) when present,
// else num_labels, else 2.
func (f *fields) numLabels(c *Config) int64 {
	r, ok := f.raw("id2label")
	if !ok {
		return f.size("num_labels", 2, maxLabels)
	}
	var m map[string]json.RawMessage
	if r[0] != '{' || json.Unmarshal(r, &m) != nil {
		f.fail("id2label", "want an object mapping label ids to names, got %s", describe(r))
		return 0
	}
	for k := range m {
		if _, err := strconv.ParseInt(k, 10, 64); err != nil {
			f.fail("id2label", "key %q is not an integer label id", k)
			return 0
		}
	}
	n := int64(len(m))
	switch {
	case n == 0:
		f.fail("id2label", "empty: the classifier needs at least one label")
	case n > maxLabels:
		f.fail("id2label", "%d labels is beyond any real model", n)
	}
	if v, ok := f.int("num_labels"); ok && v != n && f.err == nil {
		c.Notes = append(c.Notes, fmt.Sprintf("num_labels %d disagrees with the %d entries of id2label; transformers uses id2label", v, n))
	}
	return n
}

// standardSizes reads the size fields most transformers configs share under
// the same names (PretrainedConfig subclasses for llama, mistral, qwen2,
// gemma, phi3, gpt_neox, bert, roberta, ...).
func (f *fields) standardSizes(tc *models.TransformerConfig) {
	tc.VocabSize = f.size("vocab_size", required, maxVocab)
	tc.Hidden = f.size("hidden_size", required, maxWidth)
	tc.Layers = f.size("num_hidden_layers", required, maxLayers)
	tc.Heads = f.size("num_attention_heads", required, maxHeads)
	tc.Intermediate = f.size("intermediate_size", required, maxWidth)
	tc.MaxPositions = f.size("max_position_embeddings", required, maxPositions)
}
