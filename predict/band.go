package predict

import (
	"fmt"
	"math"
	"sort"
)

// Band is how far batchfit's device total (peak reserved plus the CUDA
// context, what decides whether a job fits) has been from the figure
// measured on a real GPU: the worst under- and over-prediction, each a
// share of the measured figure, over Cases recordings.
type Band struct {
	// Under is the worst under-prediction: 0.145 means a prediction
	// 14.5 % below what the GPU measured.
	Under float64
	// Over is the worst over-prediction, likewise.
	Over float64
	// Median is the median error, signed (negative: under).
	Median float64
	Cases  int
	// Source says which recordings the figures come from.
	Source string
}

// SafetyBand is the band the answers of maxbatch, plan and sweep are held
// to by default, and the one estimate prints. It must cover the worst
// under-prediction on the committed GPU recordings (TestSafetyBand in
// package validation recomputes it); until those are committed it holds
// the published training runs batchfit was checked against on a GPU:
// BERT-large under the Hugging Face Trainer on a V100 and torchvision's
// ViT-L/16 under torch 2.1, several precisions, ten runs, nine of them
// under-predicted, median −5 %, worst −14.5 %. The worst over-prediction,
// +4.5 %, is the largest among the Trainer rows of docs/accuracy.md §10
// (bert-large-uncased, batch 1 × 4, checkpointing, fp16, Adam8bit).
var SafetyBand = Band{Under: 0.145, Over: 0.045, Median: -0.05, Cases: 10,
	Source: "published training runs (BERT-large, HF Trainer, V100; ViT-L/16, torch 2.1): 10 runs"}

// BandOf is the band of a list of relative errors, (predicted − measured)
// / measured. It refuses an empty list and errors that are not finite or
// at or below −100 % (a prediction of nothing).
func BandOf(errs []float64, source string) (Band, error) {
	if len(errs) == 0 {
		return Band{}, fmt.Errorf("no errors to make a band of")
	}
	s := append([]float64(nil), errs...)
	for _, e := range s {
		if math.IsNaN(e) || math.IsInf(e, 0) || e <= -1 {
			return Band{}, fmt.Errorf("relative error %g: want a finite value above −100 %%", e)
		}
	}
	sort.Float64s(s)
	b := Band{Under: max(0, -s[0]), Over: max(0, s[len(s)-1]), Cases: len(s), Source: source}
	if n := len(s); n%2 == 1 {
		b.Median = s[n/2]
	} else {
		b.Median = (s[n/2-1] + s[n/2]) / 2
	}
	return b, nil
}

// Covers reports whether the band allows an under-prediction as deep as
// the worst of other's.
func (b Band) Covers(other Band) bool { return b.Under >= other.Under }

// Margin is the headroom, bytes, that keeps an answer safe on a device
// of the given capacity while the prediction may fall Under short of the
// real figure. A prediction p with p ≥ (1 − Under)·real fits for sure
// when real ≤ p / (1 − Under) ≤ capacity, that is when the headroom
// capacity − p is at least Under · capacity.
func (b Band) Margin(capacity int64) int64 {
	return int64(math.Ceil(b.Under * float64(capacity)))
}

// String is the band as the commands print it.
func (b Band) String() string {
	return fmt.Sprintf("within −%s/+%s of measured on %d real GPU recordings", pct(b.Under), pct(b.Over), b.Cases)
}

func pct(v float64) string { return fmt.Sprintf("%.1f %%", 100*v) }
