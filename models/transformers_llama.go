package models

import "github.com/batchfit/batchfit/graph"

// llama builds LlamaForCausalLM and the models written the same way:
// MistralForCausalLM and Qwen2ForCausalLM (q/k/v biases), GemmaForCausalLM
// (embeddings scaled by √hidden, (1+w) RMSNorm, gelu_pytorch_tanh) and
// Phi3ForCausalLM (fused qkv_proj and gate_up_proj):
//
//	model.embed_tokens(input_ids)                   # Gemma: * hidden_size**0.5
//	cos, sin = model.rotary_emb(x, position_ids)    # [1, L, D], no_grad, computed once
//	model.layers.N: x + self_attn(input_layernorm(x)); x + mlp(post_attention_layernorm(x))
//	model.norm
//	lm_head on hidden_states[:, 0:, :]; ForCausalLMLoss
//
// (or, with Head, *ForSequenceClassification's score: transformers_heads.go)
//
// The norms are b.RMSNorm, one op. LlamaRMSNorm (also Mistral, Qwen2, Phi3)
// is not fused; its forward is
//
//	input_dtype = x.dtype
//	h = x.to(torch.float32)                        # a copy unless float32
//	variance = h.pow(2).mean(-1, keepdim=True)     # pow saves h; mean saves sizes
//	h = h * torch.rsqrt(variance + eps)            # rsqrt saves its [..., 1] fp32 result; mul saves h and it
//	return weight * h.to(input_dtype)              # mul saves weight and the cast h
//
// so autograd keeps the float32 input, the [..., 1] rsqrt, and the
// normalised tensor in the input dtype; in float32 the first is x itself
// and no cast copies exist. GemmaRMSNorm computes everything in float32:
// out = _norm(x.float()) * (1.0 + weight.float()); out.type_as(x), with
// _norm(h) = h * rsqrt(h.pow(2).mean(-1, keepdim=True) + eps), keeping the
// float32 input, the rsqrt and the float32 normalised tensor. The rms_norm
// rule of the step simulator must reproduce these.
func (t *hfBuilder) llama() {
	b, tc := t.b, t.tc
	ids, labels := graph.None, graph.None
	if t.first {
		ids = b.Input("input_ids", graph.Shape{t.B, t.L}, graph.I64)
	} else {
		// a later pipeline stage starts from the hidden states it
		// receives, which require grad (their gradient is sent back)
		ids = b.Received("hidden_states", graph.Shape{t.B, t.L / max(t.sp, 1), tc.Hidden})
	}
	tg := headTargets{}
	if t.last && t.dec == nil {
		if tc.Head == "" {
			labels = b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
		} else {
			tg = t.headTargets()
		}
	}
	rot := tc.headDim()
	var embed, h graph.TensorID
	embed = graph.None
	b.Scope("model", func() {
		h = ids
		if t.first {
			embed = t.embedding("embed_tokens", tc.VocabSize, tc.Hidden)
			h = b.EmbeddingWith("embed_tokens", ids, embed)
			// the vocabulary-parallel embedding's partial sums are
			// reduce-scattered into the sequence-parallel region
			h = t.scatter("embed_tokens.scatter", h)
		}
		// LlamaRotaryEmbedding: inv_freq [D/2] float32 buffer
		// (persistent=False); cos and sin are computed per forward under
		// no_grad in float32 and returned .to(x.dtype).
		b.Buffer("rotary_emb.inv_freq", graph.Shape{rot / 2}, graph.F32)
		cos := t.hfConst("rotary_emb.cos", h, graph.Shape{1, t.L, rot}, t.dt)
		sin := t.hfConst("rotary_emb.sin", h, graph.Shape{1, t.L, rot}, t.dt)
		if tc.AttnImpl == "eager" {
			// create_causal_mask for eager: torch.where(bool mask, 0,
			// finfo.min), a [B, 1, L, L] tensor in the model's dtype.
			t.eagerMask = t.hfConst("causal_mask", h, graph.Shape{t.B, 1, t.L, t.kvLen()}, t.dt)
		}
		if tc.Arch == "gemma" && t.first {
			// hidden_states * torch.tensor(hidden_size**0.5, dtype)
			h = b.Scale("normalizer", h)
		}
		for i := t.lo; i < t.hi; i++ {
			t.layer = int(i)
			b.Block("layers."+itoa(i), func() { h = t.llamaLayer(h, cos, sin) })
		}
		if t.last {
			h = t.gather("norm.gather", b.RMSNorm("norm", h))
		}
	})
	if !t.last {
		// the stage's output is sent on; its gradient comes back
		b.Output(h)
		return
	}
	if tc.Head != "" {
		// *ForSequenceClassification: no lm_head (a tied one has nothing
		// to share), the score head on the normed hidden states
		t.decoderHead(h, tg)
		return
	}
	head := embed
	if !tc.TieEmbeddings || !t.first {
		// a last stage without the embedding keeps its own copy of a
		// tied head (Megatron's shared embedding, synced by all-reduce)
		head = b.Param("lm_head.weight", graph.Shape{tc.VocabSize, tc.Hidden})
		if !tc.TieEmbeddings {
			b.QuantizeHead("lm_head", head)
		}
	}
	logits := t.lmHead("lm_head", h, head, graph.None)
	if t.dec != nil {
		if t.tc.version() < 4046 {
			// logits = logits.float() (4.45: the last position's only)
			logits = b.Cast("float", logits, graph.F32)
		}
		t.nextTokenLogits(logits)
		return
	}
	t.causalLMLoss(logits, labels)
}

