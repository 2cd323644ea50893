package cost

import (
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
)

// TestPointwiseChoice holds timer.pointwise's choice to what cuDNN ran for
// ResNet-50's 1×1, stride-1 forward convolutions in NCHW at batch 256,
// float16, on an H200 (testdata/throughput/kernels-h200/resnet50-nchw:
// nvjet GEMM kernels and no transposes at 56×56 and 28×28; nchwToNhwc,
// an xmma kernel and nhwcToNchw at 14×14 and 7×7, 256 → 1024 and 512 →
// 2048; a cutlass kernel and no transposes for 1024 → 256 at 14×14). The
// product per image fills its tiles with H·W columns: 14×14 = 196 columns
// fill two 128-wide tiles at 77 %, 7×7 = 49 one at 38 %, where the
// implicit GEMM's N·H·W rows fill theirs. At 14×14 the two ways are
// within 5 % of each other by the model and cuDNN took both, one per
// shape: such a near tie passes either way.
func TestPointwiseChoice(t *testing.T) {
	g, err := gpu.Lookup("h200")
	if err != nil {
		t.Fatal(err)
	}
	r := g.Rates
	for _, c := range []struct {
		cin, cout, hw int64
		gemm          bool
	}{
		{64, 256, 56, true},
		{256, 64, 56, true},
		{256, 128, 56, true},
		{128, 512, 28, true},
		{512, 128, 28, true},
		{256, 1024, 14, false},
		{1024, 256, 14, true},
		{512, 2048, 7, false},
		{2048, 512, 7, false},
	} {
		gr := build(t, "pw", func(b *graph.Builder) {
			x := b.Input("x", graph.Shape{256, c.cin, c.hw, c.hw}, graph.F32)
			y := b.Target("y", graph.Shape{256}, graph.I64)
			h := b.Conv2d("conv", x, c.cout, graph.Conv2dOpts{Kernel: [2]int64{1, 1}, Stride: [2]int64{1, 1}, Dilation: [2]int64{1, 1}, Groups: 1})
			b.CrossEntropy("loss", b.Mean("pool", h, 2, 3), y)
		})
		var op *graph.Op
		for i := range gr.Ops {
			if gr.Ops[i].Kind == graph.Conv2d {
				op = &gr.Ops[i]
			}
		}
		n, hw, ok := pointwiseConv(gr, op)
		if !ok {
			t.Fatalf("%d→%d at %d×%d: not a pointwise convolution", c.cin, c.cout, c.hw, c.hw)
		}
		tm := timer{r: r, m: newMachine(r)}
		cs := convShape(gr, op)
		e := 2.0
		in, out := float64(256*c.cin*c.hw*c.hw), float64(256*c.cout*c.hw*c.hw)
		bytes := (in+float64(c.cin*c.cout))*e + out*e
		if !tm.pointwise(graph.F16, false, [3]float64{cs.pixels, cs.patch, cs.cout}, [4]float64{cs.cout, cs.cin, hw, n}, (in+out)*e, bytes) {
			t.Fatalf("%d→%d at %d×%d: no choice made", c.cin, c.cout, c.hw, c.hw)
		}
		ts, _ := tm.transposeSeconds(graph.F16, false, 2, (in+out)*e)
		viaT := ts + tm.productSeconds(conv, graph.F16, cs.pixels, cs.patch, cs.cout, 1, bytes)
		viaG := tm.productSeconds(gemm, graph.F16, cs.cout, cs.cin, hw, n, bytes)
		tie := viaG < viaT*1.05 && viaT < viaG*1.05
		t.Logf("%d→%d at %d×%d: transposes and implicit GEMM %.1f µs, product per image %.1f µs", c.cin, c.cout, c.hw, c.hw, viaT*1e6, viaG*1e6)
		// the product alone is one kernel; transposes around it, three
		if got := tm.est.Kernels == 1; got != c.gemm && !tie {
			t.Errorf("%d→%d at %d×%d: product per image %v (%d kernels), cuDNN ran it %v", c.cin, c.cout, c.hw, c.hw, got, tm.est.Kernels, c.gemm)
		}
	}
}
