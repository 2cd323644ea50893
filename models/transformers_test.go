package models

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// Parameter counts of model.parameters() for the class each zoo entry
// builds (tied weights counted once), written out from config.json.
//
// GPT2LMHeadModel (V=50257, P=1024, lm_head tied to wte): a block is
// ln_1 2E + c_attn E·3E+3E + c_proj E²+E + ln_2 2E + c_fc E·4E+4E +
// c_proj 4E·E+E = 12E²+13E; total V·E + P·E + n·(12E²+13E) + ln_f 2E.
//
//	gpt2     E=768,  n=12: 38,597,376 + 786,432 + 12·7,087,872 + 1,536      = 124,439,808
//	medium   E=1024, n=24: 51,463,168 + 1,048,576 + 24·12,596,224 + 2,048  = 354,823,168
//	large    E=1280, n=36: 64,328,960 + 1,310,720 + 36·19,677,440 + 2,560  = 774,030,080
//	xl       E=1600, n=48: 80,411,200 + 1,638,400 + 48·30,740,800 + 3,200  = 1,557,611,200
//
// all four equal the published figures.
//
// BertForMaskedLM / RobertaForMaskedLM (no pooler; decoder tied to the word
// embeddings, own bias V): embeddings V·E + P·E + T·E + LayerNorm 2E; a
// layer is q,k,v,o 4(E²+E) + LN 2E + intermediate E·I+I + output I·E+E +
// LN 2E; head transform E²+E + LN 2E + bias V.
//
//	bert-base  V=30522 E=768  I=3072 P=512 T=2, 12 layers:
//	           23,837,184 + 12·7,087,872 + 622,650 = 109,514,298 (published)
//	bert-large V=30522 E=1024 I=4096, 24 layers:
//	           31,782,912 + 24·12,596,224 + 1,082,170 = 335,174,458 (BertModel with
//	           its pooler, E²+E instead of the head: 335,141,888)
//	roberta    V=50265 E=768 P=514 T=1, 12 layers:
//	           39,000,576 + 12·7,087,872 + 642,393 = 124,697,433 (RobertaModel
//	           with pooler: 124,645,632)
//
// LlamaForCausalLM and friends: a layer is q E·H·D + k,v 2·E·KV·D + o H·D·E
// (+ biases H·D + 2·KV·D for Qwen2) + MLP 3·E·I + two norms 2E; total
// V·E (×2 untied) + n·layer + norm E.
//
//	Llama-2-7b   V=32000  E=4096 n=32 KV=32 I=11008: 2·131,072,000 + 32·202,383,360 + 4,096 = 6,738,415,616 (published)
//	Llama-2-13b  V=32000  E=5120 n=40 KV=40 I=13824: 2·163,840,000 + 40·317,204,480 + 5,120 = 13,015,864,320
//	Llama-3-8B   V=128256 E=4096 n=32 KV=8  I=14336: 2·525,336,576 + 32·218,112,000 + 4,096 = 8,030,261,248 (published)
//	Llama-3-70B  V=128256 E=8192 n=80 KV=8  I=28672: 2·1,050,673,152 + 80·855,654,400 + 8,192 = 70,553,706,496
//	Llama-3.2-1B V=128256 E=2048 n=16 H=32 KV=8 D=64  I=8192, tied: 262,668,288 + 16·60,821,504 + 2,048 = 1,235,814,400 (published)
//	Llama-3.2-3B V=128256 E=3072 n=28 H=24 KV=8 D=128 I=8192, tied: 394,002,432 + 28·100,669,440 + 3,072 = 3,212,749,824
//	Mistral-7B   V=32000  E=4096 n=32 KV=8  I=14336: 2·131,072,000 + 32·218,112,000 + 4,096 = 7,241,732,096 (published)
//	Qwen2.5-0.5B V=151936 E=896  n=24 H=14 KV=2 I=4864, tied: 136,134,656 + 24·14,912,384 + 896 = 494,032,768 (published)
//	Qwen2.5-1.5B V=151936 E=1536 n=28 H=12 KV=2 I=8960, tied: 233,373,696 + 28·46,797,824 + 1,536 = 1,543,714,304
//	Qwen2.5-7B   V=152064 E=3584 n=28 H=28 KV=4 I=18944: 2·544,997,376 + 28·233,057,792 + 3,584 = 7,615,616,512
//	gemma-2b     V=256000 E=2048 n=18 H=8 KV=1 D=256 I=16384, tied: 524,288,000 + 18·110,104,576 + 2,048 = 2,506,172,416
//	Phi-3-mini   V=32064  E=3072 n=32 qkv_proj E·3E, gate_up_proj E·2I (I=8192): 2·98,500,608 + 32·113,252,352 + 3,072 = 3,821,079,552
//
// The totals without a "(published)" mark are the checkpoints' own
// figures too: half the metadata total_size of their sharded
// model.safetensors.index.json, whose tensors are all 16-bit —
// Llama-2-13b 26,031,728,640 B, Llama-3-70B 141,107,412,992 B,
// Llama-3.2-3B 6,425,499,648 B, Qwen2.5-7B 15,231,233,024 B, gemma-2b
// 5,012,344,832 B, Phi-3-mini-4k 7,642,159,104 B — and the model cards'
// 1.54B for Qwen2.5-1.5B.
//
// T5ForConditionalGeneration (V=32128, lm_head tied to shared, no biases):
// shared V·d; encoder block = q,k,v,o 4·d·H·d_kv + LN d + wi,wo 2·d·d_ff +
// LN d, plus block 0's relative_attention_bias 32·H and final LN d; decoder
// blocks add the cross-attention 4·d·H·d_kv + LN d.
//
//	t5-small d=512 H=8  d_ff=2048, 6+6:   16,449,536 + 18,881,280 + 25,175,808   = 60,506,624
//	t5-base  d=768 H=12 d_ff=3072, 12+12: 24,674,304 + 84,954,240 + 113,275,008  = 222,903,552
//
// GPTNeoXForCausalLM pythia-160m (V=50304, E=768, untied embed_out): 2·38,633,472 +
// 12·7,087,872 + 1,536 = 162,322,944 (the Pythia paper's figure). OPTForCausalLM
// opt-125m (V=50272, 2048+2 positions, tied): 38,608,896 + 1,574,400 + 1,536 +
// 12·7,087,872 = 125,239,296.
//
// ViTForImageClassification vit-base-patch16-224 (E=768, I=3072, 16×16
// patches of 3 channels: 196 at 224, 1000 labels, no pooler): embeddings
// cls_token E + position_embeddings 197·E + patch projection 768·3·16·16 + E
// = 768 + 151,296 + 589,824 + 768 = 742,656; a layer is query, key, value
// and attention.output.dense 4(E²+E) = 2,362,368 + intermediate E·I+I =
// 2,362,368 + output I·E+E = 2,360,064 + layernorm_before/after 4E = 3,072,
// 7,087,872 in all; the final layernorm 2E = 1,536; the classifier
// 768·1000+1000 = 769,000.
//
//	742,656 + 12·7,087,872 + 1,536 + 769,000 = 86,567,656
//
// the published 86.6M, and exactly torchvision's vit_b_16: the same tensors
// (torchvision fuses q, k, v into in_proj [3E, E] + [3E], the same
// elements; its class token, conv_proj, pos_embedding, MLP, LayerNorms and
// 1000-way head match one for one), named differently.
var hfParamCounts = map[string]int64{
	"gpt2":               124_439_808,
	"gpt2-medium":        354_823_168,
	"gpt2-large":         774_030_080,
	"gpt2-xl":            1_557_611_200,
	"bert-base-uncased":  109_514_298,
	"bert-large-uncased": 335_174_458,
	"roberta-base":       124_697_433,
	"Llama-2-7b":         6_738_415_616,
	"Llama-2-13b":        13_015_864_320,
	"Llama-3-8B":         8_030_261_248,
	"Llama-3-70B":        70_553_706_496,
	"Llama-3.2-1B":       1_235_814_400,
	"Llama-3.2-3B":       3_212_749_824,
	"Mistral-7B-v0.1":    7_241_732_096,
	"Qwen2.5-0.5B":       494_032_768,
	"Qwen2.5-1.5B":       1_543_714_304,
	"Qwen2.5-7B":         7_615_616_512,
	"t5-small":           60_506_624,
	"t5-base":            222_903_552,
	"pythia-160m":        162_322_944,
	"opt-125m":           125_239_296,
	"Phi-3-mini-4k":      3_821_079_552,
	"gemma-2b":           2_506_172_416,

	"vit-base-patch16-224": 86_567_656,
}

