package hf

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// Model is a Hugging Face model opened from a config.json or a model
// directory. It implements predict.Source.
type Model struct {
	// Config is the converted config.json.
	Config *Config
	// Checkpoint is the safetensors weights beside the config (nil when
	// there are none, or when Open was given a config file).
	Checkpoint *Checkpoint
	// Tally accounts for the checkpoint's tensors (nil without weights).
	Tally *Tally
	// StoredDType is the safetensors dtype ("BF16", "F32", ...) holding
	// most of the counted parameter bytes; "" without weights. See
	// GraphDType for the graph's type.
	StoredDType string
	// ParamCount is the number of parameters of the graph: of the class
	// batchfit builds, tied weights once.
	ParamCount int64
	// StoredBytes is what the checkpoint's tensors hold, all files
	// (quantized pieces and bitsandbytes' quant_state included); 0
	// without weights.
	StoredBytes int64

	name string
}

// Tally is the checkpoint's tensors sorted into parameters and the rest.
type Tally struct {
	// Total is the number of elements of all tensors in all files.
	Total int64
	// Params is Total less the excluded tensors: the parameters of the
	// built class as the checkpoint stores them.
	Params int64
	// Excluded lists the tensors left out, each with its reason.
	Excluded []Exclusion
	// Bytes sums the counted tensors' bytes by safetensors dtype.
	Bytes map[string]int64
}

// Exclusion is a checkpoint tensor that is not a parameter of the graph.
type Exclusion struct {
	Tensor string
	File   string
	Numel  int64
	Reason string
}

// Open opens path, a config.json or a model directory. A directory needs a
// config.json; its weights (model.safetensors, else the shards of
// model.safetensors.index.json) are optional. When there are weights,
// their headers are read (never the data) and the elements they hold,
// less the tensors Tally documents as not parameters, must equal the
// graph's parameter count; a disagreement is an error naming both. A
// config.json path reads the config alone. A quantized checkpoint
// (quantization_config) is not counted in elements, which packed tensors
// do not give: instead every piece its format stores for a quantized
// Linear must be there with the bytes the format gives it (see
// graph.Quant.Pieces).
//
// The model's default sequence length is the zoo's for a config with a
// zoo entry's exact parameters (Llama-3-8B's 8192, for Llama-3.1-8B too),
// otherwise min(max_position_embeddings, 4096): for RoBERTa the positions
// after padding_idx (max_position_embeddings − pad_token_id − 1), for T5
// n_positions (512 when absent). Beyond 4096 a default would describe
// long-context extensions rather than how such models are trained; ask
// for longer sequences explicitly.
// A vit model has no sequence length (0): it takes an image, of
// image_size unless models.Config.Image says otherwise.
func Open(path string) (*Model, error) { return OpenFS(osFiles{}, path) }

// OpenFS is Open over the files of fsys: path names a config.json or a
// directory in it. A safetensors file in fsys need hold only its header:
// the size its Stat reports is what the header is checked against, so a
// model directory's headers uploaded without their data open as the
// directory would.
func OpenFS(fsys fs.FS, path string) (*Model, error) {
	st, err := fs.Stat(fsys, path)
	if err != nil {
		return nil, err
	}
	dir, cfgPath := "", path
	if st.IsDir() {
		dir, cfgPath = path, filepath.Join(path, ConfigName)
	}
	cfg, err := loadConfig(fsys, cfgPath)
	if dir != "" && errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: not a model directory: no %s", dir, ConfigName)
	}
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg, name: modelName(path), ParamCount: cfg.paramCount}
	if dir == "" {
		return m, nil
	}
	wpath, err := findCheckpoint(fsys, dir)
	if err != nil || wpath == "" {
		return m, err
	}
	if m.Checkpoint, err = readCheckpoint(fsys, wpath); err != nil {
		return nil, err
	}
	m.Tally = cfg.Count(m.Checkpoint)
	m.StoredDType = dominant(m.Tally.Bytes)
	for _, h := range m.Checkpoint.Files {
		for _, t := range h.Tensors {
			m.StoredBytes += t.Bytes()
		}
	}
	if cfg.Quant != nil {
		g, err := m.Build(models.Config{Batch: 1})
		if err != nil {
			return nil, err
		}
		if err := checkQuantized(g, m.Checkpoint); err != nil {
			return nil, err
		}
		return m, nil
	}
	if m.Tally.Params != m.ParamCount {
		g, err := m.Build(models.Config{Batch: 1})
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: the checkpoint holds %d parameters but the %s graph has %d (%+d)%s",
			wpath, m.Tally.Params, cfg.className(), m.ParamCount, m.Tally.Params-m.ParamCount, diffHint(g, m.Checkpoint, m.Tally))
	}
	return m, nil
}

