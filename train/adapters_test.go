package train

import (
	"fmt"
	"strings"
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

// bitsandbytes' 8-bit AdamW (Optimizer2State.init_state, block_wise): the
// MLP's LoRA adapters are [8, 784], [1024, 8] and [8, 1024], [1024, 8] three
// times: the [8, 784] one (6,272 elements) and every other (8,192) are
// 4096 or more, so each keeps two uint8 states (n bytes each) and two
// float32 absmax vectors of ceil(n/2048) values; the two 256-entry float32
// quantization maps come once. No temporaries: the update is one fused
// kernel a parameter.
func TestBitsAndBytesAdamState(t *testing.T) {
	prof, _ := profile.Lookup("")
	a := &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"linear"}}
	g, _, err := models.Build("mlp", models.Config{Batch: 8, Adapters: a})
	if err != nil {
		t.Fatal(err)
	}
	state := func(n int64) int64 { return 2*n + 2*4*((n+2047)/2048) }
	want := state(8*784) + state(1024*8) + 3*(state(8*1024)+state(1024*8)) + 2*256*4
	for _, paged := range []bool{false, true} {
		_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Optimizer: Optimizer{Kind: AdamW, WeightDecay: 0.01, Bits8: true, Paged: paged}})
		if err != nil {
			t.Fatal(err)
		}
		// no adapter reaches the 10^5 elements a paged state needs
		if sum.OptimizerStateBytes != want || sum.PagedOptimizerStateBytes != 0 {
			t.Errorf("paged %v: state %d (paged %d), want %d", paged, sum.OptimizerStateBytes, sum.PagedOptimizerStateBytes, want)
		}
	}
	// A full MLP: the 784×1024 weight (802,816 elements) and the 1024×1024
	// ones are paged; biases (1,024) and the head's bias (10) stay 32-bit
	// on the device, the head's weight (10,240) 8-bit.
	g, _, err = models.Build("mlp", models.Config{Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 1, Optimizer: Optimizer{Kind: Adam, Bits8: true, Paged: true}})
	if err != nil {
		t.Fatal(err)
	}
	absmax := func(n int64) int64 { return 2 * 4 * ((n + 2047) / 2048) }
	big := []int64{784 * 1024, 1024 * 1024, 1024 * 1024, 1024 * 1024}
	wantDev, wantPaged := int64(4*2*4*1024+2*4*10)+state(10*1024)+2*256*4, int64(0)
	for _, n := range big {
		wantDev += absmax(n)
		wantPaged += 2 * n
	}
	if sum.OptimizerStateBytes != wantDev || sum.PagedOptimizerStateBytes != wantPaged {
		t.Errorf("paged full MLP: device %d, paged %d; want %d, %d", sum.OptimizerStateBytes, sum.PagedOptimizerStateBytes, wantDev, wantPaged)
	}
}

// bitsandbytes' 32-bit PagedAdamW (optim_bits=32, is_paged=True; LitGPT's
// optimizer with --quantize) keeps two float32 states per parameter even
// for bf16 parameters, paged from 10^5 elements on. The full MLP under
// bf16-true: the 784×1024 and three 1024×1024 weights are paged (2·4·n
// bytes each); the four 1,024-element biases, the head's 10,240-element
// weight and its 10-element bias stay on the device, 2·4 bytes an element:
// 8·(4·1024 + 10240 + 10) = 114,768 bytes.
func TestPagedAdam32State(t *testing.T) {
	prof, _ := profile.Lookup("")
	g, _, err := models.Build("mlp", models.Config{Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Simulate(g, Setup{Profile: prof, Precision: TrueBF16, Steps: 2, Optimizer: Optimizer{Kind: AdamW, WeightDecay: 0.01, Paged: true}})
	if err != nil {
		t.Fatal(err)
	}
	wantDev := int64(8 * (4*1024 + 10240 + 10))
	wantPaged := int64(8 * (784*1024 + 3*1024*1024))
	if sum.OptimizerStateBytes != wantDev || sum.PagedOptimizerStateBytes != wantPaged {
		t.Errorf("device %d, paged %d; want %d, %d", sum.OptimizerStateBytes, sum.PagedOptimizerStateBytes, wantDev, wantPaged)
	}
}

func TestParseOptimizerName(t *testing.T) {
	for in, want := range map[string]Optimizer{
		"adamw":           {Kind: AdamW},
		"AdamW8bit":       {Kind: AdamW, Bits8: true},
		"adam_8bit":       {Kind: Adam, Bits8: true},
		"paged_adamw8bit": {Kind: AdamW, Bits8: true, Paged: true},
		"PagedAdam8bit":   {Kind: Adam, Bits8: true, Paged: true},
		"paged_adamw":     {Kind: AdamW, Paged: true},
		"PagedAdam":       {Kind: Adam, Paged: true},
	} {
		got, err := ParseOptimizerName(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v", in, got, err)
		}
	}
	for _, in := range []string{"sgd8bit", "paged_sgd", "lion8bit", "adamx"} {
		if _, err := ParseOptimizerName(in); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

// transformers' Adafactor keeps, per weight [out, in], a row vector of out
// and a column vector of in float32 values, per vector parameter its own
// size, and a 0-d RMS per parameter: for the MLP (784→1024, three
// 1024→1024, 1024→10, with biases) that is worked out below. Its step
// makes, for the largest parameter, the update and its replacement (two
// float32 copies of 1024·1024) at once.
func TestAdafactorState(t *testing.T) {
	prof, _ := profile.Lookup("")
	g, _, err := models.Build("mlp", models.Config{Batch: 8})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Optimizer: Optimizer{Kind: Adafactor, Impl: ForLoop}})
	if err != nil {
		t.Fatal(err)
	}
	weights := int64((1024 + 784) + 3*(1024+1024) + (10 + 1024))
	biases := int64(4*1024 + 10)
	want := 4*weights + 4*biases + 4*10
	if sum.OptimizerStateBytes != want {
		t.Errorf("state %d bytes, want %d", sum.OptimizerStateBytes, want)
	}
	if !strings.Contains(fmt.Sprint(ParseOptimizer("Adafactor")), "adafactor") {
		t.Error("adafactor is not a known optimizer")
	}
}

// FuzzParseOptimizerName: any name gives an optimizer batchfit simulates
// or an error naming the known ones, never a panic.
func FuzzParseOptimizerName(f *testing.F) {
	for _, s := range []string{"adamw", "paged_adamw8bit", "Adam_8bit", "paged", "8bit", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := ParseOptimizerName(s)
		if err != nil {
			if !strings.Contains(err.Error(), "adam") {
				t.Fatalf("error without the known names: %v", err)
			}
			return
		}
		if o.Bnb() && o.Kind != Adam && o.Kind != AdamW {
			t.Fatalf("%q gave %+v", s, o)
		}
		// the name prints back as one that parses to the same optimizer
		if o2, err := ParseOptimizerName(o.Name()); err != nil || o2.Kind != o.Kind || o2.Bits8 != o.Bits8 || o2.Paged != o.Paged {
			t.Fatalf("%q gave %+v, named %q, which gives %+v, %v", s, o, o.Name(), o2, err)
		}
	})
}
