package models

import (
	"fmt"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// Hugging Face transformers models, built from a config the way
// transformers' eager modeling code runs them in training mode: language
// models (decoders, BERT-style encoders, T5) and the image classifier
// ViTForImageClassification (transformers_vit.go).
//
// Which transformers the op sequences follow
//
// The modeling code changed in ways that change what autograd saves.
// TransformerConfig.Version (set from Config.Transformers, batchfit's
// --transformers) picks the release, 4.36 or later (see
// transformers_release.go for the releases read); the default ("") is the
// current code, transformers 4.56 and later (through 5.x). Always assumed:
// torch ≥ 2.5, attn_implementation "sdpa" (the default) unless AttnImpl is
// "eager", no padding in the batch (attention_mask absent or all ones, so
// masking_utils hands SDPA no mask and is_causal=True), logits_to_keep=0.
//
//   - SDPA attention (integrations/sdpa_attention.py, from 4.48; before,
//     each model's own *SdpaAttention class):
//     ≥ 4.56: no .contiguous() on q, k, v (PR #40315), and grouped-query
//     attention passes the kv heads unrepeated with enable_gqa=True
//     (≥ 4.54, PR #39412, when torch ≥ 2.5 and the mask is None).
//     4.54–4.55: enable_gqa, but query/key/value.contiguous() (a copy of
//     any non-contiguous one: GPT-2's q, k, v are views of c_attn, Llama's
//     v a transposed view of v_proj).
//     4.48–4.53: repeat_kv (expand + reshape: a copy) for GQA, then the
//     three .contiguous().
//     ≤ 4.47: repeat_kv; the per-model SDPA classes called .contiguous()
//     only when a mask was passed, so not here.
//     Every version: attn_output.transpose(1, 2).contiguous() (a copy),
//     then a view for the output projection. BERT's own SDPA class never
//     copies q, k, v without a mask.
//   - Causal-LM loss (transformers_release.go, causalLMLoss): ≤ 4.45 the
//     Llama family's forward upcasts every position's logits
//     (logits.float()) and returns the float32 copy; the loss, inline or
//     loss_utils.ForCausalLMLoss (Llama, Qwen2, Gemma, Phi3 from 4.46;
//     Mistral, GPT-2, OPT from 4.48; GPT-NeoX from 4.49), copies
//     logits[..., :-1, :].contiguous() before 4.49 and pads the labels
//     instead from 4.49; ForCausalLMLoss upcasts inside the loss. The
//     masked-LM and T5 losses call CrossEntropyLoss on logits.view(-1, V)
//     in every version.
//   - GPT-2's "gelu_new" is activations.NewGELUActivation, a Python
//     composite 0.5*x*(1+tanh(√(2/π)*(x+0.044715*x³))) of eight elementwise
//     ops that together save four tensors of the input's size, not the fused
//     gelu(approximate="tanh") (that is "gelu_pytorch_tanh", used by Gemma).
//
// Tensors that forward() creates without autograd (GPT-2's position ids,
// the rotary cos/sin, RoBERTa's and OPT's position ids, T5's relative
// position buckets and masks, eager attention masks) are declared as extra
// graph inputs (see hfConst): the Builder has no role for them yet.

// TransformerConfig is the architecture of a transformers model: the fields
// of its config.json that shape the graph. Zero values mean "the
// architecture's default" where one exists.
type TransformerConfig struct {
	// Arch is config.json's model_type: "gpt2", "llama", "mistral", "qwen2"
	// (llama-style: RMSNorm, RoPE, SwiGLU, GQA), "bert", "roberta", "t5",
	// "gpt_neox", "opt", "phi3", "gemma", "vit".
	Arch string

	VocabSize    int64 // vocab_size (none for vit)
	Hidden       int64 // hidden_size / n_embd / d_model
	Layers       int64 // num_hidden_layers / n_layer / num_layers (T5: encoder layers)
	Heads        int64 // num_attention_heads / n_head / num_heads
	KVHeads      int64 // num_key_value_heads; 0 = Heads
	HeadDim      int64 // head_dim / d_kv; 0 = Hidden/Heads
	Intermediate int64 // intermediate_size / n_inner / d_ff / ffn_dim; 0 = 4·Hidden
	// MaxPositions is max_position_embeddings / n_positions: the size of a
	// learned position table (GPT-2, BERT, RoBERTa, OPT) and so the longest
	// sequence those accept; for rotary and relative models it only
	// documents the trained context.
	MaxPositions int64

	TieEmbeddings bool // tie_word_embeddings: the LM head shares the input embedding
	QKVBias       bool // q/k/v projections have biases (qwen2; llama's attention_bias sets it and OutBias; vit's qkv_bias, true by default there)
	OutBias       bool // the attention output projection has a bias (llama attention_bias)
	MLPBias       bool // llama mlp_bias

	// Activation is hidden_act / activation_function / hidden_activation /
	// dense_act_fn: "gelu_new" (NewGELUActivation, a composite), "gelu"
	// (exact, fused), "gelu_pytorch_tanh" (fused tanh approximation),
	// "silu", "relu", "tanh", "sigmoid".
	Activation string
	NormEps    float64 // layer_norm_epsilon / rms_norm_eps / layer_norm_eps (no effect on memory)

	// DropoutP is the hidden, embedding and residual dropout (GPT-2
	// embd_pdrop/resid_pdrop, BERT hidden_dropout_prob, T5 dropout_rate, OPT
	// dropout); AttnDropoutP the dropout on attention probabilities
	// (attn_pdrop, attention_probs_dropout_prob, attention_dropout).
	DropoutP, AttnDropoutP float64

	TypeVocabSize int64 // BERT/RoBERTa token types (2 for BERT, 1 for RoBERTa)
	PadTokenID    int64 // RoBERTa's padding_idx: positions start at PadTokenID+1

	// RotaryPct is GPT-NeoX's rotary_pct: the fraction of each head that is
	// rotated (0 = 1, the whole head).
	RotaryPct float64
	// ParallelResidual is GPT-NeoX's use_parallel_residual.
	ParallelResidual bool
	// SlidingWindow is Mistral's sliding_window. It is recorded, not
	// modelled: at L ≥ SlidingWindow transformers passes SDPA an explicit
	// [B, 1, L, L] mask, which a graph cannot express yet.
	SlidingWindow int64

	// T5.
	DecoderLayers     int64  // num_decoder_layers; 0 = Layers
	RelAttnBuckets    int64  // relative_attention_num_buckets
	RelAttnMaxDist    int64  // relative_attention_max_distance (no effect on memory)
	FeedForwardProj   string // "relu", or "gated-gelu" (T5 v1.1: wi_0, wi_1; Activation "gelu_new"); "" = "relu"
	DecoderSeq        int64  // target length for the decoder; 0 = the encoder's sequence length
	DecoderStartToken int64  // decoder_start_token_id (no effect on memory)

	// Vision (vit). ImageSize is image_size, the side of the square image
	// the position table is made for (Config.Image overrides it: a model
	// configured for that side, as torchvision's ViTs are); PatchSize is
	// patch_size; NumChannels num_channels; NumLabels the classifier's
	// outputs (len(id2label), else num_labels). Zero means ViTConfig's
	// 224, 16 and 3 and PretrainedConfig's 2 labels.
	ImageSize, PatchSize, NumChannels, NumLabels int64
	// ProblemType is problem_type: "" infers it as transformers does on
	// integer labels (one label: "regression", else
	// "single_label_classification"); "regression" is an MSE loss on
	// float labels. "multi_label_classification" (BCEWithLogitsLoss) is
	// not modelled.
	ProblemType string

	// Head is the task head in place of the language-model head ("": the
	// class named above for each model type): HeadSequenceClassification,
	// HeadTokenClassification or HeadQuestionAnswering (see
	// transformers_heads.go for the classes and which model types have
	// them). NumLabels sizes its classifier as for vit, ProblemType picks
	// a sequence classifier's loss, and ClassifierDropoutP is the dropout
	// before a BERT-family classifier (classifier_dropout, else
	// hidden_dropout_prob).
	Head               string
	ClassifierDropoutP float64

	// AttnImpl is attn_implementation: "sdpa" (default) or "eager" (each
	// model's eager_attention_forward: matmul, softmax, dropout, matmul).
	// T5 is always eager: its attention adds a learned position bias,
	// which transformers runs with explicit matmuls.
	AttnImpl string
	// Version is the transformers release whose modeling code the graph
	// follows, "4.45" or "4.45.2" or "5.0"; "" is the current code (see the
	// comment at the top of this file for what changes).
	Version string

	// DType is the dtype of parameters and activations: model.to(dtype).
	// Zero is float32. (config.json's torch_dtype is the checkpoint's
	// storage type, not necessarily the training one.) Under autocast keep
	// float32 here: autocast is a property of the training setup.
	DType graph.DType
}

// hfArch describes one model_type: its builder and what it needs.
type hfArch struct {
	build func(*hfBuilder)
	// learnedPositions: the sequence length is bounded by the position
	// table (see maxSeq).
	learnedPositions bool
	// vision: the input is an image batch; there is no vocabulary and
	// Config.Seq is ignored (the sequence is the patches and the class
	// token), Config.Image sets the image side.
	vision bool
}

var hfArchs = map[string]hfArch{
	"gpt2":     {build: (*hfBuilder).gpt2, learnedPositions: true},
	"llama":    {build: (*hfBuilder).llama},
	"mistral":  {build: (*hfBuilder).llama},
	"qwen2":    {build: (*hfBuilder).llama},
	"gemma":    {build: (*hfBuilder).llama},
	"phi3":     {build: (*hfBuilder).llama},
	"bert":     {build: (*hfBuilder).bert, learnedPositions: true},
	"roberta":  {build: (*hfBuilder).bert, learnedPositions: true},
	"t5":       {build: (*hfBuilder).t5},
	"gpt_neox": {build: (*hfBuilder).gptNeoX},
	"opt":      {build: (*hfBuilder).opt, learnedPositions: true},
	"vit":      {build: (*hfBuilder).vit, vision: true},
}

// BuildTransformer builds the graph of one training step's forward pass
// and loss for a transformers model: the *ForCausalLM / *LMHeadModel class
// for decoders, *ForMaskedLM for BERT and RoBERTa, T5ForConditionalGeneration
// for T5, ViTForImageClassification for ViT. c gives the batch and the
// sequence length (both required for language models: the zoo fills the
// model's default sequence; ViT ignores c.Seq and takes c.Image, 0 for
// the config's image_size) and optional overrides of depth (c.Layers) and
// width (c.Hidden, see withOverrides).
func BuildTransformer(name string, tc TransformerConfig, c Config) (*graph.Graph, error) {
	arch, ok := hfArchs[tc.Arch]
	if !ok {
		return nil, fmt.Errorf("building %s: unsupported model_type %q (supported: %s)", name, tc.Arch, strings.Join(hfArchNames(), ", "))
	}
	if arch.vision {
		if c.Image < 0 {
			return nil, fmt.Errorf("building %s: image side must be positive, got %d", name, c.Image)
		}
		if c.Image > 0 {
			tc.ImageSize = c.Image
		}
	}
	if c.Transformers != "" {
		tc.Version = c.Transformers
	}
	tc, err := tc.withOverrides(c)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", name, err)
	}
	if err := tc.check(arch, c); err != nil {
		return nil, fmt.Errorf("building %s: %w", name, err)
	}
	if err := tc.checkHead(c); err != nil {
		return nil, fmt.Errorf("building %s: %w", name, err)
	}
	if c.Decode != nil {
		if err := tc.checkDecode(c); err != nil {
			return nil, fmt.Errorf("building %s: %w", name, err)
		}
	}
	if c.Decode != nil && (c.TP > 1 || c.PP > 1) {
		return nil, fmt.Errorf("building %s: generation with tensor or pipeline parallelism is not modelled", name)
	}
	t := &hfBuilder{b: graph.NewBuilder(name), tc: tc, B: c.Batch, L: c.Seq, dt: tc.DType, eagerMask: graph.None, hi: tc.Layers, first: true, last: true, dec: c.Decode, loopLoss: c.LossFromLogits, libCkpt: c.LibraryCheckpointing}
	if c.TP > 1 || c.PP > 1 {
		if !tensorParallelArchs[tc.Arch] {
			return nil, fmt.Errorf("building %s: tensor and pipeline parallelism are built for the Llama family (llama, mistral, qwen2, gemma, phi3), not model_type %s", name, tc.Arch)
		}
	}
	if c.TP > 1 {
		if t.tc, err = tc.tensorParallel(c.TP); err != nil {
			return nil, fmt.Errorf("building %s: %w", name, err)
		}
	}
	if c.SP {
		if c.TP <= 1 {
			return nil, fmt.Errorf("building %s: sequence parallelism splits the sequence over the tensor-parallel ranks: it needs tensor parallelism", name)
		}
		if c.Seq%c.TP != 0 {
			return nil, fmt.Errorf("building %s: sequence parallelism needs the sequence length %d to be a multiple of the tensor parallelism %d", name, c.Seq, c.TP)
		}
		t.sp = c.TP
	}
	if c.PP > 1 {
		if t.lo, t.hi, err = c.StageRange(tc.Layers); err != nil {
			return nil, fmt.Errorf("building %s: %w", name, err)
		}
		t.first, t.last = c.Stage == 0, c.Stage == c.PP-1
	}
	t.b.ParamDT = tc.DType
	t.b.Adapters = c.Adapters
	t.b.Quant = c.Quant
	arch.build(t)
	return t.b.Graph()
}