// Name is the model directory's name (for a config.json, its directory's).
func (m *Model) Name() string { return m.name }

// Build builds the graph for c; Seq 0 means DefaultSeq. A vit model
// ignores Seq and takes c.Image (0: the config's image_size).
func (m *Model) Build(c models.Config) (*graph.Graph, error) {
	if c.Seq == 0 {
		c.Seq = m.DefaultSeq()
	}
	if c.Quant == nil {
		c.Quant = m.Config.Quant
	}
	return models.BuildTransformer(m.name, m.Config.Transformer, c)
}

// ModelParallel reports that the model can be split for tensor and
// pipeline parallelism (models.BuildTransformer checks the architecture).
func (m *Model) ModelParallel() bool { return true }

// DefaultSeq is the sequence length used when none is given (see Open).
func (m *Model) DefaultSeq() int64 { return m.Config.DefaultSeq }

// Dims are the dimensions besides batch that Build honours: sequence
// length (not for vit), depth and width (models.TransformerConfig's
// overrides).
func (m *Model) Dims() []models.Dim {
	if m.Config.ModelType == "vit" {
		return []models.Dim{models.DimLayers, models.DimHidden}
	}
	return []models.Dim{models.DimSeq, models.DimLayers, models.DimHidden}
}

// Quantized reports a checkpoint stored quantized (its
// quantization_config): its weights are never trained whole.
func (m *Model) Quantized() bool { return m.Config.Quant != nil }

// Range gives the valid values of a dimension (models.TransformerConfig's
// Range: width in multiples of the head size, the sequence up to a learned
// position table).
func (m *Model) Range(d models.Dim, c models.Config) models.Range {
	return m.Config.Transformer.Range(d, c)
}

// lmClassName is the transformers class batchfit builds for model_type mt
// when the config asks for no task head (see Config.Architectures).
func lmClassName(mt string) string {
	switch mt {
	case "bert":
		return "BertForMaskedLM"
	case "roberta":
		return "RobertaForMaskedLM"
	case "t5":
		return "T5ForConditionalGeneration"
	case "gpt2":
		return "GPT2LMHeadModel"
	case "gpt_neox":
		return "GPTNeoXForCausalLM"
	case "opt":
		return "OPTForCausalLM"
	case "qwen2":
		return "Qwen2ForCausalLM"
	case "phi3":
		return "Phi3ForCausalLM"
	case "vit":
		return "ViTForImageClassification"
	}
	return strings.ToUpper(mt[:1]) + mt[1:] + "ForCausalLM"
}

func dominant(bytes map[string]int64) string {
	best, bestN := "", int64(-1)
	for dt, n := range bytes {
		if n > bestN || (n == bestN && dt < best) {
			best, bestN = dt, n
		}
	}
	return best
}

// What a checkpoint stores besides the graph's parameters, by model_type.
// Each rule names what transformers itself does not load into the class
// batchfit builds.
type rule struct {
	re     *regexp.Regexp
	reason string
}

