package models

import "github.com/batchfit/batchfit/graph"

// The releases whose GPT2Attention changed its buffers (the published
// wheels' models/gpt2/modeling_gpt2.py): 5.0.0 registers bias alone (4.57.3
// registers bias and masked_bias), 5.2.0 neither, its eager path adding
// the causal mask GPT2Model makes with create_causal_mask (5.1.0 still
// applies torch.where(bias, ...)).
const (
	hfGPT2NoMaskedBias  hfVersion = 5000
	hfGPT2MaskedByModel hfVersion = 5002
)

// gpt2 builds GPT2LMHeadModel (modeling_gpt2.py):
//
//	transformer.wte(input_ids) + transformer.wpe(position_ids)   # position_ids = arange(L)[None]
//	transformer.drop (embd_pdrop)
//	transformer.h.N: x + attn(ln_1(x)); x + mlp(ln_2(x))
//	transformer.ln_f
//	lm_head (tied to wte) on hidden_states[:, 0:, :]; ForCausalLMLoss
func (t *hfBuilder) gpt2() {
	b, tc := t.b, t.tc
	ids := b.Input("input_ids", graph.Shape{t.B, t.L}, graph.I64)
	labels := b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
	var wte, h graph.TensorID
	b.Scope("transformer", func() {
		wte = t.embedding("wte", tc.VocabSize, tc.Hidden)
		wpe := t.embedding("wpe", tc.MaxPositions, tc.Hidden)
		x := b.EmbeddingWith("wte", ids, wte)
		pos := t.hfConst("position_ids", ids, graph.Shape{1, t.L}, graph.I64)
		p := b.EmbeddingWith("wpe", pos, wpe)
		h = b.Add("add", x, p)
		if tc.AttnImpl == "eager" && t.tc.version() >= hfGPT2MaskedByModel {
			// create_causal_mask (masking_utils.eager_mask): the bool
			// mask expanded to [B, 1, L, L], then torch.where(mask, 0.0,
			// finfo.min) in inputs_embeds' dtype, a new [B, 1, L, L]
			// tensor alive through the blocks.
			t.eagerMask = t.hfConst("causal_mask", h, graph.Shape{t.B, 1, t.L, t.L}, t.dt)
		}
		h = b.Dropout("drop", h, tc.DropoutP, false)
		for i := int64(0); i < tc.Layers; i++ {
			b.Block("h."+itoa(i), func() { h = t.gpt2Block(h) })
		}
		h = b.LayerNorm("ln_f", h, 1, true)
	})
	head := wte
	if !tc.TieEmbeddings {
		head = b.Param("lm_head.weight", graph.Shape{tc.VocabSize, tc.Hidden})
		b.QuantizeHead("lm_head", head)
	}
	t.causalLMLoss(t.lmHead("lm_head", h, head, graph.None), labels)
}

// gpt2Block is GPT2Block: residual attention and MLP, each after a
// LayerNorm, with resid_pdrop dropout on both branches.
func (t *hfBuilder) gpt2Block(x graph.TensorID) graph.TensorID {
	b, tc := t.b, t.tc
	E, H, D := tc.Hidden, tc.Heads, tc.headDim()
	n := b.LayerNorm("ln_1", x, 1, true)
	var a graph.TensorID
	b.Scope("attn", func() {
		// GPT2Attention registers a causal-mask table bias [1, 1, P, P]
		// bool and masked_bias, a 0-d float32 (persistent=False, so absent
		// from checkpoints but on the device). Only the eager path reads
		// bias. transformers 5.0 drops masked_bias; 5.2 drops bias, and
		// eager attention adds the model's causal mask instead
		// (eager_attention_forward: attn_weights + attention_mask).
		mask := graph.None
		if t.tc.version() < hfGPT2MaskedByModel {
			mask = b.Buffer("bias", graph.Shape{1, 1, tc.MaxPositions, tc.MaxPositions}, graph.Bool)
		}
		if t.tc.version() < hfGPT2NoMaskedBias {
			b.Buffer("masked_bias", graph.Shape{}, graph.F32)
		}
		cAttn := t.conv1d("c_attn", E, 3*H*D)
		cProj := t.conv1d("c_proj", H*D, E)
		qkv := t.apply("c_attn", n, cAttn)
		// query, key, value = c_attn(x).split(E, dim=2); each
		// .view(B, L, H, D).transpose(1, 2): views of qkv.
		parts := t.splitHeads("c_attn", qkv, D, H, H, H)
		o := attnOpts{causal: true, p: tc.AttnDropoutP, contiguousLegacy: true,
			eager: eagerOpts{scale: true, mask: graph.None, transposeOnly: true}}
		switch {
		case tc.AttnImpl == "eager" && mask != graph.None:
			// torch.where(bias[:, :, :L, :L], scores, finfo.min): a new
			// scores-sized tensor that saves only the (buffer) condition,
			// modelled as an add of the boolean view.
			m := b.Narrow("bias_rows", mask, 2, t.L)
			o.eager.mask = b.Narrow("bias_cols", m, 3, t.L)
		case tc.AttnImpl == "eager":
			// attn_weights + attention_mask: the float mask promotes
			// half scores to float32 under autocast.
			o.eager.mask = t.eagerMask
		}
		out := t.attention(parts[0], parts[1], parts[2], o)
		// attn_output.reshape(B, L, -1).contiguous(): a view of the
		// contiguous SDPA output (a copy of the eager path's transpose).
		out = b.Reshape("reshape", out, t.B, t.L, H*D)
		out = b.Contiguous("contiguous", out)
		out = t.apply("c_proj", out, cProj)
		a = b.Dropout("resid_dropout", out, tc.DropoutP, false)
	})
	h := b.Add("add", a, x) // attn_output + residual
	n = b.LayerNorm("ln_2", h, 1, true)
	var m graph.TensorID
	b.Scope("mlp", func() {
		fc := t.conv1d("c_fc", E, tc.intermediate())
		proj := t.conv1d("c_proj", tc.intermediate(), E)
		m = t.apply("c_fc", n, fc)
		m = t.act("act", m)
		m = t.apply("c_proj", m, proj)
		m = b.Dropout("dropout", m, tc.DropoutP, false)
	})
	return b.Add("add_1", h, m) // residual + feed_forward_hidden_states
}
