package solve

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

func request(t testing.TB, name string, g string) predict.Request {
	m, err := models.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := gpu.Lookup(g)
	if err != nil {
		t.Fatal(err)
	}
	return predict.Request{Source: predict.Zoo{M: m}, GPU: dev, Context: -1, Alloc: alloc.DefaultConfig(),
		Setup: train.Setup{Optimizer: train.Optimizer{Kind: train.Adam}}}
}

// Memory rises with batch size for every zoo model: more samples only add
// tensors, so the peak of the bytes requested from the allocator rises
// strictly. (Allocated and reserved memory include the allocator's rounding
// and fragmentation — an unsplit block counts whole — and PyTorch's own
// figures are not strictly monotone at the megabyte level; they are
// checked against the requested peak instead.) From batch 1 to 2 only the
// saved activations must rise: at batch 1 a broadcast operand's gradient
// needs no sum, so AccumulateGrad receives the incoming gradient itself and
// clones it, and a slice of a cat's gradient pins the whole (ViT's position
// embedding and class token); when the peak is in the optimizer step, batch
// 1 can hold a little more than batch 2, as it does in PyTorch. Sequence
// models run at a short sequence to keep the test fast.
func TestMonotoneInBatch(t *testing.T) {
	for _, m := range models.All() {
		m := m
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			r := request(t, m.Name, "4TB")
			if m.DefaultSeq > 0 {
				r.Config.Seq = 64
			}
			r.Setup.Steps = 2
			pts, err := Sweep(context.Background(), r, []int64{1, 2, 3, 4})
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range pts {
				tl := p.Result.Timeline
				if tl.PeakAllocated < tl.Final.PeakRequested || tl.PeakReserved < tl.PeakAllocated {
					t.Errorf("batch %d: requested %d, allocated %d, reserved %d out of order", p.Value, tl.Final.PeakRequested, tl.PeakAllocated, tl.PeakReserved)
				}
				if i == 0 {
					continue
				}
				a, b := pts[i-1].Result, p.Result
				if i > 1 && b.Timeline.Final.PeakRequested <= a.Timeline.Final.PeakRequested {
					t.Errorf("peak requested at batch %d (%d) not above batch %d (%d)", p.Value, b.Timeline.Final.PeakRequested, pts[i-1].Value, a.Timeline.Final.PeakRequested)
				}
				if b.Summary.ActivationsBytes <= a.Summary.ActivationsBytes {
					t.Errorf("saved activations at batch %d not above batch %d", p.Value, pts[i-1].Value)
				}
			}
		})
	}
}

// maxbatch returns b where b fits and b+1 does not, checked by predicting
// both independently of the search.
func TestMaxBatchBoundary(t *testing.T) {
	cases := []struct {
		model, gpu string
		band       bool // held to the safety band's margin
	}{
		{"mlp", "1GiB", false},
		{"simpleconv", "t4", false},
		{"resnet18", "t4", false},
		{"resnet50", "a100-40gb", false},
		{"resnet18", "t4", true},
		{"resnet50", "a100-40gb", true},
	}
	for _, c := range cases {
		r := request(t, c.model, c.gpu)
		r.Context = 0
		if c.band {
			r.Margin = predict.SafetyBand.Margin(r.GPU.Capacity)
		}
		ans, err := MaxBatch(context.Background(), r, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.model, err)
		}
		if ans.Max < 1 {
			t.Fatalf("%s on %s: nothing fits", c.model, c.gpu)
		}
		for _, b := range []int64{ans.Max, ans.Max + 1} {
			q := r
			q.Config.Batch = b
			res, err := predict.Run(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			if want := b == ans.Max; res.Fits != want {
				t.Errorf("%s on %s: maxbatch %d, but batch %d fits=%v", c.model, c.gpu, ans.Max, b, res.Fits)
			}
			// With the band's margin, the answer's device total is low
			// enough that a real one up to the band's worst
			// under-prediction above it still fits.
			if c.band && b == ans.Max {
				if high := float64(res.DeviceTotal) / (1 - predict.SafetyBand.Under); high > float64(r.GPU.Capacity) {
					t.Errorf("%s on %s with the band: batch %d may reach %g of %d", c.model, c.gpu, b, high, r.GPU.Capacity)
				}
			}
		}
		if c.band {
			bare := r
			bare.Margin = 0
			b, err := MaxBatch(context.Background(), bare, 0)
			if err != nil || b.Max <= ans.Max {
				t.Errorf("%s on %s: the band's answer %d is not below the bare %d (%v)", c.model, c.gpu, ans.Max, b.Max, err)
			}
		}
		t.Logf("%s on %s: max batch %d in %d probes", c.model, c.gpu, ans.Max, ans.Probes)
	}
}

