package cost

import (
	"math"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// The tile model of kernel.go on a made-up GPU of 4 SMs at 1 TFLOP/s
// (0.25 TFLOP/s an SM), every share 1, worked by hand:
//
//	256 × 1024 × 256: 2 × 2 tiles of 128 × 128 fill the 4 SMs once:
//	  2·256·1024·256 / 1e12 = 134.217728 µs, no waste
//	257 rows: 3 × 2 = 6 tiles, two waves of 4 SMs, each wave
//	  2·128·128·1024 / 0.25e12 = 134.217728 µs: 268.435456 µs
//	1020 deep on the tensor cores: not a multiple of 8, half the rate:
//	  2·256·1020·256 / 0.5e12 = 267.386880 µs
//	128 × 4096 × 128: one tile for 4 SMs, split 4 ways along K (4096/128
//	  = 32 chunks allowed): one wave of 1024-deep tiles, 134.217728 µs, and
//	  the float32 partial sums written and read: 2·4·128·128·4 B
//	64 × 1024 × 64: a 64 × 64 tile, four to an SM: 16 slots, one tile,
//	  split 8 ways (1024/128): 2·64·64·128 / (1e12/16) = 16.777216 µs
func TestGEMMQuantization(t *testing.T) {
	m := machine{sms: 4, mm: 1, bw: 1e12, fp: 1e12}
	for _, c := range []struct {
		name                     string
		rows, inner, cols, batch float64
		tensor                   bool
		want, wantExtra          float64
	}{
		{"full waves", 256, 1024, 256, 1, false, 134.217728e-6, 0},
		{"one row over", 257, 1024, 256, 1, false, 268.435456e-6, 0},
		{"unaligned on tensor cores", 256, 1020, 256, 1, true, 267.38688e-6, 0},
		{"unaligned on CUDA cores", 256, 1020, 256, 1, false, 133.69344e-6, 0},
		{"split-K", 128, 4096, 128, 1, false, 134.217728e-6, 2 * 4 * 128 * 128 * 4},
		{"small tiles", 64, 1024, 64, 1, false, 16.777216e-6, 2 * 8 * 64 * 64 * 4},
	} {
		got, extra := m.gemmTime(1e12, m.mm, c.rows, c.inner, c.cols, c.batch, c.tensor)
		if math.Abs(got-c.want) > 1e-15 || extra != c.wantExtra {
			t.Errorf("%s: %.9g s and %g extra bytes, want %.9g s and %g", c.name, got, extra, c.want, c.wantExtra)
		}
	}
}

// The host and device queue of stream.go, worked by hand: ten kernels of
// 1 µs that take the host 5 µs each finish 1 µs after the host issues the
// last, 51 µs; ten of 10 µs issued in 1 µs each run back to back after
// the first issue, 101 µs.
func TestQueue(t *testing.T) {
	for _, c := range []struct {
		name     string
		cpu, gpu float64
		want     float64
	}{
		{"host-bound", 5e-6, 1e-6, 51e-6},
		{"device-bound", 1e-6, 10e-6, 101e-6},
	} {
		var q queue
		var total float64
		for range 10 {
			total += q.issue(c.cpu, c.gpu)
		}
		if math.Abs(q.gpu-c.want) > 1e-15 || math.Abs(total-c.want) > 1e-15 {
			t.Errorf("%s: device done at %g s (the increments sum to %g s), want %g s", c.name, q.gpu, total, c.want)
		}
	}
}

// On a catalog GPU no calibrated step is faster than its
// roofline bound: every kernel runs below the peaks (the achievable
// shares are under 1), which outweighs the bound's launch floor on the
// short kernels the host hides behind long ones.
func TestCalibratedAboveBound(t *testing.T) {
	a100, err := gpu.Lookup("a100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models.All() {
		g, err := m.Build(m.Small(4, 32))
		if err != nil {
			t.Fatal(err)
		}
		for _, acc := range []int{1, 4} {
			s, err := train.Setup{Precision: train.Mixed16, Accumulate: acc, Steps: 1}.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			_, sum, err := train.Simulate(g, s)
			if err != nil {
				t.Fatal(err)
			}
			e, err := Step(Input{Graph: g, Ops: sum.Ops, Setup: s, Rates: a100.Rates, Batch: 4})
			if err != nil {
				t.Fatal(err)
			}
			if e.Seconds < e.Bound.Seconds*(1-1e-9) {
				t.Errorf("%s ×%d: calibrated %g s below the bound %g s", m.Name, acc, e.Seconds, e.Bound.Seconds)
			}
		}
	}
}

// The closed form Step uses for accumulated micro-batches: from an idle
// queue, k repeats of one micro-batch's kernels end at the first's end
// plus (k−1) × max(device total, host total). Checked against queueing
// every kernel, for a host-bound, a device-bound and a mixed micro-batch.
func TestRepeatedMicroBatchesClosedForm(t *testing.T) {
	for _, c := range []struct {
		name     string
		cpu, gpu []float64
	}{
		{"host-bound", []float64{5, 5, 5, 5}, []float64{1, 2, 1, 1}},
		{"device-bound", []float64{1, 1, 1, 1}, []float64{10, 2, 30, 4}},
		{"mixed", []float64{8, 1, 1, 9, 1}, []float64{1, 20, 1, 1, 2}},
	} {
		var one queue
		var dev, host float64
		for i := range c.cpu {
			one.issue(c.cpu[i], c.gpu[i])
			dev += c.gpu[i]
			host += c.cpu[i]
		}
		for _, k := range []int{2, 3, 7} {
			var q queue
			for range k {
				for i := range c.cpu {
					q.issue(c.cpu[i], c.gpu[i])
				}
			}
			if want := one.gpu + float64(k-1)*max(dev, host); math.Abs(q.gpu-want) > 1e-9 {
				t.Errorf("%s ×%d: queued %g, closed form %g", c.name, k, q.gpu, want)
			}
		}
	}
}

// A convolution as cuDNN's implicit GEMM: x [2, 3, 32, 32] through 16
// 3×3 filters (padding 1) is (2·32·32 = 2048 pixels) × 16 over 3·3·3 = 27;
// the depthwise one after it has 16 groups, one channel each.
func TestConvAsGEMM(t *testing.T) {
	g := build(t, "conv", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{2, 3, 32, 32}, graph.F32)
		y := b.Target("y", graph.Shape{2, 16, 32, 32}, graph.F32)
		h := b.Conv2d("conv", x, 16, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}})
		h = b.Conv2d("dw", h, 16, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}, Groups: 16})
		b.MSELoss("loss", h, y)
	})
	want := map[string]convGEMM{
		"conv": {pixels: 2048, cout: 16, patch: 27, cin: 3, groups: 1},
		"dw":   {pixels: 2048, cout: 16, patch: 9, cin: 16, groups: 16},
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if w, ok := want[op.Name]; ok {
			if got := convShape(g, op); got != w {
				t.Errorf("%s: %+v, want %+v", op.Name, got, w)
			}
		}
	}
}

