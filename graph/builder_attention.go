package graph

// Builder methods for a transformer's attention beyond its Linear layers:
// MatMul of activations, scaled dot-product attention and the KV cache.

// MatMul is torch.matmul of two activations (batched, broadcasting the
// leading dims).
func (b *Builder) MatMul(name string, x, y TensorID) TensorID {
	if !b.ok(x, y) {
		return None
	}
	s, t := b.Shape(x), b.Shape(y)
	if len(s) < 2 || len(t) < 2 || s[len(s)-1] != t[len(t)-2] {
		b.Fail("%s: matmul of %v and %v", b.path(name), s, t)
		return None
	}
	lead, ok := Broadcast(s[:len(s)-2], t[:len(t)-2])
	if !ok {
		b.Fail("%s: matmul batch dims of %v and %v do not broadcast", b.path(name), s, t)
		return None
	}
	os := append(lead, s[len(s)-2], t[len(t)-1])
	return b.op(MatMul, name, []TensorID{x, y}, None, None, os, promote(b.DTypeOf(x), b.DTypeOf(y)), None, true, Attr{})
}

// Attention is the core of scaled dot-product attention on q [B, H, L, D],
// k and v [B, Hkv, S, D], giving [B, H, L, D]. Which kernel runs (eager
// math, flash, memory-efficient) and so what it saves is a property of the
// setup, not of the graph.
func (b *Builder) Attention(name string, q, k, v TensorID, causal bool, dropout float64) TensorID {
	return b.AttentionLayout(name, q, k, v, causal, dropout, QueryBHLD)
}

// AttentionLayout is Attention whose query is laid out in memory as
// layout says (Attr.Query).
func (b *Builder) AttentionLayout(name string, q, k, v TensorID, causal bool, dropout float64, layout QueryLayout) TensorID {
	return b.AttentionGQA(name, q, k, v, causal, dropout, layout, false)
}

// AttentionGQA is AttentionLayout called with enable_gqa as gqa says
// (Attr.GQA).
func (b *Builder) AttentionGQA(name string, q, k, v TensorID, causal bool, dropout float64, layout QueryLayout, gqa bool) TensorID {
	if !b.ok(q, k, v) {
		return None
	}
	qs, ks, vs := b.Shape(q), b.Shape(k), b.Shape(v)
	if len(qs) != 4 || len(ks) != 4 || len(vs) != 4 || qs[0] != ks[0] || ks[2] != vs[2] || qs[3] != ks[3] || ks[1] != vs[1] || qs[1]%ks[1] != 0 {
		b.Fail("%s: attention of q %v, k %v, v %v (want [B, H, L, D])", b.path(name), qs, ks, vs)
		return None
	}
	os := Shape{qs[0], qs[1], qs[2], vs[3]}
	return b.op(Attention, name, []TensorID{q, k, v}, None, None, os, b.DTypeOf(q), None, true,
		Attr{Heads: qs[1], KVHeads: ks[1], Causal: causal, P: dropout, Query: layout, QueryContiguous: b.contig[q], GQA: gqa})
}

// KVCache is one layer's cache update for keys or values x [B, Hkv, L, D]
// (cache_utils: DynamicCache.update, StaticCache.update): it returns the
// layer's whole cache, [B, Hkv, total, D]. A dynamic cache makes it with
// torch.cat (a new tensor; keepFirst says its first update keeps x itself,
// as the releases before the DynamicLayer refactor did); a static cache
// writes x in place into its preallocated tensor. slot names the cache
// tensor across forwards.
func (b *Builder) KVCache(name string, x TensorID, slot int, total int64, static, keepFirst bool) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) != 4 || total < s[2] {
		b.Fail("%s: cache of %v with %d positions (want [B, Hkv, L, D] and at least L)", b.path(name), s, total)
		return None
	}
	os := Shape{s[0], s[1], total, s[3]}
	return b.op(KVCache, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true,
		Attr{Slot: slot, Static: static, Inplace: keepFirst})
}
