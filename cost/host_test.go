package cost

import (
	"math"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// TestHostFor: the 1.x profiles keep the calibrated host, the 2.x ones take
// the one measured on a GPU's host.
func TestHostFor(t *testing.T) {
	for _, tc := range []struct {
		version string
		perOp   bool
	}{{"1.13", false}, {"2.0", true}, {"2.5", true}, {"2.11", true}} {
		p, err := profile.Lookup(tc.version)
		if err != nil {
			t.Fatal(err)
		}
		if h := HostFor(p); h.PerOp != tc.perOp || (!tc.perOp && h.Forward != DefaultHost.Forward) {
			t.Errorf("PyTorch %s: per-op host %v, want %v", tc.version, h.PerOp, tc.perOp)
		}
	}
}

// TestPerOpHost works a host-bound step by hand: a Linear of [1, 4] to 4
// features with a bias, then MSELoss, SGD with momentum (foreach), on a
// host whose costs are milliseconds, so that the microsecond kernels only
// trail it.
//
// Forward: fc pays Linear's 2 ms and the two module calls it enters (the
// model and fc, 0.5 ms each), 3 ms; the loss pays the default 1 ms and its
// module, 0.5 ms, and a launch for its second kernel, 0.1 ms: 4.6 ms, two
// ops. Backward: MseLossBackward's node, 3 ms, one kernel; the Linear's
// node, 3 ms, and a launch for its second kernel (the weight's and the
// bias's gradients; x needs none), 0.1 ms; AccumulateGrad for the weight
// and the bias, 3 ms each: 12.1 ms, four nodes. The optimizer: 5 ms and
// 1 ms a tensor, 7 ms, its kernels inside it; zero_grad 0.01 ms a
// parameter. 23.72 ms in all.
func TestPerOpHost(t *testing.T) {
	const ms = 1e-3
	h := Host{
		Forward: 1 * ms, Backward: 3 * ms, Launch: 0.1 * ms, PerOp: true,
		Kinds:    map[graph.Kind]float64{graph.Linear: 2 * ms},
		Module:   0.5 * ms,
		ZeroGrad: 0.01 * ms,
		Optim:    map[OptimKey]OptimHost{{train.SGD, train.Foreach}: {5 * ms, 1 * ms}},
	}
	g := build(t, "mlp", func(b *graph.Builder) {
		x := b.Input("x", graph.Shape{1, 4}, graph.F32)
		y := b.Target("y", graph.Shape{1, 4}, graph.F32)
		b.MSELoss("loss", b.Linear("fc", x, 4, true), y)
	})
	s, err := train.Setup{Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD, Momentum: 0.9, Impl: train.Foreach}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := train.Simulate(g, s)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Step(Input{Graph: g, Ops: sum.Ops, Setup: s, Rates: testRates, Batch: 1, Host: &h})
	if err != nil {
		t.Fatal(err)
	}
	if e.Ops != 2 || e.Nodes != 4 {
		t.Errorf("%d ops and %d nodes, want 2 and 4", e.Ops, e.Nodes)
	}
	for _, c := range []struct {
		part Part
		want float64
	}{{Forward, 4.6 * ms}, {Backward, 12.1 * ms}, {Optimizer, 7.02 * ms}} {
		// the device trails the host by a few kernels' KernelGPU at most
		if got := e.By[c.part]; math.Abs(got-c.want) > 0.05*ms {
			t.Errorf("%s: %.4f ms, want %.4f", c.part, got/ms, c.want/ms)
		}
	}
	if math.Abs(e.Seconds-23.72*ms) > 0.05*ms {
		t.Errorf("step %.4f ms, want 23.72", e.Seconds/ms)
	}
}
