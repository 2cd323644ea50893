package models

import "github.com/batchfit/batchfit/graph"

// torchvision.models.swin_transformer (0.14): Swin-T (v1: patch 4, embed
// 96, depths 2-2-6-2, heads 3-6-12-24, window 7×7, MLP ratio 4, dropout 0,
// stochastic_depth_prob 0.2), its shifted_window_attention written out op
// by op as torch 1.13 runs it.
//
// Views and copies follow PyTorch's strides exactly where they decide what
// autograd saves: at::matmul folds its 4-D operands to 3-D with reshape,
// which copies k^T and v (slices of the qkv projection) unless the leading
// B·nW dim is 1, and the window partition/reverse permutes are views when
// there is a single window column. Python locals outlive their last use
// inside shifted_window_attention: the qkv projection (through k and v),
// the scaled q, the relative position bias and the function's input stay
// referenced until the function returns (a Release op; measured with
// validation/step.py). The 8-byte CPU scalar that q * head_dim**-0.5
// saves (a wrapped Python number) counts in a CPU run only: on CUDA it is
// host memory.

type tvSwinSpec struct {
	name                 string
	patch, embed, window int64
	depths, heads        []int64
	sdProb               float64
	desc                 string
}

var tvSwins = []tvSwinSpec{
	{"swin_t", 4, 96, 7, []int64{2, 2, 6, 2}, []int64{3, 6, 12, 24}, 0.2,
		"Swin-T (torchvision): shifted-window attention transformer, 2-2-6-2 blocks, 28.3M parameters"},
}

func init() {
	for _, s := range tvSwins {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvSwin(s, c) },
		})
	}
}

// tvSwin is SwinTransformer.forward: features (patch embedding Conv2d,
// Permute to [B, H, W, C], LayerNorm; stages of SwinTransformerBlocks with
// PatchMerging between them), norm, permute to NCHW, avgpool, flatten,
// head.
func tvSwin(s tvSwinSpec, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(s.name, c)
	var total int64
	for _, d := range s.depths {
		total += d
	}
	h := x
	b.Scope("features", func() {
		b.Scope("0", func() {
			h = b.Conv2d("0", h, s.embed, tvConv(s.patch, s.patch, 0, 1, true))
			h = b.Permute("1", h, 0, 2, 3, 1) // non-contiguous: native_layer_norm copies it
			h = b.LayerNorm("2", h, 1, true)
		})
		idx := int64(1)
		var id int64 // stage_block_id
		for i, depth := range s.depths {
			dim := s.embed << i
			b.Scope(itoa(idx), func() {
				for j := int64(0); j < depth; j++ {
					shift := int64(0)
					if j%2 == 1 {
						shift = s.window / 2
					}
					sd := s.sdProb * float64(id) / float64(total-1)
					b.Block(itoa(j), func() { h = tvSwinBlock(b, h, s.heads[i], s.window, shift, sd) })
					id++
				}
			})
			idx++
			if i < len(s.depths)-1 {
				b.Scope(itoa(idx), func() { h = tvPatchMerging(b, h, dim) })
				idx++
			}
		}
	})
	h = b.LayerNorm("norm", h, 1, true)
	h = b.Permute("permute", h, 0, 3, 1, 2)
	h = tvGlobalAvgPool(b, "avgpool", h) // nn.AdaptiveAvgPool2d(1): a mean (1.13 saves its input, the permuted norm output)
	h = b.Flatten("flatten", h, 1)
	h = b.Linear("head", h, tvClasses, true)
	return tvFinish(b, h, y)
}

