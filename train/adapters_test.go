package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
)

// With LoRA on the MLP's four hidden Linears (r = 8: 8·(784+1024) +
// 3·8·(1024+1024) = 63,616 parameters) only the adapters get gradients and
// optimizer state: Adam keeps exp_avg and exp_avg_sq for them alone, SGD
// with momentum a buffer for them alone; the frozen base weights get
// nothing (PyTorch's optimizers skip a parameter whose grad is None).
func TestFrozenParamsGetNoGradOrState(t *testing.T) {
	const trainable = 8*(784+1024) + 3*8*(1024+1024)
	prof, _ := profile.Lookup("")
	a := &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"linear"}}
	g, _, err := models.Build("mlp", models.Config{Batch: 8, Adapters: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opt   Optimizer
		state int64
	}{
		{Optimizer{Kind: Adam, Impl: Foreach}, 2 * trainable * 4},
		{Optimizer{Kind: Adam, Impl: ForLoop}, 2 * trainable * 4},
		{Optimizer{Kind: SGD, Momentum: 0.9, Impl: Foreach}, trainable * 4},
		{Optimizer{Kind: SGD, Impl: Foreach}, 0},
	} {
		_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Optimizer: c.opt})
		if err != nil {
			t.Fatal(err)
		}
		if sum.TrainableParamCount != trainable || sum.GradientsBytes != trainable*4 || sum.OptimizerStateBytes != c.state {
			t.Errorf("%+v: trainable %d, gradients %d, state %d; want %d, %d, %d", c.opt, sum.TrainableParamCount, sum.GradientsBytes,
				sum.OptimizerStateBytes, trainable, trainable*4, c.state)
		}
	}
}

// Under autocast a frozen weight is cast at every use, not cached
// (autocast caches only leaves that require grad), so no autocast cache
// is held for it; the adapters' own weights are cached as any trainable
// weight is.
func TestFrozenWeightsAreNotCastCached(t *testing.T) {
	prof, _ := profile.Lookup("")
	a := &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"linear"}}
	g, _, err := models.Build("mlp", models.Config{Batch: 8, Adapters: a})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 1, Precision: MixedBF16, Optimizer: Optimizer{Kind: Adam}})
	if err != nil {
		t.Fatal(err)
	}
	// bf16 copies of the adapters alone: 63,616 × 2 bytes
	if want := int64(8*(784+1024)+3*8*(1024+1024)) * 2; sum.CastCacheBytes != want {
		t.Errorf("autocast cache %d bytes, want the adapters' %d", sum.CastCacheBytes, want)
	}
}