func hfArchNames() []string {
	names := make([]string, 0, len(hfArchs))
	for n := range hfArchs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// headDim is the per-head size.
func (tc TransformerConfig) headDim() int64 {
	if tc.HeadDim > 0 {
		return tc.HeadDim
	}
	if tc.Heads > 0 {
		return tc.Hidden / tc.Heads
	}
	return 0
}

func (tc TransformerConfig) kvHeads() int64 {
	if tc.KVHeads > 0 {
		return tc.KVHeads
	}
	return tc.Heads
}

func (tc TransformerConfig) intermediate() int64 {
	if tc.Intermediate > 0 {
		return tc.Intermediate
	}
	return 4 * tc.Hidden
}

// withOverrides applies the Config's depth and width overrides. Depth sets
// the number of layers (T5: of both stacks). Width sets the hidden size and
// keeps the head size and the query/key-value grouping: heads become
// Hidden/HeadDim, kv heads keep their ratio to the heads, and the MLP keeps
// its ratio to the hidden size (Intermediate·new/old, rounded down).
func (tc TransformerConfig) withOverrides(c Config) (TransformerConfig, error) {
	if c.Layers > 0 {
		tc.Layers = c.Layers
		if tc.DecoderLayers > 0 {
			tc.DecoderLayers = c.Layers
		}
	}
	if c.Hidden > 0 && c.Hidden != tc.Hidden {
		d, kv := tc.headDim(), tc.kvHeads()
		if d <= 0 || kv <= 0 || tc.Heads%kv != 0 {
			return tc, fmt.Errorf("cannot resize hidden: heads %d, kv heads %d, head size %d", tc.Heads, kv, d)
		}
		group := tc.Heads / kv
		if c.Hidden%(d*group) != 0 {
			return tc, fmt.Errorf("hidden size %d is not a multiple of head size %d × %d query heads per kv head", c.Hidden, d, group)
		}
		inter := tc.intermediate() * c.Hidden / tc.Hidden
		tc.Heads = c.Hidden / d
		if tc.KVHeads > 0 {
			tc.KVHeads = tc.Heads / group
		}
		tc.HeadDim = d
		tc.Intermediate = inter
		tc.Hidden = c.Hidden
	}
	return tc, nil
}

// Range gives the values a solver may give dimension d, the other sizes as
// in c. Width: withOverrides keeps the head size and the query heads per
// key/value head, so the hidden size is a multiple of head size × group
// (× the tensor parallelism, which splits the key/value heads t ways,
// tensorParallel). Depth: a pipeline needs a layer a stage (StageRange), and
// an explicit stage split fixes it. Sequence: a learned position table
// (GPT-2's wpe, BERT's position_embeddings, OPT's embed_positions) has no
// row for a later position, so its size bounds the sequence (check); rotary
// and relative positions set no bound. Sequence parallelism splits the
// sequence over the tensor-parallel ranks, so it is a multiple of them.
func (tc TransformerConfig) Range(d Dim, c Config) Range {
	switch d {
	case DimHidden:
		hd, kv := tc.headDim(), tc.kvHeads()
		if hd <= 0 || kv <= 0 || tc.Heads%kv != 0 {
			return AnyPositive
		}
		group := tc.Heads / kv
		r := Range{Min: hd * group, Step: hd * group, StepWhy: fmt.Sprintf("a multiple of the head size %d", hd)}
		if group > 1 {
			r.StepWhy += fmt.Sprintf(" × %d query heads per key/value head", group)
		}
		if c.TP > 1 {
			r.Min, r.Step = r.Min*c.TP, r.Step*c.TP
			r.StepWhy += fmt.Sprintf(" × tensor parallelism %d", c.TP)
		}
		return r
	case DimLayers:
		if len(c.StageLayers) > 0 {
			var sum int64
			for _, l := range c.StageLayers {
				sum += l
			}
			return Range{Min: sum, Step: 1, Max: sum, MaxWhy: fmt.Sprintf("the stage sizes, which add up to %d layers", sum)}
		}
		if c.PP > 1 {
			return Range{Min: c.PP, Step: 1, StepWhy: fmt.Sprintf("at least a layer for each of %d pipeline stages", c.PP)}
		}
		return AnyPositive
	case DimSeq:
		r := AnyPositive
		if c.SP && c.TP > 1 {
			r = Range{Min: c.TP, Step: c.TP, StepWhy: fmt.Sprintf("a multiple of the tensor parallelism %d (sequence parallelism splits the sequence)", c.TP)}
		}
		if arch, ok := hfArchs[tc.Arch]; ok && arch.learnedPositions && tc.MaxPositions > 0 {
			r.Max = tc.maxSeq()
			r.MaxWhy = fmt.Sprintf("the %d learned positions of %s (max_position_embeddings)", r.Max, tc.Arch)
		}
		return r
	}
	return AnyPositive
}

func (tc TransformerConfig) check(arch hfArch, c Config) error {
	if arch.vision {
		if err := tc.checkVision(); err != nil {
			return err
		}
	}
	switch {
	case c.Batch <= 0:
		return fmt.Errorf("batch size must be positive, got %d", c.Batch)
	case !arch.vision && c.Seq <= 0:
		return fmt.Errorf("sequence length must be positive, got %d", c.Seq)
	case arch.vision && (tc.Hidden <= 0 || tc.Layers <= 0 || tc.Heads <= 0):
		return fmt.Errorf("hidden_size, num_hidden_layers and num_attention_heads must be positive (got %d, %d, %d)",
			tc.Hidden, tc.Layers, tc.Heads)
	case !arch.vision && (tc.VocabSize <= 0 || tc.Hidden <= 0 || tc.Layers <= 0 || tc.Heads <= 0):
		return fmt.Errorf("vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive (got %d, %d, %d, %d)",
			tc.VocabSize, tc.Hidden, tc.Layers, tc.Heads)
	case tc.Heads%tc.kvHeads() != 0:
		return fmt.Errorf("%d attention heads are not a multiple of %d key/value heads", tc.Heads, tc.kvHeads())
	case tc.HeadDim == 0 && tc.Hidden%tc.Heads != 0:
		return fmt.Errorf("hidden size %d is not divisible by %d heads", tc.Hidden, tc.Heads)
	case tc.DropoutP < 0 || tc.DropoutP >= 1 || tc.AttnDropoutP < 0 || tc.AttnDropoutP >= 1:
		return fmt.Errorf("dropout probabilities must lie in [0, 1), got %g and %g", tc.DropoutP, tc.AttnDropoutP)
	}
	switch tc.AttnImpl {
	case "", "sdpa", "eager":
	default:
		return fmt.Errorf("unknown attn_implementation %q (want sdpa or eager)", tc.AttnImpl)
	}
	if err := tc.checkRelease(); err != nil {
		return err
	}
	if _, err := hfActivation(tc.Activation); err != nil {
		return err
	}
	if arch.learnedPositions {
		max := tc.maxSeq()
		if tc.MaxPositions <= 0 {
			return fmt.Errorf("%s needs max_position_embeddings", tc.Arch)
		}
		if c.Seq > max {
			return fmt.Errorf("sequence length %d exceeds the %d learned positions of %s", c.Seq, max, tc.Arch)
		}
	}
	if tc.Arch == "bert" || tc.Arch == "roberta" {
		if tc.TypeVocabSize <= 0 {
			return fmt.Errorf("%s needs type_vocab_size", tc.Arch)
		}
	}
	if tc.Arch == "t5" && tc.RelAttnBuckets <= 0 {
		return fmt.Errorf("t5 needs relative_attention_num_buckets")
	}
	return nil
}

// positionRows is the size of the learned position table: OPT adds its
// offset of 2 to max_position_embeddings, the others store the table size.
func (tc TransformerConfig) positionRows() int64 {
	if tc.Arch == "opt" {
		return tc.MaxPositions + 2
	}
	return tc.MaxPositions
}

// maxSeq is the longest sequence a learned position table serves: RoBERTa
// counts positions from padding_idx+1.
func (tc TransformerConfig) maxSeq() int64 {
	if tc.Arch == "roberta" {
		return tc.MaxPositions - tc.PadTokenID - 1
	}
	return tc.MaxPositions
}

// hfVersion is a transformers release as major·1000 + minor (4.46 → 4046).
type hfVersion int

// hfCurrent stands for the current code.
const hfCurrent hfVersion = 1 << 30

func parseHFVersion(v string) (hfVersion, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if v == "" || v == "latest" {
		return hfCurrent, nil
	}
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, fmt.Errorf("transformers version %q: want major.minor such as 4.45", v)
	}
	var major, minor int
	if _, err := fmt.Sscanf(parts[0]+" "+parts[1], "%d %d", &major, &minor); err != nil || major < 4 || minor < 0 {
		return 0, fmt.Errorf("transformers version %q: want major.minor (4.x or later) such as 4.45", v)
	}
	return hfVersion(major*1000 + minor), nil
}