var (
	// Rotary inv_freq: a buffer (persistent=False since transformers
	// 4.31); checkpoints saved earlier store one per layer (Llama-2's
	// original conversion, Pythia).
	ruleInvFreq = rule{regexp.MustCompile(`(^|\.)rotary_emb\.inv_freq$`), "rotary inv_freq buffer"}
	// GPT2Attention's causal-mask table bias [1, 1, P, P] and masked_bias:
	// buffers the original GPT-2 checkpoints store (GPT2Model's
	// _keys_to_ignore_on_load_unexpected).
	ruleGPT2Mask = rule{regexp.MustCompile(`(^|\.)h\.\d+\.attn\.(bias|masked_bias)$`), "GPT-2 causal-mask buffer"}
	// GPTNeoXAttention's bias and masked_bias buffers (Pythia stores them).
	ruleNeoXMask = rule{regexp.MustCompile(`(^|\.)layers\.\d+\.attention\.(bias|masked_bias)$`), "GPT-NeoX causal-mask buffer"}
	// BertEmbeddings' position_ids and token_type_ids buffers, persistent
	// in checkpoints saved before transformers 4.31.
	ruleBertIDs = rule{regexp.MustCompile(`(^|\.)embeddings\.(position_ids|token_type_ids)$`), "embeddings id buffer"}
	// The pooler: *ForMaskedLM has none (_keys_to_ignore_on_load_unexpected
	// = [r"pooler"]); bert-base-uncased and roberta-base store one.
	rulePooler = rule{regexp.MustCompile(`(^|\.)pooler\.dense\.(weight|bias)$`), "pooler, which the masked-LM class has not"}
	// BertForPreTraining's next-sentence head (bert-base-uncased stores it).
	ruleNSP = rule{regexp.MustCompile(`^cls\.seq_relationship\.(weight|bias)$`), "next-sentence head, which BertForMaskedLM has not"}
	// A cross-attention position bias that old T5 checkpoints carry and
	// T5ForConditionalGeneration ignores on load
	// (_keys_to_ignore_on_load_unexpected).
	ruleT5CrossBias = rule{regexp.MustCompile(`^decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias\.weight$`), "unused T5 cross-attention bias"}
	// ViTModel's pooler (ViTModel checkpoints such as the ImageNet-21k
	// ones store it); ViTForImageClassification builds ViTModel with
	// add_pooling_layer=False and ignores it on load.
	ruleViTPooler = rule{regexp.MustCompile(`(^|\.)pooler\.dense\.(weight|bias)$`), "pooler, which ViTForImageClassification has not"}
)

// tieGroup names tensors that are one Parameter in the built class: a
// checkpoint stores the group once (save_pretrained drops the copies) or
// several times; all but the first present are excluded. Names match as
// suffixes after a dot, so base-model checkpoints without the class's
// prefix ("h.0…" for "transformer.h.0…") match too.
type tieGroup struct {
	names []string
	when  tieWhen
}

type tieWhen uint8

const (
	always   tieWhen = iota
	ifTied           // tie_word_embeddings is set
	ifUntied         // tie_word_embeddings is not set
)

type countRules struct {
	exclude []rule
	ties    []tieGroup
}

var llamaRules = countRules{
	exclude: []rule{ruleInvFreq},
	ties:    []tieGroup{{names: []string{"embed_tokens.weight", "lm_head.weight"}, when: ifTied}},
}

