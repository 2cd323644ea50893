package predict

import (
	"context"
	"reflect"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// A screened request answers as the full one wherever the step could fit,
// and is screened out only where the full answer does not fit either:
// requested bytes are a floor under what the allocator reserves. The
// batches run from comfortably fitting to many times the device, for a
// model with cuDNN workspaces (screened at their low end) and one without.
func TestScreenNeverRulesOutAFit(t *testing.T) {
	dev, err := gpu.Lookup("a10g")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model   string
		seq     int64
		batches []int64
	}{
		{"resnet50", 0, []int64{64, 128, 160, 192, 256, 1024}},
		{"gpt2", 1024, []int64{4, 8, 12, 16, 24, 128}},
	} {
		m, err := models.Lookup(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		var screened int
		for _, b := range tc.batches {
			req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: b, Seq: tc.seq}, GPU: dev, Context: -1,
				Setup: train.Setup{Optimizer: train.Optimizer{Kind: train.AdamW}}}
			full, err := Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			req.Screen = true
			got, err := Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Screened {
				if got.Timeline.PeakReserved != full.Timeline.PeakReserved || got.Fits != full.Fits || !reflect.DeepEqual(got.Time, full.Time) {
					t.Errorf("%s batch %d: unscreened answer differs: reserved %d, fits %v; full %d, %v", tc.model, b,
						got.Timeline.PeakReserved, got.Fits, full.Timeline.PeakReserved, full.Fits)
				}
				continue
			}
			screened++
			if full.Fits {
				t.Errorf("%s batch %d: screened out, but the full prediction fits (%s)", tc.model, b, full.Decider)
			}
			if got.Fits || got.Summary.PeakRequested > full.Summary.PeakRequested {
				t.Errorf("%s batch %d: screened answer fits %v, requested %d above the full step's %d", tc.model, b,
					got.Fits, got.Summary.PeakRequested, full.Summary.PeakRequested)
			}
		}
		if screened == 0 || screened == len(tc.batches) {
			t.Errorf("%s: %d of %d batches screened out; the cases should straddle the device", tc.model, screened, len(tc.batches))
		}
	}
}

// Records are the first micro-batch's, whatever the accumulation, the
// steps and the batch: they equal those of a full prediction.
func TestRecordsMatchTheFullRun(t *testing.T) {
	dev, err := gpu.Lookup("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []train.Precision{train.FP32, train.MixedBF16, train.Mixed16, train.TrueBF16} {
		req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: 2, Seq: 512}, GPU: dev, Context: -1,
			Setup: train.Setup{Precision: p, Accumulate: 8, Optimizer: train.Optimizer{Kind: train.AdamW}}}
		full, err := Run(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		runs, g, err := Records(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Ops) != len(runs) || !reflect.DeepEqual(runs, full.Summary.Ops) {
			t.Errorf("%s: records differ from the full prediction's", p)
		}
	}
}
