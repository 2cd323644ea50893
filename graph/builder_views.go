package graph

// Builder methods that change a tensor's shape, layout or dtype: the views
// (Reshape, Transpose, Select, Narrow, Expand…), the copies (Contiguous,
// Clone, the casts) and Cat.

// Reshape is x.reshape(shape): a view of a contiguous tensor, a copy of a
// non-contiguous one. One dimension may be -1.
func (b *Builder) Reshape(name string, x TensorID, shape ...int64) TensorID {
	if !b.ok(x) {
		return None
	}
	n := b.Shape(x).Numel()
	os := Shape(append([]int64(nil), shape...))
	infer := -1
	known := int64(1)
	for i, d := range os {
		if d == -1 && infer < 0 {
			infer = i
			continue
		}
		if d < 0 {
			b.Fail("%s: reshape to %v", b.path(name), shape)
			return None
		}
		known *= d
	}
	if infer >= 0 && known > 0 {
		os[infer] = n / known
	}
	if os.Numel() != n {
		b.Fail("%s: cannot reshape %v (%d elements) to %v", b.path(name), b.Shape(x), n, shape)
		return None
	}
	if b.contig[x] {
		return b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, true, Attr{})
	}
	return b.op(Contiguous, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true, Attr{})
}

// Flatten is torch.flatten(x, start) (end_dim -1).
func (b *Builder) Flatten(name string, x TensorID, start int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	st, ok := normDim(start, len(s))
	if !ok {
		if len(s) == 0 {
			return x
		}
		b.Fail("%s: flatten from dim %d of %v", b.path(name), start, s)
		return None
	}
	if st == len(s)-1 {
		return x
	}
	os := append(s[:st].Clone(), s[st:].Numel())
	return b.Reshape(name, x, os...)
}

// Transpose swaps two dims (a non-contiguous view).
func (b *Builder) Transpose(name string, x TensorID, d0, d1 int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	a, ok1 := normDim(d0, len(s))
	c, ok2 := normDim(d1, len(s))
	if !ok1 || !ok2 {
		b.Fail("%s: transpose(%d, %d) of %v", b.path(name), d0, d1, s)
		return None
	}
	os := s.Clone()
	os[a], os[c] = os[c], os[a]
	contig := b.contig[x] && (a == c || s[a] == 1 || s[c] == 1)
	perm := make([]int, len(s))
	for i := range perm {
		perm[i] = i
	}
	perm[a], perm[c] = c, a
	if a == c {
		perm = nil
	}
	return b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, contig, Attr{Perm: perm})
}

// Permute reorders dims (a non-contiguous view unless the order is the
// identity).
func (b *Builder) Permute(name string, x TensorID, dims ...int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(dims) != len(s) {
		b.Fail("%s: permute %v of %v", b.path(name), dims, s)
		return None
	}
	os := make(Shape, len(s))
	seen := make([]bool, len(s))
	perm := make([]int, len(s))
	identity := true
	for i, d := range dims {
		nd, ok := normDim(d, len(s))
		if !ok || seen[nd] {
			b.Fail("%s: permute %v of %v", b.path(name), dims, s)
			return None
		}
		seen[nd] = true
		os[i] = s[nd]
		perm[i] = nd
		identity = identity && nd == i
	}
	if identity {
		perm = nil
	}
	out := b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, b.contig[x] && identity, Attr{Perm: perm})
	if len(dims) == 4 {
		switch {
		case b.cl[x] && dims[0] == 0 && dims[1] == 2 && dims[2] == 3 && dims[3] == 1:
			// NHWC strides read in NHWC order: contiguous.
			b.contig[out] = true
		case b.contig[x] && dims[0] == 0 && dims[1] == 3 && dims[2] == 1 && dims[3] == 2:
			b.cl[out] = true
		}
	}
	return out
}

// Select is x[..., i, ...] along dim (a view; not contiguous unless dim is
// the leading dimension).
func (b *Builder) Select(name string, x TensorID, dim int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	d, ok := normDim(dim, len(s))
	if !ok {
		b.Fail("%s: select along dim %d of %v", b.path(name), dim, s)
		return None
	}
	os := append(s[:d].Clone(), s[d+1:]...)
	return b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, b.contig[x] && d == 0, Attr{})
}

// Narrow is x.narrow(dim, start, length): a view.
func (b *Builder) Narrow(name string, x TensorID, dim int, length int64) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	d, ok := normDim(dim, len(s))
	if !ok || length > s[d] || length < 0 {
		b.Fail("%s: narrow dim %d to %d of %v", b.path(name), dim, length, s)
		return None
	}
	os := s.Clone()
	os[d] = length
	leading := true
	for _, v := range s[:d] {
		leading = leading && v == 1
	}
	return b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, b.contig[x] && (leading || length == s[d]), Attr{})
}

// Expand broadcasts x to shape (a view with zero strides).
func (b *Builder) Expand(name string, x TensorID, shape ...int64) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(View, name, []TensorID{x}, None, None, Shape(append([]int64(nil), shape...)), b.DTypeOf(x), x, false, Attr{})
}

// Contiguous is x.contiguous(): a copy when x is not contiguous, x itself
// otherwise.
func (b *Builder) Contiguous(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	if b.contig[x] {
		return x
	}
	return b.op(Contiguous, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, true, Attr{})
}

// Clone is x.clone(): always a copy (a Contiguous op on a contiguous
// tensor), whose backward passes the gradient through.
func (b *Builder) Clone(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(Contiguous, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, true, Attr{})
}

// Cast is x.to(dtype).
func (b *Builder) Cast(name string, x TensorID, dt DType) TensorID {
	if !b.ok(x) {
		return None
	}
	// Recorded even when the graph dtypes agree: under autocast the input
	// may be half at run time, and then .to(float32) is a real copy (the
	// simulator aliases it when the run-time dtypes agree, as PyTorch
	// returns self).
	return b.CastAs(name, x, dt, CastToDType)
}

// CastAs is a cast whose target the simulation decides (see CastTarget);
// dt is the graph's dtype for the result.
func (b *Builder) CastAs(name string, x TensorID, dt DType, to CastTarget) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(Cast, name, []TensorID{x}, None, None, b.Shape(x).Clone(), dt, None, true, Attr{CastTo: to})
}

// CastCopy is x.to(dtype, copy=True): a new tensor even when x already
// has dtype.
func (b *Builder) CastCopy(name string, x TensorID, dt DType) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(Cast, name, []TensorID{x}, None, None, b.Shape(x).Clone(), dt, None, true, Attr{InputCopy: true})
}

// Cat concatenates along dim.
func (b *Builder) Cat(name string, dim int, xs ...TensorID) TensorID {
	if !b.ok(xs...) || len(xs) == 0 {
		b.Fail("%s: cat of nothing", b.path(name))
		return None
	}
	s := b.Shape(xs[0]).Clone()
	d, ok := normDim(dim, len(s))
	if !ok {
		b.Fail("%s: cat along dim %d of %v", b.path(name), dim, s)
		return None
	}
	for _, x := range xs[1:] {
		o := b.Shape(x)
		if len(o) != len(s) {
			b.Fail("%s: cat of %v and %v", b.path(name), s, o)
			return None
		}
		for i := range o {
			if i != d && o[i] != s[i] {
				b.Fail("%s: cat of %v and %v along dim %d", b.path(name), b.Shape(xs[0]), o, d)
				return None
			}
		}
		s[d] += o[d]
	}
	return b.op(Cat, name, xs, None, None, s, b.DTypeOf(xs[0]), None, true, Attr{Dim: d})
}
