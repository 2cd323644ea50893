package validation_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	// The estimate command line reader (validation.EstimateRequest) and
	// the maxbatch command itself.
	"github.com/batchfit/batchfit/internal/cli"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/validation"
)

const safetyCorpusDir = "../testdata/gpu"

// bandErrors are the errors the safety band is made of, one per case that
// measured a device-level figure: the device total against nvidia-smi's
// used memory where the case gives it, else peak reserved against
// max_memory_reserved. A reserved figure under-predicted by x leaves the
// device total under-predicted by less (the context adds the same to
// both), so taking it where no device figure exists errs towards a wider
// band.
func bandErrors(cmps []validation.GPUComparison) (device, reserved []float64) {
	for _, c := range cmps {
		if !math.IsNaN(c.ErrReserved) {
			reserved = append(reserved, c.ErrReserved)
		}
		switch {
		case !math.IsNaN(c.ErrDevice):
			device = append(device, c.ErrDevice)
		case !math.IsNaN(c.ErrReserved):
			device = append(device, c.ErrReserved)
		}
	}
	return device, reserved
}

// realLimit is the largest batch a case shows to run on its GPU: the
// largest that ran in a largest-batch table, one below the first that ran
// out of memory, or one below the batch of a run that ran out of memory.
func realLimit(c validation.GPUCase) (int64, bool) {
	m := c.Measured
	limit := int64(math.MaxInt64)
	if m.LargestBatch > 0 {
		limit = min(limit, m.LargestBatch)
	}
	if m.FirstOOMBatch > 0 {
		limit = min(limit, m.FirstOOMBatch-1)
	}
	if m.OOM {
		if b, ok := batchOf(c.Args); ok {
			limit = min(limit, b-1)
		}
	}
	return limit, limit != math.MaxInt64
}

// batchOf reads --batch from an estimate command line (a single batch).
func batchOf(args []string) (int64, bool) {
	for i, a := range args {
		v, ok := "", false
		switch {
		case (a == "--batch" || a == "-batch") && i+1 < len(args):
			v, ok = args[i+1], true
		case strings.HasPrefix(a, "--batch="):
			v, ok = strings.TrimPrefix(a, "--batch="), true
		}
		if ok {
			b, err := strconv.ParseInt(v, 10, 64)
			return b, err == nil
		}
	}
	return 0, false
}

// withoutBatch drops --batch from a command line: maxbatch searches it.
func withoutBatch(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--batch" || a == "-batch":
			i++
		case strings.HasPrefix(a, "--batch="):
		default:
			out = append(out, a)
		}
	}
	return out
}

// TestSafetyBand recomputes the error distribution of the device total
// over the GPU corpus and holds the committed band (predict.SafetyBand) to
// it: (a) the band covers the corpus's worst under-prediction, and (b) on
// every case with a real limit, maxbatch's default answer (with the band)
// is at or below the batch that really ran.
func TestSafetyBand(t *testing.T) {
	cases, err := validation.LoadGPUCorpus(safetyCorpusDir)
	if err != nil {
		t.Fatal(err)
	}
	cmps, err := validation.CompareGPUCorpus(cases)
	if err != nil {
		t.Fatal(err)
	}
	device, reserved := bandErrors(cmps)
	if len(device) == 0 {
		t.Fatal("no case of the corpus measured a device-level figure")
	}
	got, err := predict.BandOf(device, "the GPU corpus")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("device total: %s, median %+.1f %% (committed: %s)", got, 100*got.Median, predict.SafetyBand)
	if r, err := predict.BandOf(reserved, "the GPU corpus"); err == nil {
		t.Logf("peak reserved: %s, median %+.1f %%", r, 100*r.Median)
	}
	// (a)
	if !predict.SafetyBand.Covers(got) {
		t.Errorf("the committed band allows %.1f %% under, the corpus shows %.1f %%: set predict.SafetyBand to Under %.4f, Over %.4f, Median %.4f, Cases %d",
			100*predict.SafetyBand.Under, 100*got.Under, got.Under, got.Over, got.Median, got.Cases)
	}
	// (b)
	checked := 0
	for _, c := range cases {
		limit, ok := realLimit(c)
		if !ok {
			continue
		}
		checked++
		args := append(append([]string{"maxbatch"}, withoutBatch(c.ResolvedArgs())...), "--json")
		var out, errs bytes.Buffer
		code := cli.Run(args, &out, &errs)
		if code != 0 && code != 1 {
			t.Errorf("%s: maxbatch exit %d: %s", c.ID, code, errs.String())
			continue
		}
		var mb cli.MaxBatchJSON
		if err := json.Unmarshal(out.Bytes(), &mb); err != nil {
			t.Errorf("%s: maxbatch --json: %v", c.ID, err)
			continue
		}
		if mb.MaxBatch > limit {
			t.Errorf("%s: maxbatch answers %d with the band (margin %d bytes); the GPU ran at most %d", c.ID, mb.MaxBatch, mb.MarginBytes, limit)
		}
	}
	t.Logf("%d cases with a real limit checked", checked)
}

// The helpers above on hand-made command lines and cases.
func TestSafetyBandHelpers(t *testing.T) {
	if b, ok := batchOf([]string{"resnet50", "--batch", "32", "--gpu", "t4"}); !ok || b != 32 {
		t.Errorf("batchOf: %d, %v", b, ok)
	}
	if b, ok := batchOf([]string{"resnet50", "--batch=8"}); !ok || b != 8 {
		t.Errorf("batchOf =: %d, %v", b, ok)
	}
	if got := withoutBatch([]string{"m", "--batch", "4", "--gpu", "t4", "--batch=2"}); strings.Join(got, " ") != "m --gpu t4" {
		t.Errorf("withoutBatch: %v", got)
	}
	cases := []struct {
		c     validation.GPUCase
		limit int64
		ok    bool
	}{
		{validation.GPUCase{Measured: validation.GPUMeasured{LargestBatch: 96, FirstOOMBatch: 112}}, 96, true},
		{validation.GPUCase{Measured: validation.GPUMeasured{FirstOOMBatch: 112}}, 111, true},
		{validation.GPUCase{Args: []string{"m", "--batch", "64"}, Measured: validation.GPUMeasured{OOM: true}}, 63, true},
		{validation.GPUCase{Measured: validation.GPUMeasured{MaxMemoryAllocated: 1 << 30}}, 0, false},
	}
	for i, c := range cases {
		if l, ok := realLimit(c.c); ok != c.ok || (ok && l != c.limit) {
			t.Errorf("case %d: limit %d, %v; want %d, %v", i, l, ok, c.limit, c.ok)
		}
	}
	nan := math.NaN()
	dev, res := bandErrors([]validation.GPUComparison{
		{ErrReserved: -0.10, ErrDevice: -0.05}, // the device figure wins
		{ErrReserved: -0.12, ErrDevice: nan},   // reserved stands in
		{ErrReserved: nan, ErrDevice: nan},     // neither
	})
	if len(dev) != 2 || dev[0] != -0.05 || dev[1] != -0.12 || len(res) != 2 {
		t.Errorf("bandErrors: device %v, reserved %v", dev, res)
	}
}
