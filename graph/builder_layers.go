package graph

// Builder methods for the nn modules: Linear, Conv2d, the norms, the
// activations, Softmax, Dropout, the pools, Mean and Embedding.

// Linear is nn.Linear(in, out, bias) applied to x's last dimension.
func (b *Builder) Linear(name string, x TensorID, out int64, bias bool) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) == 0 {
		b.Fail("%s: linear needs at least one dimension", b.path(name))
		return None
	}
	b.Push(name)
	w := b.Param("weight", Shape{out, s[len(s)-1]})
	bb := None
	if bias {
		bb = b.Param("bias", Shape{out})
	}
	b.Pop()
	b.quantize(name, w)
	l, adapted := b.LoRAParams(name, s[len(s)-1], out)
	y := b.LinearWith(name, x, w, bb)
	if adapted {
		y = b.ApplyLoRA(name, x, y, l)
	}
	return y
}

// LinearWith is F.linear(x, w, bias) with existing parameters (tied
// weights such as GPT-2's language-model head).
func (b *Builder) LinearWith(name string, x, w, bias TensorID) TensorID {
	if !b.ok(x, w) {
		return None
	}
	s, ws := b.Shape(x), b.Shape(w)
	if len(ws) != 2 || len(s) == 0 || s[len(s)-1] != ws[1] {
		b.Fail("%s: linear of %v with weight %v: last dimension %d does not match in_features %d", b.path(name), s, ws, last(s), last(ws))
		return None
	}
	os := s.Clone()
	os[len(os)-1] = ws[0]
	copied := false
	if len(s) > 2 && !b.contig[x] {
		// F.linear on a non-contiguous N-D input goes through matmul, which
		// folds the input to 2-D with reshape: a copy, and the copy is what
		// mm saves.
		x = b.op(Contiguous, name+".input_copy", []TensorID{x}, None, None, s.Clone(), b.DTypeOf(x), None, true, Attr{})
		copied = true
	}
	return b.op(Linear, name, []TensorID{x}, w, bias, os, b.DTypeOf(x), None, true, Attr{InputCopy: copied})
}

func last(s Shape) int64 {
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// Conv2dOpts are nn.Conv2d's arguments beyond the channels.
type Conv2dOpts struct {
	Kernel, Stride, Padding, Dilation [2]int64
	Groups                            int64
	Bias                              bool
}

// Conv2d is nn.Conv2d on an NCHW tensor.
func (b *Builder) Conv2d(name string, x TensorID, outC int64, o Conv2dOpts) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("%s: conv2d expects a 4-D (N, C, H, W) input, got %v", b.path(name), s)
		return None
	}
	o = conv2dDefaults(o)
	if s[1]%o.Groups != 0 || outC%o.Groups != 0 {
		b.Fail("%s: conv2d channels %d→%d not divisible by groups %d", b.path(name), s[1], outC, o.Groups)
		return None
	}
	h, ok1 := convOut(s[2], o.Kernel[0], o.Stride[0], o.Padding[0], o.Dilation[0])
	w, ok2 := convOut(s[3], o.Kernel[1], o.Stride[1], o.Padding[1], o.Dilation[1])
	if !ok1 || !ok2 {
		b.Fail("%s: conv2d kernel %v larger than padded input %v", b.path(name), o.Kernel, s[2:])
		return None
	}
	b.Push(name)
	wt := b.Param("weight", Shape{outC, s[1] / o.Groups, o.Kernel[0], o.Kernel[1]})
	bias := None
	if o.Bias {
		bias = b.Param("bias", Shape{outC})
	}
	b.Pop()
	out := b.op(Conv2d, name, []TensorID{x}, wt, bias, Shape{s[0], outC, h, w}, b.DTypeOf(x), None, true,
		Attr{Kernel: o.Kernel, Stride: o.Stride, Padding: o.Padding, Dilation: o.Dilation, Groups: o.Groups, ChannelsLast: b.cl[x]})
	// The output takes the input's suggested memory format.
	b.keepChannelsLast(out, x)
	return out
}

// keepChannelsLast gives out the channels-last layout of x, for ops whose
// output follows their input's memory format.
func (b *Builder) keepChannelsLast(out, x TensorID) {
	if b.cl[x] {
		b.cl[out] = true
		b.contig[out] = false
	}
}

func conv2dDefaults(o Conv2dOpts) Conv2dOpts {
	for i := 0; i < 2; i++ {
		if o.Stride[i] == 0 {
			o.Stride[i] = 1
		}
		if o.Dilation[i] == 0 {
			o.Dilation[i] = 1
		}
	}
	if o.Groups == 0 {
		o.Groups = 1
	}
	return o
}

