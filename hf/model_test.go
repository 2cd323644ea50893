package hf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
)

// tinyLlamaParams is tinyLlama's LlamaForCausalLM by hand: embed_tokens
// and lm_head 256·64 each, the final norm 64, and per layer q_proj 64·64,
// k_proj and v_proj 64·32 (2 kv heads of 16), o_proj 64·64, gate_proj,
// up_proj and down_proj 64·128 each, two norms of 64.
const tinyLlamaParams = 2*256*64 + 64 + 2*(4096+2048+2048+4096+3*8192+2*64) // 106,816

// tinyLlamaTensors are the tensors save_pretrained writes for tinyLlama,
// in dtype, with the inv_freq buffers a checkpoint from before
// transformers 4.31 carries.
func tinyLlamaTensors(dtype string) []st {
	ts := []st{{"model.embed_tokens.weight", dtype, []int64{256, 64}}}
	for i := 0; i < 2; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		ts = append(ts,
			st{p + "self_attn.q_proj.weight", dtype, []int64{64, 64}},
			st{p + "self_attn.k_proj.weight", dtype, []int64{32, 64}},
			st{p + "self_attn.v_proj.weight", dtype, []int64{32, 64}},
			st{p + "self_attn.o_proj.weight", dtype, []int64{64, 64}},
			st{p + "self_attn.rotary_emb.inv_freq", "F32", []int64{8}},
			st{p + "mlp.gate_proj.weight", dtype, []int64{128, 64}},
			st{p + "mlp.up_proj.weight", dtype, []int64{128, 64}},
			st{p + "mlp.down_proj.weight", dtype, []int64{64, 128}},
			st{p + "input_layernorm.weight", dtype, []int64{64}},
			st{p + "post_attention_layernorm.weight", dtype, []int64{64}},
		)
	}
	return append(ts, st{"model.norm.weight", dtype, []int64{64}}, st{"lm_head.weight", dtype, []int64{256, 64}})
}

// modelDir writes a model directory: config.json and, unless ts is nil,
// model.safetensors.
func modelDir(t *testing.T, cfg map[string]any, ts []st) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny-llama")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigName), mustJSON(t, cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if ts != nil {
		writeST(t, filepath.Join(dir, WeightsName), ts...)
	}
	return dir
}

