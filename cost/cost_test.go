package cost

import (
	"math"
	"testing"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// flops times one op's forward and backward and returns the arithmetic of
// each.
func flops(t *testing.T, g *graph.Graph, name string, run train.OpRun) (fwd, bwd float64) {
	t.Helper()
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Name != name {
			continue
		}
		var f, b timer
		f.r = testRates
		b.r = testRates
		forward(&f, g, op, run)
		backward(&b, g, op, run)
		return f.est.FLOPs, b.est.FLOPs
	}
	t.Fatalf("no op %s", name)
	return 0, 0
}

// simulateAndTime simulates g under s and times the step from the
// simulation's op records, at micro-batch batch.
func simulateAndTime(t *testing.T, g *graph.Graph, s train.Setup, batch int64) Estimate {
	t.Helper()
	s, err := s.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := train.Simulate(g, s)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Step(Input{Graph: g, Ops: sum.Ops, Setup: s, Rates: testRates, Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var testRates = gpu.Rates{FP32: 1e13, TF32: 2e13, FP16: 4e13, BF16: 4e13, Bandwidth: 1e12}

func build(t *testing.T, name string, fn func(b *graph.Builder)) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder(name)
	fn(b)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func f32() train.OpRun { return train.OpRun{In: graph.F32, Out: graph.F32} }

// A Linear of x [64, 256] to 128 features with a bias: the product is
// 2·64·256·128 = 4,194,304 operations. With x needing a gradient (it comes
// from a parameter-using op), backward does two products of that size and
// the bias sum, 64·128 = 8,192 additions.
func TestLinearFLOPs(t *testing.T) {
	g := build(t, "linear", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{64, 256}, graph.F32)
		y := b.Target("y", graph.Shape{64, 128}, graph.F32)
		h := b.Linear("first", x, 256, false)
		o := b.Linear("lin", h, 128, true)
		b.MSELoss("loss", o, y)
	})
	fwd, bwd := flops(t, g, "lin", f32())
	if fwd != 4194304 || bwd != 2*4194304+8192 {
		t.Errorf("linear: forward %g, backward %g; want 4194304 and %d", fwd, bwd, 2*4194304+8192)
	}
	// the first layer's input is the batch: no input gradient
	_, bwd = flops(t, g, "first", f32())
	if want := 2.0 * 64 * 256 * 256; bwd != want {
		t.Errorf("first linear backward %g, want %g (weight gradient only)", bwd, want)
	}
}

// A 3×3 convolution of 3 to 16 channels, padding 1, on [2, 3, 32, 32]:
// each of the 2·16·32·32 = 32,768 outputs takes 3·3·3 = 27 multiply-adds,
// 1,769,472 operations. A depthwise 3×3 of 16 channels (groups 16) takes
// 9 multiply-adds per output: 2·32,768·9 = 589,824. Backward: data and
// weight gradients of the same size (no data gradient for the batch; the
// builder's convolutions have no bias).
func TestConvFLOPs(t *testing.T) {
	g := build(t, "conv", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{2, 3, 32, 32}, graph.F32)
		y := b.Target("y", graph.Shape{2, 16, 32, 32}, graph.F32)
		h := b.Conv2d("conv", x, 16, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}})
		h = b.Conv2d("dw", h, 16, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}, Groups: 16})
		b.MSELoss("loss", h, y)
	})
	fwd, bwd := flops(t, g, "conv", f32())
	if fwd != 1769472 || bwd != 1769472 {
		t.Errorf("conv: forward %g, backward %g", fwd, bwd)
	}
	fwd, bwd = flops(t, g, "dw", f32())
	if fwd != 589824 || bwd != 2*589824 {
		t.Errorf("depthwise: forward %g, backward %g", fwd, bwd)
	}
}