func (tc TransformerConfig) version() hfVersion {
	v, err := parseHFVersion(tc.Version)
	if err != nil {
		return hfCurrent
	}
	return v
}

// hfActivation maps an ACT2FN name to the op it runs; "gelu_new" has no
// single op (see hfBuilder.act).
func hfActivation(name string) (graph.Kind, error) {
	switch name {
	case "gelu_new":
		return "", nil
	case "gelu":
		return graph.GELU, nil
	case "gelu_pytorch_tanh":
		return graph.GELUTanh, nil
	case "silu", "swish":
		return graph.SiLU, nil
	case "relu":
		return graph.ReLU, nil
	case "tanh":
		return graph.Tanh, nil
	case "sigmoid":
		return graph.Sigmoid, nil
	}
	return "", fmt.Errorf("unsupported activation %q (supported: gelu_new, gelu, gelu_pytorch_tanh, silu, relu, tanh, sigmoid)", name)
}

// hfBuilder carries one build.
type hfBuilder struct {
	b    *graph.Builder
	tc   TransformerConfig
	B, L int64
	dt   graph.DType
	// eagerMask is the additive mask the eager attention path adds to the
	// scores (None when there is none).
	eagerMask graph.TensorID
	// lo and hi are the layers this pipeline stage builds; first and last
	// say whether it embeds the tokens and computes the loss.
	lo, hi      int64
	first, last bool
	// sp is the sequence-parallel degree (0: none): norms, dropouts and
	// residuals run on L/sp positions, gathered before the
	// column-parallel projections and reduce-scattered after the
	// row-parallel ones.
	sp int64
	// dec is one forward of generate() (nil: a training step); layer is
	// the index of the decoder layer being built.
	dec   *Decode
	layer int
	// loopLoss: the loss is the training loop's, on the returned logits
	// (graph.Config.LossFromLogits).
	loopLoss bool
	// libCkpt: the library's gradient checkpointing is on
	// (graph.Config.LibraryCheckpointing)
	libCkpt bool
}