func TestOpenDirectory(t *testing.T) {
	dir := modelDir(t, tinyLlama(), tinyLlamaTensors("BF16"))
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.ParamCount != tinyLlamaParams || m.Tally.Params != tinyLlamaParams {
		t.Errorf("graph %d, checkpoint %d parameters; want %d", m.ParamCount, m.Tally.Params, tinyLlamaParams)
	}
	if m.Tally.Total != tinyLlamaParams+2*8 || len(m.Tally.Excluded) != 2 || m.Tally.Excluded[0].Reason != "rotary inv_freq buffer" {
		t.Errorf("tally %+v", m.Tally)
	}
	if m.StoredDType != "BF16" || m.Tally.Bytes["BF16"] != 2*tinyLlamaParams || m.Tally.Bytes["F32"] != 0 {
		t.Errorf("stored dtype %s, bytes %v", m.StoredDType, m.Tally.Bytes)
	}
	if m.Name() != "tiny-llama" || m.DefaultSeq() != 128 || len(m.Dims()) != 3 {
		t.Errorf("name %q, default sequence %d, dims %v", m.Name(), m.DefaultSeq(), m.Dims())
	}
	g, err := m.Build(models.Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Tensor(g.Inputs[0]).Shape; s.String() != "[2, 128]" {
		t.Errorf("input %v, want [2 128]", s)
	}
	if g, err = m.Build(models.Config{Batch: 1, Seq: 16, Layers: 4}); err != nil || g.ParamCount() != tinyLlamaParams+2*(tinyLlamaParams-2*256*64-64)/2 {
		t.Errorf("4 layers: %v", err)
	}

	// The config alone: no weights are looked for.
	c, err := Open(filepath.Join(dir, ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	if c.Checkpoint != nil || c.Tally != nil || c.StoredDType != "" || c.Name() != "tiny-llama" || c.ParamCount != tinyLlamaParams {
		t.Errorf("config-only model %+v", c)
	}
}

func TestOpenNoWeights(t *testing.T) {
	m, err := Open(modelDir(t, tinyLlama(), nil))
	if err != nil {
		t.Fatal(err)
	}
	if m.Checkpoint != nil || m.ParamCount != tinyLlamaParams {
		t.Errorf("model %+v", m)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no config.json") {
		t.Errorf("empty directory: error %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("a missing path opened")
	}
}

// shardedDir writes a model directory whose weights are the shards
// model-0000i-of-0000n.safetensors and their index.
func shardedDir(t *testing.T, cfg map[string]any, shards ...[]st) string {
	t.Helper()
	dir := modelDir(t, cfg, nil)
	weightMap := map[string]string{}
	for i, s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		writeST(t, filepath.Join(dir, name), s...)
		for _, x := range s {
			weightMap[x.name] = name
		}
	}
	if err := os.WriteFile(filepath.Join(dir, WeightsIndexName), mustJSON(t, map[string]any{"weight_map": weightMap}), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestOpenSharded(t *testing.T) {
	ts := tinyLlamaTensors("F16")
	dir := shardedDir(t, tinyLlama(), ts[:9], ts[9:])
	m, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Checkpoint.Files) != 2 || m.Tally.Params != tinyLlamaParams || m.StoredDType != "F16" {
		t.Errorf("checkpoint %d files, %d parameters, %s", len(m.Checkpoint.Files), m.Tally.Params, m.StoredDType)
	}
	// model.safetensors wins over the index, as in from_pretrained.
	writeST(t, filepath.Join(dir, WeightsName), tinyLlamaTensors("F32")...)
	if m, err = Open(dir); err != nil || len(m.Checkpoint.Files) != 1 || m.StoredDType != "F32" {
		t.Errorf("with model.safetensors too: %v", err)
	}
}

func TestOpenDisagrees(t *testing.T) {
	var ts []st
	for _, x := range tinyLlamaTensors("BF16") {
		if x.name != "model.layers.1.mlp.down_proj.weight" {
			ts = append(ts, x)
		}
	}
	_, err := Open(modelDir(t, tinyLlama(), ts))
	want := fmt.Sprintf("the checkpoint holds %d parameters but the LlamaForCausalLM graph has %d (-8192)", tinyLlamaParams-8192, tinyLlamaParams)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "only in the graph: model.layers.1.mlp.down_proj.weight [64, 128]") {
		t.Errorf("error %v, want %q and the missing tensor", err, want)
	}

	// A config saying tied embeddings with a checkpoint storing the head as
	// a different tensor: the shapes differ, so it is not a copy.
	ts = tinyLlamaTensors("BF16")
	ts[len(ts)-1] = st{"lm_head.weight", "BF16", []int64{255, 64}}
	_, err = Open(modelDir(t, with(tinyLlama(), "tie_word_embeddings", true), ts))
	if err == nil || !strings.Contains(err.Error(), "only in the checkpoint: lm_head.weight [255, 64]") {
		t.Errorf("error %v", err)
	}

}

// Tied weights are stored once or twice; both count once.
func TestOpenTied(t *testing.T) {
	cfg := with(tinyLlama(), "tie_word_embeddings", true)
	ts := tinyLlamaTensors("BF16")
	want := int64(tinyLlamaParams - 256*64)
	m, err := Open(modelDir(t, cfg, ts))
	if err != nil {
		t.Fatal(err)
	}
	if m.ParamCount != want || m.Tally.Params != want {
		t.Errorf("both stored: %d and %d, want %d", m.ParamCount, m.Tally.Params, want)
	}
	last := m.Tally.Excluded[0]
	if last.Tensor != "lm_head.weight" || last.Reason != "tied to model.embed_tokens.weight" {
		t.Errorf("exclusions %+v", m.Tally.Excluded)
	}
	if m, err = Open(modelDir(t, cfg, ts[:len(ts)-1])); err != nil || m.Tally.Params != want {
		t.Errorf("embedding only: %v", err)
	}
}

// checkpointOf lists g's parameters under their names, as a checkpoint of
// the built class stores them.
func checkpointOf(t *testing.T, cfg map[string]any) []st {
	t.Helper()
	c, err := ParseConfig(mustJSON(t, cfg), "config.json")
	if err != nil {
		t.Fatal(err)
	}
	g, err := models.BuildTransformer("x", c.Transformer, models.Config{Batch: 1, Seq: 4})
	if err != nil {
		t.Fatal(err)
	}
	var ts []st
	for _, id := range g.Params() {
		p := g.Tensor(id)
		ts = append(ts, st{p.Name, "F32", p.Shape})
	}
	return ts
}

// The other families' buffers, unused heads and tied copies, as their
// published checkpoints store them.
func TestOpenExclusions(t *testing.T) {
	rename := func(ts []st, from, to string) []st {
		for i := range ts {
			ts[i].name = strings.Replace(ts[i].name, from, to, 1)
		}
		return ts
	}
	tests := []struct {
		name     string
		cfg      map[string]any
		extra    func([]st) []st
		excluded int
	}{
		{"gpt2 original", tinyGPT2(), func(ts []st) []st {
			// GPT2Model's save: no "transformer." prefix, the mask
			// buffers, no lm_head.
			ts = rename(ts, "transformer.", "")
			for i := 0; i < 2; i++ {
				ts = append(ts, st{fmt.Sprintf("h.%d.attn.bias", i), "F32", []int64{1, 1, 64, 64}},
					st{fmt.Sprintf("h.%d.attn.masked_bias", i), "F32", nil})
			}
			return ts
		}, 4},
		{"gpt2 with head", tinyGPT2(), func(ts []st) []st {
			return append(ts, st{"lm_head.weight", "F32", []int64{100, 32}})
		}, 1},
		{"pythia", tinyNeoX(), func(ts []st) []st {
			for i := 0; i < 2; i++ {
				p := fmt.Sprintf("gpt_neox.layers.%d.attention.", i)
				ts = append(ts, st{p + "bias", "BOOL", []int64{1, 1, 64, 64}}, st{p + "masked_bias", "F32", nil},
					st{p + "rotary_emb.inv_freq", "F32", []int64{1}})
			}
			return ts
		}, 6},
		{"bert pretraining", tinyBERT("bert"), func(ts []st) []st {
			return append(ts,
				st{"bert.embeddings.position_ids", "I64", []int64{1, 66}},
				st{"bert.pooler.dense.weight", "F32", []int64{32, 32}}, st{"bert.pooler.dense.bias", "F32", []int64{32}},
				st{"cls.seq_relationship.weight", "F32", []int64{2, 32}}, st{"cls.seq_relationship.bias", "F32", []int64{2}},
				st{"cls.predictions.decoder.weight", "F32", []int64{100, 32}}, st{"cls.predictions.decoder.bias", "F32", []int64{100}})
		}, 7},
		{"roberta", tinyBERT("roberta"), func(ts []st) []st {
			return append(ts,
				st{"roberta.pooler.dense.weight", "F32", []int64{32, 32}}, st{"roberta.pooler.dense.bias", "F32", []int64{32}},
				st{"lm_head.decoder.weight", "F32", []int64{100, 32}}, st{"lm_head.decoder.bias", "F32", []int64{100}})
		}, 4},
		{"t5", tinyT5(), func(ts []st) []st {
			return append(ts,
				st{"encoder.embed_tokens.weight", "F32", []int64{100, 32}}, st{"decoder.embed_tokens.weight", "F32", []int64{100, 32}},
				st{"lm_head.weight", "F32", []int64{100, 32}},
				st{"decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight", "F32", []int64{8, 4}})
		}, 4},
		{"t5 untied", with(tinyT5(), "tie_word_embeddings", false), func(ts []st) []st {
			return append(ts, st{"encoder.embed_tokens.weight", "F32", []int64{100, 32}})
		}, 1},
		{"opt", tinyOPT(), func(ts []st) []st {
			return append(rename(ts, "model.", ""), st{"lm_head.weight", "F32", []int64{100, 32}})
		}, 1},
		{"vit with pooler", tinyViT(), func(ts []st) []st {
			return append(ts, st{"vit.pooler.dense.weight", "F32", []int64{32, 32}}, st{"vit.pooler.dense.bias", "F32", []int64{32}})
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := tt.extra(checkpointOf(t, tt.cfg))
			m, err := Open(modelDir(t, tt.cfg, ts))
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Tally.Excluded) != tt.excluded {
				t.Errorf("excluded %+v, want %d", m.Tally.Excluded, tt.excluded)
			}
		})
	}
}

func TestModelName(t *testing.T) {
	for path, want := range map[string]string{
		"/models/Llama-3.2-1B":             "Llama-3.2-1B",
		"/models/Llama-3.2-1B/":            "Llama-3.2-1B",
		"/models/Llama-3.2-1B/config.json": "Llama-3.2-1B",
		"/models/gpt2.json":                "gpt2",
		"/config.json":                     "config",
	} {
		if got := modelName(path); got != want {
			t.Errorf("modelName(%q) = %q, want %q", path, got, want)
		}
	}
}

// tinyViTParams is tinyViT's ViTForImageClassification by hand (E = 32,
// 3 channels, 8-pixel patches of a 32-pixel image: 16 patches):
// embeddings cls_token 32 + position_embeddings 17·32 + projection
// 32·3·8·8 + 32; per layer query, key, value and output.dense 4·(32·32 +
// 32), intermediate 32·64 + 64, output 64·32 + 32, two LayerNorms 2·64;
// the final LayerNorm 64 and the classifier 32·3 + 3.
const tinyViTParams = (32 + 17*32 + 6144 + 32) + 2*(4*1056+2112+2080+128) + 64 + 99 // 24,003

func TestOpenViT(t *testing.T) {
	cfg := with(tinyViT(), "num_labels", 5)
	m, err := Open(modelDir(t, cfg, checkpointOf(t, cfg)))
	if err != nil {
		t.Fatal(err)
	}
	if m.ParamCount != tinyViTParams || m.Tally.Params != tinyViTParams {
		t.Errorf("graph %d, checkpoint %d parameters; want %d", m.ParamCount, m.Tally.Params, tinyViTParams)
	}
	if m.DefaultSeq() != 0 || len(m.Dims()) != 2 || m.Config.className() != "ViTForImageClassification" {
		t.Errorf("default sequence %d, dims %v, class %s", m.DefaultSeq(), m.Dims(), m.Config.className())
	}
	if len(m.Config.Notes) != 1 || !strings.Contains(m.Config.Notes[0], "num_labels 5 disagrees with the 3 entries of id2label") {
		t.Errorf("notes %q", m.Config.Notes)
	}
	// The image side follows Config.Image: a 64-pixel image has 64
	// patches, so 65 positions.
	g, err := m.Build(models.Config{Batch: 2, Image: 64})
	if err != nil {
		t.Fatal(err)
	}
	if in := g.Tensor(g.Inputs[0]); in.Shape.String() != "[2, 3, 64, 64]" {
		t.Errorf("input %s %v", in.Name, in.Shape)
	}
	if got, want := g.ParamCount(), int64(tinyViTParams+48*32); got != want {
		t.Errorf("64-pixel graph: %d parameters, want %d", got, want)
	}
}

// The other Llama-style families open from a directory with the tensor
// names their published checkpoints carry (save_pretrained of
// MistralForCausalLM, Qwen2ForCausalLM, GemmaForCausalLM and
// Phi3ForCausalLM), not names taken from batchfit's own graph. On
// tinyLlama's sizes a llama layer is 36,992 parameters (see
// tinyLlamaParams); Qwen2 adds q, k and v biases (64 + 32 + 32); Phi-3
// fuses q, k, v into qkv_proj [64+2·32, 64] and gate, up into
// gate_up_proj [2·128, 64], the same elements; Gemma ties its LM head to
// the embedding and the checkpoint holds no lm_head.
func TestOpenLlamaFamilies(t *testing.T) {
	layers := func(f func(p string) []st) []st {
		var ts []st
		for i := 0; i < 2; i++ {
			ts = append(ts, f(fmt.Sprintf("model.layers.%d.", i))...)
		}
		return ts
	}
	norms := func(p string) []st {
		return []st{{p + "input_layernorm.weight", "BF16", []int64{64}}, {p + "post_attention_layernorm.weight", "BF16", []int64{64}}}
	}
	llamaLayer := func(bias bool) func(p string) []st {
		return func(p string) []st {
			ts := []st{
				{p + "self_attn.q_proj.weight", "BF16", []int64{64, 64}},
				{p + "self_attn.k_proj.weight", "BF16", []int64{32, 64}},
				{p + "self_attn.v_proj.weight", "BF16", []int64{32, 64}},
				{p + "self_attn.o_proj.weight", "BF16", []int64{64, 64}},
				{p + "mlp.gate_proj.weight", "BF16", []int64{128, 64}},
				{p + "mlp.up_proj.weight", "BF16", []int64{128, 64}},
				{p + "mlp.down_proj.weight", "BF16", []int64{64, 128}},
			}
			if bias {
				ts = append(ts, st{p + "self_attn.q_proj.bias", "BF16", []int64{64}},
					st{p + "self_attn.k_proj.bias", "BF16", []int64{32}}, st{p + "self_attn.v_proj.bias", "BF16", []int64{32}})
			}
			return append(ts, norms(p)...)
		}
	}
	phi3Layer := func(p string) []st {
		return append([]st{
			{p + "self_attn.qkv_proj.weight", "BF16", []int64{128, 64}},
			{p + "self_attn.o_proj.weight", "BF16", []int64{64, 64}},
			{p + "mlp.gate_up_proj.weight", "BF16", []int64{256, 64}},
			{p + "mlp.down_proj.weight", "BF16", []int64{64, 128}},
		}, norms(p)...)
	}
	embed := st{"model.embed_tokens.weight", "BF16", []int64{256, 64}}
	final := []st{{"model.norm.weight", "BF16", []int64{64}}}
	head := st{"lm_head.weight", "BF16", []int64{256, 64}}
	cases := []struct {
		name   string
		cfg    map[string]any
		ts     []st
		params int64
	}{
		{"mistral", with(tinyLlama(), "model_type", "mistral", "architectures", []any{"MistralForCausalLM"}),
			append(append(append([]st{embed}, layers(llamaLayer(false))...), final...), head), 106_816},
		{"qwen2", with(tinyLlama(), "model_type", "qwen2", "architectures", []any{"Qwen2ForCausalLM"}),
			append(append(append([]st{embed}, layers(llamaLayer(true))...), final...), head), 106_816 + 2*128},
		{"gemma", with(tinyLlama(), "model_type", "gemma", "architectures", []any{"GemmaForCausalLM"}, "head_dim", 16, "tie_word_embeddings", remove),
			append(append([]st{embed}, layers(llamaLayer(false))...), final...), 106_816 - 256*64},
		{"phi3", with(tinyLlama(), "model_type", "phi3", "architectures", []any{"Phi3ForCausalLM"}),
			append(append(append([]st{embed}, layers(phi3Layer)...), final...), head), 106_816},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Open(modelDir(t, c.cfg, c.ts))
			if err != nil {
				t.Fatal(err)
			}
			if m.ParamCount != c.params || m.Tally.Params != c.params || len(m.Tally.Excluded) != 0 {
				t.Errorf("graph %d, checkpoint %d parameters (%d excluded); want %d", m.ParamCount, m.Tally.Params, len(m.Tally.Excluded), c.params)
			}
			if m.StoredDType != "BF16" {
				t.Errorf("stored dtype %q", m.StoredDType)
			}
		})
	}
}