// tvSwinBlock is SwinTransformerBlock.forward:
// x = x + stochastic_depth(attn(norm1(x)));
// x = x + stochastic_depth(mlp(norm2(x))), the one StochasticDepth module
// drawing fresh noise at each call. MLP is Linear(C, 4C), GELU,
// Dropout(0.0), Linear(4C, C), Dropout(0.0).
func tvSwinBlock(b *graph.Builder, x graph.TensorID, heads, window, shift int64, sd float64) graph.TensorID {
	h := b.LayerNorm("norm1", x, 1, true)
	h = tvShiftedWindowAttention(b, "attn", h, heads, window, shift)
	h = b.StochasticDepth("stochastic_depth", h, sd)
	x = b.Add("add", x, h)
	h = b.LayerNorm("norm2", x, 1, true)
	b.Scope("mlp", func() {
		dim := b.Shape(h)[3]
		h = b.Linear("0", h, 4*dim, true)
		h = b.Act(graph.GELU, "1", h, false)
		h = b.Dropout("2", h, 0, false)
		h = b.Linear("3", h, dim, true)
		h = b.Dropout("4", h, 0, false)
	})
	h = b.StochasticDepth("stochastic_depth", h, sd)
	return b.Add("add_1", x, h)
}

// tvShiftedWindowAttention is ShiftedWindowAttention.forward on x [B, H,
// W, C]: the relative position bias, then shifted_window_attention with
// window ws, the given shift (0 for even blocks), no dropout. Parameters in
// model.parameters() order: relative_position_bias_table [(2ws-1)², heads]
// (the module's own), qkv.weight, qkv.bias, proj.weight, proj.bias; buffer
// relative_position_index [ws⁴] int64.
func tvShiftedWindowAttention(b *graph.Builder, name string, x graph.TensorID, heads, ws, shift int64) graph.TensorID {
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("%s: shifted window attention expects [B, H, W, C], got %v", name, s)
		return graph.None
	}
	bsz, hh, ww, c := s[0], s[1], s[2], s[3]
	if heads < 1 || c%heads != 0 {
		b.Fail("%s: dim %d not divisible by %d heads", name, c, heads)
		return graph.None
	}
	d := c / heads
	n := ws * ws
	var out graph.TensorID
	b.Scope(name, func() {
		table := b.Param("relative_position_bias_table", graph.Shape{(2*ws - 1) * (2*ws - 1), heads})
		index := b.Buffer("relative_position_index", graph.Shape{n * n}, graph.I64)

		// _get_relative_position_bias: table[index].view(N, N, -1)
		// .permute(2, 0, 1).contiguous().unsqueeze(0) → [1, heads, N, N].
		bias := b.Index("relative_position_bias", table, index)
		bias = b.Reshape("relative_position_bias_view", bias, n, n, heads)
		bias = b.Permute("relative_position_bias_permute", bias, 2, 0, 1)
		bias = b.Contiguous("relative_position_bias_contiguous", bias)
		bias = b.Reshape("relative_position_bias_unsqueeze", bias, 1, heads, n, n)

		// Pad to multiples of the window: F.pad always copies (zero pads
		// included).
		padR, padB := (ws-ww%ws)%ws, (ws-hh%ws)%ws
		h := b.Pad("pad", x, 0, 0, 0, padR, 0, padB)
		ph, pw := hh+padB, ww+padR
		sh, sw := shift, shift
		if ws >= ph {
			sh = 0
		}
		if ws >= pw {
			sw = 0
		}
		if sh+sw > 0 {
			h = b.Roll("roll", h, []int64{-sh, -sw}, []int{1, 2})
		}
		nh, nw := ph/ws, pw/ws
		nW := nh * nw
		h = tvWindowPartition(b, "partition", h, nh, ws, nw, ws, c)
		win := h // [B*nW, N, C], kept for new_zeros below

		// qkv = F.linear(x, qkv_weight, qkv_bias): 3-D contiguous, addmm.
		qkvOut := b.Linear("qkv", h, 3*c, true)
		qkv := b.Reshape("qkv_reshape", qkvOut, bsz*nW, n, 3, heads, d)
		qkv = b.Permute("qkv_permute", qkv, 2, 0, 3, 1, 4)
		q := b.Select("q", qkv, 0)
		k := b.Select("k", qkv, 0)
		v := b.Select("v", qkv, 0)
		// q * head_dim ** -0.5: a new tensor; MulBackward0 keeps the
		// wrapped Python number, an 8-byte double (graph.Attr.Number)
		q = b.ScaleNumber("q_scale", q, false, graph.WrappedDouble)
		qScaled := q
		kt := b.Transpose("k_transpose", k, -2, -1)
		attn := tvMatMul4D(b, "matmul_qk", q, kt)
		attn = b.Add("add_bias", attn, bias)
		if sh+sw > 0 {
			mask := tvShiftedWindowMask(b, "attn_mask", win, ph, pw, ws)
			attn = b.Reshape("attn_view", attn, bsz, nW, heads, n, n)
			m := b.Reshape("attn_mask_unsqueeze", mask, 1, nW, 1, n, n)
			attn = b.Add("add_mask", attn, m)
			attn = b.Reshape("attn_view_1", attn, bsz*nW, heads, n, n)
		}
		attn = b.Softmax("softmax", attn, -1, false)
		attn = b.Dropout("attn_dropout", attn, 0, false) // F.dropout(p=0.0): attn itself
		h = tvMatMul4D(b, "matmul_av", attn, v)
		h = b.Transpose("transpose", h, 1, 2)
		h = b.Reshape("reshape", h, bsz*nW, n, c) // a copy
		h = b.Linear("proj", h, c, true)
		h = b.Dropout("dropout", h, 0, false)

		h = tvWindowReverse(b, "reverse", h, bsz, nh, ws, nw, ws, c)
		if sh+sw > 0 {
			h = b.Roll("roll_back", h, []int64{sh, sw}, []int{1, 2})
		}
		// x[:, :H, :W, :].contiguous(): torch 1.13's indexing returns self
		// for a slice whose stop equals the size (:H, :W when nothing was
		// padded) but records the bare ":" slices (their stop is not the
		// size): full views, so contiguous() then returns the same tensor.
		h = b.Slice("unpad_0", h, 0, 0, bsz, 1)
		if hh != ph {
			h = b.Slice("unpad_1", h, 1, 0, hh, 1)
		}
		if ww != pw {
			h = b.Slice("unpad_2", h, 2, 0, ww, 1)
		}
		h = b.Slice("unpad_3", h, 3, 0, c, 1)
		out = b.Contiguous("contiguous", h)
		b.Release("return", x, bias, qkvOut, qScaled)
	})
	return out
}