// gather and scatter are sequence parallelism's collectives along the
// sequence, or nothing without it.
func (t *hfBuilder) gather(name string, x graph.TensorID) graph.TensorID {
	if t.sp <= 1 {
		return x
	}
	return t.b.AllGather(name, x, 1, t.sp)
}

func (t *hfBuilder) scatter(name string, x graph.TensorID) graph.TensorID {
	if t.sp <= 1 {
		return x
	}
	return t.b.ReduceScatter(name, x, 1, t.sp)
}

// tensorParallelArchs are the architectures whose builder splits by
// heads, kv heads, intermediate size and vocabulary alone.
var tensorParallelArchs = map[string]bool{"llama": true, "mistral": true, "qwen2": true, "gemma": true, "phi3": true}

// tensorParallel is one rank's share of Megatron-LM's tensor parallelism
// of degree t: the query, key, value, gate and up projections are
// column-parallel (their output features split t ways: heads/t, kv
// heads/t, intermediate/t), the output and down projections row-parallel
// (their input features split, their outputs whole after an in-place
// all-reduce), the embedding and the head vocabulary-parallel (vocab/t
// rows; the loss over the rank's vocabulary slice), the norms replicated.
// Head size and hidden size stay. A vocabulary not divisible by t is
// padded up to the next multiple, as Megatron pads it.
func (tc TransformerConfig) tensorParallel(t int64) (TransformerConfig, error) {
	kv := tc.kvHeads()
	switch {
	case tc.Heads%t != 0:
		return tc, fmt.Errorf("tensor parallelism %d does not divide %d attention heads", t, tc.Heads)
	case kv%t != 0:
		return tc, fmt.Errorf("tensor parallelism %d does not divide %d key/value heads (Megatron splits the query groups)", t, kv)
	case tc.intermediate()%t != 0:
		return tc, fmt.Errorf("tensor parallelism %d does not divide the intermediate size %d", t, tc.intermediate())
	}
	tc.HeadDim = tc.headDim()
	tc.Intermediate = tc.intermediate() / t
	tc.Heads /= t
	tc.KVHeads = kv / t
	tc.VocabSize = (tc.VocabSize + t - 1) / t
	return tc, nil
}

