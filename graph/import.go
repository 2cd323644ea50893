package graph

// The methods of this file serve importers of recorded graphs (package
// capture), which know every tensor's shape, storage and strides from the
// recording, and whose parameters already exist when an op uses them.

// NamedParam creates a parameter with its full state_dict name (no scope is
// prefixed). trainable is the recording's requires_grad; a --freeze
// pattern or a LoRA setup may still freeze it.
func (b *Builder) NamedParam(path string, s Shape, trainable bool) TensorID {
	if b.err != nil {
		return None
	}
	rg := trainable && (b.inLoRA || !b.frozen(path))
	return b.newTensor(path, s.Clone(), b.ParamDT, Parameter, None, rg, true)
}

// NamedBuffer creates a registered buffer with its full name.
func (b *Builder) NamedBuffer(path string, s Shape, dt DType) TensorID {
	if b.err != nil {
		return None
	}
	return b.newTensor(path, s.Clone(), dt, Buffer, None, false, true)
}

// ViewAs is a zero-copy view of x with shape s: any of PyTorch's view ops
// (view, transpose, permute, expand, select, slice, unsqueeze, ...), with
// the contiguity the recorded strides show.
func (b *Builder) ViewAs(name string, x TensorID, s Shape, contig bool) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(View, name, []TensorID{x}, None, None, s.Clone(), b.DTypeOf(x), x, contig, Attr{})
}

// ViewPermuted is a view of x that reorders its dims (a recorded
// transpose or permute): output dim i is input dim perm[i] (Attr.Perm).
func (b *Builder) ViewPermuted(name string, x TensorID, s Shape, contig bool, perm []int) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(View, name, []TensorID{x}, None, None, s.Clone(), b.DTypeOf(x), x, contig, Attr{Perm: append([]int(nil), perm...)})
}

// SetChannelsLast marks x as a dense 4-D tensor in channels-last order
// (the recorded strides say so): the convolutions that read it then make
// a channels-last copy of their weight, as the builders' ConvNeXt does.
func (b *Builder) SetChannelsLast(x TensorID) {
	if x >= 0 && int(x) < len(b.cl) {
		b.cl[x] = true
		b.contig[x] = false
	}
}

// SetStrided marks x as a dense tensor whose memory order is not its dims'
// order (a TensorIterator result laid out like a permuted operand, the
// recorded strides of a captured one): a layer_norm that reads it copies it
// (Attr.InputCopy), as does a linear that folds it.
func (b *Builder) SetStrided(x TensorID) {
	if x >= 0 && int(x) < len(b.contig) {
		b.contig[x] = false
	}
}

// CopyAs is a new tensor holding x's elements in shape s (clone,
// contiguous, reshape of a non-contiguous tensor, _unsafe_view of one):
// a Contiguous op.
func (b *Builder) CopyAs(name string, x TensorID, s Shape) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(Contiguous, name, []TensorID{x}, None, None, s.Clone(), b.DTypeOf(x), None, true, Attr{})
}

// Conv2dWith is F.conv2d(x, w, bias, ...) with existing parameters.
func (b *Builder) Conv2dWith(name string, x, w, bias TensorID, o Conv2dOpts) TensorID {
	if !b.ok(x, w) {
		return None
	}
	s, ws := b.Shape(x), b.Shape(w)
	if len(s) != 4 || len(ws) != 4 {
		b.Fail("%s: conv2d expects a 4-D input and weight, got %v and %v", b.path(name), s, ws)
		return None
	}
	o = conv2dDefaults(o)
	o.Kernel = [2]int64{ws[2], ws[3]}
	if s[1] != ws[1]*o.Groups {
		b.Fail("%s: conv2d of %v with weight %v and %d groups: channels do not match", b.path(name), s, ws, o.Groups)
		return None
	}
	h, ok1 := convOut(s[2], o.Kernel[0], o.Stride[0], o.Padding[0], o.Dilation[0])
	wd, ok2 := convOut(s[3], o.Kernel[1], o.Stride[1], o.Padding[1], o.Dilation[1])
	if !ok1 || !ok2 {
		b.Fail("%s: conv2d kernel %v larger than padded input %v", b.path(name), o.Kernel, s[2:])
		return None
	}
	out := b.op(Conv2d, name, []TensorID{x}, w, bias, Shape{s[0], ws[0], h, wd}, b.DTypeOf(x), None, true,
		Attr{Kernel: o.Kernel, Stride: o.Stride, Padding: o.Padding, Dilation: o.Dilation, Groups: o.Groups, ChannelsLast: b.cl[x]})
	b.keepChannelsLast(out, x)
	return out
}

