package models

import "github.com/batchfit/batchfit/graph"

// t5 builds T5ForConditionalGeneration (modeling_t5.py, 4.46+), which has
// no SDPA path: its attention adds a learned relative position bias with
// explicit matmuls.
//
//	shared = nn.Embedding(V, d_model); encoder and decoder embed_tokens and
//	(tie_word_embeddings) lm_head share it
//	encoder: dropout(embed(input_ids)); block.N: x + dropout(SelfAttention(layer_norm(x)));
//	         x + dropout(DenseReluDense(layer_norm(x))); final_layer_norm; dropout
//	decoder_input_ids = _shift_right(labels)
//	decoder: the same with causal self-attention and a cross-attention
//	         (EncDecAttention on the encoder output) between them
//	sequence_output * d_model**-0.5 (tied), lm_head, CrossEntropyLoss over [B·Lt, V]
//
// T5Attention (no scaling of the scores):
//
//	q, k, v = q(x), k(kv), v(kv), each .view(B, -1, H, d_kv).transpose(1, 2)
//	scores = q @ k.transpose(3, 2)
//	layer 0: position_bias = relative_attention_bias(buckets [Lq, Lk] int64)
//	         .permute([2, 0, 1]).unsqueeze(0) + mask     # [B, H, Lq, Lk], requires grad
//	         (cross-attention: zeros [1, H, Lq, Lk] + mask, no grad,
//	         but a leaf that requires grad under gradient checkpointing
//	         in training);
//	         later layers reuse it
//	scores += position_bias                               # in place
//	attn = dropout(softmax(scores.float(), -1).type_as(scores))
//	o((attn @ v).transpose(1, 2).contiguous().view(B, -1, H·d_kv))
//
// The masks: the encoder's (1 - ones[:, None, None, :]) * finfo.min is
// [B, 1, 1, Ls]; the decoder's causal mask is [B, 1, Lt, Lt] (eager); the
// cross-attention's inverted encoder mask is [B, 1, 1, Ls]. T5LayerNorm is
// an RMS norm: variance = x.to(float32).pow(2).mean(-1, keepdim=True);
// x = x * rsqrt(variance + eps); x.to(weight.dtype) if the weight is half;
// weight * x — it keeps the float32 copy (pow), x and the rsqrt (mul), and
// the normalised x (weight *). With float16 weights T5Block also clamps
// infinities (torch.where + clamp), which is not modelled.
func (t *hfBuilder) t5() {
	b, tc := t.b, t.tc
	E, V := tc.Hidden, tc.VocabSize
	Ls, Lt := t.L, tc.DecoderSeq
	if Lt <= 0 {
		Lt = Ls
	}
	ids := b.Input("input_ids", graph.Shape{t.B, Ls}, graph.I64)
	labels := b.Target("labels", graph.Shape{t.B, Lt}, graph.I64)
	shared := t.embedding("shared", V, E)

	var enc graph.TensorID
	b.Scope("encoder", func() {
		h := b.EmbeddingWith("embed_tokens", ids, shared)
		mask := t.hfConst("extended_attention_mask", h, graph.Shape{t.B, 1, 1, Ls}, t.dt)
		h = b.Dropout("dropout", h, tc.DropoutP, false)
		bias := graph.None
		for i := int64(0); i < tc.Layers; i++ {
			b.Block("block."+itoa(i), func() {
				h, bias = t.t5Sublayer("layer.0", "SelfAttention", h, graph.None, mask, bias, i == 0, Ls, Ls)
				h = t.t5FF("layer.1", h)
			})
		}
		h = b.RMSNorm("final_layer_norm", h)
		enc = b.Dropout("dropout", h, tc.DropoutP, false)
	})

	// _shift_right(labels): new_zeros, [..., 1:] = labels[..., :-1].clone(),
	// [..., 0] = decoder_start_token_id, masked_fill_(-100 → pad): a new
	// [B, Lt] int64 tensor, modelled as cat(labels[:, :1], labels[:, :-1]).
	decIDs := b.Cat("_shift_right", 1, b.Narrow("_shift_right_start", labels, 1, 1), b.Narrow("_shift_right_body", labels, 1, Lt-1))

	var h graph.TensorID
	b.Scope("decoder", func() {
		h = b.EmbeddingWith("embed_tokens", decIDs, shared)
		causal := t.hfConst("causal_mask", h, graph.Shape{t.B, 1, Lt, Lt}, t.dt)
		cross := t.hfConst("encoder_extended_attention_mask", h, graph.Shape{t.B, 1, 1, Ls}, t.dt)
		h = b.Dropout("dropout", h, tc.DropoutP, false)
		selfBias, crossBias := graph.None, graph.None
		layers := tc.DecoderLayers
		if layers <= 0 {
			layers = tc.Layers
		}
		for i := int64(0); i < layers; i++ {
			b.Block("block."+itoa(i), func() {
				h, selfBias = t.t5Sublayer("layer.0", "SelfAttention", h, graph.None, causal, selfBias, i == 0, Lt, Lt)
				h, crossBias = t.t5Sublayer("layer.1", "EncDecAttention", h, enc, cross, crossBias, false, Lt, Ls)
				h = t.t5FF("layer.2", h)
			})
		}
		h = b.RMSNorm("final_layer_norm", h)
		h = b.Dropout("dropout", h, tc.DropoutP, false)
	})
	head := shared
	if tc.TieEmbeddings {
		h = b.Scale("rescale", h) // sequence_output * (model_dim ** -0.5)
	} else {
		head = b.Param("lm_head.weight", graph.Shape{V, E})
	}
	t.maskedLMLoss(b.LinearWith("lm_head", h, head, graph.None), labels)
}

