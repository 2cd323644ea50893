package graph

// Builder methods for the ops of torchvision's newer classification models
// (EfficientNet, ConvNeXt, Swin): stochastic depth, tensors made inside
// forward without autograd (noise, masks), padding, roll, strided slices
// and advanced indexing.

// StochasticDepth is torchvision.ops.stochastic_depth(x, p, mode="row") in
// training mode: p == 0 returns x itself; otherwise
//
//	noise = torch.empty([N, 1, ..., 1], dtype=x.dtype).bernoulli_(1 - p)
//	noise.div_(1 - p)          # when 1 - p > 0, in place
//	return x * noise
//
// The noise is a Rand op (named name+".noise") and the product a Mul, which
// saves the noise (mul saves other when self requires grad).
func (b *Builder) StochasticDepth(name string, x TensorID, p float64) TensorID {
	if !b.ok(x) {
		return None
	}
	if p < 0 || p > 1 {
		b.Fail("%s: stochastic depth probability %g outside [0, 1]", b.path(name), p)
		return None
	}
	if p == 0 {
		return x
	}
	s := b.Shape(x)
	if len(s) == 0 {
		b.Fail("%s: stochastic depth of a 0-d tensor", b.path(name))
		return None
	}
	ns := make([]int64, len(s))
	for i := range ns {
		ns[i] = 1
	}
	ns[0] = s[0]
	noise := b.Rand(name+".noise", x, ns...)
	out := b.Mul(name, x, noise)
	if out != None {
		b.g.Ops[len(b.g.Ops)-1].Attr.P = p
	}
	return out
}

// Rand is a random tensor of the given shape that forward creates with
// like's dtype (torch.empty(shape, dtype=like.dtype).bernoulli_(q) and
// in-place scaling). like only gives the dtype the tensor has at run time;
// its data is not read. The result never requires grad.
func (b *Builder) Rand(name string, like TensorID, shape ...int64) TensorID {
	return b.fresh(Rand, name, like, shape)
}

// Full is a constant tensor that forward creates with like's dtype
// (like.new_zeros(shape), then filled in place, e.g. Swin's shifted-window
// attention mask). The result never requires grad.
func (b *Builder) Full(name string, like TensorID, shape ...int64) TensorID {
	return b.fresh(Full, name, like, shape)
}

// Const is a tensor forward makes outside autograd, such as torch.arange
// position ids, a causal mask or rotary cos and sin tables: allocated where
// forward makes it, freed once its readers are done (or autograd or a
// checkpoint lets go of it). It is of dtype dt; a floating one takes, at
// run time, the dtype of like (a mask made in inputs_embeds.dtype, cos and
// sin cast to the hidden states' dtype), which precision can change.
func (b *Builder) Const(name string, like TensorID, dt DType, shape ...int64) TensorID {
	out := b.fresh(Full, name, like, shape)
	if out != None {
		b.g.Tensors[out].DType = dt
	}
	return out
}

// Host is a tensor the model keeps in host memory, made before the step
// (Attr.Host): like a Const it has its shape and dtype, but it takes no
// device memory. like should be a tensor alive through the step (a
// parameter): the simulator lets the host tensor stand on its memory.
func (b *Builder) Host(name string, like TensorID, dt DType, shape ...int64) TensorID {
	out := b.Const(name, like, dt, shape...)
	if out != None {
		b.lastOp().Attr.Host = true
	}
	return out
}

// Leaf is Const made a leaf that requires grad (Tensor.Leaf): torch.zeros
// followed by .requires_grad = True, which Python may do under no_grad
// too (a leaf's flag is its own).
func (b *Builder) Leaf(name string, like TensorID, dt DType, shape ...int64) TensorID {
	out := b.Const(name, like, dt, shape...)
	if out != None {
		t := &b.g.Tensors[out]
		t.RequiresGrad = dt.IsFloat()
		t.Leaf = t.RequiresGrad
	}
	return out
}

func (b *Builder) fresh(k Kind, name string, like TensorID, shape []int64) TensorID {
	if !b.ok(like) {
		return None
	}
	s := Shape(append([]int64(nil), shape...))
	for _, d := range s {
		if d < 0 {
			b.Fail("%s: %s of shape %v", b.path(name), k, s)
			return None
		}
	}
	out := b.op(k, name, []TensorID{like}, None, None, s, b.DTypeOf(like), None, true, Attr{})
	b.g.Tensors[out].RequiresGrad = false
	return out
}

// Compare is an elementwise comparison (x != y, x == y, ...) with a bool
// result; y is None for a comparison with a Python number.
func (b *Builder) Compare(name string, x, y TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x).Clone()
	in := []TensorID{x}
	if y != None {
		if !b.ok(y) {
			return None
		}
		bs, ok := Broadcast(s, b.Shape(y))
		if !ok {
			b.Fail("%s: comparison of %v and %v: shapes do not broadcast", b.path(name), s, b.Shape(y))
			return None
		}
		s = bs
		in = append(in, y)
	}
	return b.op(Compare, name, in, None, None, s, Bool, None, true, Attr{})
}