// tvWindowPartition is x.view(B, nh, wh, nw, ww, C).permute(0, 1, 3, 2, 4,
// 5).reshape(B*nh*nw, wh*ww, C) on a contiguous x. The permute swaps the
// dims of sizes wh and nw: with a single window column (nw == 1) that moves
// only a size-1 dim, the result is still contiguous and the reshape is a
// view; otherwise it is a copy.
func tvWindowPartition(b *graph.Builder, name string, x graph.TensorID, nh, wh, nw, ww, c int64) graph.TensorID {
	bsz := b.Shape(x)[0]
	h := b.Reshape(name+"_view", x, bsz, nh, wh, nw, ww, c)
	if nw != 1 {
		h = b.Permute(name+"_permute", h, 0, 1, 3, 2, 4, 5)
	}
	return b.Reshape(name+"_reshape", h, bsz*nh*nw, wh*ww, c)
}

// tvWindowReverse is x.view(B, nh, nw, wh, ww, C).permute(0, 1, 3, 2, 4,
// 5).reshape(B, nh*wh, nw*ww, C): a copy unless nw == 1 (see
// tvWindowPartition).
func tvWindowReverse(b *graph.Builder, name string, x graph.TensorID, bsz, nh, wh, nw, ww, c int64) graph.TensorID {
	h := b.Reshape(name+"_view", x, bsz, nh, nw, wh, ww, c)
	if nw != 1 {
		h = b.Permute(name+"_permute", h, 0, 1, 3, 2, 4, 5)
	}
	return b.Reshape(name+"_reshape", h, bsz, nh*wh, nw*ww, c)
}