// llamaLayer is LlamaDecoderLayer (and its Mistral, Qwen2, Gemma, Phi3
// copies). Parameters are created in registration order: self_attn, mlp,
// input_layernorm, post_attention_layernorm (the norms by their ops, which
// come after).
func (t *hfBuilder) llamaLayer(x, cos, sin graph.TensorID) graph.TensorID {
	b, tc := t.b, t.tc
	E, H, KV, D, I := tc.Hidden, tc.Heads, tc.kvHeads(), tc.headDim(), tc.intermediate()
	phi3 := tc.Arch == "phi3"
	var q, k, v, o, qkv, gate, up, down, gateUp hfLinear
	b.Scope("self_attn", func() {
		if phi3 {
			o = t.linear("o_proj", H*D, E, false)
			qkv = t.linear("qkv_proj", E, (H+2*KV)*D, false)
			return
		}
		q = t.linear("q_proj", E, H*D, tc.QKVBias)
		k = t.linear("k_proj", E, KV*D, tc.QKVBias)
		v = t.linear("v_proj", E, KV*D, tc.QKVBias)
		o = t.linear("o_proj", H*D, E, tc.OutBias)
	})
	b.Scope("mlp", func() {
		if phi3 {
			gateUp = t.linear("gate_up_proj", E, 2*I, false)
			down = t.linear("down_proj", I, E, false)
			return
		}
		gate = t.linear("gate_proj", E, I, tc.MLPBias)
		up = t.linear("up_proj", E, I, tc.MLPBias)
		down = t.linear("down_proj", I, E, tc.MLPBias)
	})

	n := t.gather("input_layernorm.gather", b.RMSNorm("input_layernorm", x))
	var a graph.TensorID
	b.Scope("self_attn", func() {
		var qs, ks, vs graph.TensorID
		if phi3 {
			// qkv[..., :q], qkv[..., q:q+kv], qkv[..., q+kv:], each
			// .view(B, L, -1, D).transpose(1, 2).
			p := t.splitHeads("qkv_proj", t.apply("qkv_proj", n, qkv), D, H, KV, KV)
			qs, ks, vs = p[0], p[1], p[2]
		} else {
			qs = t.headsView("q_proj", t.apply("q_proj", n, q), H, D)
			ks = t.headsView("k_proj", t.apply("k_proj", n, k), KV, D)
			vs = t.headsView("v_proj", t.apply("v_proj", n, v), KV, D)
		}
		qs, ks = t.rope(qs, ks, cos, sin, D)
		ks, vs = t.cacheUpdate(ks, vs)
		// sdpa_attention_forward: is_causal only when more than one query
		// position (a decode step's single query sees the whole cache)
		out := t.attention(qs, ks, vs, attnOpts{causal: t.dec == nil || t.L > 1, p: tc.AttnDropoutP, gqa: true, contiguousLegacy: true,
			eager: eagerOpts{scale: true, mask: t.eagerMask, upcast: true}})
		// attn_output.reshape(B, L, -1).contiguous(): a view.
		out = b.Reshape("reshape", out, t.B, t.L, H*D)
		a = t.scatter("o_proj.scatter", t.apply("o_proj", out, o))
	})
	if phi3 {
		a = b.Dropout("resid_attn_dropout", a, tc.DropoutP, false)
	}
	h := b.Add("add", x, a) // residual + hidden_states
	n = t.gather("post_attention_layernorm.gather", b.RMSNorm("post_attention_layernorm", h))
	var m graph.TensorID
	b.Scope("mlp", func() {
		if phi3 {
			// gate, up = gate_up_proj(x).chunk(2, dim=-1); down_proj(up * act(gate))
			gu := t.apply("gate_up_proj", n, gateUp)
			g := b.Narrow("chunk_gate", gu, -1, I)
			u := b.Narrow("chunk_up", gu, -1, I)
			g = t.act("activation_fn", g)
			m = t.scatter("down_proj.scatter", t.apply("down_proj", b.Mul("mul", u, g), down))
			return
		}
		// down_proj(act_fn(gate_proj(x)) * up_proj(x))
		g := t.act("act_fn", t.apply("gate_proj", n, gate))
		u := t.apply("up_proj", n, up)
		m = t.scatter("down_proj.scatter", t.apply("down_proj", b.Mul("mul", g, u), down))
	})
	if phi3 {
		m = b.Dropout("resid_mlp_dropout", m, tc.DropoutP, false)
	}
	return b.Add("add_1", h, m)
}