// Attention of q, k, v [2, 4, 128, 64]: q·kᵀ and p·v are 2·8·128·128·64 =
// 16,777,216 operations each. Flash does both in forward (33,554,432) and
// five in backward (83,886,080), and so does cuDNN attention; a causal
// mask halves both. The math path
// computes every score: 33,554,432 forward, four products backward.
func TestAttentionFLOPs(t *testing.T) {
	for _, c := range []struct {
		kernel   train.Attention
		causal   bool
		fwd, bwd float64
	}{
		{train.AttentionFlash, false, 33554432, 83886080},
		{train.AttentionFlash, true, 16777216, 41943040},
		{train.AttentionCudnn, false, 33554432, 83886080},
		{train.AttentionCudnn, true, 16777216, 41943040},
		{train.AttentionEfficient, false, 33554432, 83886080},
		{train.AttentionMath, true, 33554432, 67108864},
		{train.AttentionEager, false, 33554432, 67108864},
	} {
		g := build(t, "attn", func(b *graph.Builder) {
			x := b.Input("x", graph.Shape{2, 128, 256}, graph.F32)
			y := b.Target("y", graph.Shape{2, 4, 128, 64}, graph.F32)
			qkv := func(n string) graph.TensorID {
				p := b.Linear(n, x, 256, false)
				p = b.Reshape(n+".view", p, 2, 128, 4, 64)
				return b.Transpose(n+".t", p, 1, 2)
			}
			o := b.Attention("attn", qkv("q"), qkv("k"), qkv("v"), c.causal, 0)
			b.MSELoss("loss", o, y)
		})
		run := f32()
		run.Kernel = c.kernel
		fwd, bwd := flops(t, g, "attn", run)
		if fwd != c.fwd || bwd != c.bwd {
			t.Errorf("%s causal=%v: forward %g, backward %g; want %g, %g", c.kernel, c.causal, fwd, bwd, c.fwd, c.bwd)
		}
	}
}

// The roofline of a whole step, worked by hand: x [1024, 1024] through two
// bias-free Linear(1024, 1024) with a ReLU between, mean squared error
// against y [1024, 1024], SGD without momentum, on a GPU of 10 TFLOP/s and
// 1 TB/s, in float32. With n = 1024² = 1,048,576 elements per tensor:
//
//	a product, 2·1024³ operations at 10 TFLOP/s   214.7483648 µs (its 12.58 MB of traffic take 12.6 µs)
//	ReLU: reads n, writes n floats                8.388608 µs
//	mse_loss: two kernels over o and y            max(8.388608, 2 × 5) = 10 µs
//	forward                                       214.7483648·2 + 8.388608 + 10
//	mse backward: reads the scalar gradient,
//	  o and y, writes o's gradient                (4 + 3·4n) B = 12.582916 µs
//	second Linear: input and weight gradients     2 × 214.7483648
//	ReLU backward: gradient, input, result        12.582912 µs
//	first Linear: weight gradient only (x is the batch)  214.7483648
//	SGD: param.add_(grad) on 2 parameters,
//	  reads 2, writes 1 of 2n floats              25.165824 µs
func TestMLPStepRoofline(t *testing.T) {
	const n = 1024
	g := build(t, "mlp", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{n, n}, graph.F32)
		y := b.Target("y", graph.Shape{n, n}, graph.F32)
		h := b.Linear("fc1", x, n, false)
		h = b.Act(graph.ReLU, "relu", h, false)
		h = b.Linear("fc2", h, n, false)
		b.MSELoss("loss", h, y)
	})
	s, err := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}, Steps: 1}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := train.Simulate(g, s)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Step(Input{Graph: g, Ops: sum.Ops, Setup: s, Rates: testRates, Batch: n})
	if err != nil {
		t.Fatal(err)
	}
	const mm = 214.7483648e-6
	want := [numParts]float64{
		Forward:   2*mm + 8.388608e-6 + 10e-6,
		Backward:  12.582916e-6 + 2*mm + 12.582912e-6 + mm,
		Optimizer: 25.165824e-6,
	}
	for _, p := range Parts() {
		if math.Abs(e.Bound.By[p]-want[p]) > 1e-12 {
			t.Errorf("%s: %.9g s, want %.9g s", p, e.Bound.By[p], want[p])
		}
	}
	if wantModel := 5 * 2.0 * n * n * n; e.ModelFLOPs != wantModel {
		t.Errorf("model FLOPs %g, want %g", e.ModelFLOPs, wantModel)
	}
	if got, want := e.Bound.MFU, 5*mm/(want[Forward]+want[Backward]+want[Optimizer]); math.Abs(got-want) > 1e-9 {
		t.Errorf("MFU %g, want %g", got, want)
	}
	if e.Samples != n || e.BoundSamplesPerSecond() != n/e.Bound.Seconds {
		t.Errorf("samples %d, %g/s", e.Samples, e.SamplesPerSecond())
	}
}

