package plan

import (
	"context"
	"testing"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

func benchPlan(b *testing.B, model string, seq, global int64, gpuName string, like ...string) {
	m, err := models.Lookup(model)
	if err != nil {
		b.Fatal(err)
	}
	g, err := gpu.Lookup(gpuName)
	if err != nil {
		b.Fatal(err)
	}
	if len(like) > 0 {
		// a size alone has no rates: plans are ranked by step time, so it
		// borrows a catalog GPU's, as --like does
		l, err := gpu.Lookup(like[0])
		if err != nil {
			b.Fatal(err)
		}
		g.Rates = l.Rates
	}
	o := Options{Base: predict.Request{Source: predict.Zoo{M: m}, Config: models.Config{Batch: global, Seq: seq}, GPU: g, Context: -1,
		Setup: train.Setup{Precision: train.MixedBF16, Optimizer: train.Optimizer{Kind: train.AdamW, WeightDecay: 0.01}}},
		Margin: g.Capacity / 20}
	b.ResetTimer()
	var n int
	for i := 0; i < b.N; i++ {
		ans, err := Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		n = len(ans.Evaluated)
	}
	b.ReportMetric(float64(n), "predictions")
}

// BenchmarkPlanLlama3_8B: Llama-3-8B at seq 4096, a global batch of 32, on
// one H100 (target < 300 ms on one core).
func BenchmarkPlanLlama3_8B(b *testing.B) { benchPlan(b, "Llama-3-8B", 4096, 32, "h100-80gb") }

// BenchmarkPlanLlama3_70B: Llama-3-70B at seq 8192 on one H100, where
// nothing fits (target < 1 s on one core).
func BenchmarkPlanLlama3_70B(b *testing.B) { benchPlan(b, "Llama-3-70B", 8192, 16, "h100-80gb") }

// BenchmarkPlanLlama3_70BPooled: the same search on a 2 TiB device, as if
// sharded memory were pooled, where plans fit and the whole search runs
// (an H100's rates for the step times).
func BenchmarkPlanLlama3_70BPooled(b *testing.B) {
	benchPlan(b, "Llama-3-70B", 8192, 16, "2TiB", "h100-80gb")
}

// BenchmarkPlanLlama3_70BFSDP8: Llama-3-70B at seq 4096, a global batch of
// 8, on 8 H100s under FSDP with every lever (the sharding, tensor and
// pipeline ones included), plans ranked by step time with communication
// (docs/performance.md: 1.6–2.1 s before step times were predicted under
// parallelism).
func BenchmarkPlanLlama3_70BFSDP8(b *testing.B) {
	m, err := models.Lookup("Llama-3-70B")
	if err != nil {
		b.Fatal(err)
	}
	g, err := gpu.Lookup("h100-80gb")
	if err != nil {
		b.Fatal(err)
	}
	o := Options{Base: predict.Request{Source: predict.Zoo{M: m}, Config: models.Config{Batch: 1, Seq: 4096}, GPU: g, Context: -1,
		Setup: train.Setup{Precision: train.MixedBF16, Optimizer: train.Optimizer{Kind: train.AdamW, WeightDecay: 0.01},
			Parallel: train.Parallel{Strategy: train.FSDP, GPUs: 8}}},
		Margin: g.Capacity * 145 / 1000}
	b.ResetTimer()
	var n int
	for i := 0; i < b.N; i++ {
		ans, err := Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
		n = ans.Simulations
	}
	b.ReportMetric(float64(n), "predictions")
}

// BenchmarkScreenedVsFull measures what a screened simulation costs next
// to a full one, the ratio the planner's budget charges them by
// (screenedPerFull): Llama-3-70B at seq 8192 on 8 H100s under FSDP, in
// 32-true with no checkpointing (screened: its saved activations alone
// exceed the device) and in bf16-true, full checkpointing, CPU offload (it
// fits, simulated and replayed in full).
func BenchmarkScreenedVsFull(b *testing.B) {
	m, err := models.Lookup("Llama-3-70B")
	if err != nil {
		b.Fatal(err)
	}
	g, err := gpu.Lookup("h100-80gb")
	if err != nil {
		b.Fatal(err)
	}
	base := predict.Request{Source: predict.Zoo{M: m}, Config: models.Config{Batch: 1, Seq: 8192}, GPU: g, Context: -1, Screen: true,
		Setup: train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.AdamW, WeightDecay: 0.01, Impl: train.Foreach},
			Parallel: train.Parallel{Strategy: train.FSDP, GPUs: 8}}, Graphs: predict.NewGraphs()}
	fits := base
	fits.Setup.Precision, fits.Setup.Checkpoint = train.TrueBF16, train.FullCheckpoint
	fits.Setup.Optimizer.Impl = train.Fused
	fits.Setup.Parallel.Offload = true
	timeOf := func(r predict.Request, screened bool) float64 {
		// the graphs are built once, as in a search (predict.Graphs)
		if _, err := predict.Run(context.Background(), r); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < b.N; i++ {
			res, err := predict.Run(context.Background(), r)
			if err != nil {
				b.Fatal(err)
			}
			if res.Screened != screened {
				b.Fatalf("screened %v, want %v", res.Screened, screened)
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(b.N)
	}
	b.ResetTimer()
	s, f := timeOf(base, true), timeOf(fits, false)
	b.ReportMetric(s/1e6, "ms/screened")
	b.ReportMetric(f/1e6, "ms/full")
	b.ReportMetric(f/s, "full/screened")
}
