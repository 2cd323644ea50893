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

// Handed records the tensors the call of the block being built is handed
// (Graph.BlockArgs); outside a block it does nothing.
func (b *Builder) Handed(ts ...TensorID) {
	if b.block < 0 {
		return
	}
	for len(b.g.BlockArgs) <= int(b.block) {
		b.g.BlockArgs = append(b.g.BlockArgs, nil)
	}
	b.g.BlockArgs[b.block] = append([]TensorID{}, ts...)
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