// Checkpointing runs the wrapped forward again; accumulation runs every
// micro-batch and adds the gradients in place.
func TestRecomputeAndAccumulation(t *testing.T) {
	g := build(t, "blocks", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{256, 512}, graph.F32)
		y := b.Target("y", graph.Shape{256, 512}, graph.F32)
		for i := 0; i < 4; i++ {
			b.Block("block", func() {
				x = b.Linear("fc", x, 512, true)
				x = b.Act(graph.GELU, "act", x, false)
			})
		}
		b.MSELoss("loss", x, y)
	})
	time := func(s train.Setup) Estimate { return simulateAndTime(t, g, s, 256) }
	base := time(train.Setup{Steps: 1})
	full := time(train.Setup{Steps: 1, Checkpoint: train.FullCheckpoint})
	half := time(train.Setup{Steps: 1, Checkpoint: train.Checkpoint{Every: 2}})
	// everything but the loss (two kernels at the launch floor) is in a
	// block
	if base.Bound.By[Recompute] != 0 || math.Abs(full.Bound.By[Recompute]+2*LaunchFloor-base.Bound.By[Forward]) > 1e-15 || math.Abs(2*half.Bound.By[Recompute]-full.Bound.By[Recompute]) > 1e-15 {
		t.Errorf("recompute: none %g, full %g (forward %g), every second block %g", base.Bound.By[Recompute], full.Bound.By[Recompute], base.Bound.By[Forward], half.Bound.By[Recompute])
	}
	if full.ModelFLOPs != base.ModelFLOPs || full.FLOPs <= base.FLOPs {
		t.Errorf("recomputation is not model arithmetic: %g vs %g, executed %g vs %g", full.ModelFLOPs, base.ModelFLOPs, full.FLOPs, base.FLOPs)
	}
	acc := time(train.Setup{Steps: 1, Accumulate: 4})
	// four forwards; four backwards plus three in-place sums into each
	// of the 8 gradients, 4·(512·512+512) floats (read two, write one):
	// 37.8 µs of traffic, less than 24 launches
	sums := 3 * 3 * 4 * (512*512 + 512) * 4.0 / testRates.Bandwidth
	sums = math.Max(sums, 3*8*LaunchFloor)
	if math.Abs(acc.Bound.By[Forward]-4*base.Bound.By[Forward]) > 1e-12 || math.Abs(acc.Bound.By[Backward]-(4*base.Bound.By[Backward]+sums)) > 1e-12 ||
		acc.Bound.By[Optimizer] != base.Bound.By[Optimizer] || acc.Samples != 4*256 {
		t.Errorf("accumulation ×4: %+v, one micro-batch %+v", acc.By, base.By)
	}
}

// foreach launches: at depth 4, 36 tensors a kernel; at most 320 blocks of
// 65,536 elements.
func TestForeachLaunches(t *testing.T) {
	for _, c := range []struct {
		sizes []int64
		depth int64
		want  int64
	}{
		{[]int64{10}, 1, 1},
		{make36(37, 10), 4, 2},
		{make36(110, 10), 1, 1},
		{make36(111, 10), 1, 2},
		{[]int64{320 * 65536}, 1, 1},
		{[]int64{320*65536 + 1}, 1, 2},
		{[]int64{1000 * 65536}, 3, 4},
	} {
		if got := foreachLaunches(c.sizes, c.depth); got != c.want {
			t.Errorf("%d tensors, depth %d: %d launches, want %d", len(c.sizes), c.depth, got, c.want)
		}
	}
}

