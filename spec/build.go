package spec

import (
	"errors"
	"fmt"
	"math"

	"github.com/batchfit/batchfit/graph"
)

// buildCtx is one Build: the symbol values, the graph builder, and the
// running totals the limits bound.
type buildCtx struct {
	s          *Spec
	b          *graph.Builder
	env        map[string]int64
	lim        limits
	counts     map[*layer]countMemo
	adapters   *graph.Adapters
	inBlock    bool // inside a repetition that is a checkpointable block
	paramElems int64
	acts       int64
	// positions is the smallest learned position table built (0: none)
	positions int64
}

type countMemo struct {
	ops    int64
	height int
}

func (c *buildCtx) errf(line int, l *layer, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if l != nil {
		err = fmt.Errorf("%s: %w", l.typ.name, err)
	}
	return &Error{File: c.s.File, Line: line, Err: err}
}

func (c *buildCtx) build(batch int64) (*graph.Graph, error) {
	s := c.s
	ops, _, err := c.countList(s.layers, 1)
	if err != nil {
		return nil, err
	}
	if ops = satAdd(ops, 3); ops > c.lim.ops {
		return nil, &Error{File: s.File, Err: fmt.Errorf("the layers expand to more than %d ops", c.lim.ops)}
	}
	c.b = graph.NewBuilder(s.Name)
	c.b.Adapters = c.adapters
	shape := graph.Shape{batch}
	for _, d := range s.input.shape {
		v, err := d.e.eval(c.env)
		if err != nil {
			return nil, c.errf(d.line, nil, "input shape: %v", err)
		}
		if v <= 0 {
			return nil, c.errf(d.line, nil, "input shape sizes must be positive, got %d", v)
		}
		shape = append(shape, v)
	}
	if n := numel(shape, c.lim.elems); n > c.lim.elems {
		return nil, c.errf(s.input.line, nil, "input %v has more than %d elements", shape, c.lim.elems)
	}
	x := c.b.Input("x", shape, s.input.dtype)
	if x, err = c.list(s.layers, x, 1); err != nil {
		return nil, err
	}
	if err := c.loss(x, batch); err != nil {
		return nil, err
	}
	g, err := c.b.Graph()
	if err != nil {
		return nil, &Error{File: s.File, Err: err}
	}
	if g.ParamCount() == 0 {
		return nil, &Error{File: s.File, Err: errors.New("the layers have no parameters, so there is nothing to train")}
	}
	return g, nil
}

func (c *buildCtx) loss(x graph.TensorID, batch int64) error {
	b, s := c.b, c.b.Shape(x)
	switch c.s.loss {
	case mseLoss:
		if !c.b.DTypeOf(x).IsFloat() {
			return c.errf(c.s.lossAt, nil, "mse needs float outputs, got %s", c.b.DTypeOf(x))
		}
		y := b.Target("y", s, b.DTypeOf(x))
		b.MSELoss("loss", x, y)
	default:
		if !c.b.DTypeOf(x).IsFloat() {
			return c.errf(c.s.lossAt, nil, "cross_entropy needs float logits, got %s outputs", c.b.DTypeOf(x))
		}
		switch len(s) {
		case 2:
			y := b.Target("y", graph.Shape{batch}, graph.I64)
			b.CrossEntropy("loss", x, y)
		case 3:
			// A sequence: logits [B, L, C] and targets [B, L], flattened to
			// [B·L, C] and [B·L] as language models do.
			y := b.Target("y", s[:2].Clone(), graph.I64)
			logits := b.Reshape("logits_flat", x, -1, s[2])
			y = b.Reshape("targets_flat", y, -1)
			b.CrossEntropy("loss", logits, y)
		default:
			return c.errf(c.s.lossAt, nil, "cross_entropy needs outputs [batch, classes] or [batch, seq, classes], got %v (flatten or pool first)", s)
		}
	}
	if err := b.Err(); err != nil {
		return c.errf(c.s.lossAt, nil, "loss: %w", err)
	}
	return nil
}