func convOut(in, k, s, p, d int64) (int64, bool) {
	eff := d*(k-1) + 1
	if in+2*p < eff || s <= 0 {
		return 0, false
	}
	return (in+2*p-eff)/s + 1, true
}

// BatchNorm2d is nn.BatchNorm2d(C) in training mode.
func (b *Builder) BatchNorm2d(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) < 2 {
		b.Fail("%s: batch_norm expects (N, C, ...), got %v", b.path(name), s)
		return None
	}
	c := s[1]
	b.Push(name)
	w := b.Param("weight", Shape{c})
	bias := b.Param("bias", Shape{c})
	rm := b.Buffer("running_mean", Shape{c}, F32)
	rv := b.Buffer("running_var", Shape{c}, F32)
	nb := b.Buffer("num_batches_tracked", Shape{}, I64)
	b.Pop()
	out := b.op(BatchNorm, name, []TensorID{x}, w, bias, s.Clone(), b.DTypeOf(x), None, true, Attr{})
	b.lastOp().Buffers = []TensorID{rm, rv, nb}
	b.keepChannelsLast(out, x) // empty_like(input, input.suggest_memory_format())
	return out
}

// LayerNorm is nn.LayerNorm over the last dims dimensions, with an affine
// weight and optionally a bias.
func (b *Builder) LayerNorm(name string, x TensorID, dims int, bias bool) TensorID {
	return b.norm(LayerNorm, name, x, dims, bias)
}

// RMSNorm is an RMS norm over the last dimension with a weight (LlamaRMSNorm
// and nn.RMSNorm).
func (b *Builder) RMSNorm(name string, x TensorID) TensorID {
	return b.norm(RMSNorm, name, x, 1, false)
}

func (b *Builder) norm(k Kind, name string, x TensorID, dims int, bias bool) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if dims < 1 || dims > len(s) {
		b.Fail("%s: %s over %d dims of %v", b.path(name), k, dims, s)
		return None
	}
	ns := s[len(s)-dims:].Clone()
	b.Push(name)
	w := b.Param("weight", ns)
	bb := None
	if bias {
		bb = b.Param("bias", ns.Clone())
	}
	b.Pop()
	return b.op(k, name, []TensorID{x}, w, bb, s.Clone(), b.DTypeOf(x), None, true, Attr{Dim: dims, InputCopy: k == LayerNorm && !b.contig[x]})
}

// Act applies an elementwise activation (ReLU, GELU, SiLU, Sigmoid, Tanh,
// Hardswish, Hardsigmoid, Hardtanh — nn.ReLU6 is hardtanh(x, 0, 6); the
// bounds do not change the memory). An in-place activation shares x's
// storage.
func (b *Builder) Act(k Kind, name string, x TensorID, inplace bool) TensorID {
	if !b.ok(x) {
		return None
	}
	switch k {
	case ReLU, GELU, GELUTanh, NewGELU, SiLU, Sigmoid, Tanh, Hardswish, Hardsigmoid, Hardtanh, Sqrt, Reciprocal, Erf, LeakyReLU:
	default:
		b.Fail("%s: %s is not an elementwise activation", b.path(name), k)
		return None
	}
	view := None
	if inplace {
		view = x
	}
	out := b.op(k, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), view, b.contig[x], Attr{Inplace: inplace})
	b.cl[out] = b.cl[x]
	return out
}

// Softmax is softmax (or log_softmax) along dim.
func (b *Builder) Softmax(name string, x TensorID, dim int, log bool) TensorID {
	if !b.ok(x) {
		return None
	}
	k := Softmax
	if log {
		k = LogSoftmax
	}
	d, ok := normDim(dim, len(b.Shape(x)))
	if !ok {
		b.Fail("%s: softmax dim %d out of range for %v", b.path(name), dim, b.Shape(x))
		return None
	}
	return b.op(k, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, true, Attr{Dim: d})
}

func normDim(d, n int) (int, bool) {
	if d < 0 {
		d += n
	}
	return d, d >= 0 && d < n
}

