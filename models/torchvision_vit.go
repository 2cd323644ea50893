package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// torchvision.models.vision_transformer (0.14) with nn.MultiheadAttention
// as torch 1.13 runs it in training mode.

type tvViTSpec struct {
	name                              string
	patch, layers, heads, hidden, mlp int64
	desc                              string
}

var tvViTs = []tvViTSpec{
	{"vit_b_16", 16, 12, 12, 768, 3072, "ViT-B/16 (torchvision): 12 layers, hidden 768, 12 heads, 16×16 patches, 86.6M parameters at 224"},
	{"vit_b_32", 32, 12, 12, 768, 3072, "ViT-B/32 (torchvision): 12 layers, hidden 768, 12 heads, 32×32 patches, 88.2M parameters at 224"},
	{"vit_l_16", 16, 24, 16, 1024, 4096, "ViT-L/16 (torchvision): 24 layers, hidden 1024, 16 heads, 16×16 patches, 304.3M parameters at 224"},
}

func init() {
	for _, s := range tvViTs {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Dims: []Dim{DimLayers},
			Build: func(c Config) (*graph.Graph, error) {
				s := s
				s.layers = orDefault(c.Layers, s.layers)
				return tvViT(s, c)
			},
		})
	}
}

// tvViT is VisionTransformer.forward (dropout = attention_dropout = 0.0,
// no representation layer, image_size = the input side).
func tvViT(s tvViTSpec, c Config) (*graph.Graph, error) {
	b, x, y, image := tvStart(s.name, c)
	if image%s.patch != 0 {
		b.Fail("%s: image side %d is not a multiple of the patch size %d", s.name, image, s.patch)
	}
	if s.layers < 1 {
		b.Fail("%s: needs at least one encoder layer, got %d", s.name, s.layers)
	}
	n, e := c.Batch, s.hidden
	nh := image / s.patch
	seq := nh*nh + 1

	// The root module's own parameter comes first in model.parameters(),
	// before conv_proj's.
	classToken := b.Param("class_token", graph.Shape{1, 1, e})

	// _process_input
	h := b.Conv2d("conv_proj", x, e, tvConv(s.patch, s.patch, 0, 1, true))
	h = b.Reshape("reshape", h, n, e, nh*nh) // x.reshape(n, hidden, n_h * n_w): a view
	h = b.Permute("permute", h, 0, 2, 1)     // x.permute(0, 2, 1): a non-contiguous view [n, seq-1, hidden]

	ct := b.Expand("expand", classToken, n, 1, e) // class_token.expand(n, -1, -1): a view of the parameter
	h = b.Cat("cat", 1, ct, h)                    // torch.cat([batch_class_token, x], dim=1): a new [n, seq, hidden]

	b.Scope("encoder", func() {
		pos := b.Param("pos_embedding", graph.Shape{1, seq, e})
		h = b.Add("add", h, pos)              // input = input + self.pos_embedding
		h = b.Dropout("dropout", h, 0, false) // nn.Dropout(0.0): returns its input
		b.Scope("layers", func() {
			for i := int64(0); i < s.layers && b.Err() == nil; i++ {
				b.Block(fmt.Sprintf("encoder_layer_%d", i), func() {
					h = tvEncoderBlock(b, h, s.heads, s.mlp, c.MHAPackedInProjection)
				})
			}
		})
		h = b.LayerNorm("ln", h, 1, true) // LayerNorm(hidden, eps=1e-6)
	})
	h = b.Select("select", h, 1) // x[:, 0]: a non-contiguous view of the encoder output
	var logits graph.TensorID
	b.Scope("heads", func() {
		logits = b.Linear("head", h, tvClasses, true)
	})
	return tvFinish(b, logits, y)
}

