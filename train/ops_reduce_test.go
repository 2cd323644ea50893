package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// A softmax and a negative log-likelihood written with element-wise ops,
// on the output y [N, 8] of a Linear, in float32:
//
//	m = y.max(-1, keepdim=True)   values [N, 1]; MaxBackward saves the int64 indices: 8·N B
//	s = y - m                     sub saves nothing
//	e = s.exp()                   ExpBackward saves its result e: 4·8·N B
//	z = e.sum(-1, keepdim=True)   SumBackward saves only sizes
//	p = e / z                     DivBackward saves e and z: z is 4·N B more
//	l = z.log()                   LogBackward saves self, z again
//	q = -(p + l)                  add and neg save nothing
//	t = q.gather(-1, idx)         GatherBackward saves q (4·8·N B) and idx, the batch's own
//	loss = t.mean()               saves nothing
//
// so autograd holds 8·N + 32·N + 4·N + 32·N = 76·N bytes at the end of
// forward (derivatives.yaml: exp saves result, log self, div self and
// other, max.dim indices, gather self and index). torch 1.13 on the CPU,
// counting the storages that saved_tensors_hooks packs other than x, idx
// and the weight, gives 76, 152 and 1216 bytes for N = 1, 2 and 16.
func TestReductionOpsSaved(t *testing.T) {
	for _, n := range []int64{1, 2, 16} {
		b := graph.NewBuilder("softmax-by-ops")
		x := b.Input("x", graph.Shape{n, 4}, graph.F32)
		idx := b.Target("idx", graph.Shape{n, 1}, graph.I64)
		y := b.Linear("l", x, 8, false)
		s := b.Add("sub", y, b.MaxDim("max", y, -1))
		e := b.Exp("exp", s)
		z := b.SumDim("sum", e, -1)
		p := b.Mul("div", e, z)
		q := b.Neg("neg", b.Add("add", p, b.Log("log", z)))
		b.Output(b.Mean("mean", b.Gather("gather", q, idx, -1), 0, 1))
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{CPU: true, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := 76 * n; sum.ActivationsBytes != want {
			t.Errorf("N=%d: saved %d bytes, want %d", n, sum.ActivationsBytes, want)
		}
	}
}

// Bad shapes and types are refused with the op's name.
func TestReductionOpsErrors(t *testing.T) {
	for name, build := range map[string]func(b *graph.Builder, x graph.TensorID){
		"max-dim": func(b *graph.Builder, x graph.TensorID) { b.MaxDim("m", x, 3) },
		"sum-dim": func(b *graph.Builder, x graph.TensorID) { b.SumDim("s", x, -3) },
		"gather-float-index": func(b *graph.Builder, x graph.TensorID) {
			b.Gather("g", x, x, -1)
		},
		"gather-rank": func(b *graph.Builder, x graph.TensorID) {
			b.Gather("g", x, b.Target("i", graph.Shape{2}, graph.I64), -1)
		},
	} {
		b := graph.NewBuilder(name)
		build(b, b.Input("x", graph.Shape{2, 8}, graph.F32))
		if b.Err() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Under autocast a weight that reaches the matmul as a view (an einsum's
// rearranged operand) is not in autocast's cast cache, which holds only
// leaves that are not views (cached_cast in aten/src/ATen/autocast_mode.cpp):
// a model of such Linears ends its forward with no cached copy, while the
// same model of F.linear holds one float16 copy of each weight, 2·64·64
// bytes for each of two 64×64 weights.
func TestLinearEinsumNotCached(t *testing.T) {
	for _, einsum := range []bool{false, true} {
		b := graph.NewBuilder("einsum")
		h := b.Input("x", graph.Shape{4, 64}, graph.F32)
		for _, name := range []string{"a", "b"} {
			if einsum {
				h = b.LinearEinsum(name, h, 64)
			} else {
				h = b.Linear(name, h, 64, false)
			}
		}
		b.Output(b.MeanAll("mean", h))
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{Precision: Mixed16, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := int64(2 * 2 * 64 * 64)
		if einsum {
			want = 0
		}
		if sum.CastCacheBytes != want {
			t.Errorf("einsum %v: %d bytes of cached casts, want %d", einsum, sum.CastCacheBytes, want)
		}
	}
}