func make36(n int, size int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = size
	}
	return out
}

func TestCatalogRates(t *testing.T) {
	for _, g := range gpu.All() {
		r := g.Rates
		if !r.Known() || r.Source == "" {
			t.Errorf("%s: rates %+v", g.Name, r)
			continue
		}
		// tensor cores are faster than CUDA cores where they exist
		for _, v := range []float64{r.TF32, r.FP16, r.BF16} {
			if v != 0 && v < r.FP32 {
				t.Errorf("%s: a tensor rate %g below FP32 %g", g.Name, v, r.FP32)
			}
		}
		if r.Bandwidth < 1e11 || r.Bandwidth > 1e13 || r.FP32 < 1e12 || r.FP32 > 1e15 {
			t.Errorf("%s: implausible rates %+v", g.Name, r)
		}
	}
}

// The op records of one batch size time another batch size as its own
// records do: autocast's copies of activations follow the shapes of the
// graph being timed. Every zoo model, both mixed precisions.
func TestAlignedRecordsTimeLikeOwn(t *testing.T) {
	for _, m := range models.All() {
		for _, p := range []train.Precision{train.MixedBF16, train.Mixed16} {
			s, err := train.Setup{Precision: p, Steps: 1}.Normalize()
			if err != nil {
				t.Fatal(err)
			}
			at := func(batch int64) (*graph.Graph, []train.OpRun) {
				g, err := m.Build(m.Small(batch, 32))
				if err != nil {
					t.Fatal(err)
				}
				_, sum, err := train.Simulate(g, s)
				if err != nil {
					t.Fatal(err)
				}
				return g, sum.Ops
			}
			small, smallOps := at(2)
			big, bigOps := at(8)
			time := func(g *graph.Graph, ops []train.OpRun, batch int64) float64 {
				e, err := Step(Input{Graph: g, Ops: ops, Setup: s, Rates: testRates, Batch: batch})
				if err != nil {
					t.Fatal(err)
				}
				return e.Seconds
			}
			own := time(small, smallOps, 2)
			if got := time(small, Align(small, big, bigOps), 2); math.Abs(got-own) > 1e-12*own {
				t.Errorf("%s %s: batch 2 timed with batch 8's records %g s, with its own %g s", m.Name, p, got, own)
			}
		}
	}
}

// The runtime profile's allow_tf32 defaults pick the float32 rates:
// matmuls on the CUDA cores, convolutions in TF32; half types on the
// tensor cores either way.
func TestPeakFollowsProfile(t *testing.T) {
	s, err := train.Setup{}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	tm := timer{r: testRates, tf32: [...]bool{gemm: s.Profile.MatmulAllowTF32, conv: s.Profile.CudnnAllowTF32}}
	for _, c := range []struct {
		k    rate
		dt   graph.DType
		want float64
	}{
		{gemm, graph.F32, testRates.FP32}, {conv, graph.F32, testRates.TF32},
		{gemm, graph.BF16, testRates.BF16}, {conv, graph.F16, testRates.FP16}, {vector, graph.F16, testRates.FP32},
	} {
		if got := tm.peak(c.k, c.dt); got != c.want {
			t.Errorf("kind %d, %s: %g FLOP/s, want %g", c.k, c.dt, got, c.want)
		}
	}
}

