package train

import (
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
)

func evalRun(t *testing.T, g *graph.Graph, s Setup, forwards int) (*Simulator, *trace.Trace) {
	t.Helper()
	sim, err := NewInference(g, s)
	if err != nil {
		t.Fatal(err)
	}
	for range forwards {
		if err := sim.Forward(g); err != nil {
			t.Fatal(err)
		}
	}
	tr := sim.Trace()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	return sim, tr
}

// An MLP (16 → 32, ReLU, 32 → 8, cross-entropy) in eval mode under
// no_grad, batch 4, float32 on the CPU, worked out by hand. Parameters
// 16·32+32 + 32·8+8 = 808 floats, 3232 B; batch x 256 B and y 32 B.
//
//	forward 1: 3520 + linear 512 = 4032, + relu 512 = 4544 (the peak so
//	far), the linear's output freed at its last use (nothing saves it) →
//	4032, + head 128 → 4160, relu's output freed → 3648, the 0-d loss +4,
//	log_softmax +128 and total_weight +4 (freed with the op) → 3656,
//	logits freed → 3524: parameters, batch and loss.
//	forward 2: the new batch lands (+288) before the old is released, then
//	the same with the old loss still held: the relu peak is 4544 + 4 = 4548.
func TestEvalHandWorked(t *testing.T) {
	g := mlp(t, 4, 16, 32, 1, 8)
	sim, tr := evalRun(t, g, Setup{CPU: true, Profile: mustProfile(t, "2.5")}, 2)
	sum := sim.Summary()
	if sum.PeakRequested != 4548 {
		t.Errorf("peak %d, want 4548", sum.PeakRequested)
	}
	if sum.ActivationsBytes != 0 || sum.GradientsBytes != 0 || sum.OptimizerStateBytes != 0 {
		t.Errorf("saved %d, gradients %d, optimizer state %d: want nothing under no_grad", sum.ActivationsBytes, sum.GradientsBytes, sum.OptimizerStateBytes)
	}
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && (e.Category == trace.Gradient || e.Category == trace.OptimizerState || e.Phase == trace.Backward) {
			t.Errorf("event %+v: no backward or optimizer in eval", e)
		}
	}
	if n := liveAtEnd(tr); n != 3524 {
		t.Errorf("%d bytes alive at the end, want 3524 (parameters, batch, loss)", n)
	}
}

// Under no_grad autocast still caches its parameter casts: cached_cast
// checks the parameter's requires_grad flag, which no_grad leaves set. An
// eval loop enters autocast per batch, so each forward makes float16
// copies of every weight and bias once — W1 16·32·2 = 1024 B, b1 64 B,
// W2 32·8·2 = 512 B, b2 16 B — kept until the region ends; a frozen
// parameter is not cached, and is copied at each use, for as long as the
// op runs.
func TestEvalAutocastCache(t *testing.T) {
	g := mlp(t, 4, 16, 32, 1, 8)
	_, tr := evalRun(t, g, Setup{Precision: Mixed16, Profile: mustProfile(t, "2.5")}, 2)
	cached := map[int64]int{}
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && e.Category == trace.CastCache {
			cached[e.Size]++
		}
	}
	for _, size := range []int64{1024, 64, 512, 16} {
		if cached[size] != 2 {
			t.Errorf("%d cached copies of %d bytes, want 2 (one a forward)", cached[size], size)
		}
	}
	for i := range g.Tensors {
		if g.Tensors[i].Role == graph.Parameter {
			g.Tensors[i].RequiresGrad = false
		}
	}
	_, tr = evalRun(t, g, Setup{Precision: Mixed16, Profile: mustProfile(t, "2.5")}, 2)
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && e.Category == trace.CastCache {
			t.Errorf("frozen parameters: a cached copy of %d bytes", e.Size)
		}
	}
}