// list builds the layers one after the other.
func (c *buildCtx) list(es []entry, x graph.TensorID, depth int) (graph.TensorID, error) {
	for _, e := range es {
		var err error
		if x, err = c.layer(e, x, depth); err != nil {
			return graph.None, err
		}
	}
	return x, nil
}

func (c *buildCtx) layer(e entry, x graph.TensorID, depth int) (graph.TensorID, error) {
	l := e.l
	y, err := l.typ.build(c, l, e.name, x, depth)
	if err != nil {
		return graph.None, err
	}
	if err := c.b.Err(); err != nil {
		return graph.None, c.errf(l.line, l, "%w", err)
	}
	if l.typ.name == "repeat" {
		return y, nil // its layers were counted one by one
	}
	s := c.b.Shape(y)
	n := numel(s, c.lim.elems)
	if n > c.lim.elems {
		return graph.None, c.errf(l.line, l, "output %v has more than %d elements", s, c.lim.elems)
	}
	if c.acts = satAdd(c.acts, n); c.acts > c.lim.elems {
		return graph.None, c.errf(l.line, l, "the activations have more than %d elements in all", c.lim.elems)
	}
	return y, nil
}

// countList bounds the ops the layers add and measures how deeply they
// nest, before anything is built.
func (c *buildCtx) countList(es []entry, depth int) (ops int64, height int, err error) {
	for _, e := range es {
		n, h, err := c.count(e.l, depth)
		if err != nil {
			return 0, 0, err
		}
		ops = satAdd(ops, n)
		height = max(height, h)
	}
	return ops, height, nil
}

func (c *buildCtx) count(l *layer, depth int) (int64, int, error) {
	m, ok := c.counts[l]
	if !ok {
		switch l.typ.name {
		case "residual":
			n, h, err := c.countList(l.fields["layers"].layers, depth+1)
			if err != nil {
				return 0, 0, err
			}
			m = countMemo{satAdd(n, 1), h + 1}
		case "repeat":
			reps, err := c.int(l, "count")
			if err != nil {
				return 0, 0, err
			}
			n, h, err := c.countList(l.fields["block"].layers, depth+1)
			if err != nil {
				return 0, 0, err
			}
			m = countMemo{satMul(reps, satAdd(n, 1)), h + 1}
		default:
			m = countMemo{l.typ.ops, 0}
		}
		c.counts[l] = m
	}
	if depth+m.height > MaxDepth {
		return 0, 0, c.errf(l.line, l, "layers nested more than %d deep", MaxDepth)
	}
	if m.ops > c.lim.ops {
		return 0, 0, c.errf(l.line, l, "expands to more than %d ops", c.lim.ops)
	}
	return m.ops, m.height, nil
}

// value evaluates the i-th value of a field.
func (c *buildCtx) value(l *layer, f *field, i int) (int64, error) {
	v, err := f.vals[i].eval(c.env)
	if err != nil {
		return 0, c.errf(f.line, l, "%v", err)
	}
	return v, nil
}

// int is an integer field's value (its default when absent), checked
// against the field's minimum.
func (c *buildCtx) int(l *layer, name string) (int64, error) {
	fd := l.typ.field(name)
	f := l.fields[fd.name]
	if f == nil {
		return fd.def, nil
	}
	v, err := c.value(l, f, 0)
	if err != nil {
		return 0, err
	}
	if v < fd.min {
		return 0, c.errf(f.line, l, "%s must be %s, got %d", fd.name, fd.want(), v)
	}
	return v, nil
}

// maxPair bounds kernel sizes, strides, paddings, dilations and pooled
// sizes, so that the builder's arithmetic on them cannot overflow.
const maxPair = 1 << 20

