package spec

import (
	"fmt"
	"math"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

type fieldKind uint8

const (
	kInt     fieldKind = iota
	kPair              // an integer or [h, w]
	kPadding           // kPair, or same / valid
	kDims              // a dimension or a list of them
	kBool
	kFloat
	kEnum
	kLayers
	kName
)

const noMin = math.MinInt64

// fieldDef describes one field of a layer type.
type fieldDef struct {
	name     string
	aliases  []string // PyTorch's argument names
	kind     fieldKind
	required bool
	min      int64 // smallest allowed integer (noMin for any)
	def      int64
	defBool  bool
	fmin     float64
	fmax     float64
	defFloat float64
	enum     []string
	defEnum  string
}

// want says what values the field takes, for error messages.
func (fd *fieldDef) want() string {
	var one string
	switch fd.min {
	case 1:
		one = "a positive integer"
	case 0:
		one = "a non-negative integer"
	default:
		one = "an integer"
	}
	switch fd.kind {
	case kPair:
		return one + " or a pair [h, w]"
	case kPadding:
		return one + ", a pair [h, w], same or valid"
	case kDims:
		return "a dimension or a list of dimensions"
	case kFloat:
		return fmt.Sprintf("a number from %g to %g", fd.fmin, fd.fmax)
	case kBool:
		return "true or false"
	case kEnum:
		return "one of " + strings.Join(fd.enum, ", ")
	case kLayers:
		return "a list of layers"
	}
	return one
}

func intField(name string, min, def int64, aliases ...string) fieldDef {
	return fieldDef{name: name, kind: kInt, min: min, def: def, aliases: aliases}
}

func pairField(name string, min, def int64, aliases ...string) fieldDef {
	return fieldDef{name: name, kind: kPair, min: min, def: def, aliases: aliases}
}

func boolField(name string, def bool, aliases ...string) fieldDef {
	return fieldDef{name: name, kind: kBool, defBool: def, aliases: aliases}
}

func required(fd fieldDef) fieldDef {
	fd.required = true
	return fd
}

var nameField = fieldDef{name: "name", kind: kName}

type buildFunc func(c *buildCtx, l *layer, name string, x graph.TensorID, depth int) (graph.TensorID, error)

// layerType is one kind of layer the spec format knows.
type layerType struct {
	name    string   // as documented
	aliases []string // other spellings (PyTorch class names differ only in case)
	main    string   // the field a bare value sets: linear: 10 is linear: {out: 10}
	fields  []fieldDef
	usage   string // an example, for error messages
	ops     int64  // most ops one instance adds (residual and repeat: computed)
	build   buildFunc
}

func (t *layerType) field(key string) *fieldDef {
	k := normalize(key)
	if k == "name" {
		return &nameField
	}
	for i := range t.fields {
		fd := &t.fields[i]
		if normalize(fd.name) == k {
			return fd
		}
		for _, a := range fd.aliases {
			if normalize(a) == k {
				return fd
			}
		}
	}
	return nil
}

func (t *layerType) fieldNames() []string {
	var ns []string
	for _, fd := range t.fields {
		ns = append(ns, fd.name)
	}
	for _, fd := range t.fields {
		ns = append(ns, fd.aliases...)
	}
	return append(ns, "name")
}

func activation(name string, k graph.Kind, aliases ...string) *layerType {
	t := &layerType{
		name: name, aliases: aliases, ops: 1,
		fields: []fieldDef{boolField("inplace", false)},
		usage:  name + " or " + name + ": {inplace: true}",
		build: func(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
			kind := k
			if k == graph.GELU && c.enum(l, "approximate") == "tanh" {
				kind = graph.GELUTanh
			}
			return c.b.Act(kind, name, x, c.bool(l, "inplace")), nil
		},
	}
	if k == graph.GELU {
		t.fields = append(t.fields, fieldDef{name: "approximate", kind: kEnum, enum: []string{"none", "tanh"}, defEnum: "none"})
	}
	return t
}

var layerTypes = []*layerType{
	{
		name: "linear", main: "out", ops: 1, build: buildLinear,
		usage: "linear: {out: 10} or linear: 10; in_features is inferred",
		fields: []fieldDef{
			required(intField("out", 1, 0, "out_features")),
			boolField("bias", true),
			intField("in", 1, 0, "in_features"),
		},
	},
	{
		name: "conv2d", aliases: []string{"conv"}, main: "out", ops: 1, build: buildConv2d,
		usage: "conv2d: {out: 64, kernel: 3, padding: 1}",
		fields: []fieldDef{
			required(intField("out", 1, 0, "out_channels")),
			required(pairField("kernel", 1, 0, "kernel_size")),
			pairField("stride", 1, 1),
			{name: "padding", kind: kPadding, min: 0},
			pairField("dilation", 1, 1),
			intField("groups", 1, 1),
			boolField("bias", true),
			intField("in", 1, 0, "in_channels"),
		},
	},
	{
		name: "batchnorm2d", aliases: []string{"batchnorm"}, ops: 1, build: buildBatchNorm(4, 4),
		usage:  "batchnorm2d",
		fields: []fieldDef{intField("features", 1, 0, "num_features")},
	},
	{
		name: "batchnorm1d", ops: 1, build: buildBatchNorm(2, 3),
		usage:  "batchnorm1d",
		fields: []fieldDef{intField("features", 1, 0, "num_features")},
	},
	{
		name: "layernorm", ops: 1, build: buildLayerNorm,
		usage:  "layernorm or layernorm: {dims: 1, bias: true}",
		fields: []fieldDef{intField("dims", 1, 1), boolField("bias", true)},
	},
	{
		name: "rmsnorm", ops: 1, build: buildRMSNorm,
		usage: "rmsnorm",
	},
	activation("relu", graph.ReLU),
	activation("gelu", graph.GELU),
	activation("silu", graph.SiLU, "swish"),
	activation("sigmoid", graph.Sigmoid),
	activation("tanh", graph.Tanh),
	activation("hardswish", graph.Hardswish),
	activation("hardsigmoid", graph.Hardsigmoid),
	{
		name: "softmax", main: "dim", ops: 1, build: buildSoftmax(false),
		usage:  "softmax or softmax: {dim: -1}",
		fields: []fieldDef{intField("dim", noMin, -1)},
	},
	{
		name: "logsoftmax", main: "dim", ops: 1, build: buildSoftmax(true),
		usage:  "logsoftmax or logsoftmax: {dim: -1}",
		fields: []fieldDef{intField("dim", noMin, -1)},
	},
	{
		name: "dropout", main: "p", ops: 1, build: buildDropout,
		usage: "dropout: 0.1 or dropout: {p: 0.1, inplace: false}",
		fields: []fieldDef{
			{name: "p", kind: kFloat, fmin: 0, fmax: 1, defFloat: 0.5},
			boolField("inplace", false),
		},
	},
	{
		name: "maxpool2d", aliases: []string{"maxpool"}, main: "kernel", ops: 1, build: buildPool(graph.MaxPool2d),
		usage: "maxpool2d: 2 or maxpool2d: {kernel: 3, stride: 2, padding: 1}",
		fields: []fieldDef{
			required(pairField("kernel", 1, 0, "kernel_size")),
			pairField("stride", 1, 0),
			pairField("padding", 0, 0),
			pairField("dilation", 1, 1),
			boolField("ceil_mode", false),
		},
	},
	{
		name: "avgpool2d", aliases: []string{"avgpool"}, main: "kernel", ops: 1, build: buildPool(graph.AvgPool2d),
		usage: "avgpool2d: 2 or avgpool2d: {kernel: 3, stride: 2, padding: 1}",
		fields: []fieldDef{
			required(pairField("kernel", 1, 0, "kernel_size")),
			pairField("stride", 1, 0),
			pairField("padding", 0, 0),
			boolField("ceil_mode", false),
		},
	},
	{
		name: "adaptiveavgpool2d", main: "size", ops: 1, build: buildAdaptive,
		usage:  "adaptiveavgpool2d: 1 or adaptiveavgpool2d: {size: [7, 7]}",
		fields: []fieldDef{required(pairField("size", 1, 0, "output_size"))},
	},
	{
		name: "flatten", main: "start", ops: 1, build: buildFlatten,
		usage:  "flatten or flatten: {start: 1}",
		fields: []fieldDef{intField("start", noMin, 1, "start_dim")},
	},
	{
		name: "mean", main: "dim", ops: 1, build: buildMean,
		usage:  "mean: 1 or mean: {dim: [2, 3]}",
		fields: []fieldDef{required(fieldDef{name: "dim", kind: kDims, min: noMin})},
	},
	{
		name: "embedding", ops: 1, build: buildEmbedding,
		usage: "embedding: {num: 50257, dim: 768}",
		fields: []fieldDef{
			required(intField("num", 1, 0, "num_embeddings")),
			required(intField("dim", 1, 0, "embedding_dim")),
		},
	},
	{
		name: "position_embedding", aliases: []string{"posembedding", "positionalembedding"}, main: "num", ops: 3, build: buildPosEmbedding,
		usage:  "position_embedding: {num: 1024} (learned positions added to [batch, seq, dim])",
		fields: []fieldDef{required(intField("num", 1, 0, "num_positions", "max_positions"))},
	},
	{
		name: "attention", aliases: []string{"selfattention", "multiheadattention"}, main: "heads", ops: 10, build: buildAttention,
		usage: "attention: {heads: 8, causal: true}",
		fields: []fieldDef{
			required(intField("heads", 1, 0, "num_heads")),
			boolField("causal", false),
			boolField("bias", true),
			{name: "dropout", kind: kFloat, fmin: 0, fmax: 1},
		},
	},
	{
		name: "residual", main: "layers", build: buildResidual,
		usage:  "residual: [layernorm, {linear: 512}] (y = x + f(x))",
		fields: []fieldDef{required(fieldDef{name: "layers", kind: kLayers})},
	},
	{
		name: "repeat", main: "count", build: buildRepeat,
		usage: "repeat: 4 with block: [layers...]",
		fields: []fieldDef{
			required(intField("count", 0, 0)),
			required(fieldDef{name: "block", kind: kLayers}),
		},
	},
}

func lookupType(name string) *layerType {
	n := normalize(name)
	for _, t := range layerTypes {
		if normalize(t.name) == n {
			return t
		}
		for _, a := range t.aliases {
			if normalize(a) == n {
				return t
			}
		}
	}
	return nil
}

func typeNames() []string {
	ns := make([]string, len(layerTypes))
	for i, t := range layerTypes {
		ns[i] = t.name
	}
	return ns
}

func buildLinear(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) < 2 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, ..., features], got %v", s)
	}
	out, err := c.int(l, "out")
	if err != nil {
		return graph.None, err
	}
	if err := c.checkIn(l, "in", s[len(s)-1], s); err != nil {
		return graph.None, err
	}
	bias := c.bool(l, "bias")
	if err := c.params(l, out, s[len(s)-1]); err != nil {
		return graph.None, err
	}
	if bias {
		if err := c.params(l, out); err != nil {
			return graph.None, err
		}
	}
	return c.b.Linear(name, x, out, bias), nil
}

