package plan

import (
	"context"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// When nothing fits, the least need is a plan's simulated in full (never
// one whose simulation stopped at the device), and a larger GPU is named
// only with a plan that, simulated on it again here, fits it with the
// margin of its own capacity. The floor of each case is its float32
// logits, which the cross-entropy takes whatever the precision: 32768 ×
// 128256 × 4 bytes = 16.8 GB for Llama-3-8B at seq 32768 (a T4 holds
// 15.6 GB), 131072 × 128256 × 4 = 67.2 GB for Llama-3-70B at seq 131072
// on each FSDP rank (its own micro-batch of 1), a tp-th of that under
// tensor parallelism.
//
// The levers keep the job's GPUs: tensor parallelism over 8 more GPUs each
// splits the logits (vocabulary-parallel) and fits Llama-3-70B at that
// length on 64 H100s, which is another question than a larger GPU.
func TestLargerNamesOnlySimulatedFits(t *testing.T) {
	var sameGPUs []Lever
	for _, l := range Levers() {
		if l != Tensor && l != Pipeline {
			sameGPUs = append(sameGPUs, l)
		}
	}
	for _, tc := range []struct {
		model, gpu string
		seq        int64
		par        train.Parallel
		band       bool // the margin: the band of each GPU, or none
		objective  Objective
		floor      int64
		// some: at least one larger GPU holds a plan. The B200's 173.75
		// GiB holds Llama-3-8B in bf16 (weights, gradients and Adam
		// states 16 + 16 + 32 GB) with full checkpointing's 32 × 32768 ×
		// 4096 × 2 bytes (8.6 GB) and a few copies of the logits.
		some bool
	}{
		{"Llama-3-8B", "t4", 32768, train.Parallel{}, false, FewestChanges, 32768 * 128256 * 4, true},
		{"Llama-3-70B", "h100-80gb", 131072, train.Parallel{Strategy: train.FSDP, GPUs: 8}, true, Throughput, 131072 * 128256 * 4, false},
	} {
		m, err := models.Lookup(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		g0, err := gpu.Lookup(tc.gpu)
		if err != nil {
			t.Fatal(err)
		}
		margin := func(g gpu.GPU) (int64, error) {
			if tc.band {
				return predict.SafetyBand.Margin(g.Capacity), nil
			}
			return 0, nil
		}
		m0, _ := margin(g0)
		o := Options{Base: predict.Request{Source: predict.Zoo{M: m}, Config: models.Config{Batch: 1, Seq: tc.seq}, GPU: g0, Context: -1,
			Setup: train.Setup{Precision: train.MixedBF16, Optimizer: train.Optimizer{Kind: train.Adam}, Parallel: tc.par}},
			Margin: m0, Objective: tc.objective, Top: 3, Levers: sameGPUs}
		ans, err := Run(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if len(ans.Best) != 0 {
			t.Fatalf("%s on %s: a plan fits: %v", tc.model, tc.gpu, plansOf(ans))
		}
		if ans.Need < tc.floor+m0 || ans.NeedFrom == "" {
			t.Errorf("%s: the least need %d (%s) is below the logits' %d and the margin %d", tc.model, ans.Need, ans.NeedFrom, tc.floor, m0)
		}
		for _, p := range ans.Evaluated {
			if p.Candidate.String() == ans.NeedFrom && p.Result.Screened {
				t.Errorf("%s: the least need is that of %s, whose simulation stopped at the device", tc.model, ans.NeedFrom)
			}
		}
		if ans.StatesNeed > 0 && ans.StatesFrom == "" {
			t.Errorf("%s: a bound of the model states without its combination", tc.model)
		}
		fits, searched, _, err := Larger(context.Background(), o, gpu.All(), margin)
		if err != nil {
			t.Fatal(err)
		}
		if tc.some && len(fits) == 0 {
			t.Errorf("%s: no larger GPU holds a plan (searched %v)", tc.model, searched)
		}
		for _, f := range fits {
			if f.GPU.Capacity <= g0.Capacity {
				t.Errorf("%s: %s named, no larger than %s", tc.model, f.GPU.Name, tc.gpu)
			}
			// simulated again, on its own
			r := ans.request(f.Plan.Candidate)
			r.GPU, r.Margin, r.Context, r.Screen = f.GPU, f.Margin, -1, false
			res, err := predict.Run(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			if !res.Fits || res.DeviceTotal+f.Margin > f.GPU.Capacity || res.DeviceTotal != f.Plan.Result.DeviceTotal {
				t.Errorf("%s on %s: %s fits %v, device total %d (named with %d) and margin %d of %d", tc.model, f.GPU.Name, f.Plan.Candidate,
					res.Fits, res.DeviceTotal, f.Plan.Result.DeviceTotal, f.Margin, f.GPU.Capacity)
			}
			// under tensor parallelism each rank holds its share of the
			// vocabulary's logits (Megatron's vocab-parallel output layer
			// and cross-entropy)
			if floor := tc.floor / max(f.Plan.TP, 1); res.Summary.PeakRequested < floor {
				t.Errorf("%s on %s: requested peak %d below the logits' %d", tc.model, f.GPU.Name, res.Summary.PeakRequested, floor)
			}
		}
	}
}
