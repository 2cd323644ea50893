package models

import "github.com/batchfit/batchfit/graph"

// gptNeoX builds GPTNeoXForCausalLM (modeling_gpt_neox.py; Pythia):
//
//	gpt_neox.embed_in, emb_dropout (hidden_dropout)
//	layers.N: attn = post_attention_dropout(attention(input_layernorm(x)))
//	          parallel residual: x + attn + post_mlp_dropout(mlp(post_attention_layernorm(x)))
//	          otherwise:         a = x + attn; a + post_mlp_dropout(mlp(post_attention_layernorm(a)))
//	final_layer_norm; embed_out (untied in Pythia); ForCausalLMLoss
//
// The attention fuses q, k and v per head: query_key_value(x).view(B, L, H,
// 3·D).transpose(1, 2).chunk(3, dim=-1), and rotates only the first
// rotary_pct of each head. GPTNeoXLayer registers both LayerNorms before
// the attention; they are created here by their ops, so in
// Graph.Params() post_attention_layernorm follows the attention.
func (t *hfBuilder) gptNeoX() {
	b, tc := t.b, t.tc
	E, H, D, I := tc.Hidden, tc.Heads, tc.headDim(), tc.intermediate()
	rot := D
	if tc.RotaryPct > 0 && tc.RotaryPct < 1 {
		rot = int64(float64(D) * tc.RotaryPct)
	}
	ids := b.Input("input_ids", graph.Shape{t.B, t.L}, graph.I64)
	labels := b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
	var embed, h graph.TensorID
	b.Scope("gpt_neox", func() {
		embed = t.embedding("embed_in", tc.VocabSize, E)
		h = b.EmbeddingWith("embed_in", ids, embed)
		h = b.Dropout("emb_dropout", h, tc.DropoutP, false)
		b.Buffer("rotary_emb.inv_freq", graph.Shape{rot / 2}, graph.F32)
		cos := t.hfConst("rotary_emb.cos", h, graph.Shape{1, t.L, rot}, t.dt)
		sin := t.hfConst("rotary_emb.sin", h, graph.Shape{1, t.L, rot}, t.dt)
		if tc.AttnImpl == "eager" {
			t.eagerMask = t.hfConst("causal_mask", h, graph.Shape{t.B, 1, t.L, t.L}, t.dt)
		}
		for i := int64(0); i < tc.Layers; i++ {
			b.Block("layers."+itoa(i), func() {
				x := h
				n := b.LayerNorm("input_layernorm", x, 1, true)
				var a graph.TensorID
				b.Scope("attention", func() {
					qkvL := t.linear("query_key_value", E, 3*H*D, true)
					dense := t.linear("dense", H*D, E, true)
					qkv := b.Reshape("view", t.apply("query_key_value", n, qkvL), t.B, t.L, H, 3*D)
					qkv = b.Transpose("transpose", qkv, 1, 2)
					q := b.Narrow("chunk_query", qkv, -1, D)
					k := b.Narrow("chunk_key", qkv, -1, D)
					v := b.Narrow("chunk_value", qkv, -1, D)
					q, k = t.rope(q, k, cos, sin, rot)
					out := t.attention(q, k, v, attnOpts{causal: true, p: tc.AttnDropoutP, contiguousLegacy: true,
						eager: eagerOpts{scale: true, mask: t.eagerMask, upcast: true}})
					out = b.Reshape("reshape", out, t.B, t.L, H*D)
					a = t.apply("dense", out, dense)
				})
				a = b.Dropout("post_attention_dropout", a, tc.DropoutP, false)
				mlpIn := x
				if !tc.ParallelResidual {
					a = b.Add("add", a, x)
					mlpIn = a
				}
				n = b.LayerNorm("post_attention_layernorm", mlpIn, 1, true)
				var m graph.TensorID
				b.Scope("mlp", func() {
					up := t.linear("dense_h_to_4h", E, I, true)
					down := t.linear("dense_4h_to_h", I, E, true)
					m = t.apply("dense_4h_to_h", t.act("act", t.apply("dense_h_to_4h", n, up)), down)
				})
				m = b.Dropout("post_mlp_dropout", m, tc.DropoutP, false)
				if tc.ParallelResidual {
					h = b.Add("add_1", b.Add("add", m, a), x) // mlp_output + attn_output + hidden_states
				} else {
					h = b.Add("add_1", m, a)
				}
			})
		}
		h = b.LayerNorm("final_layer_norm", h, 1, true)
	})
	head := embed
	if !tc.TieEmbeddings {
		head = b.Param("embed_out.weight", graph.Shape{tc.VocabSize, E})
		b.QuantizeHead("embed_out", head)
	}
	t.causalLMLoss(t.lmHead("embed_out", h, head, graph.None), labels)
}