// rope is apply_rotary_pos_emb(q, k, cos, sin) on the first rot channels of
// each head (all of them except for GPT-NeoX's partial rotary):
//
//	cos = cos.unsqueeze(1); sin = sin.unsqueeze(1)    # [1, 1, L, rot] views
//	q_embed = (q * cos) + (rotate_half(q) * sin)
//	rotate_half(x) = torch.cat((-x[..., rot/2:], x[..., :rot/2]), dim=-1)
//
// mul by cos/sin saves cos/sin (constants) since q requires grad and they
// do not; neg, cat and add save nothing. With partial rotary q[..., :rot]
// and q[..., rot:] are views and the result is cat([q_embed, q_pass], -1).
func (t *hfBuilder) rope(q, k, cos, sin graph.TensorID, rot int64) (graph.TensorID, graph.TensorID) {
	b := t.b
	c := b.Reshape("cos_unsqueeze", cos, 1, 1, t.L, rot)
	s := b.Reshape("sin_unsqueeze", sin, 1, 1, t.L, rot)
	return t.rotate("q", q, c, s, rot), t.rotate("k", k, c, s, rot)
}

func (t *hfBuilder) rotate(name string, x, cos, sin graph.TensorID, rot int64) graph.TensorID {
	b := t.b
	d := t.tc.headDim()
	xr, pass := x, graph.None
	if rot < d {
		xr = b.Narrow(name+"_rot", x, -1, rot)
		pass = b.Narrow(name+"_pass", x, -1, d-rot)
	}
	c := b.Mul(name+"_mul_cos", xr, cos)
	x1 := b.Narrow(name+"_x1", xr, -1, rot/2)
	x2 := b.Narrow(name+"_x2", xr, -1, rot-rot/2) // x[..., rot/2:] (Narrow has no start; storage is the same)
	neg := b.Scale(name+"_neg", x2)               // -x2: a new tensor, nothing saved
	rh := b.Cat(name+"_rotate_half", -1, neg, x1)
	s := b.Mul(name+"_mul_sin", rh, sin)
	out := b.Add(name+"_embed", c, s)
	if pass != graph.None {
		out = b.Cat(name+"_cat_pass", -1, out, pass)
	}
	return out
}