func buildConv2d(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) != 4 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, channels, height, width], got %v", s)
	}
	var o graph.Conv2dOpts
	out, err := c.int(l, "out")
	if err != nil {
		return graph.None, err
	}
	if o.Kernel, err = c.pair(l, "kernel"); err != nil {
		return graph.None, err
	}
	if o.Stride, err = c.pair(l, "stride"); err != nil {
		return graph.None, err
	}
	if o.Dilation, err = c.pair(l, "dilation"); err != nil {
		return graph.None, err
	}
	if o.Groups, err = c.int(l, "groups"); err != nil {
		return graph.None, err
	}
	if f := l.fields["padding"]; f != nil && f.s != "" {
		if f.s == "same" {
			for i := 0; i < 2; i++ {
				eff := o.Dilation[i]*(o.Kernel[i]-1) + 1
				if o.Stride[i] != 1 || eff%2 == 0 {
					return graph.None, c.errf(f.line, l, "padding same needs stride 1 and an odd kernel (batchfit models symmetric padding only), got kernel %v stride %v dilation %v", o.Kernel, o.Stride, o.Dilation)
				}
				o.Padding[i] = (eff - 1) / 2
			}
		}
	} else if o.Padding, err = c.pair(l, "padding"); err != nil {
		return graph.None, err
	}
	if err := c.checkIn(l, "in", s[1], s); err != nil {
		return graph.None, err
	}
	if s[1]%o.Groups != 0 || out%o.Groups != 0 {
		return graph.None, c.errf(c.line(l, "groups"), l, "groups %d must divide both the input channels %d and out %d", o.Groups, s[1], out)
	}
	o.Bias = c.bool(l, "bias")
	if err := c.params(l, out, s[1]/o.Groups, o.Kernel[0], o.Kernel[1]); err != nil {
		return graph.None, err
	}
	return c.b.Conv2d(name, x, out, o), nil
}