// tvEncoderBlock is EncoderBlock.forward.
func tvEncoderBlock(b *graph.Builder, input graph.TensorID, heads, mlp int64, packed bool) graph.TensorID {
	var e int64
	if s := b.Shape(input); len(s) > 0 {
		e = s[len(s)-1]
	}
	x := b.LayerNorm("ln_1", input, 1, true)
	// self.self_attention(query=x, key=x, value=x, need_weights=False)
	x = tvMultiheadAttention(b, "self_attention", x, heads, 0, packed)
	x = b.Dropout("dropout", x, 0, false) // nn.Dropout(0.0): x itself
	// x = x + input (not in-place). TensorIterator lays the sum out in its
	// operands' order of strides (reorder_dimensions in
	// aten/src/ATen/TensorIterator.cpp; the first operand that tells two
	// dims apart decides): x, the transposed attention output, is [B, L, E]
	// over [L, B, E] memory, so the sum is a dense but non-contiguous
	// [B, L, E], and so are add_1 (x + y) and every layer's output. Each
	// LayerNorm that reads one (ln_2, the next layer's ln_1, encoder.ln)
	// works on X.expect_contiguous() in layer_norm_cuda and again in
	// layer_norm_backward_cuda (aten/src/ATen/native/layer_norm.cpp): a
	// float32 [B, L, E] copy in forward and another in backward (measured
	// on an H200, torch 2.11, ViT-B/16 under bf16 autocast: a 38.7 MB
	// block at batch 64 beside each LayerNorm's output and beside its
	// input gradient; testdata/measured/snapshots).
	x = b.Add("add", x, input)
	b.SetStrided(x)

	y := b.LayerNorm("ln_2", x, 1, true)
	// MLPBlock = torchvision.ops.MLP(hidden, [mlp, hidden], nn.GELU,
	// inplace=None, dropout=0.0): Linear, GELU, Dropout, Linear, Dropout.
	b.Scope("mlp", func() {
		y = b.Linear("0", y, mlp, true)
		y = b.Act(graph.GELU, "1", y, false) // nn.GELU(): approximate="none"
		y = b.Dropout("2", y, 0, false)
		y = b.Linear("3", y, e, true)
		y = b.Dropout("4", y, 0, false)
	})
	out := b.Add("add_1", x, y) // return x + y: laid out as x (see add)
	b.SetStrided(out)
	return out
}

// tvMultiheadAttention is nn.MultiheadAttention(E, heads, dropout=p,
// batch_first=True) called as self-attention (query is key is value) with
// need_weights=False, no masks, in training mode: MultiheadAttention.forward
// around F.multi_head_attention_forward, as torch 1.13 runs it or, with
// packed, 2.x (the in-projection, tvMHAInProjection; the attention core
// is SDPA there, which the setup's profile picks). The
// fast path (torch._native_multi_head_attention) is never taken in
// training. x is [B, L, E]; the result is [B, L, E], a non-contiguous view.
//
// Parameters, in model.parameters() order: in_proj_weight [3E, E],
// in_proj_bias [3E], out_proj.weight [E, E], out_proj.bias [E].
func tvMultiheadAttention(b *graph.Builder, name string, x graph.TensorID, heads int64, p float64, packed bool) graph.TensorID {
	s := b.Shape(x)
	if len(s) != 3 {
		b.Fail("%s: multi-head attention expects [B, L, E], got %v", name, s)
		return graph.None
	}
	bsz, l, e := s[0], s[1], s[2]
	if heads < 1 || e%heads != 0 {
		b.Fail("%s: embed_dim %d not divisible by num_heads %d", name, e, heads)
		return graph.None
	}
	d := e / heads
	var out graph.TensorID
	b.Scope(name, func() {
		w := b.Param("in_proj_weight", graph.Shape{3 * e, e})
		bias := b.Param("in_proj_bias", graph.Shape{3 * e})

		// MultiheadAttention.forward, batch_first with query is key is
		// value: query = key = value = query.transpose(1, 0), a
		// non-contiguous view [L, B, E].
		q := b.Transpose("transpose", x, 1, 0)

		// _in_projection_packed, self-attention branch (q is k is v):
		// linear(q, w, b), then q, k and v (tvMHAInProjection). F.linear of this
		// non-contiguous 3-D input goes through at::matmul in 1.13, which
		// folds it with reshape(-1, E) — a copy [L*B, E], since the
		// transposed view is not contiguous — runs mm (MmBackward0 saves
		// that copy) and adds the bias as a separate op (so the mm result
		// [L*B, 3E] and the biased [L, B, 3E] briefly coexist). LinearWith
		// derives the copy from the input's contiguity. Output [L, B, 3E].
		proj := b.LinearWith("in_proj", q, w, bias)

		qkv := tvMHAInProjection(b, proj, l, bsz, heads, d, packed)

		// The core: in 1.13, q_scaled = q / math.sqrt(head_dim) (a new
		// tensor; DivBackward0 saves only the wrapped number); bmm(q_scaled,
		// k.transpose(-2, -1)); softmax(dim=-1); dropout if p > 0; bmm
		// with v, giving a contiguous [B*H, L, D] — here [B, H, L, D]. Its
		// saving rule belongs to the op table and the setup. (2.x calls
		// scaled_dot_product_attention on q.view(B, H, L, D), whose memory
		// is [L, B, H, D]: the CPU flash kernel lays its output out so.)
		o := b.AttentionLayout("attention", qkv[0], qkv[1], qkv[2], false, p, graph.QueryLBHD)

		// attn_output.transpose(0, 1).contiguous().view(tgt_len * bsz,
		// embed_dim): a view [L, B*H, D] of the contiguous [B*H, L, D]
		// result, copied, then viewed [L*B, E]. (2.x: attn_output
		// .permute(2, 0, 1, 3).contiguous(), the same [L, B, H, D]; no copy
		// where the kernel laid the output out [L, B, H, D].)
		o = b.Reshape("attn_view", o, bsz*heads, l, d)
		o = b.Transpose("attn_transpose", o, 0, 1)
		o = b.Contiguous("attn_contiguous", o)
		o = b.Reshape("attn_flat", o, l*bsz, e)
		// linear(attn_output, out_proj_weight, out_proj_bias): 2-D, addmm.
		o = b.Linear("out_proj", o, e, true)
		// attn_output.view(tgt_len, bsz, E): a view [L, B, E].
		o = b.Reshape("out_view", o, l, bsz, e)
		// MultiheadAttention.forward: attn_output.transpose(1, 0), a
		// non-contiguous view [B, L, E].
		out = b.Transpose("out_transpose", o, 1, 0)
	})
	return out
}

