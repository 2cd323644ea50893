package graph

import (
	"fmt"
	"slices"
	"strings"
)

// Builder assembles a Graph op by op, inferring output shapes the way
// PyTorch does. The first error (a shape mismatch, a bad argument) is kept
// and every later call becomes a no-op returning None, so a builder reads
// like the model's forward() and checks once at the end with Graph().
type Builder struct {
	g     Graph
	scope []string
	// prefixes[i] is scope[:i+1] joined by dots: names are made for every
	// tensor and op, so the joined scope is kept rather than rebuilt.
	prefixes []string
	block    int32
	err      error
	contig   []bool // per tensor: is it contiguous (reshape of it is a view)
	// cl marks dense 4-D tensors in channels-last order (NHWC strides of an
	// NCHW shape), such as x.permute(0, 3, 1, 2) of a contiguous tensor. Only
	// ConvNeXt-style layouts create them; ops that follow the input's
	// memory format (conv, batch norm, elementwise) keep it, and
	// permute(0, 2, 3, 1) of one is contiguous again.
	cl      []bool
	ParamDT DType // dtype of parameters created from now on (default float32)
	// noGrad: ops added now run with grad mode off (see NoGrad)
	noGrad bool
	// Adapters, when set, freeze parameters and add LoRA adapters to the
	// Linear layers they name (see Adapters).
	Adapters *Adapters
	// Quant, when set, stores the weights of the Linear layers built from
	// now on in a quantized format (see Quant).
	Quant *Quant
	// quantized are the Linear layers (by path) whose weights are stored
	// quantized, with their format.
	quantized map[string]QuantFormat
	inLoRA    bool
	loraHits  map[string]bool
	// linearNames are the Linear layers' own names, for an error that
	// lists what LoRA could target; freezeHits the --freeze names that
	// matched a parameter.
	linearNames map[string]bool
	freezeHits  map[string]bool
}

// NewBuilder starts an empty graph.
func NewBuilder(name string) *Builder {
	return &Builder{g: Graph{Name: name, Loss: None}, block: -1, ParamDT: F32}
}

// Err returns the first error met so far.
func (b *Builder) Err() error { return b.err }

// Fail records an error (the first one wins) for builders that validate
// their own arguments.
func (b *Builder) Fail(format string, args ...any) {
	if b.err == nil {
		b.err = fmt.Errorf(format, args...)
	}
}

// ModuleNameError is the error of adapters that name a module the model
// does not have (Adapters.Freeze, Adapters.Targets): the names given are
// wrong, not the model, so a command line calls it a usage error.
type ModuleNameError struct{ Err error }

func (e ModuleNameError) Error() string { return e.Err.Error() }
func (e ModuleNameError) Unwrap() error { return e.Err }

// Graph finishes the build.
func (b *Builder) Graph() (*Graph, error) {
	if b.err != nil {
		return nil, fmt.Errorf("building %s: %w", b.g.Name, b.err)
	}
	if a := b.Adapters; a != nil && a.Rank == 0 {
		var miss []string
		for _, f := range a.Freeze {
			if !b.freezeHits[f] {
				miss = append(miss, f)
			}
		}
		if len(miss) > 0 {
			return nil, ModuleNameError{fmt.Errorf("building %s: --freeze %s names no module of the model", b.g.Name, strings.Join(miss, ", "))}
		}
	}
	if a := b.Adapters; a != nil && a.Rank > 0 {
		if miss := b.unmatchedTargets(); len(miss) > 0 {
			var names []string
			for n := range b.linearNames {
				names = append(names, n)
			}
			slices.Sort(names)
			return nil, ModuleNameError{fmt.Errorf("building %s: LoRA target modules %s match no Linear layer of the model (its Linear layers are named %s)", b.g.Name, strings.Join(miss, ", "), strings.Join(names, ", "))}
		}
	}
	if err := b.g.Validate(); err != nil {
		return nil, err
	}
	g := b.g
	return &g, nil
}

// Push enters a module scope: names created inside get the prefix.
func (b *Builder) Push(name string) {
	p := name
	if k := len(b.prefixes); k > 0 {
		p = b.prefixes[k-1] + "." + name
	}
	b.scope = append(b.scope, name)
	b.prefixes = append(b.prefixes, p)
}

// Pop leaves the innermost module scope.
func (b *Builder) Pop() {
	if len(b.scope) > 0 {
		b.scope = b.scope[:len(b.scope)-1]
		b.prefixes = b.prefixes[:len(b.prefixes)-1]
	}
}

