package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// viewStrides against at::detail::computeStride, worked by hand.
func TestViewStrides(t *testing.T) {
	for _, c := range []struct {
		name    string
		old     graph.Shape
		st      []int64
		nw      graph.Shape
		want    []int64
		viewble bool
	}{
		{"contiguous split", graph.Shape{4, 192, 16}, []int64{3072, 16, 1}, graph.Shape{4, 192, 4, 4}, []int64{3072, 16, 4, 1}, true},
		// a narrow's transpose [4, 192, 16] of a [4, 17, 192] gradient:
		// its last dim splits in place
		{"transposed split", graph.Shape{4, 192, 16}, []int64{3264, 1, 192}, graph.Shape{4, 192, 4, 4}, []int64{3264, 1, 768, 192}, true},
		// rows of a narrow merge: 192 = 192 · 1
		{"narrow merge", graph.Shape{4, 16, 192}, []int64{3264, 192, 1}, graph.Shape{4, 3072}, []int64{3264, 1}, true},
		// the batch dim of a narrow cannot merge: 3264 ≠ 16 · 192
		{"narrow flatten", graph.Shape{4, 16, 192}, []int64{3264, 192, 1}, graph.Shape{12288}, nil, false},
		{"transpose flatten", graph.Shape{2, 3}, []int64{1, 2}, graph.Shape{6}, nil, false},
	} {
		got, ok := viewStrides(c.old, c.st, c.nw)
		if ok != c.viewble || (ok && !slices.Equal(got, c.want)) {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, got, ok, c.want, c.viewble)
		}
	}
}

// The layout predicates, as c10 answers them.
func TestLayoutPredicates(t *testing.T) {
	for _, c := range []struct {
		name                    string
		s                       graph.Shape
		st                      []int64
		contig, dense, nhwcLike bool
	}{
		{"contiguous", graph.Shape{64, 768, 14, 14}, []int64{150528, 196, 14, 1}, true, true, false},
		// ViT-B/16's patch gradient: permute(0, 2, 1) back and reshaped
		{"patch gradient", graph.Shape{64, 768, 14, 14}, []int64{150528, 1, 10752, 768}, false, true, true},
		// the same through a narrow of the [64, 197, 768] gradient
		{"narrowed patch gradient", graph.Shape{64, 768, 14, 14}, []int64{151296, 1, 10752, 768}, false, false, true},
		{"size-1 dims", graph.Shape{4, 1, 8}, []int64{8, 99, 1}, true, true, false},
		{"narrow of channels", graph.Shape{4, 8, 2, 2}, []int64{64, 4, 2, 1}, false, false, false},
	} {
		if got := isContiguous(c.s, c.st); got != c.contig {
			t.Errorf("%s: contiguous %v, want %v", c.name, got, c.contig)
		}
		if got := isDense(c.s, c.st); got != c.dense {
			t.Errorf("%s: dense %v, want %v", c.name, got, c.dense)
		}
		if got := channelsLastStrides(c.s, c.st); got != c.nhwcLike {
			t.Errorf("%s: channels-last strides %v, want %v", c.name, got, c.nhwcLike)
		}
	}
}

// A patch embedding on the CPU (Slow2d, no oneDNN): a 4×4 convolution of
// 3 to 8 channels with stride 4 on an 8×8 image, batch 4, whose output
// [4, 8, 2, 2] (512 B) is flattened to [4, 8, 4]. Its backward (the input
// is the batch: no grad_input) makes grad_weight (8·3·4·4·4 = 1,536 B),
// grad_bias (32 B) and the columns (4·3·16·4·4 = 3,072 B); where the
// gradient that reaches it is strided, the weight half's
// grad_output_.contiguous() copies its 512 B first, alive beside the
// columns (slow_conv2d_backward_weight_out_cpu_template).
func TestConvStridedGradCopy(t *testing.T) {
	const gw, gb, cols, gcopy = 1536, 32, 3072, 512
	plain := []int64{gw, gb, cols, -cols}
	copied := []int64{gw, gb, gcopy, cols, -cols, -gcopy}
	for _, c := range []struct {
		name string
		head func(b *graph.Builder, f graph.TensorID) graph.TensorID // [4, 8, 4] → [4, 8]
		want []int64
	}{
		// mean over the flattened positions: a new, contiguous gradient
		// viewed back as the output's
		{"flatten", func(b *graph.Builder, f graph.TensorID) graph.TensorID { return b.Mean("mean", f, 2) }, plain},
		// transpose(1, 2): the gradient comes back transposed
		{"transpose", func(b *graph.Builder, f graph.TensorID) graph.TensorID {
			return b.Mean("mean", b.Transpose("tr", f, 1, 2), 1)
		}, copied},
		// and a class token cat along dim 1: a narrow of the cat's
		// gradient, then transposed (ViT's PatchEmbed and _pos_embed)
		{"transpose and cat", func(b *graph.Builder, f graph.TensorID) graph.TensorID {
			tok := b.Expand("expand", b.Param("cls", graph.Shape{1, 1, 8}), 4, 1, 8)
			return b.Mean("mean", b.Cat("cat", 1, tok, b.Transpose("tr", f, 1, 2)), 1)
		}, copied},
		// a cat along the batch: the narrow is whole rows, contiguous
		{"cat along the batch", func(b *graph.Builder, f graph.TensorID) graph.TensorID {
			both := b.Cat("cat", 0, f, b.Param("extra", graph.Shape{1, 8, 4}))
			return b.Mean("mean", b.Narrow("first", both, 0, 4), 2)
		}, plain},
	} {
		b := graph.NewBuilder("patch")
		x := b.Input("x", graph.Shape{4, 3, 8, 8}, graph.F32)
		y := b.Target("y", graph.Shape{4}, graph.I64)
		h := b.Conv2d("c", x, 8, graph.Conv2dOpts{Kernel: [2]int64{4, 4}, Stride: [2]int64{4, 4}, Dilation: [2]int64{1, 1}, Groups: 1, Bias: true})
		b.CrossEntropy("loss", b.Linear("head", c.head(b, b.Flatten("flatten", h, 2)), 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		size := map[int64]int64{}
		var got []int64
		for _, e := range tr.Events {
			if e.Action == trace.Alloc {
				size[e.ID] = e.Size
			}
			if e.Phase != trace.Backward || tr.SiteName(e.Site) != "c" || (e.Action != trace.Alloc && e.Action != trace.Free) {
				continue
			}
			d := size[e.ID]
			if e.Action == trace.Free {
				d = -d
			}
			got = append(got, d)
		}
		if len(got) < len(c.want) || !slices.Equal(got[:len(c.want)], c.want) {
			t.Errorf("%s: the convolution's backward %v, want %v first", c.name, got, c.want)
		}
	}
}
