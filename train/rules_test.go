package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
)

// The seed CNN, worked out by hand per sample (float32):
//
//	relu1 result [32,32,32]            131,072 B (conv1's output dies after relu)
//	pool1 indices [32,16,16] int64      65,536 B (pool1 also saves relu1's result)
//	pool1 output, saved by conv2        32,768 B
//	relu2 result [64,16,16]             65,536 B
//	pool2 indices [64,8,8] int64        32,768 B
//	pool2 output, saved by fc (a view)  16,384 B
//	log_softmax result [10]                 40 B
//
// 344,104 B a sample, plus nll_loss's 0-d total_weight (4 B). PyTorch 1.13
// reports 344,108 at batch 1 (testdata/reference/torch-cpu.json).
func TestSimpleConvHandComputed(t *testing.T) {
	for _, b := range []int64{1, 8, 32} {
		g, err := models.SimpleConv(b)
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "1.13"), Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := b*344104 + 4; sum.ActivationsBytes != want {
			t.Errorf("batch %d: saved %d, want %d", b, sum.ActivationsBytes, want)
		}
		// conv1 3·32·9+32, conv2 32·64·9+64, fc 4096·10+10
		if want := int64(896 + 18496 + 40970); sum.ParamCount != want {
			t.Errorf("params %d, want %d", sum.ParamCount, want)
		}
	}
}