// MaskedFill is x.masked_fill(mask, number) (out of place): a new tensor of
// x's shape; the mask broadcasts to x.
func (b *Builder) MaskedFill(name string, x, mask TensorID) TensorID {
	if !b.ok(x, mask) {
		return None
	}
	if b.DTypeOf(mask) != Bool {
		b.Fail("%s: masked_fill mask must be bool, got %s", b.path(name), b.DTypeOf(mask))
		return None
	}
	if s, ok := Broadcast(b.Shape(x), b.Shape(mask)); !ok || s.Numel() != b.Shape(x).Numel() {
		b.Fail("%s: masked_fill of %v with a mask %v", b.path(name), b.Shape(x), b.Shape(mask))
		return None
	}
	out := b.op(MaskedFill, name, []TensorID{x, mask}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, b.contig[x], Attr{})
	b.cl[out] = b.cl[x]
	return out
}

// Pad is F.pad(x, pads) in constant mode: pads are (before, after) pairs
// starting from the last dim, as in PyTorch. constant_pad_nd always returns
// a new tensor, even when every pad is zero (torch 1.13 clones the input
// then).
func (b *Builder) Pad(name string, x TensorID, pads ...int64) TensorID {
	return b.PadMode(name, x, PadConstant, pads...)
}

// PadMode is F.pad(x, pads, mode): constant (constant_pad_nd), reflect
// (reflection_pad) or replicate (replication_pad). pads are F.pad's: the
// last dim first, (before, after) for each.
func (b *Builder) PadMode(name string, x TensorID, mode PadMode, pads ...int64) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(pads)%2 != 0 || len(pads)/2 > len(s) {
		b.Fail("%s: pad %v of %v", b.path(name), pads, s)
		return None
	}
	os := s.Clone()
	for i := 0; i < len(pads)/2; i++ {
		d := len(s) - 1 - i
		os[d] += pads[2*i] + pads[2*i+1]
		if os[d] < 0 {
			b.Fail("%s: pad %v of %v leaves a negative size", b.path(name), pads, s)
			return None
		}
	}
	return b.op(Pad, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true, Attr{Pad: mode})
}

// Roll is torch.roll(x, shifts, dims): a new tensor of x's shape. The
// shifts do not change the memory; the number of dims does (roll_common
// rolls one dim at a time, each step a new tensor).
func (b *Builder) Roll(name string, x TensorID, shifts []int64, dims []int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(shifts) != len(dims) || len(dims) == 0 {
		b.Fail("%s: roll with shifts %v and dims %v", b.path(name), shifts, dims)
		return None
	}
	for _, d := range dims {
		if _, ok := normDim(d, len(s)); !ok {
			b.Fail("%s: roll over dim %d of %v", b.path(name), d, s)
			return None
		}
	}
	out := b.op(Roll, name, []TensorID{x}, None, None, s.Clone(), b.DTypeOf(x), None, b.contig[x], Attr{Count: len(dims)})
	b.cl[out] = b.cl[x]
	return out
}

// Slice is x[..., start:end:step, ...] along dim (a view; end is clamped
// to the size, as in Python). Its backward writes the gradient into zeros
// of x's size (slice_backward), even when the slice is the whole dim.
func (b *Builder) Slice(name string, x TensorID, dim int, start, end, step int64) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	d, ok := normDim(dim, len(s))
	if !ok || step < 1 || start < 0 || start > s[d] {
		b.Fail("%s: slice %d:%d:%d along dim %d of %v", b.path(name), start, end, step, dim, s)
		return None
	}
	if end > s[d] {
		end = s[d]
	}
	n := int64(0)
	if end > start {
		n = (end - start + step - 1) / step
	}
	os := s.Clone()
	os[d] = n
	leading := true
	for _, v := range s[:d] {
		leading = leading && v == 1
	}
	contig := b.contig[x] && ((step == 1 || n <= 1) && (leading || n == s[d]))
	return b.op(Slice, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, contig, Attr{Dim: d})
}

// Index is src[idx] for an integer index tensor: rows of src gathered along
// dim 0, giving idx's shape followed by src's trailing dims (Swin's
// relative_position_bias_table[relative_position_index]). src may be a
// parameter; idx is typically a buffer.
func (b *Builder) Index(name string, src, idx TensorID) TensorID {
	if !b.ok(src, idx) {
		return None
	}
	if b.DTypeOf(idx).IsFloat() || b.DTypeOf(idx) == Bool {
		b.Fail("%s: index tensor must be integer, got %s", b.path(name), b.DTypeOf(idx))
		return None
	}
	ss := b.Shape(src)
	if len(ss) == 0 {
		b.Fail("%s: indexing a 0-d tensor", b.path(name))
		return None
	}
	os := append(b.Shape(idx).Clone(), ss[1:]...)
	return b.op(Index, name, []TensorID{src, idx}, None, None, os, b.DTypeOf(src), None, true, Attr{})
}
