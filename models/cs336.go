package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// The Transformer language model of Stanford's CS336 (Language Modeling
// from Scratch), assignment 1's BasicsTransformerLM, op by op as the
// course's code runs it: a pre-norm decoder with RMSNorm (eps 1e-5),
// causal multi-head attention with RoPE (theta 10000), a SwiGLU
// feed-forward (w1, w3: d_model→d_ff, w2: d_ff→d_model), a final RMSNorm
// and an untied lm_head; no Linear has a bias. The sizes are the
// model-size table of the course's assignment 2 handout, with its
// vocabulary of 10,000; the sequence length is the model's context_length.
// The loss is the course's cross-entropy, taken with element-wise ops:
// mean(gather(−(x − max − log(sum(exp(x − max)))), targets)).
//
// What autograd keeps differs from the Llama modules of the same sizes:
// attention scores come from einsum, are divided by √d_k, masked with
// torch.where and put through a softmax written as exp(x − max) / sum,
// which keeps exp's result, the sum and the max's indices; SiLU is
// x·sigmoid(x), which keeps sigmoid's result and x; RoPE is two
// products and a difference per half, joined by torch.cat.
type cs336Size struct {
	name                    string
	dModel, dFF, layers, nh int64
}

var cs336Sizes = []cs336Size{
	{"small", 768, 3072, 12, 12},
	{"medium", 1024, 4096, 24, 16},
	{"large", 1280, 5120, 36, 20},
	{"xl", 1600, 6400, 48, 25},
	{"2.7b", 2560, 10240, 32, 32},
}

// CS336NoteID names the note of the CS336 models (docs/accuracy.md,
// section 11).
const CS336NoteID = "cs336-adamw"

// CS336Note is printed with every prediction for a CS336 model: the
// course's optimizer is its own.
const CS336Note = "note [" + CS336NoteID + "]: the course's own AdamW makes new m and v tensors for each parameter at every step; torch.optim's AdamW (--optimizer adamw --forloop is the nearest) updates them in place, so the optimizer step can take a few sizes of the largest parameter more than shown"

// cs336DefaultSeq is the sequence length (context_length) used when none
// is given.
const cs336DefaultSeq = 512

const cs336Vocab = 10000

func init() {
	for _, s := range cs336Sizes {
		name := "cs336-" + s.name
		s := s
		Register(Model{
			Name: name, Family: "cs336",
			Description: fmt.Sprintf("CS336 BasicsTransformerLM %s: %d layers, d_model %d, d_ff %d, %d heads, vocab %d, RoPE, SwiGLU, untied", s.name, s.layers, s.dModel, s.dFF, s.nh, cs336Vocab),
			DefaultSeq:  cs336DefaultSeq,
			Dims:        []Dim{DimSeq, DimLayers},
			Note:        CS336Note,
			Build: func(c Config) (*graph.Graph, error) {
				if c.Seq == 0 {
					c.Seq = cs336DefaultSeq
				}
				return buildCS336(name, s, c)
			},
		})
	}
}