func hfZooEntry(t *testing.T, name string) hfModel {
	t.Helper()
	for _, m := range hfZoo {
		if m.name == name {
			return m
		}
	}
	t.Fatalf("%s is not in the transformers zoo", name)
	return hfModel{}
}

func hfBuild(t *testing.T, name string, tc TransformerConfig, c Config) *graph.Graph {
	t.Helper()
	g, err := BuildTransformer(name, tc, c)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return g
}

// hfOp returns the op named name (the last one, for names reused by a
// module called twice).
func hfOp(t *testing.T, g *graph.Graph, name string) *graph.Op {
	t.Helper()
	var found *graph.Op
	for i := range g.Ops {
		if g.Ops[i].Name == name {
			found = &g.Ops[i]
		}
	}
	if found == nil {
		t.Fatalf("%s: no op %q", g.Name, name)
	}
	return found
}

func hfCount(g *graph.Graph, kind graph.Kind, nameHas string) int {
	n := 0
	for _, op := range g.Ops {
		if op.Kind == kind && strings.Contains(op.Name, nameHas) {
			n++
		}
	}
	return n
}

func TestTransformerParamCounts(t *testing.T) {
	if len(hfParamCounts) != len(hfZoo) {
		t.Errorf("%d expected counts for %d zoo entries", len(hfParamCounts), len(hfZoo))
	}
	for _, m := range hfZoo {
		want, ok := hfParamCounts[m.name]
		if !ok {
			t.Errorf("%s: no expected parameter count", m.name)
			continue
		}
		g := hfBuild(t, m.name, m.tc, Config{Batch: 1, Seq: 8})
		if got := g.ParamCount(); got != want {
			t.Errorf("%s: %d parameters, want %d (diff %d)", m.name, got, want, got-want)
		}
	}
}

