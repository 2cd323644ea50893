package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
)

// savedOf builds a graph with body between an input [n, h] and a Linear
// head with cross-entropy, and returns the saved bytes at the end of
// forward under the given profile on the CPU, less the head's share (its
// log-softmax result [n, 10] and total_weight).
func savedOf(t *testing.T, n, h int64, prof string, body func(b *graph.Builder, x graph.TensorID) graph.TensorID) (int64, *trace.Trace) {
	t.Helper()
	b := graph.NewBuilder("t")
	x := b.Input("x", graph.Shape{n, h}, graph.F32)
	y := b.Target("y", graph.Shape{n}, graph.I64)
	out := body(b, x)
	out = b.Linear("head", b.Flatten("flatten", out, 1), 10, true)
	b.CrossEntropy("loss", out, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, prof), Steps: 1, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	return sum.ActivationsBytes - (n*10*4 + 4), tr
}

// hardtanh_, silu_ and hardswish_ (nn.ReLU6 / nn.SiLU / nn.Hardswish with
// inplace=True) save a copy of their input taken before overwriting it; the
// result keeps the input's storage, which the next Linear saves: two
// [n, h] storages. Out of place, the activation saves its input and the
// Linear the activation's output: also two. relu_ saves its result, the
// storage the Linear saves too: one.
func TestInplaceActivationSavesCopy(t *testing.T) {
	const n, h = 4, 32
	act := int64(n * h * 4)
	for _, c := range []struct {
		k       graph.Kind
		inplace bool
		want    int64
	}{
		{graph.Hardtanh, true, 2 * act},
		{graph.Hardtanh, false, 2 * act},
		{graph.SiLU, true, 2 * act},
		{graph.Hardswish, true, 2 * act},
		{graph.ReLU, true, act},
	} {
		got, _ := savedOf(t, n, h, "1.13", func(b *graph.Builder, x graph.TensorID) graph.TensorID {
			x = b.Linear("fc", x, h, true)
			return b.Act(c.k, "act", x, c.inplace)
		})
		// the head saves the activation's output storage
		if got != c.want {
			t.Errorf("%s inplace=%v: saved %d, want %d", c.k, c.inplace, got, c.want)
		}
	}
}

// stochastic_depth(x, p, "row") saves its [N, 1, ...] noise (mul saves
// other); p == 0 is x itself.
func TestStochasticDepth(t *testing.T) {
	const n, h = 4, 32
	act := int64(n * h * 4)
	for _, c := range []struct {
		p    float64
		want int64
	}{
		{0, act},         // fc's output, saved by the head
		{0.1, act + n*4}, // the product, saved by the head, and the noise
		{1, act + n*4},   // survival 0: the noise is all zeros, still a tensor
	} {
		got, _ := savedOf(t, n, h, "1.13", func(b *graph.Builder, x graph.TensorID) graph.TensorID {
			x = b.Linear("fc", x, h, true)
			return b.StochasticDepth("sd", x, c.p)
		})
		if got != c.want {
			t.Errorf("p=%g: saved %d, want %d", c.p, got, c.want)
		}
	}
}

// mean.dim saves its input under torch 1.13 (MeanBackward1._saved_self),
// only sizes later.
func TestMeanSavesSelfOn113(t *testing.T) {
	const n, h = 4, 32
	for _, c := range []struct {
		prof string
		want int64
	}{{"1.13", n * h * 4}, {"2.5", 0}} {
		got, _ := savedOf(t, n, h, c.prof, func(b *graph.Builder, x graph.TensorID) graph.TensorID {
			x = b.Linear("fc", x, h, true)
			x = b.Reshape("view", x, n, h/8, 8)
			return b.Mean("mean", x, -1)
		})
		// the head saves the mean's output [n, h/8]
		if want := c.want + n*h/8*4; got != want {
			t.Errorf("%s: saved %d, want %d", c.prof, got, want)
		}
	}
}

