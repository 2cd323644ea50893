package train

import (
	"sort"

	"github.com/batchfit/batchfit/graph"
)

// A gradient's layout in memory, followed through backward where it
// matters: a kernel that needs a contiguous gradient copies a strided one
// first (conv_cpu.go, conv_cudnn.go), and AccumulateGrad copies a
// parameter's strided gradient rather than stealing it.
//
// Strides are elements, nil for a contiguous tensor. Where a gradient
// comes from (tools/autograd/derivatives.yaml and the functions it names):
//
//   - a node that computes its gradient into a new tensor (a matmul, a
//     convolution, a normalization, sum_to over broadcast dims) makes it
//     contiguous: nil;
//   - a node that hands the incoming gradient on (add's `self: grad`,
//     clone's and contiguous's `self: grad`, a cast to the same dtype)
//     keeps its strides;
//   - cat's backward (cat_tensors_backward in FunctionsManual.cpp) hands
//     each input grad.narrow(dim, offset, size): the cat gradient's
//     strides over the input's shape, strided unless the slice is whole
//     rows of it;
//   - transpose's `self: grad.transpose(dim0, dim1)` and permute's
//     permute_backwards (grad.permute of the inverse order) reorder the
//     strides back (graph.Attr.Perm);
//   - view's, _reshape_alias's and _unsafe_view's
//     `self: grad.reshape(self.sizes())` is a view when
//     at::detail::computeStride (aten/src/ATen/TensorUtils.cpp) finds
//     strides for the new shape, and otherwise a contiguous copy
//     (reshape's clone(at::MemoryFormat::Contiguous)), which is memory;
//   - the engine's sum of two gradients of one tensor (InputBuffer::
//     accumulate's old_var + var) is a TensorIterator output, laid out
//     densely in the first operand's order of strides (reorder_dimensions);
//     the in-place add_ keeps the buffer's strides;
//   - a cast (ToCopyBackward0's grad.to(dtype), the engine's
//     validate_outputs cast) preserves the strides of a dense tensor and
//     makes any other contiguous (empty_like with MemoryFormat::Preserve).
//
// An elementwise backward (threshold_backward, gelu_backward) is a
// TensorIterator output too and would keep a permuted gradient's order;
// it is taken as contiguous here: the strided gradients that reach a
// copying kernel (a patch embedding's, through a transpose and a cat)
// meet no elementwise node on the way.

// contiguousStrides are the strides of a contiguous tensor of shape s.
func contiguousStrides(s graph.Shape) []int64 {
	st := make([]int64, len(s))
	acc := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= max(s[i], 1)
	}
	return st
}

// stridesOf are st, or a contiguous tensor's where st is nil.
func stridesOf(s graph.Shape, st []int64) []int64 {
	if st == nil {
		return contiguousStrides(s)
	}
	return st
}

// isContiguous is TensorImpl::compute_contiguous: dims of size 1 may have
// any stride, and an empty tensor is contiguous.
func isContiguous(s graph.Shape, st []int64) bool {
	if st == nil || s.Numel() == 0 {
		return true
	}
	want := int64(1)
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == 1 {
			continue
		}
		if st[i] != want {
			return false
		}
		want *= s[i]
	}
	return true
}

// layoutOf is st, or nil where it is contiguous.
func layoutOf(s graph.Shape, st []int64) []int64 {
	if isContiguous(s, st) {
		return nil
	}
	return st
}

// denseOrder is the order of s's dims from the largest stride to the
// smallest, ties in place.
func denseOrder(s graph.Shape, st []int64) []int {
	order := make([]int, len(s))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return st[order[a]] > st[order[b]] })
	return order
}

// isDense is TensorImpl::compute_non_overlapping_and_dense
// (graph.DenseStrides), nil strides being a contiguous tensor's.
func isDense(s graph.Shape, st []int64) bool {
	return st == nil || graph.DenseStrides(s, st)
}

// denseLike are the strides of a new dense tensor of shape s laid out in
// the order of st's strides (a TensorIterator output of an operand with
// strides st).
func denseLike(s graph.Shape, st []int64) []int64 {
	if st == nil {
		return nil
	}
	order := denseOrder(s, st)
	out := make([]int64, len(s))
	acc := int64(1)
	for k := len(order) - 1; k >= 0; k-- {
		out[order[k]] = acc
		acc *= max(s[order[k]], 1)
	}
	return layoutOf(s, out)
}