// The logits are the output of the LM head for every position; the loss
// is a float32 scalar; every layer is a checkpointable block.
func TestTransformerZooGraphs(t *testing.T) {
	heads := map[string]string{
		"bert": "cls.predictions.decoder", "roberta": "lm_head.decoder", "gpt_neox": "embed_out", "vit": "classifier",
	}
	for _, m := range hfZoo {
		t.Run(m.name, func(t *testing.T) {
			g, mm, err := Build(m.name, Config{Batch: 2})
			if err != nil {
				t.Fatal(err)
			}
			if mm.Family != "transformers" || mm.DefaultSeq != m.defaultSeq {
				t.Errorf("registered as family %q, default seq %d", mm.Family, mm.DefaultSeq)
			}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			head := heads[m.tc.Arch]
			if head == "" {
				head = "lm_head"
			}
			vision := hfArchs[m.tc.Arch].vision
			logits := g.Tensor(hfOp(t, g, head).Output)
			want := graph.Shape{2, m.defaultSeq, m.tc.VocabSize}
			input := "input_ids"
			if vision {
				want, input = graph.Shape{2, m.tc.NumLabels}, "pixel_values"
				if len(mm.Dims) != 2 || mm.Dims[0] != DimLayers || mm.Dims[1] != DimHidden {
					t.Errorf("dims %v, want layers and hidden", mm.Dims)
				}
			}
			if logits.Shape.String() != want.String() || logits.DType != graph.F32 {
				t.Errorf("logits %v %s, want %v float32", logits.Shape, logits.DType, want)
			}
			loss := g.Tensor(g.Loss)
			if len(loss.Shape) != 0 || loss.DType != graph.F32 || !loss.RequiresGrad {
				t.Errorf("loss %v %s requires_grad=%v", loss.Shape, loss.DType, loss.RequiresGrad)
			}
			layers := m.tc.Layers
			if m.tc.Arch == "t5" {
				layers *= 2
			}
			if int64(len(g.Blocks)) != layers {
				t.Errorf("%d blocks, want %d", len(g.Blocks), layers)
			}
			for _, op := range g.Ops {
				if op.Block >= 0 && !strings.HasPrefix(op.Name, g.Blocks[op.Block]+".") {
					t.Errorf("op %s is in block %s", op.Name, g.Blocks[op.Block])
				}
			}
			if len(g.Inputs) == 0 || g.Tensor(g.Inputs[0]).Name != input || len(g.Targets) != 1 {
				t.Errorf("inputs %v, targets %v", g.Inputs, g.Targets)
			}
		})
	}
}