// t5AttnParams are one T5Attention's parameters in registration order.
type t5AttnParams struct {
	q, k, v, o hfLinear
	relBias    graph.TensorID
}

func (t *hfBuilder) t5AttnParams(name string, relBias bool) t5AttnParams {
	tc := t.tc
	inner := tc.Heads * tc.headDim()
	var p t5AttnParams
	t.b.Scope(name, func() {
		p.q = t.linear("q", tc.Hidden, inner, false)
		p.k = t.linear("k", tc.Hidden, inner, false)
		p.v = t.linear("v", tc.Hidden, inner, false)
		p.o = t.linear("o", inner, tc.Hidden, false)
		p.relBias = graph.None
		if relBias {
			p.relBias = t.embedding("relative_attention_bias", tc.RelAttnBuckets, tc.Heads)
		}
	})
	return p
}

// t5Sublayer is T5LayerSelfAttention (module "SelfAttention", enc None:
// keys and values from x) or T5LayerCrossAttention ("EncDecAttention",
// keys and values from the encoder output enc): x + dropout(attention(
// layer_norm(x))). It returns the position bias the later layers reuse.
func (t *hfBuilder) t5Sublayer(name, module string, x, enc, mask, bias graph.TensorID, first bool, Lq, Lk int64) (graph.TensorID, graph.TensorID) {
	b := t.b
	var out graph.TensorID
	b.Scope(name, func() {
		p := t.t5AttnParams(module, first)
		n := b.RMSNorm("layer_norm", x)
		kv := n
		if enc != graph.None {
			kv = enc
		}
		var a graph.TensorID
		b.Scope(module, func() {
			a, bias = t.t5Attention(n, kv, mask, bias, p, Lq, Lk)
		})
		out = b.Add("add", x, b.Dropout("dropout", a, t.tc.DropoutP, false))
	})
	return out, bias
}