// hfLinear is an nn.Linear's parameters, created in module registration
// order ahead of use (model.parameters() order is registration order,
// which forward() does not always follow).
type hfLinear struct {
	w, bias graph.TensorID
	// lora is the layer's LoRA adapter, when a target names it.
	lora    graph.LoRA
	adapted bool
}

// linear creates the parameters of nn.Linear(in, out, bias) named name
// under the current scope.
func (t *hfBuilder) linear(name string, in, out int64, bias bool) hfLinear {
	b := t.b
	b.Push(name)
	l := hfLinear{w: b.Param("weight", graph.Shape{out, in}), bias: graph.None}
	if bias {
		l.bias = b.Param("bias", graph.Shape{out})
	}
	b.Pop()
	b.QuantizeLinear(name, l.w)
	l.lora, l.adapted = b.LoRAParams(name, in, out)
	return l
}

// conv1d creates the parameters of transformers' Conv1D(nf=out, nx=in)
// (GPT-2): its weight is [in, out] and it runs torch.addmm(bias,
// x.view(-1, in), weight). The Builder's linear takes [out, in] weights, so
// the weight is created as [out, in]: same element count, same bytes, same
// saved tensors (addmm saves x and the weight); only the shape is
// transposed relative to the checkpoint.
func (t *hfBuilder) conv1d(name string, in, out int64) hfLinear {
	return t.linear(name, in, out, true)
}

