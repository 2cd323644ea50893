package capture

// queryBLHD reports whether the CPU flash attention kernel of torch 2.x
// lays its output out [B, L, H, D] for this query: the kernel allocates the
// output like the query (torch 2.5's meta kernel for
// _scaled_dot_product_flash_attention_for_cpu is torch.empty_like(query),
// and at::empty_like with preserve_format keeps the strides of a dense
// tensor and, for a strided one that is not dense, infer_dense_strides
// keeps its dims' order by stride). Measured on 2.5.1's CPU: a query
// [B, H, L, D] cut from a packed qkv projection, as timm's Attention does
// (qkv(x).reshape(B, N, 3, H, D).permute(2, 0, 3, 1, 4).unbind(0), strides
// (3NHD, D, 3HD, 1)), gives an output of strides (NHD, D, HD, 1), whose
// transpose(1, 2) is contiguous, as a dense [B, L, H, D] query's does
// (transposed12); a contiguous query gives a contiguous output, and an
// [L, B, H, D] one keeps that order.
func (x *bctx) queryBLHD(t *tensor) bool {
	if x.transposed12(t) {
		return true
	}
	s := x.shape(t)
	if len(s) != 4 || len(t.Stride) != 4 || x.contig(t) || s[1] == 1 || s[2] == 1 {
		return false
	}
	st := make([]int64, 4)
	for i := range st {
		st[i] = t.Stride[i]
		if t.StrideBatch != nil {
			st[i] += t.StrideBatch[i] * (x.n - x.m.b0)
		}
	}
	// dims in the order B, L, H, D by decreasing stride (a batch of 1
	// takes any stride)
	return (s[0] == 1 || st[0] > st[2]) && st[2] > st[1] && st[1] > st[3]
}
