package plan

import (
	"math"
	"testing"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// rankPlan is a plan of a micro-batch of 1, no accumulation, on 8
// data-parallel ranks (a global batch of 8) split tp × pp ways more.
func rankPlan(name string, tp, pp int64, seconds float64, total int64, tune Tune) *Plan {
	return &Plan{
		Candidate: Candidate{MicroBatch: 1, Accumulate: 1, Parallel: train.Parallel{Strategy: train.FSDP, GPUs: 8}, TP: tp, PP: pp, Tune: tune},
		Changes:   []string{name},
		Seconds:   seconds,
		Result:    &predict.Result{DeviceTotal: total},
		Fits:      true,
	}
}

// Every plan makes the global batch of 8 a step, so samples a second per
// GPU is 8 / (step time × GPUs): the fewer GPU-seconds, the better.
//
//	a: 8 GPUs,           10 s:  80 GPU-s, 8/80  = 0.1    a second per GPU
//	b: 8 × tp 8 = 64,   1.5 s:  96 GPU-s, 8/96  ≈ 0.0833
//	c: 8 × tp 2 = 16,     4 s:  64 GPU-s, 8/64  = 0.125
//	d: 8 GPUs,           12 s:  96 GPU-s, as b, on fewer GPUs
//	e: 8 × pp 2 = 16,     1 s:  16 GPU-s, but LoRA: after every full plan
//
// Fastest first would be e, b, c, a, d; per GPU it is c, a, d, b, e.
// Without step times: the fewest GPUs, then the least device total.
func TestRankByThroughputPerGPU(t *testing.T) {
	const gib = 1 << 30
	mk := func() []*Plan {
		return []*Plan{
			rankPlan("a", 1, 1, 10, 30*gib, FullTune),
			rankPlan("b", 8, 1, 1.5, 10*gib, FullTune),
			rankPlan("c", 2, 1, 4, 20*gib, FullTune),
			rankPlan("d", 1, 1, 12, 20*gib, FullTune),
			rankPlan("e", 1, 2, 1, 5*gib, LoRATune),
		}
	}
	wantGPUs := map[string]int64{"a": 8, "b": 64, "c": 16, "d": 8, "e": 16}
	wantRate := map[string]float64{"a": 0.1, "b": 8.0 / 96, "c": 0.125, "d": 8.0 / 96, "e": 0.5}
	for _, p := range mk() {
		n := p.Changes[0]
		if p.GPUs() != wantGPUs[n] {
			t.Errorf("%s: %d GPUs, want %d", n, p.GPUs(), wantGPUs[n])
		}
		if r := p.ThroughputPerGPU(); math.Abs(r-wantRate[n]) > 1e-12 {
			t.Errorf("%s: %g samples/s per GPU, want %g", n, r, wantRate[n])
		}
	}
	cases := []struct {
		name    string
		o       Objective
		untimed bool
		want    string
	}{
		{"timed", Throughput, false, "cadbe"},
		// every plan moves one lever here, so the changes tie
		{"fewest changes", FewestChanges, false, "cadbe"},
		// a and d: 8 GPUs, 30 and 20 GiB; b 64; c 16 GPUs; e last (LoRA)
		{"untimed", FewestChanges, true, "dacbe"},
	}
	for _, c := range cases {
		ps := mk()
		sortPlans(ps, c.o, c.untimed)
		var got string
		for _, p := range ps {
			got += p.Changes[0]
		}
		if got != c.want {
			t.Errorf("%s: order %s, want %s", c.name, got, c.want)
		}
	}
}