// A model directory given as its files' headers alone opens as the
// directory on disk does; a header cut short is an error naming the file.
func TestOpenHeaders(t *testing.T) {
	dir := modelDir(t, tinyLlama(), nil)
	ts := tinyLlamaTensors("F16")
	shards := [][]st{ts[:9], ts[9:]}
	weightMap := map[string]string{}
	up := &Headers{Dir: "tiny-llama", Files: map[string]HeaderFile{}}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	up.Files[ConfigName] = HeaderFile{Data: cfg, Size: int64(len(cfg))}
	for i, s := range shards {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", i+1)
		writeST(t, filepath.Join(dir, name), s...)
		for _, x := range s {
			weightMap[x.name] = name
		}
		hdr, n := stHeader(t, s, map[string]string{"format": "pt"})
		up.Files[name] = HeaderFile{Data: stBytes(hdr, 0), Size: int64(8+len(hdr)) + n}
	}
	index := mustJSON(t, map[string]any{"weight_map": weightMap})
	if err := os.WriteFile(filepath.Join(dir, WeightsIndexName), index, 0o644); err != nil {
		t.Fatal(err)
	}
	up.Files[WeightsIndexName] = HeaderFile{Data: index, Size: int64(len(index))}
	disk, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := OpenFS(up, "tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	if mem.Name() != disk.Name() || mem.ParamCount != disk.ParamCount || mem.Tally.Params != disk.Tally.Params ||
		mem.StoredDType != disk.StoredDType || len(mem.Checkpoint.Files) != 2 {
		t.Errorf("from headers %s %d %d %s, from disk %s %d %d %s", mem.Name(), mem.ParamCount, mem.Tally.Params, mem.StoredDType,
			disk.Name(), disk.ParamCount, disk.Tally.Params, disk.StoredDType)
	}
	// A size smaller than the tensors' end is a truncated file.
	name := "model-00002-of-00002.safetensors"
	f := up.Files[name]
	up.Files[name] = HeaderFile{Data: f.Data, Size: f.Size - 1}
	if _, err := OpenFS(up, "tiny-llama"); err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), name) {
		t.Errorf("short file: %v", err)
	}
	// Fewer bytes than the header's length says.
	up.Files[name] = HeaderFile{Data: f.Data[:len(f.Data)-3], Size: f.Size}
	if _, err := OpenFS(up, "tiny-llama"); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("cut header: %v", err)
	}
	delete(up.Files, name)
	if _, err := OpenFS(up, "tiny-llama"); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("missing shard: %v", err)
	}
	delete(up.Files, ConfigName)
	if _, err := OpenFS(up, "tiny-llama"); err == nil || !strings.Contains(err.Error(), "no config.json") {
		t.Errorf("no config: %v", err)
	}
}