// Scope runs fn inside module scope name.
func (b *Builder) Scope(name string, fn func()) {
	b.Push(name)
	defer b.Pop()
	fn()
}

// Block runs fn as one checkpointable block (a residual block, a
// transformer layer), under module scope name.
func (b *Builder) Block(name string, fn func()) {
	prev := b.block
	b.g.Blocks = append(b.g.Blocks, b.path(name))
	b.block = int32(len(b.g.Blocks) - 1)
	b.Scope(name, fn)
	b.block = prev
}

// grow doubles a full slice's capacity: append alone grows large slices by
// a quarter, copying a graph of thousands of ops several times over.
func grow[E any](s []E) []E {
	if len(s) < cap(s) {
		return s
	}
	return slices.Grow(s, max(cap(s), 16))
}

func (b *Builder) path(name string) string {
	k := len(b.prefixes)
	if k == 0 {
		return name
	}
	if name == "" {
		return b.prefixes[k-1]
	}
	return b.prefixes[k-1] + "." + name
}

// Shape returns the shape of t (nil for None or after an error).
func (b *Builder) Shape(t TensorID) Shape {
	if t < 0 || int(t) >= len(b.g.Tensors) {
		return nil
	}
	return b.g.Tensors[t].Shape
}

// DTypeOf returns the dtype of t.
func (b *Builder) DTypeOf(t TensorID) DType {
	if t < 0 || int(t) >= len(b.g.Tensors) {
		return F32
	}
	return b.g.Tensors[t].DType
}

func (b *Builder) ok(ts ...TensorID) bool {
	if b.err != nil {
		return false
	}
	for _, t := range ts {
		if t < 0 || int(t) >= len(b.g.Tensors) {
			b.Fail("%s: use of an undefined tensor", b.path(""))
			return false
		}
	}
	return true
}

func (b *Builder) newTensor(name string, s Shape, dt DType, role Role, view TensorID, rg bool, contig bool) TensorID {
	if view != None && b.g.Tensors[view].View != None {
		view = b.g.Tensors[view].View
	}
	if _, err := CheckedBytes(b.path(name), s, dt); err != nil && b.err == nil {
		// refused where the size is made, naming the tensor and its
		// shape: every figure after would be computed from it
		b.err = err
	}
	b.g.Tensors = grow(b.g.Tensors)
	b.g.Tensors = append(b.g.Tensors, Tensor{Name: name, Shape: s, DType: dt, Role: role, View: view, RequiresGrad: rg})
	b.contig = append(b.contig, contig)
	b.cl = append(b.cl, false)
	return TensorID(len(b.g.Tensors) - 1)
}

// Input declares an input batch tensor.
func (b *Builder) Input(name string, s Shape, dt DType) TensorID {
	if b.err != nil {
		return None
	}
	id := b.newTensor(name, s.Clone(), dt, Input, None, false, true)
	b.g.Inputs = append(b.g.Inputs, id)
	return id
}

// Received declares a floating input that requires grad: activations a
// pipeline stage receives from the previous one, whose gradient backward
// computes and sends back. Its dtype is the model's at run time.
func (b *Builder) Received(name string, s Shape) TensorID {
	if b.err != nil {
		return None
	}
	id := b.newTensor(name, s.Clone(), b.ParamDT, Input, None, true, true)
	b.g.Inputs = append(b.g.Inputs, id)
	return id
}

// AllGather gathers x along dim from t sequence-parallel ranks.
func (b *Builder) AllGather(name string, x TensorID, dim int, t int64) TensorID {
	return b.collective(AllGather, name, x, dim, t)
}

// ReduceScatter sums x over t sequence-parallel ranks and keeps this
// rank's 1/t of dim.
func (b *Builder) ReduceScatter(name string, x TensorID, dim int, t int64) TensorID {
	return b.collective(ReduceScatter, name, x, dim, t)
}

func (b *Builder) collective(k Kind, name string, x TensorID, dim int, t int64) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x).Clone()
	if dim < 0 {
		dim += len(s)
	}
	if dim < 0 || dim >= len(s) || t < 1 {
		b.Fail("%s %s: dim %d of %v over %d ranks", k, b.path(name), dim, s, t)
		return None
	}
	if k == AllGather {
		s[dim] *= t
	} else {
		if s[dim]%t != 0 {
			b.Fail("%s %s: %d is not divisible by %d ranks", k, b.path(name), s[dim], t)
			return None
		}
		s[dim] /= t
	}
	return b.op(k, name, []TensorID{x}, None, None, s, b.DTypeOf(x), None, true, Attr{Dim: dim, Groups: t})
}

