package models

import "github.com/batchfit/batchfit/graph"

// bert builds BertForMaskedLM, or RobertaForMaskedLM for Arch "roberta"
// (modeling_bert.py, modeling_roberta.py). Neither has a pooler. With a
// Head the encoder carries that head instead (transformers_heads.go).
//
//	embeddings: word(input_ids) + token_type(token_type_ids) + position(position_ids),
//	            LayerNorm, dropout. BERT: position_ids = the position_ids buffer [:, :L];
//	            RoBERTa: create_position_ids_from_input_ids (cumsum of the non-pad mask
//	            + padding_idx, [B, L] int64); token_type_ids = the zero buffer [:, :L]
//	            expanded to [B, L].
//	encoder.layer.N: LayerNorm(x + dropout(dense(attention(x)))) then
//	                 LayerNorm(a + dropout(dense(act(dense(a)))))
//	head: BERT cls.predictions: transform (dense, act, LayerNorm), decoder (tied
//	      to word_embeddings, with the head's own bias); RoBERTa lm_head: dense,
//	      gelu, layer_norm, decoder (tied) + bias.
//	loss: CrossEntropyLoss()(logits.view(-1, V), labels.view(-1))
//
// Without padding the model passes SDPA no mask (_prepare_4d_attention_mask_for_sdpa
// returns None for an all-ones mask) and is_causal=False.
func (t *hfBuilder) bert() {
	b, tc := t.b, t.tc
	roberta := tc.Arch == "roberta"
	prefix := "bert"
	if roberta {
		prefix = "roberta"
	}
	E, V := tc.Hidden, tc.VocabSize
	ids := b.Input("input_ids", graph.Shape{t.B, t.L}, graph.I64)
	labels, tg := graph.None, headTargets{}
	if tc.Head == "" {
		labels = b.Target("labels", graph.Shape{t.B, t.L}, graph.I64)
	} else {
		tg = t.headTargets()
	}
	var word, h graph.TensorID
	b.Scope(prefix, func() {
		b.Scope("embeddings", func() {
			word = t.embedding("word_embeddings", V, E)
			pos := t.embedding("position_embeddings", tc.MaxPositions, E)
			tt := t.embedding("token_type_embeddings", tc.TypeVocabSize, E)
			// Registered with persistent=False: arange(P)[None] and zeros.
			posBuf := b.Buffer("position_ids", graph.Shape{1, tc.MaxPositions}, graph.I64)
			ttBuf := b.Buffer("token_type_ids", graph.Shape{1, tc.MaxPositions}, graph.I64)
			var posIDs graph.TensorID
			if roberta {
				posIDs = t.hfConst("position_ids", ids, graph.Shape{t.B, t.L}, graph.I64)
			} else {
				posIDs = b.Narrow("position_ids_slice", posBuf, 1, t.L)
			}
			ttIDs := b.Expand("token_type_ids_expand", b.Narrow("token_type_ids_slice", ttBuf, 1, t.L), t.B, t.L)
			e := b.EmbeddingWith("word_embeddings", ids, word)
			e = b.Add("add", e, b.EmbeddingWith("token_type_embeddings", ttIDs, tt))
			e = b.Add("add_position", e, b.EmbeddingWith("position_embeddings", posIDs, pos))
			e = b.LayerNorm("LayerNorm", e, 1, true)
			h = b.Dropout("dropout", e, tc.DropoutP, false)
		})
		if tc.AttnImpl == "eager" {
			// get_extended_attention_mask of the default all-ones mask:
			// (1 - mask[:, None, None, :]) * finfo.min, added to the scores.
			t.eagerMask = t.hfConst("extended_attention_mask", h, graph.Shape{t.B, 1, 1, t.L}, t.dt)
		}
		b.Scope("encoder", func() {
			for i := int64(0); i < tc.Layers; i++ {
				b.Block("layer."+itoa(i), func() { h = t.bertLayer(h) })
			}
		})
	})
	if tc.Head != "" {
		t.encoderHead(prefix, h, tg)
		return
	}
	var logits graph.TensorID
	headScope, norm := "cls.predictions", "LayerNorm"
	if roberta {
		headScope, norm = "lm_head", "layer_norm"
	}
	b.Scope(headScope, func() {
		// The head's own bias is registered on the head module itself, so
		// model.parameters() lists it before the transform; decoder.bias
		// is the same Parameter.
		bias := b.Param("bias", graph.Shape{V})
		x := h
		transform := func() {
			dense := t.linear("dense", E, E, true)
			x = t.apply("dense", x, dense)
			if roberta {
				x = b.Act(graph.GELU, "gelu", x, false) // RobertaLMHead calls gelu directly
			} else {
				x = t.act("transform_act_fn", x)
			}
			x = b.LayerNorm(norm, x, 1, true)
		}
		if roberta {
			transform()
		} else {
			b.Scope("transform", transform)
		}
		w := word
		if !tc.TieEmbeddings {
			w = b.Param("decoder.weight", graph.Shape{V, E})
		}
		logits = b.LinearWith("decoder", x, w, bias)
	})
	t.maskedLMLoss(logits, labels)
}

// bertLayer is BertLayer (RobertaLayer): self-attention, then the
// feed-forward, each closed by dropout, a residual add and a post-LayerNorm.
func (t *hfBuilder) bertLayer(x graph.TensorID) graph.TensorID {
	b, tc := t.b, t.tc
	E, H, D, I := tc.Hidden, tc.Heads, tc.headDim(), tc.intermediate()
	var a graph.TensorID
	b.Scope("attention", func() {
		var s graph.TensorID
		b.Scope("self", func() {
			ql := t.linear("query", E, H*D, true)
			kl := t.linear("key", E, H*D, true)
			vl := t.linear("value", E, H*D, true)
			q := t.headsView("query", t.apply("query", x, ql), H, D)
			k := t.headsView("key", t.apply("key", x, kl), H, D)
			v := t.headsView("value", t.apply("value", x, vl), H, D)
			out := t.attention(q, k, v, attnOpts{causal: false, p: tc.AttnDropoutP,
				eager: eagerOpts{scale: true, mask: t.eagerMask}})
			s = b.Reshape("reshape", out, t.B, t.L, H*D)
		})
		b.Scope("output", func() {
			dense := t.linear("dense", H*D, E, true)
			o := b.Dropout("dropout", t.apply("dense", s, dense), tc.DropoutP, false)
			a = b.LayerNorm("LayerNorm", b.Add("add", o, x), 1, true)
		})
	})
	var inter graph.TensorID
	b.Scope("intermediate", func() {
		dense := t.linear("dense", E, I, true)
		inter = t.act("intermediate_act_fn", t.apply("dense", a, dense))
	})
	var out graph.TensorID
	b.Scope("output", func() {
		dense := t.linear("dense", I, E, true)
		o := b.Dropout("dropout", t.apply("dense", inter, dense), tc.DropoutP, false)
		out = b.LayerNorm("LayerNorm", b.Add("add", o, a), 1, true)
	})
	return out
}