// The solver's ranges come from the config: n_positions (GPT-2) and
// max_position_embeddings (BERT; RoBERTa's table of 514 rows serves 512
// positions after padding_idx 1) bound the sequence, the head size steps
// the width, rotary positions (Llama) bound nothing.
func TestOpenRanges(t *testing.T) {
	for _, c := range []struct {
		dir           string
		seqMax, hStep int64
	}{
		{"gpt2", 1024, 64},
		{"bert-base-uncased", 512, 64},
		{"roberta-base", 512, 64},
		{"opt-125m", 2048, 64},
		// head size 128, 4 query heads per key/value head
		{"Llama-3-8B", 0, 512},
	} {
		m, err := Open(filepath.Join("testdata", "configs", c.dir, ConfigName))
		if err != nil {
			t.Fatal(err)
		}
		if r := m.Range(models.DimSeq, models.Config{}); r.Max != c.seqMax {
			t.Errorf("%s: sequence up to %d (%s), want %d", c.dir, r.Max, r.MaxWhy, c.seqMax)
		}
		if r := m.Range(models.DimHidden, models.Config{}); r.Step != c.hStep || r.Min != c.hStep {
			t.Errorf("%s: widths from %d in steps of %d, want %d", c.dir, r.Min, r.Step, c.hStep)
		}
	}
}