// Target declares a target tensor of the loss.
func (b *Builder) Target(name string, s Shape, dt DType) TensorID {
	if b.err != nil {
		return None
	}
	id := b.newTensor(name, s.Clone(), dt, Target, None, false, true)
	b.g.Targets = append(b.g.Targets, id)
	return id
}

// Param creates a parameter under the current scope.
func (b *Builder) Param(name string, s Shape) TensorID {
	if b.err != nil {
		return None
	}
	path := b.path(name)
	// an adapter's own parameters train; the rest may be frozen
	rg := b.inLoRA || !b.frozen(path)
	return b.newTensor(path, s.Clone(), b.ParamDT, Parameter, None, rg, true)
}

// Buffer creates a registered buffer under the current scope.
func (b *Builder) Buffer(name string, s Shape, dt DType) TensorID {
	if b.err != nil {
		return None
	}
	return b.newTensor(b.path(name), s.Clone(), dt, Buffer, None, false, true)
}

// op appends an op writing a fresh tensor of shape s and dtype dt. When
// viewOf is not None the output shares viewOf's storage.
func (b *Builder) op(k Kind, name string, in []TensorID, w, bias TensorID, s Shape, dt DType, viewOf TensorID, contig bool, attr Attr) TensorID {
	rg := false
	for _, t := range in {
		rg = rg || b.g.Tensors[t].RequiresGrad
	}
	for _, t := range []TensorID{w, bias} {
		if t != None {
			rg = rg || b.g.Tensors[t].RequiresGrad
		}
	}
	if !dt.IsFloat() || b.noGrad {
		rg = false
	}
	p := b.path(name)
	if len(b.g.Ops) == MaxOps && b.err == nil {
		// the ops after are skipped (ok fails): a deep model is refused
		// before its graph is built, not after
		b.err = opsError(b.g.Name)
	}
	out := b.newTensor(p, s, dt, Activation, viewOf, rg, contig)
	b.g.Ops = grow(b.g.Ops)
	b.g.Ops = append(b.g.Ops, Op{Kind: k, Name: p, Inputs: in, Weight: w, Bias: bias, Output: out, Attr: attr, Block: b.block})
	return out
}

func (b *Builder) lastOp() *Op { return &b.g.Ops[len(b.g.Ops)-1] }

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
	return b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, contig, Attr{})
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
	identity := true
	for i, d := range dims {
		nd, ok := normDim(d, len(s))
		if !ok || seen[nd] {
			b.Fail("%s: permute %v of %v", b.path(name), dims, s)
			return None
		}
		seen[nd] = true
		os[i] = s[nd]
		identity = identity && nd == i
	}
	out := b.op(View, name, []TensorID{x}, None, None, os, b.DTypeOf(x), x, b.contig[x] && identity, Attr{})
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