func TestTransformerAttentionPaths(t *testing.T) {
	llama3 := hfZooEntry(t, "Llama-3-8B").tc
	llama2 := hfZooEntry(t, "Llama-2-7b").tc
	gpt2 := hfZooEntry(t, "gpt2").tc
	with := func(tc TransformerConfig, impl, version string) TransformerConfig {
		tc.Layers, tc.AttnImpl, tc.Version = 2, impl, version
		return tc
	}
	c := Config{Batch: 2, Seq: 64}
	sdpa := func(g *graph.Graph) *graph.Op { return hfOp(t, g, "model.layers.0.self_attn.sdpa") }

	// Current SDPA: GQA goes to the kernel unrepeated; the only copy is
	// attn_output.transpose(1, 2).contiguous().
	g := hfBuild(t, "llama3", with(llama3, "", ""), c)
	if a := sdpa(g); a.Attr.Heads != 32 || a.Attr.KVHeads != 8 || !a.Attr.Causal || a.Attr.P != 0 {
		t.Errorf("sdpa attrs %+v, want 32 heads, 8 kv heads, causal, p=0", a.Attr)
	}
	if n := hfCount(g, graph.Contiguous, "self_attn"); n != 2 {
		t.Errorf("current: %d copies in two sdpa attentions, want 2", n)
	}

	// copies per attention in layer 0 and the kv heads the kernel sees, by version.
	for _, tt := range []struct {
		version     string
		tc          TransformerConfig
		copies, kvh int
	}{
		{"4.56", llama3, 1, 8},
		{"4.55", llama3, 2, 8},  // enable_gqa; value.contiguous() copies the v_proj view
		{"4.53", llama3, 3, 32}, // repeat_kv copies k and v; they are then contiguous
		{"4.47", llama3, 3, 32},
		{"4.53", llama2, 2, 32}, // no GQA: value.contiguous() only
		{"4.47", llama2, 1, 32},
	} {
		g := hfBuild(t, "llama", with(tt.tc, "sdpa", tt.version), c)
		if n := hfCount(g, graph.Contiguous, "layers.0.self_attn"); n != tt.copies {
			t.Errorf("%s %s: %d copies, want %d", tt.tc.Arch, tt.version, n, tt.copies)
		}
		if a := sdpa(g); int(a.Attr.KVHeads) != tt.kvh {
			t.Errorf("%s %s: kernel sees %d kv heads, want %d", tt.tc.Arch, tt.version, a.Attr.KVHeads, tt.kvh)
		}
	}
	g = hfBuild(t, "llama3", with(llama3, "sdpa", "4.50"), c)
	k := g.Tensor(hfOp(t, g, "model.layers.0.self_attn.repeat_kv_key_reshape").Output)
	if k.View != graph.None || k.Shape.String() != "[2, 32, 64, 128]" {
		t.Errorf("repeated key %v (view %d), want a [2, 32, 64, 128] copy", k.Shape, k.View)
	}

	// GPT-2's q, k, v are views of c_attn: in 4.48–4.55 all three are copied.
	g = hfBuild(t, "gpt2", with(gpt2, "sdpa", "4.50"), c)
	if n := hfCount(g, graph.Contiguous, "h.0.attn."); n != 4 {
		t.Errorf("gpt2 4.50: %d copies in layer 0, want 4 (q, k, v, output)", n)
	}
	g = hfBuild(t, "gpt2", with(gpt2, "", ""), c)
	a := hfOp(t, g, "transformer.h.0.attn.sdpa")
	if a.Attr.P != 0.1 || !a.Attr.Causal {
		t.Errorf("gpt2 attention %+v, want causal with dropout 0.1", a.Attr)
	}
	for _, in := range a.Inputs {
		if g.Storage(in) != g.Storage(hfOp(t, g, "transformer.h.0.attn.c_attn").Output) {
			t.Errorf("gpt2 sdpa input %s is not a view of c_attn", g.Tensor(in).Name)
		}
	}

	// Eager: explicit matmuls, softmax, dropout on the probabilities.
	for _, tc := range []TransformerConfig{with(llama3, "eager", ""), with(gpt2, "eager", ""), with(hfZooEntry(t, "bert-base-uncased").tc, "eager", "")} {
		g = hfBuild(t, tc.Arch, tc, c)
		if n := hfCount(g, graph.Attention, ""); n != 0 {
			t.Errorf("%s eager: %d attention ops", tc.Arch, n)
		}
		if n := hfCount(g, graph.Softmax, ""); n != 2 {
			t.Errorf("%s eager: %d softmax ops, want 2", tc.Arch, n)
		}
		if n := hfCount(g, graph.MatMul, ""); n != 4 {
			t.Errorf("%s eager: %d matmuls, want 4", tc.Arch, n)
		}
	}
	g = hfBuild(t, "bert", with(hfZooEntry(t, "bert-base-uncased").tc, "sdpa", ""), c)
	if a := hfOp(t, g, "bert.encoder.layer.0.attention.self.sdpa"); a.Attr.Causal || a.Attr.P != 0.1 {
		t.Errorf("bert attention %+v, want bidirectional with dropout 0.1", a.Attr)
	}
}