func (t *hfBuilder) apply(name string, x graph.TensorID, l hfLinear) graph.TensorID {
	y := t.b.LinearWith(name, x, l.w, l.bias)
	if l.adapted {
		y = t.b.ApplyLoRA(name, x, y, l.lora)
	}
	return y
}

// embedding creates nn.Embedding(num, dim)'s weight under the current scope.
func (t *hfBuilder) embedding(name string, num, dim int64) graph.TensorID {
	return t.b.Param(name+".weight", graph.Shape{num, dim})
}

// hfConst declares a tensor that forward() creates outside autograd
// (torch.arange position ids, rotary cos/sin under no_grad, masks), made
// where like is: it lives from there until its last reader is done, or
// until the backward that autograd or a checkpoint holds it for, not for
// the whole step as the batch does. A floating one has like's run-time
// dtype (see graph.Builder.Const).
func (t *hfBuilder) hfConst(name string, like graph.TensorID, s graph.Shape, dt graph.DType) graph.TensorID {
	return t.b.Const(name, like, dt, s...)
}

// act applies the config's activation. NewGELUActivation ("gelu_new") is
// 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 *
// torch.pow(x, 3.0)))), evaluated left to right as eight ops:
//
//	a = 0.5 * x          mul by a Python number: saves nothing
//	p = torch.pow(x, 3)  saves x (under CUDA autocast a float32 copy of x:
//	                     pow is on AT_FORALL_FP32, and float32 then
//	                     propagates by type promotion through s, u, w, h,
//	                     e and y)
//	s = 0.044715 * p     nothing
//	u = x + s            nothing
//	w = 0.7978… * u      nothing
//	h = torch.tanh(w)    saves its result h
//	e = 1.0 + h          add of a number: nothing (modelled as a scalar op)
//	y = a * e            saves a and e
//
// so it keeps x, h, a and e: four tensors of x's size where the fused
// gelu(approximate="tanh") keeps one.
func (t *hfBuilder) act(name string, x graph.TensorID) graph.TensorID {
	b := t.b
	k, _ := hfActivation(t.tc.Activation)
	if k != "" {
		return b.Act(k, name, x, false)
	}
	var y graph.TensorID
	b.Scope(name, func() {
		a := b.Scale("mul_half", x)
		p := b.Unary(graph.Pow, "pow", x)
		s := b.Scale("mul_coef", p)
		u := b.Add("add", x, s)
		w := b.Scale("mul_sqrt_2_over_pi", u)
		h := b.Act(graph.Tanh, "tanh", w, false)
		e := b.Scale("add_one", h)
		y = b.Mul("mul", a, e)
	})
	return y
}

// maskedLMLoss is CrossEntropyLoss()(logits.view(-1, V), labels.view(-1)),
// as BertForMaskedLM, RobertaForMaskedLM and T5ForConditionalGeneration
// compute it (no upcast).
func (t *hfBuilder) maskedLMLoss(logits, labels graph.TensorID) {
	b := t.b
	b.Return(logits) // MaskedLMOutput / Seq2SeqLMOutput(loss, logits)
	V := t.tc.VocabSize
	b.Scope("loss", func() {
		flat := b.Reshape("view_logits", logits, -1, V)
		target := b.Reshape("view_labels", labels, -1)
		b.CrossEntropy("cross_entropy", flat, target)
	})
}

