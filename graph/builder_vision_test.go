package graph

import (
	"strings"
	"testing"
)

func TestBuilderVisionOps(t *testing.T) {
	b := NewBuilder("t")
	x := b.Input("x", Shape{2, 3, 8, 8}, F32)
	c := b.Conv2d("conv", x, 4, Conv2dOpts{Kernel: [2]int64{1, 1}})

	// stochastic depth: p == 0 is x itself; otherwise noise [N, 1, 1, 1]
	// (no grad) and a mul.
	if got := b.StochasticDepth("sd0", c, 0); got != c {
		t.Error("stochastic depth with p = 0 is not its input")
	}
	sd := b.StochasticDepth("sd", c, 0.2)
	mul := b.g.Ops[len(b.g.Ops)-1]
	noise := b.g.Ops[len(b.g.Ops)-2]
	if mul.Kind != Mul || noise.Kind != Rand || mul.Output != sd || mul.Inputs[1] != noise.Output {
		t.Fatalf("stochastic depth ops: %s %s", noise.Kind, mul.Kind)
	}
	if n := b.g.Tensors[noise.Output]; n.Shape.String() != "[2, 1, 1, 1]" || n.RequiresGrad || n.DType != F32 {
		t.Errorf("noise %v requires_grad=%v %s", n.Shape, n.RequiresGrad, n.DType)
	}
	if !b.g.Tensors[sd].RequiresGrad {
		t.Error("stochastic depth output does not require grad")
	}

	// pad always makes a new tensor; roll too; slices are views.
	nhwc := b.Permute("nhwc", c, 0, 2, 3, 1) // [2, 8, 8, 4]
	p := b.Pad("pad", nhwc, 0, 0, 0, 1, 0, 3)
	if s := b.Shape(p).String(); s != "[2, 11, 9, 4]" || b.g.Tensors[p].View != None {
		t.Errorf("pad: %s view=%d", s, b.g.Tensors[p].View)
	}
	r := b.Roll("roll", p, []int64{-3, -3}, []int{1, 2})
	if op := b.g.Ops[len(b.g.Ops)-1]; op.Kind != Roll || op.Attr.Count != 2 || b.g.Tensors[r].View != None {
		t.Errorf("roll op %s count %d", op.Kind, op.Attr.Count)
	}
	s0 := b.Slice("s0", r, 1, 1, 100, 2)
	if s := b.Shape(s0).String(); s != "[2, 5, 9, 4]" || b.g.Storage(s0) != r || b.contig[s0] {
		t.Errorf("strided slice: %s, storage %d, contiguous %v", s, b.g.Storage(s0), b.contig[s0])
	}
	if full := b.Slice("all", r, 0, 0, 1<<62, 1); !b.contig[full] || b.Shape(full).String() != "[2, 11, 9, 4]" {
		t.Error("a whole-dim slice of a contiguous tensor is not contiguous")
	}
	if lead := b.Slice("lead", r, 0, 1, 2, 1); !b.contig[lead] {
		t.Error("a slice of the leading dim is not contiguous")
	}

	// comparisons and masked_fill
	m := b.Full("mask", c, 4, 4)
	if b.g.Tensors[m].RequiresGrad || b.DTypeOf(m) != F32 {
		t.Error("full: requires grad or wrong dtype")
	}
	ne := b.Compare("ne", m, None)
	if b.DTypeOf(ne) != Bool || b.g.Tensors[ne].RequiresGrad {
		t.Errorf("compare dtype %s", b.DTypeOf(ne))
	}
	f := b.MaskedFill("fill", m, ne)
	if b.Shape(f).String() != "[4, 4]" || b.DTypeOf(f) != F32 {
		t.Errorf("masked_fill %v %s", b.Shape(f), b.DTypeOf(f))
	}

	// advanced indexing of a parameter table by an int64 buffer
	table := b.Param("table", Shape{169, 3})
	idx := b.Buffer("index", Shape{2401}, I64)
	g := b.Index("gather", table, idx)
	if s := b.Shape(g).String(); s != "[2401, 3]" || !b.g.Tensors[g].RequiresGrad {
		t.Errorf("index: %s", s)
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
}

// ConvNeXt's layouts: permute(0, 3, 1, 2) of a contiguous NHWC tensor is
// channels-last; a conv keeps it; permute(0, 2, 3, 1) of it is contiguous,
// so that layer_norm makes no copy, while the stem's (of a contiguous
// NCHW tensor) does.
func TestBuilderChannelsLast(t *testing.T) {
	b := NewBuilder("t")
	x := b.Input("x", Shape{2, 3, 16, 16}, F32)
	c := b.Conv2d("stem", x, 8, Conv2dOpts{Kernel: [2]int64{4, 4}, Stride: [2]int64{4, 4}})
	h := b.Permute("p", c, 0, 2, 3, 1)
	h = b.LayerNorm("ln", h, 1, true)
	if !b.g.Ops[len(b.g.Ops)-1].Attr.InputCopy {
		t.Error("layer_norm of a permuted NCHW tensor does not copy")
	}
	h = b.Permute("back", h, 0, 3, 1, 2)
	if b.contig[h] || !b.cl[h] {
		t.Fatal("permute(0, 3, 1, 2) of a contiguous tensor is not channels-last")
	}
	d := b.Conv2d("dw", h, 8, Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}, Groups: 8})
	if !b.cl[d] || b.contig[d] {
		t.Error("conv of a channels-last input is not channels-last")
	}
	s := b.Param("scale", Shape{8, 1, 1})
	m := b.Mul("mul", s, d)
	if !b.cl[m] {
		t.Error("mul with a channels-last operand is not channels-last")
	}
	q := b.Permute("q", m, 0, 2, 3, 1)
	if !b.contig[q] {
		t.Error("permute(0, 2, 3, 1) of a channels-last tensor is not contiguous")
	}
	b.LayerNorm("ln2", q, 1, true)
	if b.g.Ops[len(b.g.Ops)-1].Attr.InputCopy {
		t.Error("layer_norm of a contiguous input copies it")
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
}