// GPT-2's gelu_new is NewGELUActivation's eight elementwise ops, the
// cube a pow (on CUDA autocast's float32 list, unlike a mul); Gemma's
// gelu_pytorch_tanh and BERT's gelu are single fused ops.
func TestTransformerActivations(t *testing.T) {
	c := Config{Batch: 1, Seq: 16}
	g := hfBuild(t, "gpt2", hfZooEntry(t, "gpt2").tc, c)
	var kinds []string
	for _, op := range g.Ops {
		if strings.HasPrefix(op.Name, "transformer.h.0.mlp.act.") {
			kinds = append(kinds, string(op.Kind))
		}
	}
	if got, want := strings.Join(kinds, " "), "mul pow mul add mul tanh mul mul"; got != want {
		t.Errorf("gelu_new ops %q, want %q", got, want)
	}
	if n := hfCount(g, graph.GELUTanh, ""); n != 0 {
		t.Errorf("gpt2 has %d fused gelu_tanh ops", n)
	}
	if n := hfCount(hfBuild(t, "gemma", hfZooEntry(t, "gemma-2b").tc, c), graph.GELUTanh, "mlp.act_fn"); n != 18 {
		t.Errorf("gemma-2b: %d gelu_tanh, want 18", n)
	}
	if n := hfCount(hfBuild(t, "bert", hfZooEntry(t, "bert-base-uncased").tc, c), graph.GELU, ""); n != 13 {
		t.Errorf("bert-base: %d gelu, want 13 (12 layers + head)", n)
	}
}