// Dropout is nn.Dropout(p) in training mode. p == 0 returns x itself, as
// PyTorch does (no op, nothing saved).
func (b *Builder) Dropout(name string, x TensorID, p float64, inplace bool) TensorID {
	if !b.ok(x) {
		return None
	}
	if p < 0 || p > 1 {
		b.Fail("%s: dropout probability %g outside [0, 1]", b.path(name), p)
		return None
	}
	if p == 0 {
		return x
	}
	view := None
	if inplace {
		view = x
	}
	return b.op(Dropout, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), view, b.contig[x], Attr{P: p, Inplace: inplace})
}

// Pool2dOpts are the arguments of MaxPool2d and AvgPool2d. A zero Stride
// means the kernel size, as in PyTorch.
type Pool2dOpts struct {
	Kernel, Stride, Padding, Dilation [2]int64
	CeilMode                          bool
}

// MaxPool2d is nn.MaxPool2d.
func (b *Builder) MaxPool2d(name string, x TensorID, o Pool2dOpts) TensorID {
	return b.pool(MaxPool2d, name, x, o)
}

// AvgPool2d is nn.AvgPool2d.
func (b *Builder) AvgPool2d(name string, x TensorID, o Pool2dOpts) TensorID {
	return b.pool(AvgPool2d, name, x, o)
}

func (b *Builder) pool(k Kind, name string, x TensorID, o Pool2dOpts) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("%s: %s expects a 4-D (N, C, H, W) input, got %v", b.path(name), k, s)
		return None
	}
	var out [2]int64
	for i := 0; i < 2; i++ {
		if o.Stride[i] == 0 {
			o.Stride[i] = o.Kernel[i]
		}
		if o.Dilation[i] == 0 {
			o.Dilation[i] = 1
		}
		eff := o.Dilation[i]*(o.Kernel[i]-1) + 1
		num := s[2+i] + 2*o.Padding[i] - eff
		if num < 0 || o.Kernel[i] <= 0 {
			b.Fail("%s: %s kernel %v larger than input %v", b.path(name), k, o.Kernel, s[2:])
			return None
		}
		n := num/o.Stride[i] + 1
		if o.CeilMode && num%o.Stride[i] != 0 {
			n++
			// PyTorch: the last window must start inside the input or left padding.
			if (n-1)*o.Stride[i] >= s[2+i]+o.Padding[i] {
				n--
			}
		}
		out[i] = n
	}
	return b.op(k, name, []TensorID{x}, None, None, Shape{s[0], s[1], out[0], out[1]}, b.DTypeOf(x), None, true,
		Attr{Kernel: o.Kernel, Stride: o.Stride, Padding: o.Padding, Dilation: o.Dilation})
}

// AdaptiveAvgPool2d is nn.AdaptiveAvgPool2d((h, w)).
func (b *Builder) AdaptiveAvgPool2d(name string, x TensorID, h, w int64) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) != 4 || h <= 0 || w <= 0 {
		b.Fail("%s: adaptive_avg_pool2d to (%d, %d) of %v", b.path(name), h, w, s)
		return None
	}
	return b.op(AdaptiveAvgPool2d, name, []TensorID{x}, None, None, Shape{s[0], s[1], h, w}, b.DTypeOf(x), None, true, Attr{})
}

// Mean averages over the given dims (keepdim false).
func (b *Builder) Mean(name string, x TensorID, dims ...int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	drop := make(map[int]bool)
	for _, d := range dims {
		nd, ok := normDim(d, len(s))
		if !ok {
			b.Fail("%s: mean over dim %d of %v", b.path(name), d, s)
			return None
		}
		drop[nd] = true
	}
	var os Shape
	for i, d := range s {
		if !drop[i] {
			os = append(os, d)
		}
	}
	return b.op(Mean, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true, Attr{})
}

// Embedding is nn.Embedding(num, dim) looked up with integer indices.
func (b *Builder) Embedding(name string, idx TensorID, num, dim int64) TensorID {
	if !b.ok(idx) {
		return None
	}
	b.Push(name)
	w := b.Param("weight", Shape{num, dim})
	b.Pop()
	return b.EmbeddingWith(name, idx, w)
}

// EmbeddingWith is F.embedding with an existing weight.
func (b *Builder) EmbeddingWith(name string, idx, w TensorID) TensorID {
	if !b.ok(idx, w) {
		return None
	}
	if b.DTypeOf(idx).IsFloat() {
		b.Fail("%s: embedding indices must be integers, got %s", b.path(name), b.DTypeOf(idx))
		return None
	}
	ws := b.Shape(w)
	os := append(b.Shape(idx).Clone(), ws[len(ws)-1])
	return b.op(Embedding, name, []TensorID{idx}, w, None, os, b.DTypeOf(w), None, true, Attr{})
}