// tvMatMul4D is torch.matmul of two 4-D tensors [A, H, n, m] @ [A, H, m,
// p] as at::matmul runs it: each operand is folded to [A*H, ., .] with
// reshape (a view when its strides allow, else a copy, which is what bmm
// then saves), bmm, and the result viewed back to [A, H, n, p]. The
// operands here are either contiguous (a view either way) or
// head/token-permuted slices of the qkv projection, which (with more than
// one head) fold to a view exactly when A == 1: the leading dim merges
// away; otherwise A's stride is not H times H's.
func tvMatMul4D(b *graph.Builder, name string, x, y graph.TensorID) graph.TensorID {
	xs, ys := b.Shape(x), b.Shape(y)
	if len(xs) != 4 || len(ys) != 4 {
		b.Fail("%s: 4-D matmul of %v and %v", name, xs, ys)
		return graph.None
	}
	fold := func(nm string, t graph.TensorID, s graph.Shape) graph.TensorID {
		if s[0] == 1 {
			return b.Select(nm, t, 0) // reshape merging a leading 1: a view
		}
		return b.Reshape(nm, t, s[0]*s[1], s[2], s[3])
	}
	a := fold(name+"_fold_self", x, xs)
	c := fold(name+"_fold_mat2", y, ys)
	o := b.MatMul(name, a, c)
	return b.Reshape(name+"_view", o, xs[0], xs[1], xs[2], ys[3])
}

// tvShiftedWindowMask builds shifted_window_attention's attention mask
// [nW, N, N] the way forward does, none of it differentiable:
// attn_mask = x.new_zeros((pad_H, pad_W)) with nine slice fills (in
// place); .view(nh, ws, nw, ws).permute(0, 2, 1, 3).reshape(nW, N) (a
// copy); attn_mask.unsqueeze(1) - attn_mask.unsqueeze(2);
// .masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0).
func tvShiftedWindowMask(b *graph.Builder, name string, like graph.TensorID, ph, pw, ws int64) graph.TensorID {
	nh, nw := ph/ws, pw/ws
	n := ws * ws
	m := b.Full(name, like, ph, pw)
	m = b.Reshape(name+"_view", m, nh, ws, nw, ws)
	if nw != 1 {
		m = b.Permute(name+"_permute", m, 0, 2, 1, 3) // swaps ws with nw: a view, not contiguous unless nw == 1
	}
	m = b.Reshape(name+"_reshape", m, nh*nw, n)
	// unsqueeze(1) - unsqueeze(2): a subtraction; no gradient flows
	// through the mask, so for memory it is an elementwise add.
	diff := b.Add(name+"_sub", b.Reshape(name+"_unsqueeze_1", m, nh*nw, 1, n), b.Reshape(name+"_unsqueeze_2", m, nh*nw, n, 1))
	ne := b.Compare(name+"_ne", diff, graph.None)
	filled := b.MaskedFill(name+"_masked_fill", diff, ne)
	eq := b.Compare(name+"_eq", diff, graph.None)
	return b.MaskedFill(name+"_masked_fill_1", filled, eq)
}

// tvPatchMerging is PatchMerging.forward on x [B, H, W, C]:
// _patch_merging_pad (F.pad to even H and W — a copy even with zero pads —
// then x[..., i::2, j::2, :] for the four (i, j), each three slice views,
// concatenated along C), norm = LayerNorm(4C), reduction = Linear(4C, 2C,
// bias=False). reduction is registered before norm, so its weight comes
// first in model.parameters().
func tvPatchMerging(b *graph.Builder, x graph.TensorID, dim int64) graph.TensorID {
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("patch merging expects [B, H, W, C], got %v", s)
		return graph.None
	}
	w := b.Param("reduction.weight", graph.Shape{2 * dim, 4 * dim})
	h := b.Pad("pad", x, 0, 0, 0, s[2]%2, 0, s[1]%2)
	ps := b.Shape(h)
	var parts []graph.TensorID
	for i, ij := range [][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
		p := b.Slice("x"+itoa(int64(i))+"_h", h, 1, ij[0], ps[1], 2)
		p = b.Slice("x"+itoa(int64(i))+"_w", p, 2, ij[1], ps[2], 2)
		p = b.Slice("x"+itoa(int64(i))+"_c", p, 3, 0, ps[3], 1)
		parts = append(parts, p)
	}
	h = b.Cat("cat", -1, parts...)
	h = b.LayerNorm("norm", h, 1, true)
	return b.LinearWith("reduction", h, w, graph.None)
}