// Release marks the return of a Python function whose locals or arguments
// still reference xs after their last use as operands: PyTorch frees a
// tensor when its last reference goes, not after its last use. The result
// is a view of xs[0] that nothing reads.
func (b *Builder) Release(name string, xs ...TensorID) TensorID {
	if !b.ok(xs...) || len(xs) == 0 {
		b.Fail("%s: release of nothing", b.path(name))
		return None
	}
	return b.op(Release, name, xs, None, None, b.Shape(xs[0]).Clone(), b.DTypeOf(xs[0]), xs[0], false, Attr{})
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

// Broadcast returns the broadcast shape of a and c.
func Broadcast(a, c Shape) (Shape, bool) {
	n := len(a)
	if len(c) > n {
		n = len(c)
	}
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		x, y := int64(1), int64(1)
		if j := len(a) - n + i; j >= 0 {
			x = a[j]
		}
		if j := len(c) - n + i; j >= 0 {
			y = c[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

func (b *Builder) binary(k Kind, name string, x, y TensorID, inplace bool) TensorID {
	if !b.ok(x, y) {
		return None
	}
	s, ok := Broadcast(b.Shape(x), b.Shape(y))
	if !ok || (inplace && s.Numel() != b.Shape(x).Numel()) {
		b.Fail("%s: %s of %v and %v: shapes do not broadcast", b.path(name), k, b.Shape(x), b.Shape(y))
		return None
	}
	dt := promote(b.DTypeOf(x), b.DTypeOf(y))
	view := None
	contig := true
	if inplace {
		view, dt, contig = x, b.DTypeOf(x), b.contig[x]
	}
	in := []TensorID{x, y}
	out := b.op(k, name, in, None, None, s, dt, view, contig, Attr{Inplace: inplace})
	if inplace {
		b.cl[out] = b.cl[x]
	} else {
		// TensorIterator lays the result out like the first operand that
		// is not broadcast.
		for _, t := range in {
			if b.Shape(t).Numel() == s.Numel() && len(b.Shape(t)) == len(s) {
				b.keepChannelsLast(out, t)
				break
			}
		}
	}
	return out
}

func promote(a, c DType) DType {
	if a == c {
		return a
	}
	if a.IsFloat() && !c.IsFloat() {
		return a
	}
	if c.IsFloat() && !a.IsFloat() {
		return c
	}
	if a.Size() >= c.Size() {
		return a
	}
	return c
}

// Add is x + y with broadcasting; AddInplace is x += y.
func (b *Builder) Add(name string, x, y TensorID) TensorID { return b.binary(Add, name, x, y, false) }

// AddInplace is x += y (x keeps its storage).
func (b *Builder) AddInplace(name string, x, y TensorID) TensorID {
	return b.binary(Add, name, x, y, true)
}

// Mul is x * y with broadcasting.
func (b *Builder) Mul(name string, x, y TensorID) TensorID { return b.binary(Mul, name, x, y, false) }

// Scale is x * number (or x / number): a new tensor, nothing saved.
// TensorIterator gives the result the stride order of x, so a permuted x
// (Swin's q, a select of the permuted qkv) makes a permuted result, which a
// later reshape must copy.
func (b *Builder) Scale(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	out := b.op(Mul, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, b.contig[x], Attr{Scalar: true})
	b.cl[out] = b.cl[x]
	return out
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
	return b.AttentionLayout(name, q, k, v, causal, dropout, false)
}

// AttentionLayout is Attention whose query is laid out [B, L, H, D] in
// memory when queryTransposed (Attr.QueryTransposed).
func (b *Builder) AttentionLayout(name string, q, k, v TensorID, causal bool, dropout float64, queryTransposed bool) TensorID {
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
		Attr{Heads: qs[1], KVHeads: ks[1], Causal: causal, P: dropout, QueryTransposed: queryTransposed})
}

// CrossEntropy is F.cross_entropy(logits, target) with class indices and
// mean reduction; logits are [N, C] (or [N, C, ...]).
func (b *Builder) CrossEntropy(name string, logits, target TensorID) TensorID {
	if !b.ok(logits, target) {
		return None
	}
	ls, ts := b.Shape(logits), b.Shape(target)
	if len(ls) < 2 || len(ts) != len(ls)-1 || ts[0] != ls[0] {
		b.Fail("%s: cross_entropy of logits %v and targets %v (want [N, C] and [N])", b.path(name), ls, ts)
		return None
	}
	out := b.op(CrossEntropy, name, []TensorID{logits, target}, None, None, Shape{}, F32, None, true, Attr{Dim: 1})
	b.g.Loss = out
	return out
}

// MSELoss is F.mse_loss(pred, target) with mean reduction.
func (b *Builder) MSELoss(name string, pred, target TensorID) TensorID {
	if !b.ok(pred, target) {
		return None
	}
	if _, ok := Broadcast(b.Shape(pred), b.Shape(target)); !ok {
		b.Fail("%s: mse_loss of %v and %v", b.path(name), b.Shape(pred), b.Shape(target))
		return None
	}
	out := b.op(MSELoss, name, []TensorID{pred, target}, None, None, Shape{}, F32, None, true, Attr{})
	b.g.Loss = out
	return out
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

// Return marks x as returned by the forward beside the loss (Graph.Returned).
func (b *Builder) Return(x TensorID) {
	if b.ok(x) {
		b.g.Returned = append(b.g.Returned, x)
	}
}

// Output marks x as what the caller keeps from the forward pass for graphs
// without a loss, in the loss's part: the logits a generation loop reads,
// alive until the next forward replaces it; or a pipeline stage's output,
// which backward starts from (its gradient, received from the next stage,
// is the seed: a tensor of x's shape).
func (b *Builder) Output(x TensorID) {
	if b.ok(x) {
		b.g.Loss = x
	}
}
