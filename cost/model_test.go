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
// convolutions at 0.5 and streaming kernels at 0.8 of the bandwidth;
// without an SM count depthwise kernels have no per-SM rate
// (TestPerSMRates) and stream too, worked by hand:
//
//	a 1024³ GEMM, 2.147483648 GFLOP, at 80 TFLOP/s: 26.8435456 µs
//	the same as a convolution, at 50 TFLOP/s: 42.94967296 µs
//	a depthwise convolution moving 4 MB at 0.8 TB/s: 5 µs
//	one of 0.1 GFLOP at the 10 TFLOP/s of the CUDA cores: 10 µs
//	an elementwise kernel moving 1 MB at 0.8 TB/s: 1.25 µs, under the
//	  2.5 µs an empty kernel takes on the device
func TestSharesByKernel(t *testing.T) {
	r := gpu.Rates{FP32: 10e12, FP16: 100e12, Bandwidth: 1e12,
		Achievable: gpu.Achievable{Matmul: 0.5, GEMM: 0.8, Depthwise: 1, Transpose: 1, Bandwidth: 0.8}}
	const n = 1024.0
	for _, c := range []struct {
		name string
		run  func(*timer)
		want float64
	}{
		{"cuBLAS GEMM", func(t *timer) { t.product(gemm, graph.F16, n, n, n, 1, 0) }, 26.8435456e-6},
		{"cuDNN convolution", func(t *timer) { t.product(conv, graph.F16, n, n, n, 1, 0) }, 42.94967296e-6},
		{"depthwise, by its traffic", func(t *timer) { t.grouped(conv, graph.F16, false, 1e6, 4e6) }, 5e-6},
		{"depthwise, by its arithmetic", func(t *timer) { t.grouped(conv, graph.F16, false, 1e8, 1e6) }, 10e-6},
		{"elementwise, at the device's least", func(t *timer) { t.kernel(vector, graph.F16, 0, 1e6) }, KernelGPU},
	} {
		tm := timer{r: r, m: newMachine(r)}
		c.run(&tm)
		if got := tm.dev[Forward]; math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%s: %.10g s, want %.10g", c.name, got, c.want)
		}
	}
}

// The per-SM rates, on a made-up GPU of 10 SMs at 1,000 MHz (1e10 SM
// clocks a second) and 1 TB/s at a share of 0.8, worked by hand:
//
//	a depthwise convolution moving 1 MB at 2 bytes per SM per clock
//	  (20 GB/s, under the 0.8 TB/s): 1e6 / 2e10 = 50 µs
//	at 200 bytes per SM per clock the bandwidth binds: 10 MB at
//	  0.8 TB/s = 12.5 µs
//	the three NCHW transposes around a half-precision convolution whose
//	  operands are 3 MB (1.5 M elements) at 1.5 elements per SM per
//	  clock (1.5e10 a second): 100 µs, where their 6 MB of reads and
//	  writes at 0.8 TB/s would take 7.5 µs
//	in float32 (TF32) the same 3 MB are 0.75 M elements: 50 µs
//	at 150 elements per SM per clock the bandwidth binds: 7.5 µs
//	no boost clock: the clock from the FP32 peak, 10 SMs × clock × 256 =
//	  2.56 TFLOP/s gives the same 1e10 SM clocks a second: 50 µs
func TestPerSMRates(t *testing.T) {
	base := gpu.Rates{FP32: 2.56e12, TF32: 50e12, FP16: 100e12, Bandwidth: 1e12, SMs: 10, BoostMHz: 1000}
	for _, c := range []struct {
		name    string
		dw, tr  float64
		noClock bool
		run     func(*timer)
		want    float64
	}{
		{"depthwise at its SM rate", 2, 0, false, func(t *timer) { t.grouped(conv, graph.F16, false, 0, 1e6) }, 50e-6},
		{"depthwise at the bandwidth", 200, 0, false, func(t *timer) { t.grouped(conv, graph.F16, false, 0, 10e6) }, 12.5e-6},
		{"depthwise, clock from FP32", 2, 0, true, func(t *timer) { t.grouped(conv, graph.F16, false, 0, 1e6) }, 50e-6},
		{"half transposes at their SM rate", 0, 1.5, false, func(t *timer) { t.transposes(graph.F16, false, 3, 3e6) }, 100e-6},
		{"float32 transposes at their SM rate", 0, 1.5, false, func(t *timer) { t.transposes(graph.F32, false, 3, 3e6) }, 50e-6},
		{"transposes at the bandwidth", 0, 150, false, func(t *timer) { t.transposes(graph.F16, false, 3, 3e6) }, 7.5e-6},
	} {
		r := base
		r.Achievable = gpu.Achievable{Matmul: 0.5, GEMM: 0.8, Bandwidth: 0.8, Depthwise: c.dw, Transpose: c.tr}
		if c.noClock {
			r.BoostMHz = 0
		}
		tm := timer{r: r, m: newMachine(r), tf32: [3]bool{conv: true}}
		c.run(&tm)
		if got := tm.dev[Forward]; math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: %.10g s, want %.10g", c.name, got, c.want)
		}
	}
}