// t5Attention is T5Attention.forward on queries from x and keys/values
// from kv. When bias is None it computes the position bias (see t5) and
// returns it for the later layers.
func (t *hfBuilder) t5Attention(x, kv, mask, bias graph.TensorID, p t5AttnParams, Lq, Lk int64) (graph.TensorID, graph.TensorID) {
	b, tc := t.b, t.tc
	H, D := tc.Heads, tc.headDim()
	q := t.headsView("q", t.apply("q", x, p.q), H, D)
	k := t.headsView("k", t.apply("k", kv, p.k), H, D)
	v := t.headsView("v", t.apply("v", kv, p.v), H, D)
	scores := b.MatMul("matmul_qk", q, b.Transpose("key_transpose", k, 3, 2))
	if bias == graph.None {
		var pb graph.TensorID
		if p.relBias != graph.None {
			// compute_bias: the [Lq, Lk] int64 buckets (arange arithmetic,
			// no grad) through the embedding (which saves them), then
			// [Lq, Lk, H] → permute([2, 0, 1]) → unsqueeze(0): views. The
			// Builder has no unsqueeze; an expand to the same sizes is the
			// same view.
			buckets := t.hfConst("relative_position_bucket", scores, graph.Shape{Lq, Lk}, graph.I64)
			pb = b.EmbeddingWith("relative_attention_bias", buckets, p.relBias)
			pb = b.Permute("permute", pb, 2, 0, 1)
			pb = b.Expand("unsqueeze", pb, 1, H, Lq, Lk)
		} else if t.libCkpt && t.dec == nil {
			// torch.zeros((1, H, Lq, Lk)) with requires_grad = True
			// under gradient checkpointing in training
			// (graph.Config.LibraryCheckpointing): a leaf
			pb = b.Leaf("position_bias", scores, t.dt, 1, H, Lq, Lk)
		} else {
			// torch.zeros((1, H, Lq, Lk)), no grad (outside gradient
			// checkpointing).
			pb = t.hfConst("position_bias", scores, graph.Shape{1, H, Lq, Lk}, t.dt)
		}
		bias = b.Add("add_mask", pb, mask) // position_bias + causal_mask: [B, H, Lq, Lk]
	}
	scores = b.AddInplace("add_position_bias", scores, bias)
	a := b.Softmax("softmax", b.Cast("float", scores, graph.F32), -1, false)
	a = b.Cast("type_as", a, t.dt)
	a = b.Dropout("dropout", a, tc.DropoutP, false)
	o := b.MatMul("matmul_av", a, v)
	o = b.Contiguous("contiguous", b.Transpose("transpose", o, 1, 2))
	o = b.Reshape("view", o, t.B, Lq, H*D)
	return t.apply("o", o, p.o), bias
}

// t5FF is T5LayerFF: x + dropout(DenseReluDense(layer_norm(x))), with
// DenseReluDense = wo(dropout(act(wi(x)))) or, for "gated-gelu",
// wo(dropout(act(wi_0(x)) * wi_1(x))).
func (t *hfBuilder) t5FF(name string, x graph.TensorID) graph.TensorID {
	b, tc := t.b, t.tc
	E, I := tc.Hidden, tc.intermediate()
	gated := tc.FeedForwardProj == "gated-gelu"
	var out graph.TensorID
	b.Scope(name, func() {
		var wi, wi1, wo hfLinear
		b.Scope("DenseReluDense", func() {
			if gated {
				wi = t.linear("wi_0", E, I, false)
				wi1 = t.linear("wi_1", E, I, false)
			} else {
				wi = t.linear("wi", E, I, false)
			}
			wo = t.linear("wo", I, E, false)
		})
		n := b.RMSNorm("layer_norm", x)
		var f graph.TensorID
		b.Scope("DenseReluDense", func() {
			if gated {
				g := t.act("act", t.apply("wi_0", n, wi))
				f = b.Mul("mul", g, t.apply("wi_1", n, wi1))
			} else {
				f = t.act("act", t.apply("wi", n, wi))
			}
			f = b.Dropout("dropout", f, tc.DropoutP, false)
			f = t.apply("wo", f, wo)
		})
		out = b.Add("add", x, b.Dropout("dropout", f, tc.DropoutP, false))
	})
	return out
}