// ConvTranspose2dWith is F.conv_transpose2d with an existing weight
// [C_in, C_out/groups, kh, kw] and bias (None when absent); outPad is its
// output_padding.
func (b *Builder) ConvTranspose2dWith(name string, x, w, bias TensorID, o Conv2dOpts, outPad [2]int64) TensorID {
	if !b.ok(x, w) {
		return None
	}
	s, ws := b.Shape(x), b.Shape(w)
	if len(s) != 4 || len(ws) != 4 {
		b.Fail("%s: conv_transpose2d expects a 4-D input and weight, got %v and %v", b.path(name), s, ws)
		return None
	}
	o = conv2dDefaults(o)
	o.Kernel = [2]int64{ws[2], ws[3]}
	if s[1] != ws[0] || ws[0]%o.Groups != 0 {
		b.Fail("%s: conv_transpose2d of %v with weight %v and %d groups: channels do not match", b.path(name), s, ws, o.Groups)
		return None
	}
	var hw [2]int64
	for i := range hw {
		// (in − 1)·stride − 2·padding + dilation·(k − 1) + output_padding + 1
		hw[i] = (s[2+i]-1)*o.Stride[i] - 2*o.Padding[i] + o.Dilation[i]*(o.Kernel[i]-1) + outPad[i] + 1
		if hw[i] <= 0 || outPad[i] < 0 {
			b.Fail("%s: conv_transpose2d of %v with kernel %v makes no output", b.path(name), s, o.Kernel)
			return None
		}
	}
	out := b.op(ConvTranspose2d, name, []TensorID{x}, w, bias, Shape{s[0], ws[1] * o.Groups, hw[0], hw[1]}, b.DTypeOf(x), None, true,
		Attr{Kernel: o.Kernel, Stride: o.Stride, Padding: o.Padding, Dilation: o.Dilation, Groups: o.Groups, ChannelsLast: b.cl[x]})
	b.keepChannelsLast(out, x)
	return out
}

// InstanceNormWith is F.instance_norm with batch statistics (no running
// statistics kept) and the affine parameters given (None when absent).
func (b *Builder) InstanceNormWith(name string, x, w, bias TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) < 3 {
		b.Fail("%s: instance_norm expects (N, C, ...), got %v", b.path(name), s)
		return None
	}
	for _, p := range []TensorID{w, bias} {
		if p == None {
			continue
		}
		if ps := b.Shape(p); len(ps) != 1 || ps[0] != s[1] {
			b.Fail("%s: instance_norm's affine parameters are (%d), got %v", b.path(name), s[1], b.Shape(p))
			return None
		}
	}
	return b.op(InstanceNorm, name, []TensorID{x}, w, bias, s.Clone(), b.DTypeOf(x), None, true, Attr{})
}

// BatchNormWith is F.batch_norm in training mode with existing affine
// parameters (None when absent) and running statistics.
func (b *Builder) BatchNormWith(name string, x, w, bias TensorID, buffers []TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if len(s) < 2 {
		b.Fail("%s: batch_norm expects (N, C, ...), got %v", b.path(name), s)
		return None
	}
	out := b.op(BatchNorm, name, []TensorID{x}, w, bias, s.Clone(), b.DTypeOf(x), None, true, Attr{})
	var bufs []TensorID
	for _, t := range buffers {
		if t != None {
			bufs = append(bufs, t)
		}
	}
	b.lastOp().Buffers = bufs
	b.keepChannelsLast(out, x)
	return out
}

// LayerNormWith is F.layer_norm over the last dims dimensions with
// existing parameters (None when absent).
func (b *Builder) LayerNormWith(name string, x, w, bias TensorID, dims int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	if dims < 1 || dims > len(s) {
		b.Fail("%s: layer_norm over %d dims of %v", b.path(name), dims, s)
		return None
	}
	return b.op(LayerNorm, name, []TensorID{x}, w, bias, s.Clone(), b.DTypeOf(x), None, true, Attr{Dim: dims, InputCopy: !b.contig[x]})
}

