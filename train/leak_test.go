package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
)

// After training steps, every activation, saved tensor, autocast copy and
// temporary has been freed: only the loss of the last step (kept by the
// loop's variable) remains among them. Checked for every zoo model under
// the setups that exercise the most rules at once. The summary's requested
// peak is the one the events give.
func TestNothingLeaks(t *testing.T) {
	setups := []leakSetup{
		{"fp32", Setup{Steps: 2}},
		{"bf16-mixed+checkpointing", Setup{Steps: 2, Precision: MixedBF16, Checkpoint: FullCheckpoint}},
		{"16-mixed+accumulate", Setup{Steps: 2, Precision: Mixed16, Accumulate: 2, Optimizer: Optimizer{Kind: SGD, Momentum: 0.9}}},
		{"16-mixed+every-2+attention", Setup{Steps: 2, Precision: Mixed16, Checkpoint: Checkpoint{Every: 2, Attention: true}, Attention: AttentionEager}},
		{"bf16-true+checkpointing+1.13", Setup{Steps: 2, Precision: TrueBF16, Checkpoint: FullCheckpoint, Profile: mustProfile(t, "1.13")}},
	}
	for _, m := range models.All() {
		m := m
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			cfg := m.Small(2, 16)
			g, _, err := models.Build(m.Name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkNoLeaks(t, g, setups)
		})
	}
}

type leakSetup struct {
	name string
	s    Setup
}

// checkNoLeaks simulates g under each setup and checks that only the last
// loss is left of the activations, temporaries and autocast copies, and
// that the summary's requested peak is the events'.
func checkNoLeaks(t *testing.T, g *graph.Graph, setups []leakSetup) {
	t.Helper()
	for _, su := range setups {
		tr, sum, err := Simulate(g, su.s)
		if err != nil {
			t.Fatalf("%s: %v", su.name, err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatalf("%s: %v", su.name, err)
		}
		live := map[int64]trace.Event{}
		var cur, peak int64
		for _, e := range tr.Events {
			switch e.Action {
			case trace.Alloc:
				live[e.ID] = e
				cur += e.Size
				peak = max(peak, cur)
			case trace.Free:
				cur -= live[e.ID].Size
				delete(live, e.ID)
			}
		}
		// The summary's running peak agrees with the events.
		if sum.PeakRequested != peak {
			t.Errorf("%s: summary peak requested %d, the events' %d", su.name, sum.PeakRequested, peak)
		}
		var n int
		var bytes int64
		for _, e := range live {
			switch e.Category {
			case trace.Activation, trace.Transient, trace.CastCache:
				n++
				bytes += e.Size
				if n > 1 {
					t.Errorf("%s: %s from %s (%s, step %d) still live at the end", su.name, e.Category, tr.SiteName(e.Site), e.Phase, e.Step+1)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d activation/transient blocks live at the end (%d bytes), want 1 (the loss)", su.name, n, bytes)
		}
	}
}

// The same holds with quantized base weights under LoRA, in every format,
// with and without autocast and checkpointing.
func TestNothingLeaksQuantized(t *testing.T) {
	setups := []leakSetup{
		{"bf16-true", Setup{Steps: 2, Precision: TrueBF16}},
		{"bf16-mixed+checkpointing", Setup{Steps: 2, Precision: MixedBF16, Checkpoint: FullCheckpoint}},
		{"fp32+accumulate", Setup{Steps: 2, Accumulate: 2}},
	}
	targets := map[string][]string{"Llama-3.2-1B": {"q_proj", "v_proj"}, "gpt2": {"c_attn"}, "bert-base-uncased": {"query", "value"}}
	formats := []graph.Quant{
		{Format: graph.NF4, Bits: 4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16},
		{Format: graph.FP4, Bits: 4, BlockSize: 64, Compute: graph.F32},
		{Format: graph.Int8, Bits: 8, Compute: graph.F16},
		{Format: graph.GPTQ, Bits: 4, GroupSize: 128, Compute: graph.F16, Prequantized: true},
		{Format: graph.AWQ, Bits: 4, GroupSize: 128, Compute: graph.F16, Prequantized: true},
	}
	for name, tg := range targets {
		for _, q := range formats {
			q := q
			t.Run(name+"/"+q.Format.String(), func(t *testing.T) {
				m, err := models.Lookup(name)
				if err != nil {
					t.Fatal(err)
				}
				cfg := m.Small(2, 16)
				cfg.Quant = &q
				cfg.Adapters = &graph.Adapters{Rank: 4, Alpha: 8, Targets: tg}
				g, _, err := models.Build(m.Name, cfg)
				if err != nil {
					t.Fatal(err)
				}
				checkNoLeaks(t, g, setups)
			})
		}
	}
}