// opt builds OPTForCausalLM (modeling_opt.py) for models whose
// word_embed_proj_dim equals hidden_size (no project_in/out), with
// do_layer_norm_before (pre-LN):
//
//	model.decoder.embed_tokens(input_ids) + embed_positions(position_ids + 2)
//	    position_ids = (cumsum(attention_mask, 1) * attention_mask - 1).long(): [B, L]
//	layers.N: x + dropout(self_attn(self_attn_layer_norm(x)));
//	          x.reshape(-1, E) + dropout(fc2(relu(fc1(final_layer_norm(x))))), viewed back
//	final_layer_norm; lm_head (tied); ForCausalLMLoss
//
// OPTDecoder registers final_layer_norm before its layers; it is created by
// its op here, so it comes last in Graph.Params().
func (t *hfBuilder) opt() {
	b, tc := t.b, t.tc
	E, H, D, I := tc.Hidden, tc.Heads, tc.headDim(), tc.intermediate()
	ids := b.Input("input_ids", graph.Shape{t.B, t.L}, graph.I64)
	labels := b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
	var embed, h graph.TensorID
	b.Scope("model.decoder", func() {
		embed = t.embedding("embed_tokens", tc.VocabSize, E)
		pos := t.embedding("embed_positions", tc.positionRows(), E)
		x := b.EmbeddingWith("embed_tokens", ids, embed)
		posIDs := t.hfConst("position_ids", ids, graph.Shape{t.B, t.L}, graph.I64)
		h = b.Add("add", x, b.EmbeddingWith("embed_positions", posIDs, pos))
		if tc.AttnImpl == "eager" {
			t.eagerMask = t.hfConst("causal_mask", h, graph.Shape{t.B, 1, t.L, t.L}, t.dt)
		}
		for i := int64(0); i < tc.Layers; i++ {
			b.Block("layers."+itoa(i), func() {
				var kL, vL, qL, oL hfLinear
				b.Scope("self_attn", func() {
					kL = t.linear("k_proj", E, H*D, true)
					vL = t.linear("v_proj", E, H*D, true)
					qL = t.linear("q_proj", E, H*D, true)
					oL = t.linear("out_proj", H*D, E, true)
				})
				x := h
				n := b.LayerNorm("self_attn_layer_norm", x, 1, true)
				var a graph.TensorID
				b.Scope("self_attn", func() {
					q := t.headsView("q_proj", t.apply("q_proj", n, qL), H, D)
					k := t.headsView("k_proj", t.apply("k_proj", n, kL), H, D)
					v := t.headsView("v_proj", t.apply("v_proj", n, vL), H, D)
					out := t.attention(q, k, v, attnOpts{causal: true, p: tc.AttnDropoutP, contiguousLegacy: true,
						eager: eagerOpts{scale: true, mask: t.eagerMask}})
					out = b.Reshape("reshape", out, t.B, t.L, H*D)
					a = t.apply("out_proj", out, oL)
				})
				a = b.Dropout("dropout", a, tc.DropoutP, false)
				x = b.Add("add", x, a)
				fc1 := t.linear("fc1", E, I, true)
				fc2 := t.linear("fc2", I, E, true)
				x = b.Reshape("reshape", x, -1, E)
				n = b.LayerNorm("final_layer_norm", x, 1, true)
				m := t.apply("fc2", t.act("activation_fn", t.apply("fc1", n, fc1)), fc2)
				m = b.Dropout("dropout_1", m, tc.DropoutP, false)
				h = b.Reshape("view", b.Add("add_1", x, m), t.B, t.L, E)
			})
		}
		h = b.LayerNorm("final_layer_norm", h, 1, true)
	})
	head := embed
	if !tc.TieEmbeddings {
		head = b.Param("lm_head.weight", graph.Shape{tc.VocabSize, E})
		b.QuantizeHead("lm_head", head)
	}
	t.causalLMLoss(t.lmHead("lm_head", h, head, graph.None), labels)
}