// The seed question: how deep can the MLP be at batch 32? Depth is solved
// like batch: the answer fits, one more layer does not.
func TestMaxLayers(t *testing.T) {
	// a device smaller than --gpu accepts, built directly
	r := request(t, "mlp", "1GiB")
	r.GPU.Capacity = 256 << 20
	r.Context = 0
	r.Config.Batch = 32
	ans, err := MaxDim(context.Background(), r, models.DimLayers, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Max < 2 || ans.Over == nil || ans.Over.Fits || !ans.Fit.Fits {
		t.Fatalf("layers: max %d, fit %v, over %v", ans.Max, ans.Fit != nil && ans.Fit.Fits, ans.Over != nil && ans.Over.Fits)
	}
	// A 1024-unit hidden layer adds 1024·1024+1024 parameters; with Adam
	// each costs 16 bytes (weight, gradient, two moments): about 16 MiB a
	// layer, so a 256 MiB device holds on the order of
	// ten layers, not hundreds.
	if ans.Max > 64 {
		t.Errorf("max layers %d is implausibly deep for 256 MiB", ans.Max)
	}
	if _, err := MaxDim(context.Background(), request(t, "resnet18", "t4"), models.DimLayers, 0); err == nil {
		t.Error("resnet18 has no layers dimension, want an error")
	}
}

func BenchmarkMaxBatchGPT2(b *testing.B) {
	r := request(b, "gpt2", "h100-80gb")
	r.Config.Seq = 1024
	for i := 0; i < b.N; i++ {
		if _, err := MaxBatch(context.Background(), r, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMaxBatchResNet50(b *testing.B) {
	r := request(b, "resnet50", "h100-80gb")
	var ans *Answer
	for i := 0; i < b.N; i++ {
		var err error
		if ans, err = MaxBatch(context.Background(), r, 0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ans.Probes), "predictions")
	b.ReportMetric(float64(ans.Max), "answer")
}

// Llama-3-70B does not fit one GPU with Adam (its bf16 weights alone are
// 141 GB), so the search runs against a 2 TiB device, as if sharded memory
// were pooled, to time a full search.
func BenchmarkMaxBatchLlama3_70B(b *testing.B) {
	r := request(b, "Llama-3-70B", "2TiB")
	r.Config.Seq = 8192
	r.Setup.Precision = train.TrueBF16
	r.Setup.Checkpoint = train.FullCheckpoint
	for i := 0; i < b.N; i++ {
		if _, err := MaxBatch(context.Background(), r, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMaxBatchLlama3_70BFSDP is the same model sharded for real:
// FSDP FULL_SHARD over 8 H100s with the step on the host (CPU offload),
// bf16, checkpointing every block, at seq 4096 — the per-rank prediction
// each probe of the search makes (target: the single-GPU targets, under a
// second on one core).
func BenchmarkMaxBatchLlama3_70BFSDP(b *testing.B) {
	r := request(b, "Llama-3-70B", "h100-80gb")
	r.Config.Seq = 4096
	r.Setup.Precision = train.TrueBF16
	r.Setup.Checkpoint = train.FullCheckpoint
	r.Setup.Parallel = train.Parallel{Strategy: train.FSDP, GPUs: 8, Offload: true}
	for i := 0; i < b.N; i++ {
		ans, err := MaxBatch(context.Background(), r, 0)
		if err != nil {
			b.Fatal(err)
		}
		if ans.Max < 1 {
			b.Fatal("nothing fits")
		}
	}
}

// maxbatch answers for every zoo member: a batch that fits with the next
// one not fitting, or nothing fits (70B-class models on one 80 GB GPU).
// Sequence models run at a short sequence to keep the test fast.
func TestMaxBatchEveryModel(t *testing.T) {
	for _, m := range models.All() {
		m := m
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			r := request(t, m.Name, "h100-80gb")
			if m.DefaultSeq > 0 {
				r.Config.Seq = 128
			}
			r.Setup.Precision = train.MixedBF16
			ans, err := MaxBatch(context.Background(), r, 1<<16)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ans.Max == 0:
				if ans.Over == nil || ans.Over.Fits {
					t.Errorf("nothing fits, but batch 1 was not shown to fail")
				}
			case ans.Limited:
				if !ans.Fit.Fits {
					t.Errorf("limit %d reported without fitting", ans.Max)
				}
			default:
				if !ans.Fit.Fits || ans.Over == nil || ans.Over.Fits || ans.Over.Config.Batch != ans.Max+1 {
					t.Errorf("max %d: fit %v, next %+v", ans.Max, ans.Fit.Fits, ans.Over != nil && ans.Over.Fits)
				}
			}
		})
	}
}

// BenchmarkSweepResNet50 is 'batchfit sweep resnet50 --batch 1:256': nine
// predictions, memory and step time (target < 100 ms on one core).
func BenchmarkSweepResNet50(b *testing.B) {
	r := request(b, "resnet50", "h100-80gb")
	batches := []int64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	for i := 0; i < b.N; i++ {
		if _, err := Sweep(context.Background(), r, batches); err != nil {
			b.Fatal(err)
		}
	}
}

// A transformer's width is heads × head size (withOverrides keeps the head
// size), and a learned position table has no row past its size: the search
// tries only such values, and a sequence bounded by the table stops there,
// saying that the table, not memory, decided.
func TestMaxDimValidValues(t *testing.T) {
	for _, c := range []struct {
		model, gpu string
		dim        models.Dim
		seq        int64
		step       int64 // every value tried is a multiple
		bound      int64 // the model's limit reached, 0: memory decides
	}{
		// GPT-2: 12 heads of 64 (n_embd 768 / n_head 12)
		{"gpt2", "t4", models.DimHidden, 256, 64, 0},
		// Llama-3.2-1B: head size 64 (2048 / 32 heads), 32 query heads
		// over 8 key/value heads, a group of 4: widths in multiples of
		// 256
		{"Llama-3.2-1B", "t4", models.DimHidden, 128, 256, 0},
		// n_positions 1024 and max_position_embeddings 512; at batch 1
		// both fit far below an H100's memory
		{"gpt2", "h100-80gb", models.DimSeq, 0, 1, 1024},
		{"bert-base-uncased", "h100-80gb", models.DimSeq, 0, 1, 512},
	} {
		r := request(t, c.model, c.gpu)
		r.Config.Batch, r.Config.Seq = 1, c.seq
		ans, err := MaxDim(context.Background(), r, c.dim, 0)
		if err != nil {
			t.Errorf("%s %s: %v", c.model, c.dim, err)
			continue
		}
		for _, v := range ans.Tried {
			if v%c.step != 0 || v <= 0 {
				t.Errorf("%s %s: tried %d, not a positive multiple of %d", c.model, c.dim, v, c.step)
			}
		}
		if c.bound > 0 {
			if ans.Max != c.bound || !ans.Limited || !strings.Contains(ans.Bound, fmt.Sprint(c.bound)) {
				t.Errorf("%s %s: max %d, limited %v by %q; want %d, limited by the position table", c.model, c.dim, ans.Max, ans.Limited, ans.Bound, c.bound)
			}
			continue
		}
		if ans.Max == 0 || ans.Limited || ans.Bound != "" || ans.Next != ans.Max+c.step || ans.Over == nil || ans.Over.Fits || !ans.Fit.Fits {
			t.Errorf("%s %s: max %d (limited %v, %q), next %d; want a memory boundary one step of %d apart", c.model, c.dim, ans.Max, ans.Limited, ans.Bound, ans.Next, c.step)
		}
	}
}

// A search limit under the model's bound is the search's, not the model's.
func TestMaxDimSearchLimitBelowModel(t *testing.T) {
	r := request(t, "gpt2", "h100-80gb")
	r.Config.Batch = 1
	ans, err := MaxDim(context.Background(), r, models.DimSeq, 300)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Max != 300 || !ans.Limited || ans.Bound != "" {
		t.Errorf("max %d, limited %v by %q; want 300 by the search's limit", ans.Max, ans.Limited, ans.Bound)
	}
	// a limit below the smallest valid width leaves nothing to try
	if _, err := MaxDim(context.Background(), r, models.DimHidden, 32); err == nil || !strings.Contains(err.Error(), "head size 64") {
		t.Errorf("hidden up to 32: got %v, want an error naming the head size", err)
	}
}

// A search whose next value is beyond batchfit's bounds (here more layers
// than simulated; a graph of too many ops or bytes is the same error
// class, graph.ErrBound) answers the largest value within them, saying
// which bound ended it, rather than failing.
func TestSearchStopsAtTheBounds(t *testing.T) {
	// mlp at width 64 fits thousands of layers on a B200: the layers
	// bound decides
	r := request(t, "mlp", "b200")
	r.Config = models.Config{Batch: 1, Hidden: 64}
	ans, err := MaxDim(context.Background(), r, models.DimLayers, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !ans.Limited || ans.Max != predict.MaxLayers || ans.Fit == nil || ans.Bound != "" || !strings.Contains(ans.Beyond, "layers 4097: at most 4096") {
		t.Errorf("max %d, limited %v, bound %q, beyond %q; want %d beyond the layers bound", ans.Max, ans.Limited, ans.Bound, ans.Beyond, predict.MaxLayers)
	}
}