// Contig reports whether the builder holds x as contiguous.
func (b *Builder) Contig(x TensorID) bool { return x >= 0 && int(x) < len(b.contig) && b.contig[x] }

// MulInplace is x.mul_(y) (or div_): x's storage is written.
func (b *Builder) MulInplace(name string, x, y TensorID) TensorID {
	return b.binary(Mul, name, x, y, true)
}

// TensorAt is the tensor id as built so far.
func (b *Builder) TensorAt(id TensorID) *Tensor { return &b.g.Tensors[id] }

// NoGrad runs fn with grad mode off, as torch.no_grad() and a custom
// Function's forward do: the ops fn adds make results that do not require
// grad, so they save nothing and have no backward.
func (b *Builder) NoGrad(fn func()) {
	was := b.noGrad
	b.noGrad = true
	defer func() { b.noGrad = was }()
	fn()
}

// Custom is a torch.autograd.Function's node over result, what its forward
// (built under NoGrad) returned: inputs are the Function's tensor
// arguments, then any tensor it saved that is not one of them (made in
// forward); saved lists the positions saved. The output shares result's
// storage and requires grad when an argument does. The op's last input is
// result itself.
func (b *Builder) Custom(name string, inputs []TensorID, args int, saved []int, result TensorID) TensorID {
	if !b.ok(append(append([]TensorID(nil), inputs...), result)...) {
		return None
	}
	// the result is read too, so that it lives until the node takes it
	ins := append(append([]TensorID(nil), inputs...), result)
	out := b.op(Custom, name, ins, None, None, b.Shape(result).Clone(), b.DTypeOf(result), result, b.contig[result],
		Attr{Count: args, Saved: append([]int(nil), saved...)})
	rg := false
	for _, t := range inputs[:args] {
		rg = rg || b.g.Tensors[t].RequiresGrad
	}
	b.g.Tensors[out].RequiresGrad = rg && b.DTypeOf(result).IsFloat()
	return out
}

// Unary is an elementwise op of one tensor with a rule of its own in
// package train (Pow, Rsqrt, Exp, Log, Neg): a new tensor of x's shape.
func (b *Builder) Unary(k Kind, name string, x TensorID) TensorID { return b.unary(k, name, x) }

// LinearOf is an nn.Linear's F.linear(x, w, bias) over parameters that
// exist already: as Linear, the weight is stored quantized and LoRA
// adapters are added where the builder's setup names the layer.
func (b *Builder) LinearOf(name string, x, w, bias TensorID) TensorID {
	if !b.ok(x, w) {
		return None
	}
	ws := b.Shape(w)
	if len(ws) != 2 {
		return b.LinearWith(name, x, w, bias)
	}
	b.quantize(name, w)
	l, adapted := b.LoRAParams(name, ws[1], ws[0])
	y := b.LinearWith(name, x, w, bias)
	if adapted {
		y = b.ApplyLoRA(name, x, y, l)
	}
	return y
}

// ScaleInplace is x.mul_(number) (or div_): x's storage is written;
// nothing is saved, and its backward multiplies the gradient by the
// number into a new tensor (MulBackward1), as Scale's does.
func (b *Builder) ScaleInplace(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	out := b.op(Mul, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), x, b.contig[x], Attr{Scalar: true, Inplace: true})
	b.cl[out] = b.cl[x]
	return out
}

// ScaleNumber is Scale (ScaleInplace when inplace) by a Python number
// that the bindings wrap in a 0-d tensor (Attr.Number): x * 0.5 or
// x.div_(2) reach mul.Tensor and div_.Tensor with the number wrapped, and
// MulBackward0 and DivBackward0 save other; x - 2 reaches sub.Tensor,
// whose node saves nothing.
func (b *Builder) ScaleNumber(name string, x TensorID, inplace bool, n Number) TensorID {
	out := b.Scale
	if inplace {
		out = b.ScaleInplace
	}
	y := out(name, x)
	if y != None && len(b.g.Ops) > 0 && b.g.Ops[len(b.g.Ops)-1].Output == y {
		b.g.Ops[len(b.g.Ops)-1].Attr.Number = n
	}
	return y
}
