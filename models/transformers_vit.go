package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// ViT in transformers (modeling_vit.py): ViTForImageClassification as it
// runs in training mode, op for op.
//
//	ViTModel.forward: pixel_values.to(projection.weight.dtype) when the
//	  model is not float32 (a copy of the float32 batch);
//	embeddings: patch_embeddings.projection (Conv2d C→E, kernel = stride =
//	  patch_size) .flatten(2).transpose(1, 2) (a non-contiguous [B, N, E]
//	  view), torch.cat((cls_token.expand(B, -1, -1), x), dim=1), + the
//	  position_embeddings Parameter [1, N+1, E], dropout(hidden_dropout_prob);
//	encoder.layer.N (ViTLayer):
//	  a = attention(layernorm_before(h)): query, key and value Linear, each
//	      .view(B, -1, H, D).transpose(1, 2); the attention function;
//	      context.reshape(B, L, E) (a view); output.dense + dropout
//	  h = a + h
//	  m = intermediate.dense + act(layernorm_after(h)) (act: hidden_act)
//	  return output.dropout(output.dense(m)) + h
//	layernorm; classifier(sequence_output[:, 0, :]) (a strided view of the
//	  final LayerNorm's output, which the classifier's addmm saves);
//	loss (loss_utils.ForSequenceClassificationLoss, or the same code inline
//	  in earlier releases): single_label_classification is
//	  cross_entropy(logits.view(-1, num_labels), labels.view(-1)) with int64
//	  labels [B]; regression (one label, or problem_type "regression") is
//	  MSELoss()(logits.squeeze(), labels.squeeze()) on float labels.
//
// With the default dropouts of 0.0 nn.Dropout returns its input, so no
// dropout op exists. Without a head mask (attention_mask None) SDPA gets
// no mask and is_causal=False.
//
// Versions: from the attention refactor (hfViTAttnInterface) ViTSelfAttention
// projects key, value, then query and calls the attention interface:
// integrations.sdpa_attention_forward (whose q, k, v .contiguous() copies
// in 4.48–4.55 apply: the three are transposed views) or the module's
// eager_attention_forward (matmul, * scaling, softmax in float32 then
// .to(query.dtype), dropout, matmul, transpose(1, 2).contiguous()).
// Before it ViTSdpaSelfAttention projected query first and called
// F.scaled_dot_product_attention directly (no copies), and the eager
// ViTSelfAttention divided by √D and ran softmax in the input dtype.
// Releases before 4.41 (no SDPA for ViT) are not distinguished.
//
// The module and parameter names are those of transformers 4.x (and of
// the checkpoints). transformers PR #41693 ("Refactor ViT to updated
// standards", merged October 2025, for 5.0) restructured these modules;
// its code has not been checked against this graph: names may differ
// there, and the op sequence is assumed unchanged.

// hfViTAttnInterface is the first release with ViT's attention interface
// (transformers PR #36545, "Refactor Attention implementation for ViT-based
// models", merged on 2025-03-20, the eve of 4.50.0; whether 4.50.0 or 4.51.0
// shipped it first is not established here).
const hfViTAttnInterface hfVersion = 4050

// ViTConfig's and PretrainedConfig's defaults.
const (
	hfViTImage    = 224
	hfViTPatch    = 16
	hfViTChannels = 3
	hfViTLabels   = 2
)

func (tc TransformerConfig) imageSize() int64   { return orDefault(tc.ImageSize, hfViTImage) }
func (tc TransformerConfig) patchSize() int64   { return orDefault(tc.PatchSize, hfViTPatch) }
func (tc TransformerConfig) numChannels() int64 { return orDefault(tc.NumChannels, hfViTChannels) }
func (tc TransformerConfig) numLabels() int64   { return orDefault(tc.NumLabels, hfViTLabels) }

// problemType is the loss transformers picks for integer labels:
// problem_type when set, otherwise regression for one label and
// single-label classification for more.
func (tc TransformerConfig) problemType() string {
	if tc.ProblemType != "" {
		return tc.ProblemType
	}
	if tc.numLabels() == 1 {
		return "regression"
	}
	return "single_label_classification"
}

// checkVision validates the image geometry and the head of a vision model.
func (tc TransformerConfig) checkVision() error {
	s, p := tc.imageSize(), tc.patchSize()
	switch {
	case tc.ImageSize < 0 || tc.PatchSize < 0 || tc.NumChannels < 0 || tc.NumLabels < 0:
		return fmt.Errorf("image_size, patch_size, num_channels and num_labels must not be negative (got %d, %d, %d, %d)",
			tc.ImageSize, tc.PatchSize, tc.NumChannels, tc.NumLabels)
	case p > s:
		return fmt.Errorf("patch size %d is larger than the %d-pixel image", p, s)
	}
	switch tc.ProblemType {
	case "", "single_label_classification", "regression":
	case "multi_label_classification":
		return fmt.Errorf("problem_type %q (BCEWithLogitsLoss) is not supported", tc.ProblemType)
	default:
		return fmt.Errorf("unknown problem_type %q (want single_label_classification or regression)", tc.ProblemType)
	}
	return nil
}