func buildBatchNorm(minRank, maxRank int) buildFunc {
	return func(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
		s := c.b.Shape(x)
		if len(s) < minRank || len(s) > maxRank {
			want := "[batch, channels, height, width]"
			if maxRank == 3 {
				want = "[batch, channels] or [batch, channels, length]"
			}
			return graph.None, c.errf(l.line, l, "needs an input of shape %s, got %v", want, s)
		}
		if err := c.checkIn(l, "features", s[1], s); err != nil {
			return graph.None, err
		}
		if err := c.params(l, 2, s[1]); err != nil {
			return graph.None, err
		}
		return c.b.BatchNorm2d(name, x), nil
	}
}

func buildLayerNorm(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	dims, err := c.int(l, "dims")
	if err != nil {
		return graph.None, err
	}
	if dims > int64(len(s)-1) {
		return graph.None, c.errf(c.line(l, "dims"), l, "cannot normalize over the last %d dimensions of %v (the batch dimension is not normalized)", dims, s)
	}
	if err := c.params(l, 2, graph.Shape(s[len(s)-int(dims):]).Numel()); err != nil {
		return graph.None, err
	}
	return c.b.LayerNorm(name, x, int(dims), c.bool(l, "bias")), nil
}

func buildRMSNorm(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) < 2 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, ..., features], got %v", s)
	}
	if err := c.params(l, s[len(s)-1]); err != nil {
		return graph.None, err
	}
	return c.b.RMSNorm(name, x), nil
}