// The fused kernels read the parameter, its gradient and every
// per-element state of train.OptimizerStates, and write the parameter and
// the states: worked out from torch's fused SGD (momentum_buffer) and Adam
// (exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad).
func TestFusedPassReadsTheOptimizerTable(t *testing.T) {
	for _, c := range []struct {
		o    train.Optimizer
		want pass
	}{
		{train.Optimizer{Kind: train.SGD}, pass{2, 1}},
		{train.Optimizer{Kind: train.SGD, Momentum: 0.9}, pass{3, 2}},
		{train.Optimizer{Kind: train.Adam}, pass{4, 3}},
		{train.Optimizer{Kind: train.AdamW}, pass{4, 3}},
		{train.Optimizer{Kind: train.Adam, AMSGrad: true}, pass{5, 4}},
	} {
		if got := fusedPass(c.o); got != c.want {
			t.Errorf("%s (amsgrad %v): %+v, want %+v", c.o.Name(), c.o.AMSGrad, got, c.want)
		}
	}
}

// A convolution on the tensor cores in NCHW pays cuDNN's layout transposes
// (cost.go, transposes): in forward the input, filter and output, each
// read and written once; in backward the weight gradient's call does the
// same (the input is the batch: no data gradient). In channels-last, or
// off the tensor cores (float32 on a GPU without TF32), none. Worked on
// the made-up GPU (1 TB/s): x and the output are 32·64·56·56 halves, the
// filter 64·64·3·3.
func TestNCHWTransposes(t *testing.T) {
	g := build(t, "conv", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{32, 64, 56, 56}, graph.F32)
		y := b.Target("y", graph.Shape{32}, graph.I64)
		h := b.Conv2d("conv", x, 64, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}})
		h = b.Mean("pool", h, 2, 3)
		b.CrossEntropy("loss", h, y)
	})
	bound := func(prec train.Precision, cl bool, r gpu.Rates) Estimate {
		s, err := train.Setup{Precision: prec, Optimizer: train.Optimizer{Kind: train.SGD}, Steps: 1, ChannelsLast: cl}.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := train.Simulate(g, s)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Step(Input{Graph: g, Ops: sum.Ops, Setup: s, Rates: r, Batch: 32})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const x, w = 32 * 64 * 56 * 56, 64 * 64 * 3 * 3
	want := 2 * float64(x+w+x) * 2 / testRates.Bandwidth // read and write, 2 bytes each
	nchw, nhwc := bound(train.Mixed16, false, testRates), bound(train.Mixed16, true, testRates)
	for _, p := range []Part{Forward, Backward} {
		if d := nchw.Bound.By[p] - nhwc.Bound.By[p]; math.Abs(d-want) > 1e-12 {
			t.Errorf("16-mixed %s: NCHW costs %.9g s more than channels-last, want %.9g s", p, d, want)
		}
	}
	if nchw.Seconds <= nhwc.Seconds {
		t.Errorf("calibrated: NCHW %g s, channels-last %g s: the transposes cost nothing", nchw.Seconds, nhwc.Seconds)
	}
	noTF32 := testRates
	noTF32.TF32 = 0
	a, b := bound(train.FP32, false, noTF32), bound(train.FP32, true, noTF32)
	if a.Bound.Seconds != b.Bound.Seconds || a.Seconds != b.Seconds {
		t.Errorf("float32 off the tensor cores: NCHW %g s, channels-last %g s; want no transposes", a.Seconds, b.Seconds)
	}
}