func buildCS336(name string, s cs336Size, c Config) (*graph.Graph, error) {
	b := graph.NewBuilder(name)
	b.Adapters, b.Quant = c.Adapters, c.Quant
	B, T, d, ff, nh := c.Batch, c.Seq, s.dModel, s.dFF, s.nh
	layers := orDefault(c.Layers, s.layers)
	dk := d / nh
	if B < 1 || T < 1 || layers < 1 {
		b.Fail("%s needs a positive batch, sequence length and depth, got %d, %d, %d", name, B, T, layers)
		return b.Graph()
	}
	ids := b.Input("x", graph.Shape{B, T}, graph.I64)
	targets := b.Target("targets", graph.Shape{B, T}, graph.I64)
	emb := b.Embedding("token_embeddings", ids, cs336Vocab, d)
	x := emb
	// RotaryEmbedding's non-persistent (2, context_length, d_k/2) float32
	// cos/sin table, shared by every layer; forward slices it to the
	// sequence and unbinds cos and sin: views.
	table := b.Buffer("positional_encoder._freq_cis_cache", graph.Shape{2, T, dk / 2}, graph.F32)
	cos := b.Select("positional_encoder.cos", table, 0)
	sin := b.Select("positional_encoder.sin", b.Slice("positional_encoder.rest", table, 0, 1, 2, 1), 0)
	heads := func(name string, t graph.TensorID) graph.TensorID {
		// rearrange "... seq (heads d) -> ... heads seq d": views
		return b.Permute(name+".heads", b.Reshape(name+".split", t, B, T, nh, dk), 0, 2, 1, 3)
	}
	rope := func(name string, t graph.TensorID) graph.TensorID {
		// rearrange "... (half_d xy) -> xy ... half_d" and unbind: the even
		// and odd elements, strided views
		x1 := b.Slice(name+".x1", t, -1, 0, dk, 2)
		x2 := b.Slice(name+".x2", t, -1, 1, dk, 2)
		r1 := b.Add(name+".x1_rot", b.Mul(name+".cos_x1", cos, x1), b.Mul(name+".sin_x2", sin, x2))
		r2 := b.Add(name+".x2_rot", b.Mul(name+".sin_x1", sin, x1), b.Mul(name+".cos_x2", cos, x2))
		out := b.Cat(name+".concat", -1, r1, r2)
		// forward's locals x1_rot and x2_rot live until it returns
		b.Release(name+".return", r1, r2)
		return out
	}
	softmax := func(name string, t graph.TensorID) graph.TensorID {
		shifted := b.Add(name+".sub", t, b.MaxDim(name+".max", t, -1))
		e := b.Exp(name+".exp", shifted)
		out := b.Mul(name+".div", e, b.SumDim(name+".sum", e, -1))
		// nn_utils.softmax's locals: the shifted input and its exp
		b.Release(name+".return", shifted, e)
		return out
	}
	for i := int64(0); i < layers && b.Err() == nil; i++ {
		b.Block("layers."+itoa(i), func() {
			h := b.RMSNorm("ln1", x)
			b.Push("attn")
			q := rope("q_rope", heads("q", b.LinearEinsum("q_proj", h, d)))
			k := rope("k_rope", heads("k", b.LinearEinsum("k_proj", h, d)))
			v := heads("v", b.LinearEinsum("v_proj", h, d))
			// einsum's bmm of Q and Kᵀ, scaled by a Python number
			scores := b.Scale("scale", b.MatMul("scores", q, b.Transpose("k_t", k, -2, -1)))
			// causal_mask = arange(seq)[:, None] >= arange(seq)[None, :],
			// made by every layer's forward; torch.where keeps it
			iota := b.Const("iota", ids, graph.I64, T)
			mask := b.Compare("causal_mask", b.Reshape("qi", iota, T, 1), b.Reshape("kj", iota, 1, T))
			masked := b.MaskedFill("where", scores, mask)
			w := softmax("softmax", masked)
			// einsum reshapes V [B, heads, seq, d_k], a permuted view, to
			// [B·heads, seq, d_k] for bmm: a copy, which bmm keeps
			o := b.MatMul("weighted", w, b.Contiguous("v_bmm", v))
			// scaled_dot_product_attention's locals: the masked scores and
			// the weights
			b.Release("sdpa.return", masked, w)
			// rearrange "batch heads seq d_v -> batch seq (heads d_v)": a
			// reshape of a permuted tensor, a copy
			merged := b.Reshape("merge", b.Permute("unheads", o, 0, 2, 1, 3), B, T, d)
			o = b.LinearEinsum("output_proj", merged, d)
			// forward's argument and locals: the normalized input, Q and K
			// after RoPE, V, the mask and the merged heads
			b.Release("return", h, q, k, v, mask, merged)
			b.Pop()
			res := b.Add("attn_residual", x, o)
			h2 := b.RMSNorm("ln2", res)
			b.Push("ffn")
			a := b.LinearEinsum("w1", h2, ff)
			silu := b.Mul("silu", a, b.Act(graph.Sigmoid, "sigmoid", a, false))
			g := b.Mul("gate", silu, b.LinearEinsum("w3", h2, ff))
			f := b.LinearEinsum("w2", g, d)
			b.Release("return", h2)
			b.Pop()
			out := b.Add("ffn_residual", res, f)
			// the block's locals x_attn, attn_sublayer_output and x_ffn
			b.Release("return", o, res, f)
			x = out
		})
	}
	x = b.RMSNorm("ln_final", x)
	logits := b.LinearEinsum("lm_head", x, cs336Vocab)
	// forward's local embedded_tokens holds the embedding output to the end
	b.Release("return", emb)
	// cross_entropy: -log_softmax(logits) gathered at the targets, averaged
	b.Push("loss")
	shifted := b.Add("sub_max", logits, b.MaxDim("max", logits, -1))
	lse := b.Log("log", b.SumDim("sum", b.Exp("exp", shifted), -1))
	logp := b.Add("sub_lse", shifted, lse)
	// log_softmax's locals: the max and the shifted logits
	b.Release("log_softmax.return", shifted)
	nll := b.Neg("neg", logp)
	picked := b.Gather("gather", nll, b.Reshape("targets", targets, B, T, 1), -1)
	loss := b.MeanAll("mean", picked)
	b.Pop()
	b.Output(loss)
	return b.Graph()
}