func buildSoftmax(log bool) buildFunc {
	return func(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
		d, err := c.dim(l, "dim", x)
		if err != nil {
			return graph.None, err
		}
		return c.b.Softmax(name, x, d, log), nil
	}
}

func buildDropout(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	return c.b.Dropout(name, x, c.float(l, "p"), c.bool(l, "inplace")), nil
}

func buildPool(k graph.Kind) buildFunc {
	return func(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
		s := c.b.Shape(x)
		if len(s) != 4 {
			return graph.None, c.errf(l.line, l, "needs an input of shape [batch, channels, height, width], got %v", s)
		}
		var o graph.Pool2dOpts
		var err error
		if o.Kernel, err = c.pair(l, "kernel"); err != nil {
			return graph.None, err
		}
		if l.fields["stride"] != nil {
			if o.Stride, err = c.pair(l, "stride"); err != nil {
				return graph.None, err
			}
		}
		if o.Padding, err = c.pair(l, "padding"); err != nil {
			return graph.None, err
		}
		o.Dilation = [2]int64{1, 1}
		if k == graph.MaxPool2d {
			if o.Dilation, err = c.pair(l, "dilation"); err != nil {
				return graph.None, err
			}
		}
		for i := 0; i < 2; i++ {
			// PyTorch: "pad should be at most half of effective kernel size".
			if eff := o.Dilation[i]*(o.Kernel[i]-1) + 1; o.Padding[i] > eff/2 {
				return graph.None, c.errf(c.line(l, "padding"), l, "padding %v must be at most half the kernel %v", o.Padding, o.Kernel)
			}
		}
		o.CeilMode = c.bool(l, "ceil_mode")
		if k == graph.MaxPool2d {
			return c.b.MaxPool2d(name, x, o), nil
		}
		return c.b.AvgPool2d(name, x, o), nil
	}
}

func buildAdaptive(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) != 4 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, channels, height, width], got %v", s)
	}
	size, err := c.pair(l, "size")
	if err != nil {
		return graph.None, err
	}
	return c.b.AdaptiveAvgPool2d(name, x, size[0], size[1]), nil
}

func buildFlatten(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	d, err := c.dim(l, "start", x)
	if err != nil {
		return graph.None, err
	}
	return c.b.Flatten(name, x, d), nil
}

func buildMean(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	f := l.fields["dim"]
	var dims []int
	for i := range f.vals {
		d, err := c.dimAt(l, f, i, x)
		if err != nil {
			return graph.None, err
		}
		for _, e := range dims {
			if e == d {
				return graph.None, c.errf(f.line, l, "dimension %d listed twice", d)
			}
		}
		dims = append(dims, d)
	}
	return c.b.Mean(name, x, dims...), nil
}

func buildEmbedding(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	if dt := c.b.DTypeOf(x); dt.IsFloat() {
		return graph.None, c.errf(l.line, l, "needs integer token ids, but its input is %s (set input: {dtype: int64})", dt)
	}
	num, err := c.int(l, "num")
	if err != nil {
		return graph.None, err
	}
	dim, err := c.int(l, "dim")
	if err != nil {
		return graph.None, err
	}
	if err := c.params(l, num, dim); err != nil {
		return graph.None, err
	}
	return c.b.Embedding(name, x, num, dim), nil
}

