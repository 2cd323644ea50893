package capture

import (
	"strings"

	"github.com/batchfit/batchfit/graph"
)

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

// atenTimm maps the aten ops that timm's layers run and the other rules
// do not; it reports false for the others.
func (x *bctx) atenTimm(o *op) bool {
	switch strings.TrimPrefix(o.Aten, "aten::") {
	case "addcmul":
		// addcmul(self, tensor1, tensor2, value) (timm's
		// GlobalResponseNorm, ConvNeXt-V2: torch.addcmul(bias, weight,
		// x * x_n)): derivatives.yaml (v2.5.1) gives tensor1
		// grad * (tensor2 * value) and tensor2 grad * (tensor1 * value),
		// self grad, so AddcmulBackward0 keeps tensor2 where tensor1
		// needs a gradient and tensor1 where tensor2 does (the generated
		// code saves a variable only for the inputs whose formula
		// uses it and that need a gradient)
		if len(o.Out) == 0 || o.Out[0] == nil || len(o.Args) < 3 {
			return false
		}
		ins := make([]graph.TensorID, 3)
		for i := range ins {
			id, ok := o.Args[i].tensor()
			if !ok {
				return false
			}
			if ins[i] = x.in(o, id); ins[i] == graph.None {
				return true
			}
		}
		grad := func(i int) bool { return x.b.TensorAt(ins[i]).RequiresGrad }
		var saved []int
		if grad(2) {
			saved = append(saved, 1)
		}
		if grad(1) {
			saved = append(saved, 2)
		}
		x.set(o.Out[0], x.saving(x.name(o), ins, 3, saved, &x.m.f.Tensors[*o.Out[0]]))
		return true
	}
	return false
}