// Which share of the peaks each kind of kernel runs at, on a made-up GPU
// (no SM count, so no tile model) of 100 TFLOP/s half precision, 10 TFLOP/s
// float32 and 1 TB/s, with cuBLAS's GEMMs at 0.8 of the peak, cuDNN's
// convolutions at 0.5, streaming kernels at 0.8 of the bandwidth and
// depthwise ones at a quarter of that (0.2 TB/s), worked by hand:
//
//	a 1024³ GEMM, 2.147483648 GFLOP, at 80 TFLOP/s: 26.8435456 µs
//	the same as a convolution, at 50 TFLOP/s: 42.94967296 µs
//	a depthwise convolution moving 1 MB at 0.2 TB/s: 5 µs
//	one of 0.1 GFLOP at the 10 TFLOP/s of the CUDA cores: 10 µs
//	an elementwise kernel moving 1 MB at 0.8 TB/s: 1.25 µs, under the
//	  2.5 µs an empty kernel takes on the device
func TestSharesByKernel(t *testing.T) {
	r := gpu.Rates{FP32: 10e12, FP16: 100e12, Bandwidth: 1e12,
		Achievable: gpu.Achievable{Matmul: 0.5, GEMM: 0.8, Depthwise: 0.25, Bandwidth: 0.8}}
	const n = 1024.0
	for _, c := range []struct {
		name string
		run  func(*timer)
		want float64
	}{
		{"cuBLAS GEMM", func(t *timer) { t.product(gemm, graph.F16, n, n, n, 1, 0) }, 26.8435456e-6},
		{"cuDNN convolution", func(t *timer) { t.product(conv, graph.F16, n, n, n, 1, 0) }, 42.94967296e-6},
		{"depthwise, by its traffic", func(t *timer) { t.grouped(conv, graph.F16, 1e6, 1e6) }, 5e-6},
		{"depthwise, by its arithmetic", func(t *timer) { t.grouped(conv, graph.F16, 1e8, 1e6) }, 10e-6},
		{"elementwise, at the device's least", func(t *timer) { t.kernel(vector, graph.F16, 0, 1e6) }, KernelGPU},
	} {
		tm := timer{r: r, m: newMachine(r)}
		c.run(&tm)
		if got := tm.dev[Forward]; math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%s: %.10g s, want %.10g", c.name, got, c.want)
		}
	}
}
