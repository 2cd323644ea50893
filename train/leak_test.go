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

// The same holds one rank of every data-parallel strategy, and the
// parameters left at the end are the rank's own (no gathered unit
// outlives its backward).
func TestNothingLeaksParallel(t *testing.T) {
	var setups []leakSetup
	for _, p := range []Parallel{{Strategy: DDP, GPUs: 4}, {Strategy: DDP, GPUs: 4, BucketView: true},
		{Strategy: FSDP, GPUs: 4}, {Strategy: FSDP, GPUs: 4, Sharding: ShardGradOp}, {Strategy: FSDP, GPUs: 16, Sharding: HybridShard},
		{Strategy: FSDP, GPUs: 4, Offload: true}, {Strategy: FSDP2, GPUs: 4}, {Strategy: ZeRO1, GPUs: 4},
		{Strategy: ZeRO2, GPUs: 4}, {Strategy: ZeRO3, GPUs: 4}, {Strategy: ZeRO3, GPUs: 4, Offload: true, OffloadParams: true}} {
		name := string(p.Strategy)
		if p.Sharding != "" {
			name += "-" + string(p.Sharding)
		}
		if p.Offload {
			name += "-offload"
		}
		if p.BucketView {
			name += "-view"
		}
		setups = append(setups,
			leakSetup{name + "/bf16-mixed+checkpointing+accumulate", Setup{Steps: 3, Precision: MixedBF16, Checkpoint: FullCheckpoint, Accumulate: 2, Parallel: p}},
			leakSetup{name + "/fp32", Setup{Steps: 2, Parallel: p, Optimizer: Optimizer{Kind: AdamW, Impl: ForLoop}}})
	}
	for _, name := range []string{"mlp", "resnet18", "gpt2", "Llama-3.2-1B", "bert-base-uncased", "t5-small", "vit_b_16"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m, err := models.Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			g, _, err := models.Build(m.Name, m.Small(2, 16))
			if err != nil {
				t.Fatal(err)
			}
			checkNoLeaks(t, g, setups)
			for _, su := range setups {
				tr, sum, err := Simulate(g, su.s)
				if err != nil {
					t.Fatal(err)
				}
				live := liveEvents(tr)
				var params int64
				for _, e := range live {
					if e.Category == trace.Parameter {
						params += e.Size
					}
				}
				if params != sum.ParametersBytes {
					t.Errorf("%s: %d bytes of parameters live at the end, the rank's own are %d", su.name, params, sum.ParametersBytes)
				}
			}
		})
	}
}

// A pipeline stage leaves nothing behind either: every in-flight
// micro-batch's activations, what it received and its loss are released.
func TestNothingLeaksPipeline(t *testing.T) {
	m, err := models.Lookup("Llama-3.2-1B")
	if err != nil {
		t.Fatal(err)
	}
	for stage := int64(0); stage < 3; stage++ {
		cfg := m.Small(2, 16)
		cfg.Layers, cfg.PP, cfg.Stage, cfg.TP, cfg.SP = 3, 3, stage, 2, true
		g, err := m.Build(cfg)
		if err != nil {
			t.Fatal(err)
		}
		s := Setup{Steps: 2, Precision: MixedBF16, Accumulate: 5, Stages: 3, Stage: int(stage), Checkpoint: FullCheckpoint}
		tr, _, err := Simulate(g, s)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Validate(); err != nil {
			t.Fatal(err)
		}
		live := liveEvents(tr)
		for _, e := range live {
			switch e.Category {
			case trace.Activation, trace.Transient, trace.CastCache, trace.Batch:
				t.Errorf("stage %d: %s of %d bytes from %s still live at the end", stage, e.Category, e.Size, tr.SiteName(e.Site))
			}
		}
	}
}

// liveEvents is the allocations a trace leaves live, by id.
func liveEvents(tr *trace.Trace) map[int64]trace.Event {
	live := map[int64]trace.Event{}
	for _, e := range tr.Events {
		switch e.Action {
		case trace.Alloc:
			live[e.ID] = e
		case trace.Free:
			delete(live, e.ID)
		}
	}
	return live
}