// headsView is x.view(B, L, n, D).transpose(1, 2) for x [B, L, n·D]: a
// [B, n, L, D] view.
func (t *hfBuilder) headsView(name string, x graph.TensorID, n, d int64) graph.TensorID {
	b := t.b
	s := b.Shape(x)
	if len(s) != 3 {
		b.Fail("%s: expected [B, L, n·D], got %v", name, s)
		return graph.None
	}
	v := b.Reshape(name+"_view", x, s[0], s[1], n, d)
	return b.Transpose(name+"_transpose", v, 1, 2)
}

// splitHeads takes a fused projection x [B, L, (n0+n1+…)·D] (GPT-2's c_attn,
// Phi-3's qkv_proj) and returns each part as a [B, n_i, L, D] view, the
// result of x.split(...)[i].view(B, L, n_i, D).transpose(1, 2). The Builder
// turns a reshape of a non-contiguous split into a copy, though viewing a
// split of the last dimension is stride-compatible in PyTorch, so the
// equivalent view order is used: x.view(B, L, Σn, D), narrow dim 2 to each
// part, transpose(1, 2). Every step is a view of x's storage either way.
// (Narrow takes no start offset; offsets do not change storage.)
func (t *hfBuilder) splitHeads(name string, x graph.TensorID, d int64, parts ...int64) []graph.TensorID {
	b := t.b
	var n int64
	for _, p := range parts {
		n += p
	}
	v := b.Reshape(name+"_view", x, t.B, t.L, n, d)
	out := make([]graph.TensorID, len(parts))
	for i, p := range parts {
		part := b.Narrow(name+"_split"+itoa(int64(i)), v, 2, p)
		out[i] = b.Transpose(name+"_transpose"+itoa(int64(i)), part, 1, 2)
	}
	return out
}

// attnOpts say how a model's attention module calls the attention function.
type attnOpts struct {
	causal bool
	p      float64
	// gqa: the module has num_key_value_groups (llama-style), so
	// sdpa_attention_forward repeats or broadcasts kv heads.
	gqa bool
	// contiguousLegacy: the module goes through sdpa_attention_forward,
	// which called query/key/value.contiguous() in 4.48–4.55 (BERT's own
	// SDPA module skipped it without a mask).
	contiguousLegacy bool
	// eager describes the model's eager_attention_forward.
	eager eagerOpts
}

// eagerOpts describe an eager attention function: scores = q @ kᵀ, then in
// order an optional scale, an optional additive mask (or T5's in-place
// position bias), softmax (optionally in float32 and cast back), dropout,
// attn @ v.
type eagerOpts struct {
	scale       bool
	mask        graph.TensorID // None when absent; broadcast to the scores
	maskInplace bool           // scores += mask (T5)
	upcast      bool           // softmax in float32, then .to(query.dtype)
	// transposeOnly: the function returns attn_output.transpose(1, 2)
	// without .contiguous() (GPT-2's eager path).
	transposeOnly bool
}

// attention runs the attention function on q [B, H, L, D], k and v
// [B, Hkv, S, D] and returns attn_output.transpose(1, 2) as the function
// returns it: [B, L, H, D], contiguous except for GPT-2's eager path.
//
// When the Attention op gets fewer kv heads than query heads, transformers
// called SDPA with enable_gqa=True. PyTorch's flash kernel handles the
// grouping itself; the memory-efficient kernel does not, so where flash is
// unavailable (float32, head_dim > 256, GPUs before sm80) SDPA falls back
// to the math kernel, which repeats k and v and materialises the
// [B, H, L, S] scores. That choice belongs to the simulator's kernel rule.
func (t *hfBuilder) attention(q, k, v graph.TensorID, o attnOpts) graph.TensorID {
	b := t.b
	ver := t.tc.version()
	heads := t.tc.Heads
	eager := t.tc.AttnImpl == "eager"
	// repeat_kv: always in eager; in SDPA until enable_gqa (4.54).
	if o.gqa && (eager || ver < 4054) {
		k = t.repeatKV("repeat_kv_key", k, heads)
		v = t.repeatKV("repeat_kv_value", v, heads)
	}
	var out graph.TensorID
	if eager {
		out = t.eagerCore(q, k, v, o.p, o.eager)
		if o.eager.transposeOnly {
			return b.Transpose("transpose", out, 1, 2)
		}
	} else {
		if o.contiguousLegacy && ver >= 4048 && ver < 4056 {
			q = b.Contiguous("query_contiguous", q)
			k = b.Contiguous("key_contiguous", k)
			v = b.Contiguous("value_contiguous", v)
		}
		// enable_gqa=True where the kv heads reach SDPA unrepeated (≥ 4.54)
		out = b.AttentionGQA("sdpa", q, k, v, o.causal, o.p, graph.QueryBHLD, o.gqa && ver >= 4054)
	}
	out = b.Transpose("transpose", out, 1, 2)
	return b.Contiguous("contiguous", out)
}