// pair is an integer-or-pair field's value.
func (c *buildCtx) pair(l *layer, name string) ([2]int64, error) {
	fd := l.typ.field(name)
	f := l.fields[fd.name]
	if f == nil {
		return [2]int64{fd.def, fd.def}, nil
	}
	var p [2]int64
	for i := range p {
		v, err := c.value(l, f, min(i, len(f.vals)-1))
		if err != nil {
			return p, err
		}
		if v < fd.min {
			return p, c.errf(f.line, l, "%s must be %s, got %d", fd.name, fd.want(), v)
		}
		if v > maxPair {
			return p, c.errf(f.line, l, "%s %d is larger than %d", fd.name, v, int64(maxPair))
		}
		p[i] = v
	}
	return p, nil
}

// dim is a dimension field's value, resolved against x's rank; dimension
// 0, the batch, is refused.
func (c *buildCtx) dim(l *layer, name string, x graph.TensorID) (int, error) {
	fd := l.typ.field(name)
	f := l.fields[fd.name]
	if f == nil {
		f = &field{line: l.line, vals: []*expr{lit(fd.def)}}
	}
	return c.dimAt(l, f, 0, x)
}

func (c *buildCtx) dimAt(l *layer, f *field, i int, x graph.TensorID) (int, error) {
	v, err := c.value(l, f, i)
	if err != nil {
		return 0, err
	}
	rank := int64(len(c.b.Shape(x)))
	d := v
	if d < 0 {
		d += rank
	}
	if d < 0 || d >= rank {
		return 0, c.errf(f.line, l, "dimension %d out of range for an input of shape %v", v, c.b.Shape(x))
	}
	if d == 0 {
		return 0, c.errf(f.line, l, "dimension %d is the batch dimension", v)
	}
	return int(d), nil
}

func (c *buildCtx) bool(l *layer, name string) bool {
	fd := l.typ.field(name)
	if f := l.fields[fd.name]; f != nil {
		return f.b
	}
	return fd.defBool
}

func (c *buildCtx) float(l *layer, name string) float64 {
	fd := l.typ.field(name)
	if f := l.fields[fd.name]; f != nil {
		return f.f
	}
	return fd.defFloat
}

func (c *buildCtx) enum(l *layer, name string) string {
	fd := l.typ.field(name)
	if f := l.fields[fd.name]; f != nil {
		return f.s
	}
	return fd.defEnum
}

// line is where a field was written, or the layer's line when it was not.
func (c *buildCtx) line(l *layer, name string) int {
	if f := l.fields[l.typ.field(name).name]; f != nil {
		return f.line
	}
	return l.line
}

// checkIn checks an optional field that restates an inferred size (in,
// in_channels, num_features) against the input.
func (c *buildCtx) checkIn(l *layer, name string, actual int64, s graph.Shape) error {
	f := l.fields[name]
	if f == nil {
		return nil
	}
	v, err := c.int(l, name)
	if err != nil {
		return err
	}
	if v != actual {
		return c.errf(f.line, l, "%s is %d but the input %v has %d", name, v, s, actual)
	}
	return nil
}

// params counts a layer's parameter elements (the product of dims)
// against the limit before the builder creates them.
func (c *buildCtx) params(l *layer, dims ...int64) error {
	n := int64(1)
	for _, d := range dims {
		n = satMul(n, d)
	}
	if c.paramElems = satAdd(c.paramElems, n); n > c.lim.elems || c.paramElems > c.lim.elems {
		return c.errf(l.line, l, "more than %d parameters", c.lim.elems)
	}
	return nil
}

// numel is the number of elements of s, saturating above limit.
func numel(s graph.Shape, limit int64) int64 {
	n := int64(1)
	for _, d := range s {
		n = satMul(n, d)
		if n > limit {
			return limit + 1
		}
	}
	return n
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies non-negative numbers, saturating at MaxInt64.
func satMul(a, b int64) int64 {
	if a < 0 || b < 0 {
		return math.MaxInt64
	}
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}