// model.eval(): dropout returns its input, so nothing is allocated at it,
// where training allocates its output and its mask.
func TestEvalDropoutIsIdentity(t *testing.T) {
	b := graph.NewBuilder("dropout-mlp")
	x := b.Input("x", graph.Shape{4, 16}, graph.F32)
	y := b.Target("y", graph.Shape{4}, graph.I64)
	h := b.Act(graph.ReLU, "relu", b.Linear("linear", x, 32, true), false)
	h = b.Dropout("dropout", h, 0.1, false)
	b.CrossEntropy("loss", b.Linear("head", h, 8, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	allocsAt := func(tr *trace.Trace) int {
		n := 0
		for _, e := range tr.Events {
			if e.Action == trace.Alloc && e.Phase == trace.Forward && tr.SiteName(e.Site) == "dropout" {
				n++
			}
		}
		return n
	}
	_, tr := evalRun(t, g, Setup{Profile: mustProfile(t, "2.5")}, 1)
	if n := allocsAt(tr); n != 0 {
		t.Errorf("eval: %d allocations at the dropout, want none", n)
	}
	trained, _, err := Simulate(g, Setup{Profile: mustProfile(t, "2.5"), Steps: 1})
	if err != nil {
		t.Fatal(err)
	}
	if n := allocsAt(trained); n != 2 {
		t.Errorf("training: %d allocations at the dropout, want 2 in forward (output and mask)", n)
	}
}

// A static cache's decode steps kept once as a repetition are the steps
// simulated one by one: the same events once written out, and the same
// replay, step by step, whether the allocator skips the copies or not.
func TestStaticDecodeRepeats(t *testing.T) {
	tc := models.TransformerConfig{Arch: "llama", VocabSize: 64, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
		Intermediate: 64, Activation: "silu"}
	for _, beams := range []int64{1, 3} {
		gen := Generation{Prompt: 5, NewTokens: 12, Batch: 2, Beams: beams, Static: true}
		run := func(repeat bool) (*trace.Trace, *alloc.Timeline) {
			sim, _ := generateToy(t, tc, gen, MixedBF16, repeat)
			tr := sim.CompactTrace()
			if repeat && len(tr.Repeats) != 1 {
				t.Fatalf("beams %d: %d repetitions, want 1", beams, len(tr.Repeats))
			}
			tl, err := alloc.Replay(tr, alloc.Config{}, alloc.Device{Capacity: 1 << 40, Total: 1 << 40}, alloc.ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			// with beams the reorder's copies move the cache from place
			// to place, and the state may not come back: then the copies
			// are replayed (and must still agree)
			if repeat && beams == 1 && tl.Skipped == 0 {
				t.Errorf("beams %d: the replay skipped nothing", beams)
			}
			return sim.Trace(), tl
		}
		tr1, tl1 := run(false)
		tr2, tl2 := run(true)
		if !slices.Equal(tr1.Events, tr2.Events) {
			t.Errorf("beams %d: the repeated trace differs from the simulated one", beams)
		}
		// a step for each forward, and a partial one: the end of the
		// autocast region frees the weight copies
		if len(tl1.Steps) != int(gen.Forwards())+1 || !slices.Equal(tl1.Steps, tl2.Steps) || tl1.PeakAllocated != tl2.PeakAllocated ||
			tl1.PeakReserved != tl2.PeakReserved || tl1.PeakAllocatedEvent != tl2.PeakAllocatedEvent {
			t.Errorf("beams %d: replays differ:\n%+v\n%+v", beams, tl1.Steps, tl2.Steps)
		}
	}
}

// A dynamic cache's decode steps extrapolated as a growing repetition are the steps
// simulated one by one: the same events, the same live-bytes peaks, the
// same cache at the end — across precisions, beams, the eager path (its
// mask grows too) and releases whose prefill differs.
func TestDynamicDecodeExtrapolates(t *testing.T) {
	cases := []struct {
		name    string
		prec    Precision
		beams   int64
		eager   bool
		version string
	}{
		{"fp32", FP32, 1, false, ""},
		{"bf16-mixed 3 beams", MixedBF16, 3, false, ""},
		{"bf16-true eager", TrueBF16, 1, true, ""},
		{"4.44 beams", FP32, 2, false, "4.44"},
		{"4.53 eager 2 beams", MixedBF16, 2, true, "4.53"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := models.TransformerConfig{Arch: "llama", VocabSize: 64, Hidden: 32, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 8,
				Intermediate: 64, Activation: "silu", Version: c.version}
			if c.eager {
				tc.AttnImpl = "eager"
			}
			gen := Generation{Prompt: 5, NewTokens: 14, Batch: 2, Beams: c.beams}
			full, gs1 := generateToy(t, tc, gen, c.prec, false)
			fast, gs2 := generateToy(t, tc, gen, c.prec, true)
			if fast.extrapolated != gen.NewTokens-1-5 {
				t.Fatalf("%d steps extrapolated, want %d", fast.extrapolated, gen.NewTokens-1-5)
			}
			// the replay of the repetition (its copies made one by one)
			// against the replay of the simulated steps
			dev := alloc.Device{Capacity: 1 << 40, Total: 1 << 40}
			tl1, err := alloc.Replay(full.CompactTrace(), alloc.Config{}, dev, alloc.ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tl2, err := alloc.Replay(fast.CompactTrace(), alloc.Config{}, dev, alloc.ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(fast.CompactTrace().Repeats) != 1 || !slices.Equal(tl1.Steps, tl2.Steps) || tl1.PeakAllocated != tl2.PeakAllocated ||
				tl1.PeakReserved != tl2.PeakReserved || tl1.PeakAllocatedEvent != tl2.PeakAllocatedEvent || tl1.AtPeak != tl2.AtPeak {
				t.Errorf("replays differ: peaks %d/%d and %d/%d", tl1.PeakAllocated, tl2.PeakAllocated, tl1.PeakReserved, tl2.PeakReserved)
			}
			if !slices.Equal(full.Trace().Events, fast.Trace().Events) {
				t.Error("the written-out steps differ from the simulated ones")
			}
			if full.Summary().PeakRequested != fast.Summary().PeakRequested || full.Summary().PhasePeakRequested != fast.Summary().PhasePeakRequested ||
				gs1 != gs2 || full.live != fast.live || full.next != fast.next {
				t.Errorf("peak %d / %d, phases %v / %v, cache %+v / %+v, live %d / %d, next id %d / %d",
					full.Summary().PeakRequested, fast.Summary().PeakRequested, full.Summary().PhasePeakRequested, fast.Summary().PhasePeakRequested,
					gs1, gs2, full.live, fast.live, full.next, fast.next)
			}
			if err := fast.Trace().Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// generateToy runs Generate on a llama-style config built by the Hugging
// Face builder, with the repetition of decode steps on or off.
func generateToy(t *testing.T, tc models.TransformerConfig, gen Generation, prec Precision, repeat bool) (*Simulator, GenerationSummary) {
	t.Helper()
	defer func(old bool) { repeatMicroBatches = old }(repeatMicroBatches)
	repeatMicroBatches = repeat
	build := func(seq, past int64) (*graph.Graph, error) {
		d := &models.Decode{Past: past, LogSoftmax: gen.Beams > 1}
		if gen.Static {
			d.StaticLen = gen.MaxLen()
		}
		return models.BuildTransformer("toy", tc, models.Config{Batch: gen.Rows(), Seq: seq, Decode: d})
	}
	prefill, err := build(gen.Prompt, 0)
	if err != nil {
		t.Fatal(err)
	}
	sim, gs, err := Generate(prefill, func(past int64) (*graph.Graph, error) { return build(1, past) },
		Setup{Precision: prec, Profile: mustProfile(t, "2.5")}, gen)
	if err != nil {
		t.Fatal(err)
	}
	return sim, gs
}

// A forward that returns its logits beside the loss (a Hugging Face
// ModelOutput, graph.Returned) keeps them to its end, and the loop's
// outputs variable keeps them through the next forward. The MLP of
// TestEvalHandWorked with its logits [4, 8] float32 (128 B) returned:
//
//	forward 1 ends with parameters 3232, batch 288, loss 4 and the
//	logits 128: 3652.
//	forward 2: the new batch lands and the old goes (3652), linear +512,
//	relu +512 → 4676, the peak; linear's output goes (4164), head +128,
//	relu's output goes (3780), loss +4, log_softmax +128 and total_weight
//	+4 → 3916, those two go → 3784, then the old loss and logits (the old
//	output, rebound) → 3652.
func TestEvalReturnedLogits(t *testing.T) {
	g := returnedMLP(t, 4, 16, 32, 8)
	for _, c := range []struct {
		forwards  int
		peak, end int64
	}{
		{1, 4544, 3652}, // forward 1's peak is TestEvalHandWorked's
		{2, 4676, 3652},
		{3, 4676, 3652},
	} {
		sim, tr := evalRun(t, g, Setup{CPU: true, Profile: mustProfile(t, "2.5")}, c.forwards)
		if p := sim.Summary().PeakRequested; p != c.peak {
			t.Errorf("%d forwards: peak %d, want %d", c.forwards, p, c.peak)
		}
		if n := liveAtEnd(tr); n != c.end {
			t.Errorf("%d forwards: %d bytes alive at the end, want %d", c.forwards, n, c.end)
		}
	}
}

// Autocast's cache_enabled=False, inference mode and a region around the
// loop, on the MLP of TestEvalAutocastCache (float16 copies W1 1024 B, b1
// 64 B, W2 512 B, b2 16 B: 1616 B). Forward 2 starts with parameters
// 3232, batch 288 and loss 4: 3524, and the new batch replaces the old.
//
//	cache on, a region per forward: fc1 makes x's copy 128, W1 1024, b1 64
//	and its output 256 (4996), x's copy goes (4868); relu 256 (5124), fc1's
//	output goes (4868); head's W2 512, b2 16 and output 64: 5460, the
//	peak. The copies go when the region ends: 3524.
//	inference mode: the same in the releases that cache there (2.5).
//	cache off: fc1's copies go with it: 4996 is the peak (relu: 3524 + 256
//	+ 256 = 4036; head: 3524 + 256 + 512 + 16 + 64 = 4372).
//	around the loop: forward 1's copies stay: 3524 + 1616, x's copy 128
//	and fc1's output 256 (5524), the copy goes, relu 256: 5652, the peak;
//	the 1616 B are alive after the loop until EndAutocast.
//	inference mode in a release that skips the cache there: as cache off.
func TestEvalAutocastRegion(t *testing.T) {
	g := mlp(t, 4, 16, 32, 1, 8)
	p := mustProfile(t, "2.5")
	for _, c := range []struct {
		name           string
		ac             Autocast
		peak, end, out int64
	}{
		{"per forward", Autocast{}, 5460, 3524, 3524},
		{"cache off", Autocast{CacheOff: true}, 4996, 3524, 3524},
		{"inference mode", Autocast{InferenceMode: true}, 5460, 3524, 3524},
		{"around the loop", Autocast{AroundLoop: true}, 5652, 3524 + 1616, 3524},
		{"inference mode, no cache there", Autocast{InferenceMode: true}, 4996, 3524, 3524},
	} {
		t.Run(c.name, func(t *testing.T) {
			prof := *p
			prof.AutocastCacheOffInInferenceMode = strings.HasSuffix(c.name, "no cache there")
			sim, tr := evalRun(t, g, Setup{Precision: Mixed16, Profile: &prof, CPU: true, Autocast: c.ac}, 2)
			if n := liveAtEnd(tr); n != c.end {
				t.Errorf("%d bytes alive after the loop, want %d", n, c.end)
			}
			if err := sim.EndAutocast(); err != nil {
				t.Fatal(err)
			}
			if n := liveAtEnd(sim.Trace()); n != c.out {
				t.Errorf("%d bytes alive after the region, want %d", n, c.out)
			}
			if sim.Summary().PeakRequested != c.peak {
				t.Errorf("peak %d, want %d", sim.Summary().PeakRequested, c.peak)
			}
		})
	}
}

// returnedMLP is Linear(in, hidden) → ReLU → Linear(hidden, classes) on a
// batch of n, whose logits the model returns beside the cross-entropy
// loss, as a transformers model returns them (graph.Builder.Return).
func returnedMLP(t *testing.T, n, in, hidden, classes int64) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("mlp-returned")
	x := b.Input("x", graph.Shape{n, in}, graph.F32)
	y := b.Target("y", graph.Shape{n}, graph.I64)
	h := b.Act(graph.ReLU, "relu", b.Linear("fc1", x, hidden, true), false)
	logits := b.Linear("head", h, classes, true)
	b.Return(logits)
	b.CrossEntropy("loss", logits, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}