// A transposed convolution's output is (in − 1)·stride − 2·padding +
// dilation·(k − 1) + output_padding + 1 (nn.ConvTranspose2d's docs):
// 4 → 8 for kernel 2, stride 2; 5 → 10 for kernel 3, stride 2, padding 1,
// output_padding 1. Instance norm keeps its input's shape; a sum over
// several dims keeps them as ones.
func TestBuilderSegmentationOps(t *testing.T) {
	b := NewBuilder("t")
	x := b.Input("x", Shape{2, 8, 4, 5}, F32)
	up := b.ConvTranspose2dWith("up", x, b.Param("w", Shape{8, 3, 2, 2}), b.Param("b", Shape{3}), Conv2dOpts{Stride: [2]int64{2, 2}}, [2]int64{})
	if s := b.Shape(up).String(); s != "[2, 3, 8, 10]" {
		t.Errorf("conv_transpose2d k2 s2: %s", s)
	}
	up2 := b.ConvTranspose2dWith("up2", x, b.Param("w2", Shape{8, 2, 3, 3}), None, Conv2dOpts{Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}}, [2]int64{1, 1})
	if s := b.Shape(up2).String(); s != "[2, 2, 8, 10]" {
		t.Errorf("conv_transpose2d k3 s2 p1 op1: %s", s)
	}
	in := b.InstanceNormWith("in", up, b.Param("g", Shape{3}), b.Param("beta", Shape{3}))
	if s := b.Shape(in).String(); s != "[2, 3, 8, 10]" || !b.g.Tensors[in].RequiresGrad {
		t.Errorf("instance_norm: %s", s)
	}
	act := b.Act(LeakyReLU, "act", in, true)
	if b.g.Tensors[act].View != in {
		t.Error("an in-place leaky_relu_ is not a view of its input")
	}
	sum := b.SumDims("sum", act, []int{0, 2, 3})
	if s := b.Shape(sum).String(); s != "[1, 3, 1, 1]" {
		t.Errorf("sum over 0, 2, 3: %s", s)
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestBuilderVisionErrors(t *testing.T) {
	cases := []struct {
		build func(b *Builder)
		want  string
	}{
		{func(b *Builder) { b.StochasticDepth("sd", b.Input("x", Shape{2, 5}, F32), 1.5) }, "stochastic depth probability"},
		{func(b *Builder) { b.Pad("p", b.Input("x", Shape{2, 5}, F32), 0, -6) }, "negative size"},
		{func(b *Builder) { b.Pad("p", b.Input("x", Shape{2, 5}, F32), 1) }, "pad"},
		{func(b *Builder) { b.Roll("r", b.Input("x", Shape{2, 5}, F32), []int64{1}, []int{3}) }, "roll"},
		{func(b *Builder) { b.Slice("s", b.Input("x", Shape{2, 5}, F32), 1, 0, 2, 0) }, "slice"},
		{func(b *Builder) { b.Index("i", b.Param("t", Shape{4, 2}), b.Input("x", Shape{3}, F32)) }, "integer"},
		{func(b *Builder) {
			x := b.Input("x", Shape{2, 5}, F32)
			b.MaskedFill("m", x, x)
		}, "bool"},
		{func(b *Builder) {
			b.ConvTranspose2dWith("up", b.Input("x", Shape{2, 8, 4, 4}, F32), b.Param("w", Shape{6, 4, 2, 2}), None, Conv2dOpts{Stride: [2]int64{2, 2}}, [2]int64{})
		}, "channels do not match"},
		{func(b *Builder) {
			b.ConvTranspose2dWith("up", b.Input("x", Shape{2, 8, 4}, F32), b.Param("w", Shape{8, 4, 2, 2}), None, Conv2dOpts{}, [2]int64{})
		}, "4-D"},
		{func(b *Builder) {
			b.ConvTranspose2dWith("up", b.Input("x", Shape{2, 8, 1, 1}, F32), b.Param("w", Shape{8, 4, 1, 1}), None, Conv2dOpts{Padding: [2]int64{1, 1}}, [2]int64{})
		}, "no output"},
		{func(b *Builder) {
			b.InstanceNormWith("in", b.Input("x", Shape{2, 8, 4, 4}, F32), b.Param("w", Shape{4}), None)
		}, "affine parameters"},
		{func(b *Builder) { b.InstanceNormWith("in", b.Input("x", Shape{2, 8}, F32), None, None) }, "(N, C, ...)"},
		{func(b *Builder) { b.SumDims("s", b.Input("x", Shape{2, 8}, F32), []int{0, 2}) }, "sum_dim over dim 2"},
		{func(b *Builder) { b.SumDims("s", b.Input("x", Shape{2, 8}, F32), nil) }, "no dims"},
	}
	for _, c := range cases {
		b := NewBuilder("t")
		c.build(b)
		if err := b.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error about %q, got %v", c.want, err)
		}
	}
}