// model.parameters() order is registration order.
func TestTransformerParamOrder(t *testing.T) {
	c := Config{Batch: 1, Seq: 8, Layers: 1}
	names := func(g *graph.Graph) []string {
		var s []string
		for _, p := range g.Params() {
			s = append(s, g.Tensor(p).Name)
		}
		return s
	}
	tc := hfZooEntry(t, "Qwen2.5-0.5B").tc
	got := strings.Join(names(hfBuild(t, "qwen", tc, c)), " ")
	want := "model.embed_tokens.weight " +
		"model.layers.0.self_attn.q_proj.weight model.layers.0.self_attn.q_proj.bias " +
		"model.layers.0.self_attn.k_proj.weight model.layers.0.self_attn.k_proj.bias " +
		"model.layers.0.self_attn.v_proj.weight model.layers.0.self_attn.v_proj.bias " +
		"model.layers.0.self_attn.o_proj.weight " +
		"model.layers.0.mlp.gate_proj.weight model.layers.0.mlp.up_proj.weight model.layers.0.mlp.down_proj.weight " +
		"model.layers.0.input_layernorm.weight model.layers.0.post_attention_layernorm.weight model.norm.weight"
	if got != want {
		t.Errorf("qwen2 parameters\n got %s\nwant %s", got, want)
	}
	ps := names(hfBuild(t, "bert", hfZooEntry(t, "bert-base-uncased").tc, c))
	got = strings.Join(ps[len(ps)-5:], " ")
	want = "cls.predictions.bias cls.predictions.transform.dense.weight cls.predictions.transform.dense.bias " +
		"cls.predictions.transform.LayerNorm.weight cls.predictions.transform.LayerNorm.bias"
	if got != want {
		t.Errorf("bert head parameters\n got %s\nwant %s", got, want)
	}
	ps = names(hfBuild(t, "llama-untied", hfZooEntry(t, "Llama-2-7b").tc, c))
	if ps[len(ps)-1] != "lm_head.weight" || ps[0] != "model.embed_tokens.weight" {
		t.Errorf("llama-2 parameters run from %s to %s", ps[0], ps[len(ps)-1])
	}
}

// ForCausalLMLoss: logits.float() (a copy only when the model is not
// float32), labels padded and shifted (a copy), cross_entropy over B·L rows.
func TestTransformerCausalLoss(t *testing.T) {
	tc := hfZooEntry(t, "Llama-3.2-1B").tc
	tc.Layers = 1
	c := Config{Batch: 2, Seq: 32}
	g := hfBuild(t, "fp32", tc, c)
	// logits.float() is always recorded: the simulator aliases it when the
	// logits are float32 at run time and copies them when autocast made
	// them half.
	if n := hfCount(g, graph.Cast, "loss"); n != 1 {
		t.Errorf("float32 model: %d casts in the loss, want the one logits.float()", n)
	}
	ce := hfOp(t, g, "loss.cross_entropy")
	logits, target := g.Tensor(ce.Inputs[0]), g.Tensor(ce.Inputs[1])
	if logits.Shape.String() != "[64, 128256]" || target.Shape.String() != "[64]" || target.DType != graph.I64 {
		t.Errorf("cross_entropy of %v and %v %s", logits.Shape, target.Shape, target.DType)
	}
	shift := g.Tensor(hfOp(t, g, "loss.contiguous").Output)
	if shift.View != graph.None || shift.Shape.String() != "[2, 32]" {
		t.Errorf("shifted labels %v view=%d, want a [2, 32] copy", shift.Shape, shift.View)
	}

	tc.DType = graph.BF16
	g = hfBuild(t, "bf16", tc, c)
	cast := hfOp(t, g, "loss.float")
	if out := g.Tensor(cast.Output); out.DType != graph.F32 || out.Shape.String() != "[2, 32, 128256]" {
		t.Errorf("logits.float() gives %v %s", out.Shape, out.DType)
	}
	for _, p := range g.Params() {
		if g.Tensor(p).DType != graph.BF16 {
			t.Fatalf("parameter %s is %s", g.Tensor(p).Name, g.Tensor(p).DType)
		}
	}
	if g.Tensor(hfOp(t, g, "lm_head").Output).DType != graph.BF16 {
		t.Errorf("bf16 model has float32 logits")
	}

	// Before 4.46: logits.float() (Llama family), then the shifted logits
	// are copied: [B, L-1, V].
	tc.Version = "4.45.2"
	g = hfBuild(t, "bf16-4.45", tc, c)
	if out := g.Tensor(hfOp(t, g, "loss.shift_logits").Output); out.Shape.String() != "[2, 31, 128256]" || out.DType != graph.F32 || out.View != graph.None {
		t.Errorf("4.45 shift_logits %v %s view=%d, want a float32 [2, 31, 128256] copy", out.Shape, out.DType, out.View)
	}
	gpt2 := hfZooEntry(t, "gpt2").tc
	gpt2.Layers, gpt2.Version = 1, "4.45"
	g = hfBuild(t, "gpt2-4.45", gpt2, c)
	if n := hfCount(g, graph.Cast, "loss"); n != 0 {
		t.Errorf("gpt2 4.45: %d casts in the loss", n)
	}
	if ce := hfOp(t, g, "loss.cross_entropy"); g.Tensor(ce.Inputs[0]).Shape.String() != "[62, 50257]" {
		t.Errorf("gpt2 4.45 cross_entropy over %v", g.Tensor(ce.Inputs[0]).Shape)
	}
}

