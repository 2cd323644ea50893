package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// A batch norm of 4 channels on the CPU, after a 1×1 convolution so that
// its input needs a gradient, worked out from the kernels (bn_cpu.go), for
// a batch of 2 in float32:
//
//	output, grad_input  2·4·H·W·4 B: 288 at 3×3, 32 at 1×1
//	one statistic [C]   4·4 = 16 B (save_mean, save_invstd, _mean,
//	                    _var_sum, alpha, beta, grad_weight, grad_bias)
//	NC11 buffers        {1 thread, C} = 16 B forward, {2, 1, C} = 32 B backward
//
// 2.5 makes the output, the two kept statistics, _mean and _var_sum (and
// at 1×1 the zeros buffer), frees those, then alpha and beta, freed at the
// end; 1.13 makes the statistics first and the output after them. The
// backward (both releases) makes grad_input, grad_weight, grad_bias, the
// second grad_input, frees the first, and at 1×1 zeros a 32-byte buffer.
// The figures are the batch norm's own events, allocations positive,
// frees negative, up to its first free after the ones listed.
func TestCPUBatchNorm(t *testing.T) {
	for _, c := range []struct {
		release string
		hw      int64
		fwd     []int64
		bwd     []int64
	}{
		{"2.5", 3, []int64{288, 16, 16, 16, 16, -16, -16, 16, 16, -16, -16}, []int64{288, 16, 16, 288, -288}},
		{"2.5", 1, []int64{32, 16, 16, 16, 16, 16, -16, -16, -16, 16, 16, -16, -16}, []int64{32, 16, 16, 32, -32, 32, -32}},
		{"1.13", 3, []int64{16, 16, 16, 16, -16, -16, 288, 16, 16, -16, -16}, []int64{288, 16, 16, 288, -288}},
		{"1.13", 1, []int64{16, 16, 16, 16, 16, -16, -16, -16, 32, 16, 16, -16, -16}, []int64{32, 16, 16, 32, -32, 32, -32}},
	} {
		b := graph.NewBuilder("bn")
		x := b.Input("x", graph.Shape{2, 4, c.hw, c.hw}, graph.F32)
		y := b.Target("y", graph.Shape{2}, graph.I64)
		h := b.Conv2d("c", x, 4, graph.Conv2dOpts{Kernel: [2]int64{1, 1}, Stride: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 1})
		h = b.BatchNorm2d("bn", h)
		b.CrossEntropy("loss", b.Linear("head", b.Flatten("flatten", h, 1), 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, c.release), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[trace.Phase][]int64{}
		size := map[int64]int64{}
		for _, e := range tr.Events {
			if e.Action == trace.Alloc {
				size[e.ID] = e.Size
			}
			if tr.SiteName(e.Site) != "bn" || (e.Action != trace.Alloc && e.Action != trace.Free) {
				continue
			}
			d := size[e.ID]
			if e.Action == trace.Free {
				d = -d
			}
			got[e.Phase] = append(got[e.Phase], d)
		}
		f, bw := got[trace.Forward], got[trace.Backward]
		if len(f) < len(c.fwd) || !slices.Equal(f[:len(c.fwd)], c.fwd) || len(bw) < len(c.bwd) || !slices.Equal(bw[:len(c.bwd)], c.bwd) {
			t.Errorf("%s, %d×%d: forward %v, backward %v; want %v, %v", c.release, c.hw, c.hw, f, bw, c.fwd, c.bwd)
		}
	}
}