// castLayout is the layout of a copy in another dtype (_to_copy with
// MemoryFormat::Preserve): a dense tensor's strides, contiguous otherwise.
func castLayout(s graph.Shape, st []int64) []int64 {
	if st != nil && isDense(s, st) {
		return st
	}
	return nil
}

// permuteBack are the strides of a gradient of a view that reordered its
// input's dims (output dim i is input dim perm[i]) once reordered back:
// grad.permute(inverse).
func permuteBack(outShape, inShape graph.Shape, gst []int64, perm []int) []int64 {
	g := stridesOf(outShape, gst)
	st := make([]int64, len(perm))
	for i, p := range perm {
		st[p] = g[i]
	}
	return layoutOf(inShape, st)
}

// viewStrides is at::detail::computeStride (aten/src/ATen/TensorUtils.cpp):
// the strides of a tensor of shape old and strides st seen as shape nw,
// or false where no view can be made (reshape then copies).
func viewStrides(old graph.Shape, st []int64, nw graph.Shape) ([]int64, bool) {
	out := make([]int64, len(nw))
	if len(old) == 0 {
		for i := range out {
			out[i] = 1
		}
		return out, true
	}
	if old.Numel() == 0 {
		return contiguousStrides(nw), true
	}
	viewD := len(nw) - 1
	chunkBase := st[len(st)-1]
	tensorNumel, viewNumel := int64(1), int64(1)
	for d := len(old) - 1; d >= 0; d-- {
		tensorNumel *= old[d]
		if d == 0 || (old[d-1] != 1 && st[d-1] != tensorNumel*chunkBase) {
			for viewD >= 0 && (viewNumel < tensorNumel || nw[viewD] == 1) {
				out[viewD] = viewNumel * chunkBase
				viewNumel *= nw[viewD]
				viewD--
			}
			if viewNumel != tensorNumel {
				return nil, false
			}
			if d > 0 {
				chunkBase = st[d-1]
				tensorNumel, viewNumel = 1, 1
			}
		}
	}
	if viewD != -1 {
		return nil, false
	}
	return out, true
}

// stridedGrad says the incoming gradient is not contiguous, so a kernel
// that reads grad_output.contiguous() copies it.
func (c *bwdCtx) stridedGrad() bool {
	return c.gout != nil && !isContiguous(c.m.g.Tensors[c.op.Output].Shape, c.gst)
}

// gradCopy is grad_output.contiguous() of a strided incoming gradient: a
// new tensor of its bytes, or nil where the gradient is contiguous and
// the call returns it.
func (c *bwdCtx) gradCopy() *storage {
	if !c.stridedGrad() {
		return nil
	}
	return c.alloc(c.m.g.Tensors[c.op.Output].Shape.Numel() * c.gdt.Size())
}

// channelsLastStrides is c10's is_channels_last_strides_2d
// (c10/core/MemoryFormat.h), what suggest_memory_format answers
// ChannelsLast for: a 4-D tensor whose strides grow from C to W to H to N.
func channelsLastStrides(s graph.Shape, st []int64) bool {
	if len(s) != 4 || len(st) != 4 {
		return false
	}
	var least int64
	for _, d := range []int{1, 3, 2, 0} {
		if s[d] == 0 || st[d] < least {
			return false
		}
		if d == 0 && least == st[1] {
			return false
		}
		least = st[d]
		if s[d] > 1 {
			least *= s[d]
		}
	}
	return true
}

// obeysLayout is obeys_layout_contract
// (torch/csrc/autograd/utils/grad_layout_contract.h) for a gradient with
// strides gst of a dense variable with strides vst (nil: contiguous) of
// shape s: the same strides in every dim of more than one element.
func obeysLayout(s graph.Shape, gst, vst []int64) bool {
	g, v := stridesOf(s, gst), stridesOf(s, vst)
	for i := range s {
		if s[i] != 1 && g[i] != v[i] {
			return false
		}
	}
	return true
}