var countRulesByType = map[string]countRules{
	"llama": llamaRules, "mistral": llamaRules, "qwen2": llamaRules, "gemma": llamaRules, "phi3": llamaRules,
	"gpt2": {
		exclude: []rule{ruleGPT2Mask},
		ties:    []tieGroup{{names: []string{"wte.weight", "lm_head.weight"}, when: ifTied}},
	},
	"gpt_neox": {
		exclude: []rule{ruleInvFreq, ruleNeoXMask},
		ties:    []tieGroup{{names: []string{"embed_in.weight", "embed_out.weight"}, when: ifTied}},
	},
	"opt": {
		ties: []tieGroup{{names: []string{"embed_tokens.weight", "lm_head.weight"}, when: ifTied}},
	},
	"bert": {
		exclude: []rule{ruleBertIDs, rulePooler, ruleNSP},
		ties: []tieGroup{
			{names: []string{"word_embeddings.weight", "cls.predictions.decoder.weight"}, when: ifTied},
			// BertLMPredictionHead: decoder.bias = self.bias.
			{names: []string{"cls.predictions.bias", "cls.predictions.decoder.bias"}},
		},
	},
	"roberta": {
		exclude: []rule{ruleBertIDs, rulePooler},
		ties: []tieGroup{
			{names: []string{"word_embeddings.weight", "lm_head.decoder.weight"}, when: ifTied},
			{names: []string{"lm_head.bias", "lm_head.decoder.bias"}},
		},
	},
	"vit": {exclude: []rule{ruleViTPooler}},
	"t5": {
		exclude: []rule{ruleT5CrossBias},
		ties: []tieGroup{
			// The stacks' embed_tokens are the shared embedding whatever
			// tie_word_embeddings says; lm_head joins when it is set.
			{names: []string{"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}, when: ifUntied},
			{names: []string{"shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight"}, when: ifTied},
		},
	},
}

func matchName(name, pattern string) bool {
	return name == pattern || strings.HasSuffix(name, "."+pattern)
}

// Count sorts a checkpoint's tensors into the parameters of c's graph and
// the rest (see countRulesByType: rotary inv_freq, GPT-2's and GPT-NeoX's
// mask buffers, BERT's id buffers, the pooler and next-sentence head the
// masked-LM class lacks, ViT's pooler, T5's unused cross-attention bias,
// and second copies of tied weights).
func (c *Config) Count(ck *Checkpoint) *Tally {
	rules := c.countRules()
	t := &Tally{Bytes: map[string]int64{}}
	type loc struct {
		file string
		t    Tensor
	}
	var all []loc
	for _, h := range ck.Files {
		for _, tn := range h.Tensors {
			all = append(all, loc{h.Path, tn})
		}
	}
	excluded := make([]bool, len(all))
	for i, l := range all {
		t.Total += l.t.Numel()
		for _, r := range rules.exclude {
			if r.re.MatchString(l.t.Name) {
				excluded[i] = true
				t.Excluded = append(t.Excluded, Exclusion{l.t.Name, l.file, l.t.Numel(), r.reason})
				break
			}
		}
	}
	for _, g := range rules.ties {
		if (g.when == ifTied && !c.Transformer.TieEmbeddings) || (g.when == ifUntied && c.Transformer.TieEmbeddings) {
			continue
		}
		first := -1
		for _, pattern := range g.names {
			for i, l := range all {
				if excluded[i] || !matchName(l.t.Name, pattern) {
					continue
				}
				if first < 0 {
					first = i
					continue
				}
				if i == first || l.t.Numel() != all[first].t.Numel() {
					continue // a different shape is not a copy: let the count disagree
				}
				excluded[i] = true
				t.Excluded = append(t.Excluded, Exclusion{l.t.Name, l.file, l.t.Numel(), "tied to " + all[first].t.Name})
			}
		}
	}
	for i, l := range all {
		if !excluded[i] {
			t.Params += l.t.Numel()
			t.Bytes[l.t.DType] += l.t.Bytes()
		}
	}
	sort.Slice(t.Excluded, func(i, j int) bool { return t.Excluded[i].Tensor < t.Excluded[j].Tensor })
	return t
}

// diffHint names a few tensors on either side that the other lacks, by
// name (a checkpoint name matches a graph parameter equal to it or ending
// in "."+it) and element count.
func diffHint(g *graph.Graph, ck *Checkpoint, t *Tally) string {
	params := map[string]int64{}
	for _, id := range g.Params() {
		p := g.Tensor(id)
		params[p.Name] = p.Shape.Numel()
	}
	skip := map[string]bool{}
	for _, e := range t.Excluded {
		skip[e.Tensor] = true
	}
	used := map[string]bool{}
	var extra []string
	for _, h := range ck.Files {
		for _, tn := range h.Tensors {
			if skip[tn.Name] {
				continue
			}
			match := ""
			if n, ok := params[tn.Name]; ok && n == tn.Numel() {
				match = tn.Name
			} else {
				for p, n := range params {
					if !used[p] && n == tn.Numel() && strings.HasSuffix(p, "."+tn.Name) {
						match = p
						break
					}
				}
			}
			if match == "" {
				extra = append(extra, fmt.Sprintf("%s %v", tn.Name, graph.Shape(tn.Shape)))
			} else {
				used[match] = true
			}
		}
	}
	var missing []string
	for _, id := range g.Params() {
		p := g.Tensor(id)
		if !used[p.Name] {
			missing = append(missing, fmt.Sprintf("%s %v", p.Name, p.Shape))
		}
	}
	var parts []string
	if len(extra) > 0 {
		sort.Strings(extra)
		parts = append(parts, "only in the checkpoint: "+strings.Join(limit(extra, 5), ", "))
	}
	if len(missing) > 0 {
		parts = append(parts, "only in the graph: "+strings.Join(limit(missing, 5), ", "))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

func limit(ss []string, n int) []string {
	if len(ss) <= n {
		return ss
	}
	return append(ss[:n:n], fmt.Sprintf("and %d more", len(ss)-n))
}
