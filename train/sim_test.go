package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// mlp builds Linear(in,h), ReLU, (l-1)×[Linear(h,h), ReLU], Linear(h,c) with
// cross-entropy, the seed MLP.
func mlp(t testing.TB, batch, in, h, layers, classes int64) *graph.Graph {
	b := graph.NewBuilder("mlp")
	x := b.Input("x", graph.Shape{batch, in}, graph.F32)
	y := b.Target("y", graph.Shape{batch}, graph.I64)
	for i := int64(0); i < layers; i++ {
		b.Block("layer", func() {
			x = b.Linear("linear", x, h, true)
			x = b.Act(graph.ReLU, "relu", x, false)
		})
	}
	x = b.Linear("head", x, classes, true)
	b.CrossEntropy("loss", x, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustProfile(t testing.TB, v string) *profile.Profile {
	p, err := profile.Lookup(v)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// peakLive replays a trace counting requested bytes (no allocator
// rounding) and returns the peak and the live bytes by category at it.
func peakLive(tr *trace.Trace) (int64, [trace.NumCategories]int64) {
	live := map[int64]trace.Event{}
	var cur, peak int64
	var by, at [trace.NumCategories]int64
	for _, e := range tr.Events {
		switch e.Action {
		case trace.Alloc:
			live[e.ID] = e
			cur += e.Size
			by[e.Category] += e.Size
			if cur > peak {
				peak, at = cur, by
			}
		case trace.Free:
			a := live[e.ID]
			delete(live, e.ID)
			cur -= a.Size
			by[a.Category] -= a.Size
		}
	}
	return peak, at
}

// liveAtEnd is the requested bytes still allocated after the last event.
func liveAtEnd(tr *trace.Trace) int64 {
	var end int64
	for _, e := range liveEvents(tr) {
		end += e.Size
	}
	return end
}

// The seed MLP (784 → 4×1024 → 10) at batch 32, worked out by hand:
//
//	parameters: 784·1024+1024 + 3·(1024·1024+1024) + 1024·10+10 = 3,962,890
//	saved: each ReLU saves its result (B·1024 floats) and the next Linear
//	saves the same tensor; log_softmax saves B·10 floats, which nll_loss
//	saves again, with a 0-d float total_weight. The input batch and the
//	weights are excluded.  4·32·1024·4 + 32·10·4 + 4 = 525,572 bytes.
//	Adam state: two fp32 copies of the parameters, and on the CPU a 0-d
//	float32 step count for each of the 10 parameter tensors.
func TestMLPHandComputed(t *testing.T) {
	g := mlp(t, 32, 784, 1024, 4, 10)
	_, sum, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Optimizer: Optimizer{Kind: Adam}})
	if err != nil {
		t.Fatal(err)
	}
	const params = 784*1024 + 1024 + 3*(1024*1024+1024) + 1024*10 + 10
	checks := []struct {
		name      string
		got, want int64
	}{
		{"param count", sum.ParamCount, params},
		{"parameter bytes", sum.ParametersBytes, 4 * params},
		{"gradient bytes", sum.GradientsBytes, 4 * params},
		{"adam state", sum.OptimizerStateBytes, 2*4*params + 10*4},
		{"saved activations", sum.ActivationsBytes, 4*32*1024*4 + 32*10*4 + 4},
		{"batch", sum.BatchDataBytes, 32*784*4 + 32*8},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// Peak of the seed MLP with SGD (no momentum, so no state) in fp32, worked
// out by hand for a small network where each step is visible:
// Linear(4→8), ReLU, Linear(8→2), batch 16, counting requested bytes.
func TestTinyMLPPeak(t *testing.T) {
	g := mlp(t, 16, 4, 8, 1, 2)
	tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "2.5"), Optimizer: Optimizer{Kind: SGD}, Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	// params: W1 32, b1 8, W2 16, b2 2 floats = 58·4 = 232 bytes.
	// batch: x 16·4·4 = 256, y 16·8 = 128.
	// Forward holds h1 (16·8·4 = 512) until relu makes r1 (512, saved);
	// logits 16·2·4 = 128 freed after log_softmax makes logp (128, saved),
	// total_weight 4, loss 4.
	// Backward of the second step, where the peak is reached (step 1's
	// loss is still referenced until step 2's forward completes, and step
	// 2 starts with the batch of step 1 alive while its own is copied in):
	// the largest moment is inside cross-entropy's backward.
	peak, _ := peakLive(tr)
	if peak <= 232+256+128 {
		t.Fatalf("peak %d does not exceed parameters and batch", peak)
	}
	// The whole trace frees everything but parameters, the last batch,
	// the last loss: count what is live at the end.
	end := liveAtEnd(tr)
	// 232 (params) + 384 (batch) + 4 (loss) = 620: gradients were set to
	// None by zero_grad.
	if end != 620 {
		t.Errorf("live at end = %d bytes, want 620 (parameters, last batch, last loss)", end)
	}
}

// zero_grad before PyTorch 2.0 kept the gradients: they stay live.
func TestZeroGradProfile(t *testing.T) {
	g := mlp(t, 16, 4, 8, 1, 2)
	tr, _, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "1.13"), Optimizer: Optimizer{Kind: SGD}, Steps: 2})
	if err != nil {
		t.Fatal(err)
	}
	var gradLive int64
	for _, e := range liveEvents(tr) {
		if e.Category == trace.Gradient {
			gradLive += e.Size
		}
	}
	if gradLive != 232 {
		t.Errorf("gradients live at the end under 1.13 = %d, want 232 (all parameters)", gradLive)
	}
}

// StopAbove stops a step once its requested bytes pass the limit, with
// the peaks so far: each at least the limit and at most the whole step's.
// Below the whole step's peak it never stops.
func TestStopAbove(t *testing.T) {
	g := mlp(t, 512, 1024, 2048, 6, 10)
	s := Setup{Optimizer: Optimizer{Kind: Adam}, Accumulate: 3}
	run := func(limit int64) (Summary, error) {
		sim, err := New(g, s)
		if err != nil {
			t.Fatal(err)
		}
		sim.StopAbove(limit)
		for i := 0; i < 3; i++ {
			if err := sim.Step(g); err != nil {
				return sim.Summary(), err
			}
		}
		return sim.Summary(), nil
	}
	full, err := run(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(full.PeakRequested); err != nil {
		t.Errorf("stopped at the step's own peak: %v", err)
	}
	for _, limit := range []int64{full.PeakRequested - 1, full.PeakRequested / 2, full.PeakRequested / 8} {
		got, err := run(limit)
		if err != ErrOverLimit {
			t.Fatalf("limit %d of a %d-byte step: %v, want ErrOverLimit", limit, full.PeakRequested, err)
		}
		if got.PeakRequested <= limit || got.PeakRequested > full.PeakRequested {
			t.Errorf("limit %d: stopped with a requested peak of %d (the step's %d)", limit, got.PeakRequested, full.PeakRequested)
		}
	}
}

// Stopped tells a stopped simulation from a whole one.
func TestStoppedSays(t *testing.T) {
	g := mlp(t, 64, 128, 256, 2, 10)
	for _, limit := range []int64{0, 1} {
		sim, err := New(g, Setup{})
		if err != nil {
			t.Fatal(err)
		}
		sim.StopAbove(limit)
		err = sim.Step(g)
		if sim.Stopped() != (limit == 1) || (err != nil) != (limit == 1) {
			t.Errorf("limit %d: stopped %v, error %v", limit, sim.Stopped(), err)
		}
	}
}