// eagerCore is the body of an eager_attention_forward up to attn @ v.
func (t *hfBuilder) eagerCore(q, k, v graph.TensorID, p float64, e eagerOpts) graph.TensorID {
	b := t.b
	kt := b.Transpose("key_transpose", k, 2, 3)
	s := b.MatMul("matmul_qk", q, kt)
	if e.scale {
		s = b.Scale("scale", s)
	}
	if e.mask != graph.None {
		if e.maskInplace {
			s = b.AddInplace("add_mask", s, e.mask)
		} else {
			s = b.Add("add_mask", s, e.mask)
		}
	}
	dt := b.DTypeOf(s)
	if e.upcast {
		s = b.Cast("float", s, graph.F32)
	}
	a := b.Softmax("softmax", s, -1, false)
	if e.upcast {
		a = b.Cast("to_dtype", a, dt)
	}
	a = b.Dropout("attn_dropout", a, p, false)
	return b.MatMul("matmul_av", a, v)
}

// repeatKV is transformers' repeat_kv(x, n_rep): x[:, :, None].expand(B,
// Hkv, n_rep, S, D).reshape(B, H, S, D), a copy when n_rep > 1.
func (t *hfBuilder) repeatKV(name string, x graph.TensorID, heads int64) graph.TensorID {
	b := t.b
	s := b.Shape(x)
	if s == nil || s[1] == heads {
		return x
	}
	rep := heads / s[1]
	e := b.Expand(name+"_expand", x, s[0], s[1], rep, s[2], s[3])
	return b.Reshape(name+"_reshape", e, s[0], heads, s[2], s[3])
}

// lmHead is logits = lm_head(hidden_states[:, slice(-logits_to_keep, None), :])
// with logits_to_keep = 0: the slice is a full-length view. generate()
// passes logits_to_keep=1 (num_logits_to_keep from 4.45) to the models
// that take it, so that only the last position's logits are made.
func (t *hfBuilder) lmHead(name string, h graph.TensorID, w, bias graph.TensorID) graph.TensorID {
	b := t.b
	keep := t.L
	if t.dec != nil && t.tc.version() >= 4045 {
		keep = 1
	}
	h = b.Narrow("logits_to_keep", h, 1, keep)
	return b.LinearWith(name, h, w, bias)
}

// kvLen is the key/value length attention sees: the sequence in training;
// in generate() the cache after this forward's update (the past and the
// new tokens), or a static cache's whole max_cache_len (StaticCache.update
// returns its preallocated tensors, unused positions masked).
func (t *hfBuilder) kvLen() int64 {
	switch {
	case t.dec == nil:
		return t.L
	case t.dec.StaticLen > 0:
		return t.dec.StaticLen
	}
	return t.dec.Past + t.L
}

// cacheUpdate is past_key_values.update(key_states, value_states,
// layer_idx) on the keys and values [B, Hkv, L, D] of the current layer
// (identity in training). DynamicCache.update kept the first key_states
// itself (appended to its key_cache list) until the cache layers of 4.54;
// DynamicLayer.lazy_initialization starts from torch.tensor([]) and every
// update, the first too, is a torch.cat: a copy.
func (t *hfBuilder) cacheUpdate(k, v graph.TensorID) (graph.TensorID, graph.TensorID) {
	if t.dec == nil {
		return k, v
	}
	b := t.b
	static := t.dec.StaticLen > 0
	keep := t.tc.version() < 4054
	k = b.KVCache("past_key_values.keys", k, 2*t.layer, t.kvLen(), static, keep)
	v = b.KVCache("past_key_values.values", v, 2*t.layer+1, t.kvLen(), static, keep)
	return k, v
}

// nextTokenLogits is what generate() does with the logits [B, K, V] of a
// forward: next_token_logits = outputs.logits[:, -1, :].to(copy=True,
// dtype=torch.float32) (generation/utils.py, _sample and _beam_search: a
// float32 copy of the last position, whatever the logits' dtype), then,
// for beam search, log_softmax over the vocabulary (float32). Greedy and
// sampling pick from it with argmax / softmax + multinomial, tensors of
// [B, V] at most; the output stands for them.
func (t *hfBuilder) nextTokenLogits(logits graph.TensorID) {
	b := t.b
	b.Scope("generate", func() {
		last := b.Select("last_position", logits, 1) // logits[:, -1, :], a view
		out := b.CastCopy("next_token_logits", last, graph.F32)
		if t.dec.LogSoftmax {
			out = b.Softmax("log_softmax", out, -1, true)
		}
		b.Output(out)
	})
}

// checkDecode says whether generate() can be built for the model.
func (tc TransformerConfig) checkDecode(c Config) error {
	switch tc.Arch {
	case "llama", "mistral", "qwen2", "gemma", "phi3":
	default:
		return fmt.Errorf("generation is modelled for the llama-style decoders (llama, mistral, qwen2, gemma, phi3), not %s", tc.Arch)
	}
	d := c.Decode
	switch {
	case d.Past < 0:
		return fmt.Errorf("cache length must not be negative, got %d", d.Past)
	case d.StaticLen > 0 && d.StaticLen < d.Past+c.Seq:
		return fmt.Errorf("static cache of %d positions cannot hold %d", d.StaticLen, d.Past+c.Seq)
	}
	return nil
}
