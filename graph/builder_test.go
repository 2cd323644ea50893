package graph

import (
	"strings"
	"testing"
)

// Output shapes follow PyTorch's formulas: conv (H+2p−d(k−1)−1)/s+1, pools
// with ceil_mode, broadcasting, and views versus copies.
func TestBuilderShapes(t *testing.T) {
	b := NewBuilder("t")
	x := b.Input("x", Shape{2, 3, 224, 224}, F32)
	c := b.Conv2d("conv", x, 64, Conv2dOpts{Kernel: [2]int64{7, 7}, Stride: [2]int64{2, 2}, Padding: [2]int64{3, 3}})
	if got := b.Shape(c).String(); got != "[2, 64, 112, 112]" {
		t.Errorf("resnet stem conv: %s", got)
	}
	p := b.MaxPool2d("pool", c, Pool2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}})
	if got := b.Shape(p).String(); got != "[2, 64, 56, 56]" {
		t.Errorf("resnet stem pool: %s", got)
	}
	q := b.MaxPool2d("ceil", b.Input("y", Shape{1, 1, 5, 5}, F32), Pool2dOpts{Kernel: [2]int64{2, 2}, CeilMode: true})
	if got := b.Shape(q).String(); got != "[1, 1, 3, 3]" {
		t.Errorf("ceil_mode pool of 5: %s", got)
	}
	f := b.Flatten("flat", p, 1)
	if b.g.Tensors[f].View == None {
		t.Error("flatten of a contiguous tensor must be a view")
	}
	tr := b.Transpose("t", f, 0, 1)
	r := b.Reshape("r", tr, -1)
	if b.g.Tensors[r].View != None {
		t.Error("reshape of a transposed tensor must copy")
	}
	if s, ok := Broadcast(Shape{2, 1, 4}, Shape{3, 1}); !ok || s.String() != "[2, 3, 4]" {
		t.Errorf("broadcast: %v %v", s, ok)
	}
	if _, err := b.Graph(); err == nil || !strings.Contains(err.Error(), "no loss") {
		t.Errorf("graph without loss: %v", err)
	}
}

func TestBuilderErrors(t *testing.T) {
	cases := []struct {
		build func(b *Builder)
		want  string
	}{
		{func(b *Builder) {
			b.Linear("fc", b.Input("x", Shape{2, 5}, F32), 3, true)
			b.LinearWith("fc2", b.Input("z", Shape{2, 4}, F32), 0, None)
		}, "linear"},
		{func(b *Builder) { b.Conv2d("c", b.Input("x", Shape{2, 5}, F32), 3, Conv2dOpts{Kernel: [2]int64{3, 3}}) }, "4-D"},
		{func(b *Builder) { b.Add("a", b.Input("x", Shape{2, 5}, F32), b.Input("y", Shape{3}, F32)) }, "broadcast"},
		{func(b *Builder) { b.Reshape("r", b.Input("x", Shape{2, 5}, F32), 3, 3) }, "cannot reshape"},
		{func(b *Builder) { b.Dropout("d", b.Input("x", Shape{2}, F32), 1.5, false) }, "dropout probability"},
	}
	for _, c := range cases {
		b := NewBuilder("t")
		c.build(b)
		if err := b.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error about %q, got %v", c.want, err)
		}
	}
}
