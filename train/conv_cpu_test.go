package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// A 3×3 convolution of 32 to 64 channels on a 16×16 map with padding 1,
// on the CPU without oneDNN, worked out from the kernels (conv_cpu.go):
//
//	output            N·64·16·16·4 = N·65,536 B
//	columns, N images N·(32·9)·256·4 = N·294,912 B (Slow2d, forward and backward)
//	columns, 1 image  (32·9)·256·4   = 294,912 B (NNPACK's backward)
//	grad_weight       64·32·9·4      = 73,728 B
//	grad_bias         64·4           = 256 B
//
// Slow2d's forward makes the columns, then the output, and frees the
// columns; NNPACK's only the output. In backward (the input is the batch:
// no grad_input) Slow2d makes grad_weight and grad_bias and its columns
// again; NNPACK's backward, slow_conv_dilated2d's, makes grad_weight,
// grad_bias, one image's columns and, per image, a 256-byte bias sum
// (one at a time, alike: the simulation makes one). The
// figures are the conv's own events: allocations positive, frees negative.
func TestCPUConvNNPACK(t *testing.T) {
	const out, cols1, gw, gb = 65536, 294912, 73728, 256
	slow := func(n int64) ([]int64, []int64) {
		return []int64{n * cols1, n * out, -n * cols1}, []int64{gw, gb, n * cols1, -n * cols1}
	}
	nnp := func(n int64) ([]int64, []int64) {
		// the N bias sums are alike and one at a time: one is simulated
		return []int64{n * out}, []int64{gw, gb, cols1, gb, -gb, -cols1}
	}
	for _, c := range []struct {
		n      int64
		nnpack bool
		want   func(int64) ([]int64, []int64)
	}{
		{32, false, slow},
		{32, true, nnp},
		{16, true, nnp},  // use_nnpack: a batch of 16 or more
		{15, true, slow}, // below it, Slow2d
	} {
		b := graph.NewBuilder("conv")
		x := b.Input("x", graph.Shape{c.n, 32, 16, 16}, graph.F32)
		y := b.Target("y", graph.Shape{c.n}, graph.I64)
		h := b.Conv2d("c", x, 64, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{1, 1}, Padding: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 1, Bias: true})
		b.CrossEntropy("loss", b.Linear("head", b.Flatten("flatten", h, 1), 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, NNPACK: c.nnpack, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[trace.Phase][]int64{}
		size := map[int64]int64{}
		for _, e := range tr.Events {
			if e.Action == trace.Alloc {
				size[e.ID] = e.Size
			}
			if tr.SiteName(e.Site) != "c" || (e.Action != trace.Alloc && e.Action != trace.Free) {
				continue
			}
			d := size[e.ID]
			if e.Action == trace.Free {
				d = -d
			}
			got[e.Phase] = append(got[e.Phase], d)
		}
		fwd, bwd := c.want(c.n)
		// the output is freed later, by its last reader's node: forward
		// lists only what the convolution itself allocates and frees
		if !slices.Equal(got[trace.Forward], fwd) || len(got[trace.Backward]) < len(bwd) || !slices.Equal(got[trace.Backward][:len(bwd)], bwd) {
			t.Errorf("batch %d, NNPACK %v: forward %v, backward %v; want %v, %v", c.n, c.nnpack, got[trace.Forward], got[trace.Backward], fwd, bwd)
		}
	}
}

// A convolution on a channels-last input copies its weight to
// channels-last (view_weight_2d's weight_.contiguous(ChannelsLast)) unless
// the contiguous weight already is channels-last contiguous, which
// c10's check decides on the dims above size 1 alone: the order C, W, H,
// N of those must be the order of their strides.
func TestChannelsLastWeightCopy(t *testing.T) {
	for _, c := range []struct {
		w    graph.Shape
		cl   bool
		want bool
	}{
		{graph.Shape{320, 80, 1, 1}, true, false}, // strides (80, 1, 1, 1): C's is 1
		{graph.Shape{320, 80, 3, 3}, true, true},  // C's stride 9, W's 1
		{graph.Shape{64, 1, 3, 3}, true, false},   // C of size 1: W 1, H 3, N 9
		{graph.Shape{64, 3, 1, 7}, true, true},    // C's stride 7
		{graph.Shape{320, 80, 3, 3}, false, false},
	} {
		if got := clWeightCopy(graph.Attr{ChannelsLast: c.cl}, c.w); got != c.want {
			t.Errorf("weight %v, channels-last input %v: copy %v, want %v", c.w, c.cl, got, c.want)
		}
	}
}
