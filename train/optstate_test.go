package train

import (
	"testing"

	"github.com/batchfit/batchfit/models"
)

// The table, worked out from the sources it cites (optstate.go).
func TestOptimizerStates(t *testing.T) {
	adam8 := Optimizer{Kind: Adam, Bits8: true}
	for _, c := range []struct {
		name string
		o    Optimizer
		p    StateParam
		want []int64 // bytes of each state, in order
	}{
		// a 1000-element float32 parameter
		{"sgd", Optimizer{Kind: SGD}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 4}, nil},
		{"sgd momentum", Optimizer{Kind: SGD, Momentum: 0.9}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 4}, []int64{4000}},
		{"adam", Optimizer{Kind: Adam}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 4}, []int64{4000, 4000}},
		// bf16-true: the moments are zeros_like the bfloat16 parameter
		{"adamw bf16", Optimizer{Kind: AdamW}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 2}, []int64{2000, 2000}},
		{"adam fused", Optimizer{Kind: Adam, Impl: Fused}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 4, StepOnDevice: true}, []int64{4, 4000, 4000}},
		{"adam amsgrad", Optimizer{Kind: Adam, AMSGrad: true}, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 4}, []int64{4000, 4000, 4000}},
		// under 4096 elements the 8-bit states stay float32
		{"adam8bit small", adam8, StateParam{Shape: []int64{1000}, Numel: 1000, Elem: 2}, []int64{4000, 4000}},
		// 10,000 elements: two uint8 states, ceil(10000/2048) = 5 absmax
		// floats each, the two 256-float maps
		{"adam8bit", adam8, StateParam{Shape: []int64{100, 100}, Numel: 10000, Elem: 2}, []int64{10000, 10000, 20, 20, 1024, 1024}},
		// Adafactor on [3, 5]: a row factor of 3 and a column factor of 5
		// floats, and RMS
		{"adafactor matrix", Optimizer{Kind: Adafactor}, StateParam{Shape: []int64{3, 5}, Numel: 15, Elem: 2}, []int64{12, 20, 4}},
		{"adafactor vector", Optimizer{Kind: Adafactor}, StateParam{Shape: []int64{7}, Numel: 7, Elem: 2}, []int64{28, 4}},
	} {
		var got []int64
		for _, st := range OptimizerStates(c.o, c.p) {
			got = append(got, st.Bytes)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	// paged: the uint8 states of 10^5 elements or more leave the device
	sts := OptimizerStates(Optimizer{Kind: AdamW, Bits8: true, Paged: true}, StateParam{Shape: []int64{1000, 100}, Numel: 100000, Elem: 2})
	if !sts[0].Paged || !sts[1].Paged || sts[2].Paged {
		t.Errorf("paged 10^5 elements: %+v", sts)
	}
}

// The simulator keeps exactly what the table lists: on models with
// matrices, vectors, small and large parameters, the state it creates is
// the table's sum over the trained parameters (the maps once).
func TestSimulatorKeepsTheTable(t *testing.T) {
	for _, name := range []string{"mlp", "simpleconv", "gpt2"} {
		m, err := models.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Small(2, 16)
		g, err := m.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []Setup{
			{Optimizer: Optimizer{Kind: SGD, Momentum: 0.9}},
			{Optimizer: Optimizer{Kind: Adam}},
			{Optimizer: Optimizer{Kind: Adam, Impl: Fused, AMSGrad: true}},
			{Optimizer: Optimizer{Kind: AdamW, Bits8: true}, Precision: TrueBF16},
			{Optimizer: Optimizer{Kind: AdamW, Bits8: true, Paged: true}, Precision: TrueBF16},
			{Optimizer: Optimizer{Kind: Adafactor}, Precision: TrueBF16},
		} {
			_, sum, err := Simulate(g, s)
			if err != nil {
				t.Fatal(err)
			}
			var want, paged int64
			once := map[string]bool{}
			for _, id := range g.Params() {
				tn := g.Tensor(id)
				if !tn.RequiresGrad {
					continue
				}
				p := StateParam{Shape: tn.Shape, Numel: tn.Shape.Numel(), Elem: s.Precision.ParamDType().Size(), StepOnDevice: s.Optimizer.Impl == Fused}
				for _, st := range OptimizerStates(s.Optimizer, p) {
					if st.Once && once[st.Name] {
						continue
					}
					once[st.Name] = true
					if st.Paged {
						paged += st.Bytes
					} else {
						want += st.Bytes
					}
				}
			}
			if sum.OptimizerStateBytes != want || sum.PagedOptimizerStateBytes != paged {
				t.Errorf("%s, %s: state %d, paged %d; the table says %d and %d", name, s.Optimizer.Name(), sum.OptimizerStateBytes, sum.PagedOptimizerStateBytes, want, paged)
			}
		}
	}
}

// The per-element floor: Adam keeps two moments of the parameter's dtype,
// AMSGrad three, SGD with momentum one; 8-bit Adam two bytes (none on the
// device when paged); Adafactor factors a matrix's moment away.
func TestPerElement(t *testing.T) {
	for _, c := range []struct {
		o                  Optimizer
		elem               int64
		states             int
		bytes, deviceBytes int64
	}{
		{Optimizer{Kind: SGD}, 4, 0, 0, 0},
		{Optimizer{Kind: SGD, Momentum: 0.9}, 4, 1, 4, 4},
		{Optimizer{Kind: Adam}, 4, 2, 8, 8},
		{Optimizer{Kind: AdamW}, 2, 2, 4, 4},
		{Optimizer{Kind: Adam, AMSGrad: true}, 4, 3, 12, 12},
		{Optimizer{Kind: AdamW, Bits8: true}, 2, 2, 2, 2},
		{Optimizer{Kind: AdamW, Bits8: true, Paged: true}, 2, 2, 2, 0},
		{Optimizer{Kind: Adafactor}, 4, 0, 0, 0},
		{Optimizer{Kind: NoOptimizer}, 4, 0, 0, 0},
	} {
		n, b, d := c.o.PerElement(c.elem)
		if n != c.states || b != c.bytes || d != c.deviceBytes {
			t.Errorf("%s at %d bytes: %d states, %d bytes, %d on the device; want %d, %d, %d", c.o.Name(), c.elem, n, b, d, c.states, c.bytes, c.deviceBytes)
		}
	}
}