// tvMHAInProjection turns the self-attention projection proj [L, B, 3E]
// into q, k and v as [B, H, L, D] views whose memory is [L, B, H, D]
// (head h of batch b at index b*H + h of PyTorch's [B*H, L, D] view).
//
// packed (torch 2.x, _in_projection_packed in torch/nn/functional.py):
// proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2)
// .contiguous() — one [3, L, B, E] copy — then proj[0], proj[1], proj[2],
// contiguous views of it; the attention saves all three, so the whole copy
// lives until its backward. In backward each select's gradient is a
// zero-filled [3, L, B, E] (select_backward) summed into the first.
//
// Otherwise (1.13): .chunk(3, dim=-1), three views [L, B, E] of proj at
// offsets 0, E, 2E, each non-contiguous (row stride 3E), and then
// q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim)
// .transpose(0, 1), and the same for k and v: each chunk copied into its
// own [L, B, E] storage.
func tvMHAInProjection(b *graph.Builder, proj graph.TensorID, l, bsz, heads, d int64, packed bool) [3]graph.TensorID {
	e := heads * d
	var qkv [3]graph.TensorID
	if packed {
		t := b.Reshape("unflatten", proj, l, bsz, 3, e) // a view [L, B, 3, E]
		t = b.Permute("qkv_transpose", t, 2, 0, 1, 3)   // unsqueeze(0).transpose(0, -2).squeeze(-2): a view [3, L, B, E]
		t = b.Contiguous("qkv_contiguous", t)           // the one copy
		for i, nm := range []string{"q", "k", "v"} {
			u := b.Select(nm, t, 0) // proj[i]: a contiguous [L, B, E] view
			u = b.Reshape(nm+"_view", u, l, bsz, heads, d)
			qkv[i] = b.Permute(nm+"_transpose", u, 1, 2, 0, 3)
		}
		return qkv
	}
	for i, nm := range []string{"q", "k", "v"} {
		// The attention op takes [B, H, L, D]; the view [L, B, H, D]
		// permuted (1, 2, 0, 3) is that same storage with the same
		// strides as PyTorch's transposed [B*H, L, D] view.
		t := b.Narrow(nm+"_chunk", proj, -1, e)
		t = b.Contiguous(nm+"_contiguous", t)
		t = b.Reshape(nm+"_view", t, l, bsz, heads, d)
		qkv[i] = b.Permute(nm+"_transpose", t, 1, 2, 0, 3)
	}
	return qkv
}