// A layer_norm of a non-contiguous input copies it into a temporary (and
// saves the input itself); a broadcast operand of mul gets its gradient
// through a full-size product; roll over two dims makes an intermediate;
// pad and slices save nothing.
func TestVisionOpsTransients(t *testing.T) {
	const n, c, hw = 2, 8, 6
	full := int64(n * c * hw * hw * 4)
	var saved int64
	got, tr := savedOf(t, n, 3*hw*hw, "2.5", func(b *graph.Builder, x graph.TensorID) graph.TensorID {
		x = b.Reshape("img", x, n, 3, hw, hw)
		x = b.Conv2d("conv", x, c, graph.Conv2dOpts{Kernel: [2]int64{1, 1}}) // saves nothing counted: input is the batch
		p := b.Permute("permute", x, 0, 2, 3, 1)
		p = b.LayerNorm("ln", p, 1, true) // saves conv's output (a view) and 2·n·hw·hw floats
		saved += full + 2*n*hw*hw*4
		p = b.Pad("pad", p, 0, 0, 0, 1, 0, 1) // [n, hw+1, hw+1, c]
		p = b.Roll("roll", p, []int64{-1, -1}, []int{1, 2})
		p = b.Slice("slice", p, 1, 0, hw, 1)
		p = b.Slice("slice_w", p, 2, 0, hw, 1)
		p = b.Contiguous("contiguous", p) // [n, hw, hw, c]
		s := b.Param("scale", graph.Shape{c})
		p = b.Mul("mul", s, p) // saves p (the contiguous copy)
		saved += 2 * full      // and the head saves the product
		return p
	})
	if got != saved {
		t.Errorf("saved %d, want %d", got, saved)
	}
	padded := int64(n * c * (hw + 1) * (hw + 1) * 4)
	count := map[string]int{}
	for _, e := range tr.Events {
		if e.Action != trace.Alloc {
			continue
		}
		site := tr.SiteName(e.Site)
		switch {
		case site == "ln" && e.Phase == trace.Forward && e.Category == trace.Transient && e.Size == full:
			count["ln copy"]++
		case site == "ln" && e.Phase == trace.Backward && e.Size == full:
			count["ln backward"]++ // the copy and the input gradient
		case site == "roll" && e.Size == padded:
			count["roll "+e.Phase.String()]++
		case site == "mul" && e.Phase == trace.Backward && e.Size == full:
			count["mul backward"]++ // grad * p, and the gradient of p
		}
	}
	for k, want := range map[string]int{"ln copy": 1, "ln backward": 2, "roll forward": 2, "roll backward": 2, "mul backward": 2} {
		if count[k] != want {
			t.Errorf("%s: %d allocations, want %d (all: %v)", k, count[k], want, count)
		}
	}
}