// buildPosEmbedding adds learned position embeddings to x [B, L, E]:
// x + wpe(position_ids[:L]), with the ids a registered buffer as in BERT.
func buildPosEmbedding(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) != 3 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, seq, dim], got %v", s)
	}
	num, err := c.int(l, "num")
	if err != nil {
		return graph.None, err
	}
	if s[1] > num {
		return graph.None, c.errf(c.line(l, "num"), l, "sequence length %d is longer than num %d positions", s[1], num)
	}
	if c.positions == 0 || num < c.positions {
		c.positions = num
	}
	if err := c.params(l, num, s[2]); err != nil {
		return graph.None, err
	}
	var y graph.TensorID
	c.b.Scope(name, func() {
		w := c.b.Param("weight", graph.Shape{num, s[2]})
		ids := c.b.Buffer("position_ids", graph.Shape{num}, graph.I64)
		pos := c.b.Narrow("positions", ids, 0, s[1])
		pe := c.b.EmbeddingWith("", pos, w)
		y = c.b.Add("add", x, pe)
	})
	return y, nil
}

// buildAttention is multi-head self-attention on x [B, L, E] written the
// way timm and nanoGPT write it: one qkv projection, a view to heads, the
// attention kernel, heads merged back (a copy), an output projection.
func buildAttention(c *buildCtx, l *layer, name string, x graph.TensorID, _ int) (graph.TensorID, error) {
	s := c.b.Shape(x)
	if len(s) != 3 {
		return graph.None, c.errf(l.line, l, "needs an input of shape [batch, seq, dim], got %v", s)
	}
	heads, err := c.int(l, "heads")
	if err != nil {
		return graph.None, err
	}
	bsz, seq, dim := s[0], s[1], s[2]
	if dim%heads != 0 {
		return graph.None, c.errf(c.line(l, "heads"), l, "heads %d does not divide the model dimension %d", heads, dim)
	}
	bias := c.bool(l, "bias")
	if err := c.params(l, 4, dim, dim); err != nil {
		return graph.None, err
	}
	if bias {
		if err := c.params(l, 4, dim); err != nil {
			return graph.None, err
		}
	}
	var y graph.TensorID
	c.b.Scope(name, func() {
		b := c.b
		qkv := b.Linear("qkv", x, 3*dim, bias)
		qkv = b.Reshape("split_heads", qkv, bsz, seq, 3, heads, dim/heads)
		qkv = b.Permute("permute", qkv, 2, 0, 3, 1, 4)
		q := b.Select("q", qkv, 0)
		k := b.Select("k", qkv, 0)
		v := b.Select("v", qkv, 0)
		o := b.Attention("sdpa", q, k, v, c.bool(l, "causal"), c.float(l, "dropout"))
		o = b.Transpose("transpose", o, 1, 2)
		o = b.Reshape("merge_heads", o, bsz, seq, dim)
		y = b.Linear("proj", o, dim, bias)
	})
	return y, nil
}

func buildResidual(c *buildCtx, l *layer, name string, x graph.TensorID, depth int) (graph.TensorID, error) {
	before := c.b.Shape(x).Clone()
	var fx graph.TensorID
	var err error
	c.b.Scope(name, func() { fx, err = c.list(l.fields["layers"].layers, x, depth+1) })
	if err != nil {
		return graph.None, err
	}
	if after := c.b.Shape(fx); !equalShape(before, after) {
		return graph.None, c.errf(l.line, l, "the inner layers change the shape from %v to %v; y = x + f(x) needs f to keep it", before, after)
	}
	return c.b.Add(name, x, fx), nil
}

func buildRepeat(c *buildCtx, l *layer, name string, x graph.TensorID, depth int) (graph.TensorID, error) {
	n, err := c.int(l, "count")
	if err != nil {
		return graph.None, err
	}
	block := l.fields["block"].layers
	c.b.Scope(name, func() {
		for i := int64(0); i < n && err == nil; i++ {
			body := func() { x, err = c.list(block, x, depth+1) }
			if c.inBlock {
				c.b.Scope(fmt.Sprint(i), body)
				continue
			}
			c.inBlock = true
			c.b.Block(fmt.Sprint(i), body)
			c.inBlock = false
		}
	})
	return x, err
}

func equalShape(a, b graph.Shape) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