// vit builds ViTForImageClassification (see the comment at the top of this
// file). Parameters come in registration order: embeddings.cls_token and
// position_embeddings (the module's own) before patch_embeddings.projection,
// then per layer attention, intermediate, output, layernorm_before,
// layernorm_after, then the final layernorm and the classifier.
func (t *hfBuilder) vit() {
	b, tc := t.b, t.tc
	E, S, P, C, NL := tc.Hidden, tc.imageSize(), tc.patchSize(), tc.numChannels(), tc.numLabels()
	side := S / P
	N := side * side // num_patches = (S // P)², what the stride-P convolution yields
	t.L = N + 1
	regression := tc.problemType() == "regression"

	x := b.Input("pixel_values", graph.Shape{t.B, C, S, S}, graph.F32)
	var labels graph.TensorID
	switch {
	case !regression:
		labels = b.Target("labels", graph.Shape{t.B}, graph.I64)
	case NL == 1:
		labels = b.Target("labels", graph.Shape{t.B}, graph.F32)
	default:
		labels = b.Target("labels", graph.Shape{t.B, NL}, graph.F32)
	}

	var h graph.TensorID
	b.Scope("vit", func() {
		px := x
		if t.dt != graph.F32 {
			// expected_dtype = projection.weight.dtype; pixel_values.to(expected_dtype)
			px = b.Cast("pixel_values_to", x, t.dt)
		}
		b.Scope("embeddings", func() {
			cls := b.Param("cls_token", graph.Shape{1, 1, E})
			pos := b.Param("position_embeddings", graph.Shape{1, N + 1, E})
			var pe graph.TensorID
			b.Scope("patch_embeddings", func() {
				pe = b.Conv2d("projection", px, E, graph.Conv2dOpts{
					Kernel: [2]int64{P, P}, Stride: [2]int64{P, P}, Bias: true,
				})
				pe = b.Flatten("flatten", pe, 2)        // [B, E, N]: a view
				pe = b.Transpose("transpose", pe, 1, 2) // [B, N, E]: a non-contiguous view
			})
			ct := b.Expand("cls_token_expand", cls, t.B, 1, E)
			e := b.Cat("cat", 1, ct, pe)                 // a new [B, N+1, E]
			e = b.Add("add_position_embeddings", e, pos) // embeddings + self.position_embeddings
			h = b.Dropout("dropout", e, tc.DropoutP, false)
		})
		b.Scope("encoder", func() {
			for i := int64(0); i < tc.Layers && b.Err() == nil; i++ {
				b.Block("layer."+itoa(i), func() { h = t.vitLayer(h) })
			}
		})
		h = b.LayerNorm("layernorm", h, 1, true)
	})
	// sequence_output[:, 0, :]: a view [B, E] with row stride (N+1)·E.
	first := b.Select("sequence_output_select", h, 1)
	logits := t.apply("classifier", first, t.linear("classifier", E, NL, true))
	b.Scope("loss", func() {
		if regression {
			pred := logits
			if NL == 1 {
				pred = b.Reshape("squeeze_logits", logits, t.B) // logits.squeeze(): a view
			}
			b.MSELoss("mse_loss", pred, labels)
			return
		}
		flat := b.Reshape("view_logits", logits, -1, NL)
		target := b.Reshape("view_labels", labels, -1)
		b.CrossEntropy("cross_entropy", flat, target)
	})
}

// vitLayer is ViTLayer: pre-LayerNorm attention and MLP, each closed by a
// residual add (attention_output + hidden_states; hidden_states +
// input_tensor in ViTOutput).
func (t *hfBuilder) vitLayer(x graph.TensorID) graph.TensorID {
	b, tc := t.b, t.tc
	E, H, D, I := tc.Hidden, tc.Heads, tc.headDim(), tc.intermediate()
	legacy := tc.version() < hfViTAttnInterface
	var q, k, v, o, inter, out hfLinear
	b.Scope("attention", func() {
		b.Scope("attention", func() {
			q = t.linear("query", E, H*D, tc.QKVBias)
			k = t.linear("key", E, H*D, tc.QKVBias)
			v = t.linear("value", E, H*D, tc.QKVBias)
		})
		b.Scope("output", func() { o = t.linear("dense", H*D, E, true) })
	})
	b.Scope("intermediate", func() { inter = t.linear("dense", E, I, true) })
	b.Scope("output", func() { out = t.linear("dense", I, E, true) })

	n := b.LayerNorm("layernorm_before", x, 1, true)
	var a graph.TensorID
	b.Scope("attention", func() {
		var ctx graph.TensorID
		b.Scope("attention", func() {
			var qs, ks, vs graph.TensorID
			if legacy {
				// mixed_query_layer = self.query(hidden_states), then key, value;
				// transpose_for_scores: view(B, L, H, D).permute(0, 2, 1, 3).
				qs = t.headsView("query", t.apply("query", n, q), H, D)
				ks = t.headsView("key", t.apply("key", n, k), H, D)
				vs = t.headsView("value", t.apply("value", n, v), H, D)
			} else {
				ks = t.headsView("key", t.apply("key", n, k), H, D)
				vs = t.headsView("value", t.apply("value", n, v), H, D)
				qs = t.headsView("query", t.apply("query", n, q), H, D)
			}
			ctx = t.attention(qs, ks, vs, attnOpts{causal: false, p: tc.AttnDropoutP, contiguousLegacy: !legacy,
				eager: eagerOpts{scale: true, upcast: !legacy, mask: graph.None}}) // no head mask
			// context_layer.reshape(B, L, all_head_size): a view of the contiguous copy.
			ctx = b.Reshape("reshape", ctx, t.B, t.L, H*D)
		})
		b.Scope("output", func() {
			a = b.Dropout("dropout", t.apply("dense", ctx, o), tc.DropoutP, false)
		})
	})
	h := b.Add("add", a, x) // attention_output + hidden_states
	m := b.LayerNorm("layernorm_after", h, 1, true)
	b.Scope("intermediate", func() {
		m = t.act("intermediate_act_fn", t.apply("dense", m, inter))
	})
	var y graph.TensorID
	b.Scope("output", func() {
		y = b.Dropout("dropout", t.apply("dense", m, out), tc.DropoutP, false)
		y = b.Add("add", y, h) // hidden_states + input_tensor
	})
	return y
}