// A timed pass finishes into the same step as a fresh timing, whatever
// the accumulation and optimizer it is finished with and in whatever
// order: finishing leaves the pass as it was.
func TestPassFinishesLikeStep(t *testing.T) {
	g := build(t, "mlp", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{64, 256}, graph.F32)
		y := b.Target("y", graph.Shape{64, 256}, graph.F32)
		for i := 0; i < 3; i++ {
			b.Block("block", func() { x = b.Act(graph.GELU, "act", b.Linear("fc", x, 256, true), false) })
		}
		b.MSELoss("loss", x, y)
	})
	s0, err := train.Setup{Steps: 1}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := train.Simulate(g, s0)
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Graph: g, Ops: sum.Ops, Setup: s0, Rates: testRates, Batch: 64}
	p, err := TimePass(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []train.Setup{
		{Accumulate: 8, Optimizer: train.Optimizer{Kind: train.AdamW, Impl: train.Fused}},
		{Accumulate: 1, Optimizer: train.Optimizer{Kind: train.SGD, Momentum: 0.9}},
		{Accumulate: 3, Optimizer: train.Optimizer{Kind: train.Adam, Impl: train.ForLoop}},
		{Accumulate: 8, Optimizer: train.Optimizer{Kind: train.AdamW, Impl: train.Fused}},
	} {
		s, err := s.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		in.Setup = s
		want, err := Step(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Step(in)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("accumulation %d, %s %s: finished pass %+v, fresh step %+v", s.Accumulate, s.Optimizer.Kind, s.Optimizer.Impl, got, want)
		}
	}
}

// conv_transpose2d of [2, 8, 16, 16] by a [8, 4, 2, 2] weight, stride 2:
// every input pixel meets every weight element once, 2·(2·16·16)·8·(4·2·2)
// = 131,072 operations, as many in the input's gradient (the mirrored
// convolution's forward) and in the weight's (its backward-filter), the
// output [2, 4, 32, 32]. Instance norm and LeakyReLU are elementwise.
func TestConvTransposeFLOPs(t *testing.T) {
	g := build(t, "up", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{2, 8, 16, 16}, graph.F32)
		y := b.Target("y", graph.Shape{2, 4, 32, 32}, graph.F32)
		x = b.Conv2d("conv", x, 8, graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}})
		b.Push("up")
		w := b.Param("weight", graph.Shape{8, 4, 2, 2})
		b.Pop()
		h := b.ConvTranspose2dWith("up", x, w, graph.None, graph.Conv2dOpts{Stride: [2]int64{2, 2}}, [2]int64{})
		if s := b.Shape(h); s.String() != graph.Shape([]int64{2, 4, 32, 32}).String() {
			t.Fatalf("conv_transpose2d output %v, want [2 4 32 32]", s)
		}
		b.MSELoss("loss", h, y)
	})
	fwd, bwd := flops(t, g, "up", f32())
	if fwd != 131072 || bwd != 2*131072 {
		t.Errorf("conv_transpose2d: forward %g, backward %g; want 131072 and 262144", fwd, bwd)
	}
}

// The loop's own work per micro-batch (train.Setup.LoopOverhead) adds to
// the step once per micro-batch, lowers MFU in proportion, and leaves the
// kernels' parts and the bound as they were.
func TestLoopOverhead(t *testing.T) {
	g := build(t, "mlp", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{64, 256}, graph.F32)
		y := b.Target("y", graph.Shape{64, 256}, graph.F32)
		b.MSELoss("loss", b.Linear("fc", x, 256, true), y)
	})
	for _, acc := range []int{1, 4} {
		step := func(over time.Duration) Estimate {
			return simulateAndTime(t, g, train.Setup{Steps: 1, Accumulate: acc, LoopOverhead: over}, 64)
		}
		plain, loop := step(0), step(3*time.Millisecond)
		want := plain.Seconds + float64(acc)*0.003
		if math.Abs(loop.Seconds-want) > 1e-12 || loop.Loop != float64(acc)*0.003 || loop.By != plain.By || loop.Bound != plain.Bound {
			t.Errorf("accumulation %d: %g s with 3 ms a micro-batch, %g s without; want %g", acc, loop.Seconds, plain.Seconds, want)
		}
		if math.Abs(loop.MFU*loop.Seconds-plain.MFU*plain.Seconds) > 1e-15 {
			t.Errorf("accumulation %d: MFU %g with the loop, %g without", acc, loop.MFU, plain.MFU)
		}
	}
	if _, err := (train.Setup{LoopOverhead: -time.Millisecond}).Normalize(); err == nil {
		t.Error("a negative loop overhead is accepted")
	}
}