// Swin's relative position bias: table[index] saves only the index (a
// buffer, not an activation) and sends the table a gradient of its size.
func TestIndexGather(t *testing.T) {
	b := graph.NewBuilder("t")
	x := b.Input("x", graph.Shape{2, 4}, graph.F32)
	y := b.Target("y", graph.Shape{2}, graph.I64)
	table := b.Param("table", graph.Shape{9, 4})
	idx := b.Buffer("index", graph.Shape{2}, graph.I64)
	bias := b.Index("gather", table, idx)
	if s := b.Shape(bias).String(); s != "[2, 4]" {
		t.Fatalf("index shape %s", s)
	}
	h := b.Add("add", x, bias)
	h = b.Linear("head", h, 10, true)
	b.CrossEntropy("loss", h, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := Simulate(g, Setup{CPU: true, Profile: mustProfile(t, "1.13"), Steps: 2, Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2*4*4 + 2*10*4 + 4); sum.ActivationsBytes != want {
		t.Errorf("saved %d, want %d (the add's output for the head, the loss)", sum.ActivationsBytes, want)
	}
	if want := int64((9*4 + 4*10 + 10) * 4); sum.GradientsBytes != want {
		t.Errorf("gradients %d, want %d", sum.GradientsBytes, want)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
}

// sqrt and reciprocal save their result (derivatives.yaml: grad / (2 *
// result), -grad * result * result), which the head saves too: one [n, h]
// storage. erf saves its input (2 / sqrt(pi) * exp(-self^2) * grad), fc's
// output, beside the result the head saves: two.
func TestUnaryMathSaves(t *testing.T) {
	const n, h = 4, 32
	act := int64(n * h * 4)
	for _, c := range []struct {
		k    graph.Kind
		want int64
	}{
		{graph.Sqrt, act},
		{graph.Reciprocal, act},
		{graph.Erf, 2 * act},
	} {
		got, _ := savedOf(t, n, h, "2.5", func(b *graph.Builder, x graph.TensorID) graph.TensorID {
			return b.Act(c.k, "f", b.Linear("fc", x, h, true), false)
		})
		if got != c.want {
			t.Errorf("%s: saved %d, want %d", c.k, got, c.want)
		}
	}
}

// Under autocast, reciprocal runs in float32 (AT_FORALL_FP32) and sqrt in
// the input's dtype. After a bf16 Linear, sqrt saves its bf16 result, which
// the head's addmm saves as it is: 2 bytes an element. reciprocal saves a
// float32 result (4) and the head saves its own bf16 copy of it (2): four
// bytes an element more.
func TestReciprocalRunsInFloat32UnderAutocast(t *testing.T) {
	const n, h = 4, 32
	saved := func(k graph.Kind) int64 {
		b := graph.NewBuilder("t")
		x := b.Input("x", graph.Shape{n, h}, graph.F32)
		y := b.Target("y", graph.Shape{n}, graph.I64)
		out := b.Act(k, "f", b.Linear("fc", x, h, true), false)
		b.CrossEntropy("loss", b.Linear("head", out, 10, true), y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{Precision: MixedBF16, Profile: mustProfile(t, "2.5"), Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	if d := saved(graph.Reciprocal) - saved(graph.Sqrt); d != 4*n*h {
		t.Errorf("reciprocal saves %d bytes more than sqrt, want %d", d, 4*n*h)
	}
}

// Tensors a Hugging Face forward makes outside autograd are activations,
// not batch data. LlamaModel's eager causal mask [B, 1, L, L] is made after
// the embedding in inputs_embeds.dtype (float32 under autocast, bfloat16
// in a bf16 model) and dropped when the layers are done: nothing saves an
// added mask, so it is gone before backward, unless checkpointing, whose
// blocks hold their inputs until their own backward. The rotary cos table
// [1, L, D], cast to the hidden states' dtype, is saved by q * cos and so
// lives into backward either way.
func TestForwardMadeConstants(t *testing.T) {
	const b, l, d = 2, 32, 16
	tc := models.TransformerConfig{Arch: "llama", VocabSize: 256, Hidden: 64, Layers: 2, Heads: 4, KVHeads: 2,
		Intermediate: 128, MaxPositions: 128, Activation: "silu", AttnImpl: "eager"}
	g, err := models.BuildTransformer("tiny", tc, models.Config{Batch: b, Seq: l})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p           Precision
		ckpt        bool
		elem        int64
		maskFreedIn trace.Phase
	}{
		{MixedBF16, false, 4, trace.Forward},
		{TrueBF16, false, 2, trace.Forward},
		{MixedBF16, true, 4, trace.Backward},
	} {
		tr, _, err := Simulate(g, Setup{Precision: c.p, Checkpoint: ckptOf(c.ckpt), Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		alloc := map[string]trace.Event{}
		freed := map[int64]trace.Phase{}
		for _, e := range tr.Events {
			switch e.Action {
			case trace.Alloc:
				if _, ok := alloc[tr.SiteName(e.Site)]; !ok {
					alloc[tr.SiteName(e.Site)] = e
				}
			case trace.Free:
				freed[e.ID] = e.Phase
			}
		}
		mask, cos := alloc["model.causal_mask"], alloc["model.rotary_emb.cos"]
		if mask.Size != b*l*l*c.elem || mask.Category != trace.Activation || mask.Phase != trace.Forward {
			t.Errorf("%s: mask %d bytes, %s in %s; want %d, activation, forward", c.p, mask.Size, mask.Category, mask.Phase, b*l*l*c.elem)
		}
		if ph, ok := freed[mask.ID]; !ok || ph != c.maskFreedIn {
			t.Errorf("%s checkpointing=%v: mask freed in %s, want %s", c.p, c.ckpt, ph, c.maskFreedIn)
		}
		if cos.Size != l*d*c.elem || cos.Category != trace.Activation {
			t.Errorf("%s: cos %d bytes (%s), want %d", c.p, cos.Size, cos.Category, l*d*c.elem)
		}
		if ph := freed[cos.ID]; ph != trace.Backward {
			t.Errorf("%s: cos freed in %s, want backward", c.p, ph)
		}
	}
}