// Which grouped convolutions PyTorch sends to cuDNN, and so pay the NCHW
// transposes, read off aten/src/ATen/native/Convolution.cpp
// (use_cudnn_depthwise, check_cudnn_depthwise_workload_with_filter) case
// by case: a depthwise one in NCHW goes to cuDNN only in float16, with at
// least 32 channels, a square 1×1, 3×3 or 5×5 filter, an input at least 7
// wide, undilated, and at stride 2 only with 512 channels or 256 at
// widths of 28 and more (a 1×1 filter: at batch 1 up to width 28, at
// batches up to 16 with 128 channels up to width 7); channels-last and
// non-depthwise grouped ones always go to cuDNN.
func TestCudnnGrouped(t *testing.T) {
	for _, c := range []struct {
		name       string
		n, ch, w   int64
		k, stride  int64
		dilation   int64
		groups     int64
		dt         graph.DType
		nhwc, want bool
	}{
		{"3×3 stride 1 float16", 256, 32, 56, 3, 1, 1, 32, graph.F16, false, true},
		{"5×5 stride 1 float16", 256, 240, 14, 5, 1, 1, 240, graph.F16, false, true},
		{"bfloat16: native", 256, 32, 56, 3, 1, 1, 32, graph.BF16, false, false},
		{"float32: native", 256, 32, 56, 3, 1, 1, 32, graph.F32, false, false},
		{"16 channels: native", 256, 16, 56, 3, 1, 1, 16, graph.F16, false, false},
		{"7×7: native", 256, 96, 56, 7, 1, 1, 96, graph.F16, false, false},
		{"6 wide: native", 256, 96, 6, 3, 1, 1, 96, graph.F16, false, false},
		{"dilated: native", 256, 96, 56, 3, 1, 2, 96, graph.F16, false, false},
		{"stride 2, 96 channels: native", 256, 96, 112, 3, 2, 1, 96, graph.F16, false, false},
		{"stride 2, 576 channels", 256, 576, 14, 3, 2, 1, 576, graph.F16, false, true},
		{"stride 2, 256 channels at 28", 256, 256, 28, 5, 2, 1, 256, graph.F16, false, true},
		{"stride 2, 256 channels at 14: native", 256, 256, 14, 5, 2, 1, 256, graph.F16, false, false},
		{"stride 2, 1×1 at batch 8, 128 channels, 7 wide", 8, 128, 7, 1, 2, 1, 128, graph.F16, false, true},
		{"stride 2, 1×1 at batch 32: native", 32, 128, 7, 1, 2, 1, 128, graph.F16, false, false},
		{"stride 2, 1×1 at batch 1, 28 wide", 1, 64, 28, 1, 2, 1, 64, graph.F16, false, true},
		{"stride 2, 1×1 at batch 1, 56 wide: native", 1, 64, 56, 1, 2, 1, 64, graph.F16, false, false},
		{"channels-last bfloat16", 256, 32, 56, 3, 1, 1, 32, graph.BF16, true, true},
		{"two groups, not depthwise", 256, 64, 56, 3, 1, 1, 2, graph.F32, false, true},
	} {
		g := build(t, "dw", func(b *graph.Builder) {
			x := b.Input("x", graph.Shape{c.n, c.ch, c.w, c.w}, graph.F32)
			y := b.Target("y", graph.Shape{c.n}, graph.I64)
			h := b.Conv2d("conv", x, c.ch, graph.Conv2dOpts{Kernel: [2]int64{c.k, c.k}, Stride: [2]int64{c.stride, c.stride},
				Padding: [2]int64{c.k / 2 * c.dilation, c.k / 2 * c.dilation}, Dilation: [2]int64{c.dilation, c.dilation}, Groups: c.groups})
			b.CrossEntropy("loss", b.Mean("pool", h, 2, 3), y)
		})
		var op *graph.Op
		for i := range g.Ops {
			if g.Ops[i].Kind == graph.Conv2d {
				op = &g.Ops[i]
			}
		}
		tm := timer{nhwc: c.nhwc}
		if got := tm.cudnnGrouped(g, op, c.dt); got != c.want {
			t.Errorf("%s: cuDNN %v, want %v", c.name, got, c.want)
		}
	}
}
