package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// The workspaces the seed MLP (784 → 4×1024 → 10, every Linear with a
// bias, batch 32) leaves on an sm90 GPU, worked out from
// CublasHandlePool.cpp: one 32 MiB cuBLAS workspace per thread that runs a
// GEMM (the forward thread, the autograd thread); in the 2.11 profile one
// cuBLASLt workspace of 1 MiB per thread that runs a bias-fused addmm, which
// only the forward thread does unless a checkpointed block is recomputed
// in backward; with CUBLAS_WORKSPACE_CONFIG=:16:8 the cuBLAS workspaces are
// 128 KiB and the Lt one is capped at that size
// (getCUDABlasLtWorkspaceSize).
func TestCublasLtWorkspacePerThread(t *testing.T) {
	g := mlp(t, 32, 784, 1024, 4, 10)
	const ws, lt, small = 32 << 20, 1 << 20, 16 * 1024 * 8
	for _, c := range []struct {
		name, torch string
		ck          Checkpoint
		config      string
		want        int64
	}{
		{"2.5", "2.5", Checkpoint{}, "", 2 * ws},
		{"2.11", "2.11", Checkpoint{}, "", 2*ws + lt},
		{"2.11, recomputed blocks", "2.11", FullCheckpoint, "", 2*ws + 2*lt},
		{"2.11, :16:8", "2.11", Checkpoint{}, ":16:8", 3 * small},
	} {
		_, sum, err := Simulate(g, Setup{Precision: FP32, Optimizer: Optimizer{Kind: SGD}, Steps: 1, ComputeMajor: 9,
			Checkpoint: c.ck, CublasWorkspaceConfig: c.config, Profile: mustProfile(t, c.torch)})
		if err != nil {
			t.Fatal(err)
		}
		if sum.WorkspaceBytes != c.want {
			t.Errorf("%s: workspaces %d bytes, want %d", c.name, sum.WorkspaceBytes, c.want)
		}
	}
}

// geluNew builds Linear(16 → 64) on x [8, 16], GPT-2's gelu_new as
// transformers writes it (0.5*x*(1+tanh(√(2/π)*(x+0.044715*pow(x, 3))))),
// with the cube as torch.pow or, for comparison, as x*x (or as one
// NewGELU op, the captured module), then Linear(64 → 10) and
// cross-entropy.
func geluNew(t *testing.T, pow, fused bool) *graph.Graph {
	b := graph.NewBuilder("gelu_new")
	x := b.Input("x", graph.Shape{8, 16}, graph.F32)
	y := b.Target("y", graph.Shape{8}, graph.I64)
	h := b.Linear("fc", x, 64, true)
	if fused {
		h = b.Act(graph.NewGELU, "gelu_new", h, false)
		h = b.Linear("proj", h, 10, true)
		b.CrossEntropy("loss", h, y)
		g, err := b.Graph()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a := b.Scale("mul_half", h)
	var p graph.TensorID
	if pow {
		p = b.Unary(graph.Pow, "pow", h)
	} else {
		p = b.Mul("pow", h, h)
	}
	s := b.Scale("mul_coef", p)
	u := b.Add("add", h, s)
	w := b.Scale("mul_sqrt_2_over_pi", u)
	th := b.Act(graph.Tanh, "tanh", w, false)
	e := b.Scale("add_one", th)
	h = b.Mul("mul", a, e)
	h = b.Linear("proj", h, 10, true)
	b.CrossEntropy("loss", h, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// What gelu_new saves on a 512-element input (8 × 64), worked by hand.
// With x·x the cube saves x (one storage, 2 bytes an element in bfloat16);
// torch.pow saves self as well, but under CUDA autocast pow is on
// AT_FORALL_FP32 and self is a float32 copy (2,048 B instead of 1,024),
// and type promotion makes the tanh's saved result and 1 + t, which the
// final product saves, float32 too (+1,024 B each); 0.5·x stays bfloat16,
// and proj saves a bfloat16 copy of the product either way: 3,072 B more.
// In float32, and in true bfloat16 (no autocast), the two are the same.
func TestGELUNewPowUnderAutocast(t *testing.T) {
	for _, c := range []struct {
		p    Precision
		diff int64
	}{{FP32, 0}, {MixedBF16, 3072}, {TrueBF16, 0}} {
		saved := func(pow, fused bool) int64 {
			_, sum, err := Simulate(geluNew(t, pow, fused), Setup{Precision: c.p, Steps: 1, Profile: mustProfile(t, "2.11")})
			if err != nil {
				t.Fatal(err)
			}
			return sum.ActivationsBytes
		}
		if got := saved(true, false) - saved(false, false); got != c.diff {
			t.Errorf("%s: pow saves %d bytes more than x*x, want %d", c.p, got, c.diff)
		}
		// the NewGELU op saves what the eight ops with the pow save
		if op, ops := saved(false, true), saved(true, false); op != ops {
			t.Errorf("%s: the NewGELU op saves %d bytes, its ops %d", c.p, op, ops)
		}
	}
}