func TestTransformerOverrides(t *testing.T) {
	m := hfZooEntry(t, "Llama-2-7b")
	// Depth: 2·embeddings + 2 layers + the final norm.
	g := hfBuild(t, m.name, m.tc, Config{Batch: 1, Seq: 16, Layers: 2})
	if got, want := g.ParamCount(), int64(2*131_072_000+2*202_383_360+4096); got != want {
		t.Errorf("2-layer Llama-2-7b: %d parameters, want %d", got, want)
	}
	// Width: head size 128 and the 4:1 grouping are kept; the MLP keeps
	// its 3.5 ratio.
	g = hfBuild(t, "llama3-narrow", hfZooEntry(t, "Llama-3-8B").tc, Config{Batch: 1, Seq: 16, Layers: 1, Hidden: 2048})
	shapes := map[string]string{}
	for _, p := range g.Params() {
		shapes[g.Tensor(p).Name] = g.Tensor(p).Shape.String()
	}
	for name, want := range map[string]string{
		"model.layers.0.self_attn.q_proj.weight": "[2048, 2048]",
		"model.layers.0.self_attn.k_proj.weight": "[512, 2048]",
		"model.layers.0.mlp.gate_proj.weight":    "[7168, 2048]",
	} {
		if shapes[name] != want {
			t.Errorf("hidden 2048: %s is %s, want %s", name, shapes[name], want)
		}
	}
	if a := hfOp(t, g, "model.layers.0.self_attn.sdpa"); a.Attr.Heads != 16 || a.Attr.KVHeads != 4 {
		t.Errorf("hidden 2048: %d heads, %d kv heads, want 16 and 4", a.Attr.Heads, a.Attr.KVHeads)
	}
	if _, err := BuildTransformer("bad", hfZooEntry(t, "Llama-3-8B").tc, Config{Batch: 1, Seq: 16, Hidden: 1000}); err == nil {
		t.Errorf("hidden 1000 (not a multiple of 4·128) accepted")
	}
	// T5 depth sets both stacks.
	g = hfBuild(t, "t5", hfZooEntry(t, "t5-small").tc, Config{Batch: 1, Seq: 16, Layers: 2})
	if len(g.Blocks) != 4 {
		t.Errorf("2-layer t5: %d blocks, want 4", len(g.Blocks))
	}
}