// Under autocast (16-mixed) the MLP's Linear layers use fp16 copies of their
// weights and biases (the weight-cast cache: 2 bytes a parameter), the
// input batch is cast to fp16 and that copy is what addmm saves, ReLU saves
// fp16 results, log_softmax keeps fp16 (cross_entropy passes the dtype),
// and nll_loss, on the fp32 list, saves an fp32 copy:
//
//	32·784·2 + 4·32·1024·2 + 32·10·2 + 32·10·4 + 4 = 314,244 bytes.
func TestAutocastMLP(t *testing.T) {
	g := mlp(t, 32, 784, 1024, 4, 10)
	_, sum, err := Simulate(g, Setup{Precision: Mixed16, Profile: mustProfile(t, "2.5"), Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	const params = 784*1024 + 1024 + 3*(1024*1024+1024) + 1024*10 + 10
	if sum.CastCacheBytes != 2*params {
		t.Errorf("autocast cache %d, want %d", sum.CastCacheBytes, 2*params)
	}
	if want := int64(32*784*2 + 4*32*1024*2 + 32*10*2 + 32*10*4 + 4); sum.ActivationsBytes != want {
		t.Errorf("saved %d, want %d", sum.ActivationsBytes, want)
	}
	if sum.ParametersBytes != 4*params || sum.GradientsBytes != 4*params {
		t.Errorf("mixed precision keeps fp32 parameters and gradients: %d, %d", sum.ParametersBytes, sum.GradientsBytes)
	}
	// bf16-true: parameters, gradients and Adam state in bf16.
	_, sum, err = Simulate(g, Setup{Precision: TrueBF16, Profile: mustProfile(t, "2.5"), Steps: 1, Optimizer: Optimizer{Kind: Adam}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ParametersBytes != 2*params || sum.GradientsBytes != 2*params || sum.OptimizerStateBytes != 4*params || sum.CastCacheBytes != 0 {
		t.Errorf("bf16-true: params %d grads %d state %d cache %d", sum.ParametersBytes, sum.GradientsBytes, sum.OptimizerStateBytes, sum.CastCacheBytes)
	}
}

// Optimizer state, created at the first step: SGD with momentum keeps one
// buffer per parameter, Adam two (three with amsgrad). Adam's step count is
// a 0-d float32 tensor per parameter: on the device for fused, on the host
// otherwise, which is the device itself in a CPU run.
func TestOptimizerState(t *testing.T) {
	g := mlp(t, 8, 4, 8, 1, 2) // W1 32, b1 8, W2 16, b2 2: 4 tensors, 58 floats
	const p = 58 * 4
	cases := []struct {
		o    Optimizer
		cpu  bool
		want int64
	}{
		{Optimizer{Kind: SGD}, false, 0},
		{Optimizer{Kind: SGD, Momentum: 0.9}, false, p},
		{Optimizer{Kind: Adam}, false, 2 * p},
		{Optimizer{Kind: AdamW, Impl: ForLoop}, false, 2 * p},
		{Optimizer{Kind: Adam, AMSGrad: true}, false, 3 * p},
		{Optimizer{Kind: Adam, Impl: Fused}, false, 2*p + 4*4},
		{Optimizer{Kind: Adam, Impl: ForLoop}, true, 2*p + 4*4},
		{Optimizer{Kind: SGD, Momentum: 0.9}, true, p},
	}
	for _, c := range cases {
		_, sum, err := Simulate(g, Setup{CPU: c.cpu, Optimizer: c.o})
		if err != nil {
			t.Fatal(err)
		}
		if sum.OptimizerStateBytes != c.want {
			t.Errorf("%+v: state %d, want %d", c.o, sum.OptimizerStateBytes, c.want)
		}
	}
}

// Foreach Adam's sqrt temporaries exist for all parameters at once; the
// for-loop makes them one parameter at a time. On a model whose parameters
// dominate, the foreach peak is higher by about the parameters' size less
// the largest one.
func TestForeachPeak(t *testing.T) {
	g := mlp(t, 1, 512, 512, 4, 512)
	peak := func(impl Impl) int64 {
		tr, _, err := Simulate(g, Setup{CPU: true, Optimizer: Optimizer{Kind: Adam, Impl: impl}, Steps: 2})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := peakLive(tr)
		return p
	}
	fe, fl, fu := peak(Foreach), peak(ForLoop), peak(Fused)
	if !(fe > fl && fl > fu) {
		t.Errorf("peaks: foreach %d, forloop %d, fused %d; want foreach > forloop > fused", fe, fl, fu)
	}
	// 5 Linear(512, 512) layers: 5·(512·512+512)·4 bytes of parameters; the
	// for-loop holds two temporaries of the largest (the sqrt and the
	// division), foreach one of every parameter.
	const layer = (512*512 + 512) * 4
	if d := fe - fl; d < 5*layer-2*layer-4096 || d > 5*layer {
		t.Errorf("foreach − forloop peak = %d, want about %d", d, 3*layer)
	}
}

// Checkpointing a block keeps only its input: a block of two Linear+ReLU
// pairs saves two ReLU results without checkpointing and none with it.
func TestCheckpointing(t *testing.T) {
	const bsz, h = 16, 64
	b := graph.NewBuilder("ckpt")
	x := b.Input("x", graph.Shape{bsz, h}, graph.F32)
	y := b.Target("y", graph.Shape{bsz}, graph.I64)
	for i := 0; i < 2; i++ {
		b.Block("block", func() {
			for j := 0; j < 2; j++ {
				x = b.Linear("linear", x, h, true)
				x = b.Act(graph.ReLU, "relu", x, false)
			}
		})
	}
	x = b.Linear("head", x, 10, true)
	b.CrossEntropy("loss", x, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	act := int64(bsz * h * 4)
	loss := int64(bsz*10*4 + 4)
	for _, c := range []struct {
		ckpt Checkpoint
		want int64
	}{
		// four ReLU results
		{Checkpoint{}, 4*act + loss},
		// block 0's input is the batch (excluded); block 1's input is
		// block 0's output; the head saves block 1's output.
		{FullCheckpoint, 2*act + loss},
		// every second block: block 0 alone is wrapped, its first ReLU
		// result is recomputed; block 1 saves its input and both ReLU
		// results (the second also for the head).
		{Checkpoint{Every: 2}, 3*act + loss},
		// every third block is again block 0 alone
		{Checkpoint{Every: 3}, 3*act + loss},
		// no attention core: nothing wrapped
		{Checkpoint{Attention: true}, 4*act + loss},
	} {
		tr, sum, err := Simulate(g, Setup{CPU: true, Checkpoint: c.ckpt, Optimizer: Optimizer{Kind: SGD}, Steps: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		if sum.ActivationsBytes != c.want {
			t.Errorf("checkpointing %s: saved %d, want %d", c.ckpt, sum.ActivationsBytes, c.want)
		}
	}
}

// A reentrant checkpoint holds, through its nested backward, what
// CheckpointFunction.backward's frame keeps (torch/utils/checkpoint.py):
// the recomputed output and the incoming gradient. A block of two
// bias-free Linears (h×h weights, W bytes) on a batch that requires
// grad, act bytes an activation: after the head's backward, B bytes are
// alive, g (the block output's gradient) among them. Without reentrance
// the recomputed a1 (saved by the second Linear) and a2 (read by nothing
// inside, dropped) come and go; the second Linear's backward makes ga1
// and gW2 and lets go of g and a1, so B − g + ga1 + gW2 = B + W, and the
// first's gW1 and the batch's gradient bring B + 2W + act, the peak. With
// reentrance a2 and g stay to the block's end: B + 2W + 3·act (the
// batch's gradient is the detached input's .grad until the block returns).
func TestReentrantCheckpointHolds(t *testing.T) {
	const bsz, h = 16, 64
	b := graph.NewBuilder("ckpt")
	x := b.Input("x", graph.Shape{bsz, h}, graph.F32)
	y := b.Target("y", graph.Shape{bsz}, graph.I64)
	// a batch that requires grad, so that the block is handed a tensor
	// that does (a block on a plain batch would train nothing under
	// reentrance: TestReentrantCutOff)
	b.TensorAt(x).RequiresGrad = true
	b.Block("block", func() {
		x = b.Linear("l1", x, h, false)
		x = b.Linear("l2", x, h, false)
	})
	x = b.Linear("head", x, 10, true)
	b.CrossEntropy("loss", x, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	const act = bsz * h * 4
	peak := func(c Checkpoint) int64 {
		tr, _, err := Simulate(g, Setup{Checkpoint: c, Optimizer: Optimizer{Kind: SGD}, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		size := map[int64]int64{}
		var live, top int64
		for _, e := range tr.Events {
			switch e.Action {
			case trace.Alloc:
				size[e.ID] = e.Size
				live += e.Size
			case trace.Free:
				live -= size[e.ID]
			}
			if e.Phase == trace.Backward {
				top = max(top, live)
			}
		}
		return top
	}
	if d := peak(Checkpoint{Every: 1, Reentrant: true}) - peak(FullCheckpoint); d != 2*act {
		t.Errorf("reentrant − non-reentrant backward peak = %d, want %d (the recomputed output and the incoming gradient)", d, 2*act)
	}
}

// Gradient accumulation: two micro-batches of b cost more than one of b
// (the second backward's gradients coexist with .grad before the in-place
// add) but less than one micro-batch of 2b, whose activations are double.
func TestAccumulation(t *testing.T) {
	peak := func(batch int64, acc int) int64 {
		g := mlp(t, batch, 256, 256, 2, 10)
		tr, sum, err := Simulate(g, Setup{CPU: true, Accumulate: acc, Optimizer: Optimizer{Kind: SGD}, Steps: 2})
		if err != nil {
			t.Fatal(err)
		}
		if sum.GradientsBytes != 4*sum.ParamCount {
			t.Errorf("accumulate %d: gradients %d, want %d", acc, sum.GradientsBytes, 4*sum.ParamCount)
		}
		p, _ := peakLive(tr)
		return p
	}
	one, two, double := peak(512, 1), peak(512, 2), peak(1024, 1)
	if !(one < two && two < double) {
		t.Errorf("peaks: b=512 %d, b=512×2 accumulated %d, b=1024 %d", one, two, double)
	}
}

// x + x hands the one gradient tensor to x twice; the engine sums the two
// arrivals into a new tensor (old_var + var: the first is not the only
// holder of itself), in 1.13 and in releases that add in place alike.
func TestAddSameTensorSums(t *testing.T) {
	for _, v := range []string{"1.13", "2.5"} {
		b := graph.NewBuilder("double")
		x := b.Input("x", graph.Shape{4, 3}, graph.F32)
		y := b.Target("y", graph.Shape{4}, graph.I64)
		h := b.Linear("l1", x, 8, true)
		s := b.Add("add", h, h)
		b.CrossEntropy("loss", b.Linear("l2", s, 2, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, v), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
		if err != nil {
			t.Fatal(err)
		}
		var sums []int64
		for _, e := range tr.Events {
			if e.Action == trace.Alloc && e.Phase == trace.Backward && tr.SiteName(e.Site) == "add" {
				sums = append(sums, e.Size)
			}
		}
		if len(sums) != 1 || sums[0] != 4*8*4 {
			t.Errorf("%s: the add's backward allocates %v, want one sum of h's %d bytes", v, sums, 4*8*4)
		}
	}
}

// Foreach Adam with L2 decay keeps the decayed gradients, the square roots
// and (1.13, 2.0) denom alive together until _multi_tensor_adam returns.
func TestForeachAdamL2Temporaries(t *testing.T) {
	g := mlp(t, 8, 4, 8, 1, 2) // 58 floats of parameters in 4 tensors
	const p = 58 * 4
	for _, c := range []struct {
		v    string
		sets int64
	}{{"1.13", 3}, {"2.5", 2}} {
		tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, c.v), Steps: 1,
			Optimizer: Optimizer{Kind: Adam, Impl: Foreach, WeightDecay: 0.1}})
		if err != nil {
			t.Fatal(err)
		}
		live, err := trace.LiveByStep(tr)
		if err != nil {
			t.Fatal(err)
		}
		// The optimizer phase starts with the gradients made; the first
		// step adds the state (2 sets and 4 step counters on the CPU).
		ph := live[0].Phases[trace.OptimizerStep]
		start := live[0].Phases[trace.Backward].End
		if got, want := ph.Peak-start, 2*p+4*4+c.sets*p; got != want {
			t.Errorf("%s: optimizer peak %d above the backward's end, want %d (%d temporary sets)", c.v, got, want, c.sets)
		}
	}
}

func ckptOf(on bool) Checkpoint {
	if on {
		return FullCheckpoint
	}
	return Checkpoint{}
}

func TestParseCheckpoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Checkpoint
		err  bool
	}{
		{"none", Checkpoint{}, false},
		{"full", FullCheckpoint, false},
		{"every-1", FullCheckpoint, false},
		{"every-4", Checkpoint{Every: 4}, false},
		{"every:2", Checkpoint{Every: 2}, false},
		{"attention", Checkpoint{Attention: true}, false},
		{"every-2+attention", Checkpoint{Every: 2, Attention: true}, false},
		{"Full", FullCheckpoint, false},
		{"every-0", Checkpoint{}, true},
		{"every-x", Checkpoint{}, true},
		{"sometimes", Checkpoint{}, true},
		{"none+attention", Checkpoint{}, true},
		{"full-reentrant", Checkpoint{Every: 1, Reentrant: true}, false},
		{"every-2-reentrant+attention", Checkpoint{Every: 2, Reentrant: true, Attention: true}, false},
		{"hf", Checkpoint{Every: 1, Library: true, Reentrant: true}, false},
		{"hf-non-reentrant", Checkpoint{Every: 1, Library: true}, false},
		{"hf+attention", Checkpoint{}, true},
		{"timm", Checkpoint{Every: 1, Timm: true, Reentrant: true}, false},
		{"timm-non-reentrant", Checkpoint{Every: 1, Timm: true}, false},
		{"timm+attention", Checkpoint{}, true},
		{"attention-reentrant", Checkpoint{}, true},
		{"none-reentrant", Checkpoint{}, true},
	} {
		got, err := ParseCheckpoint(c.in)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("ParseCheckpoint(%q) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.err)
		}
		if !c.err {
			if back, err := ParseCheckpoint(got.String()); err != nil || back != got {
				t.Errorf("%q: String %q reads back as %v, %v", c.in, got.String(), back, err)
			}
		}
	}
}

// ParseCheckpoint never panics, and what it accepts prints back as itself.
func FuzzParseCheckpoint(f *testing.F) {
	for _, s := range []string{"none", "full", "every-3", "attention", "every-2+attention", "every-", "every-99999999999999999999", "+", "none+none"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCheckpoint(s)
		if err != nil {
			return
		}
		if c.Every < 0 {
			t.Errorf("%q: negative period %d", s, c.Every)
		}
		back, err := ParseCheckpoint(c.String())
		if err != nil || back != c {
			t.Errorf("%q → %v → %q → %v, %v", s, c, c.String(), back, err)
		}
	})
}