func TestTransformerErrors(t *testing.T) {
	gpt2 := hfZooEntry(t, "gpt2").tc
	roberta := hfZooEntry(t, "roberta-base").tc
	if _, err := BuildTransformer("gpt2", gpt2, Config{Batch: 1, Seq: 1024}); err != nil {
		t.Errorf("gpt2 at its 1024 positions: %v", err)
	}
	if _, err := BuildTransformer("roberta", roberta, Config{Batch: 1, Seq: 512}); err != nil {
		t.Errorf("roberta at 512 positions: %v", err)
	}
	bad := []struct {
		name string
		tc   TransformerConfig
		c    Config
		msg  string
	}{
		{"gpt2 too long", gpt2, Config{Batch: 1, Seq: 1025}, "learned positions"},
		{"roberta too long", roberta, Config{Batch: 1, Seq: 513}, "learned positions"},
		{"no batch", gpt2, Config{Seq: 8}, "batch"},
		{"unknown arch", TransformerConfig{Arch: "mamba"}, Config{Batch: 1, Seq: 8}, "unsupported model_type"},
		{"bad impl", hfWith(gpt2, func(tc *TransformerConfig) { tc.AttnImpl = "flash" }), Config{Batch: 1, Seq: 8}, "attn_implementation"},
		{"bad version", hfWith(gpt2, func(tc *TransformerConfig) { tc.Version = "four" }), Config{Batch: 1, Seq: 8}, "version"},
		{"release too old", gpt2, Config{Batch: 1, Seq: 8, Transformers: "4.35"}, "oldest release"},
		{"release unread", gpt2, Config{Batch: 1, Seq: 8, Transformers: "6.0"}, "newer than any release"},
		{"gpt2 before its sdpa", gpt2, Config{Batch: 1, Seq: 8, Transformers: "4.40"}, "gpt2 is followed from 4.44"},
		{"bad act", hfWith(gpt2, func(tc *TransformerConfig) { tc.Activation = "mish" }), Config{Batch: 1, Seq: 8}, "activation"},
		{"bad gqa", hfWith(gpt2, func(tc *TransformerConfig) { tc.KVHeads = 5 }), Config{Batch: 1, Seq: 8}, "key/value heads"},
	}
	for _, tt := range bad {
		_, err := BuildTransformer(tt.name, tt.tc, tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.msg)
		}
	}
}

func TestTransformerLookup(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama-3-8b", "Llama_3.2_1B", "QWEN2.5-0.5B", "mistral-7b-v0.1"} {
		if _, err := Lookup(name); err != nil {
			t.Errorf("Lookup(%q): %v", name, err)
		}
	}
	g, _, err := Build("gpt2", Config{Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Tensor(g.Inputs[0]).Shape; s.String() != "[1, 1024]" {
		t.Errorf("gpt2 default input %v, want [1, 1024]", s)
	}
}

// BenchmarkBuildGPT2 measures building gpt2 at batch 8, sequence 1024; it
// should stay well under 2 ms.
func BenchmarkBuildGPT2(b *testing.B) {
	tc := hfZoo[0].tc
	c := Config{Batch: 8, Seq: 1024}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := BuildTransformer("gpt2", tc, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBuildLlama3_70B(b *testing.B) {
	var tc TransformerConfig
	for _, m := range hfZoo {
		if m.name == "Llama-3-70B" {
			tc = m.tc
		}
	}
	c := Config{Batch: 8, Seq: 8192}
	for i := 0; i < b.N; i++ {
		if _, err := BuildTransformer("Llama-3-70B", tc, c); err != nil {
			b.Fatal(err)
		}
	}
}

// TestT5PositionBiasLeaf: T5Attention without a relative_attention_bias,
// the decoder's cross-attention, makes torch.zeros((1, H, Lq, Lk)) its
// position bias and, under gradient checkpointing in training, sets its
// requires_grad (modeling_t5.py): one leaf, t5-small's [1, 8, 16, 16],
// made by the first decoder layer (the later ones reuse its bias). Without
// checkpointing the zeros requires no grad.
func TestT5PositionBiasLeaf(t *testing.T) {
	for _, ckpt := range []bool{false, true} {
		g := hfBuild(t, "t5", hfZooEntry(t, "t5-small").tc, Config{Batch: 2, Seq: 16, Layers: 2, LibraryCheckpointing: ckpt})
		var leaves []string
		for _, op := range g.Ops {
			if tt := g.Tensors[op.Output]; tt.Leaf {
				leaves = append(leaves, fmt.Sprintf("%s %v rg=%v", op.Name, tt.Shape, tt.RequiresGrad))
			}
		}
		want := []string(nil)
		if ckpt {
			want = []string{"decoder.block.0.layer.1.EncDecAttention.position_bias [1, 8, 16, 16] rg=true"}
		}
		if fmt.Sprint(leaves) != fmt.Sprint(want) {
			t.Errorf("checkpointing %v: leaves %q, want %q", ckpt, leaves, want)
		}
	}
}
