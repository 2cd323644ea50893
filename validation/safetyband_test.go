package validation_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"

	// The maxbatch command itself.
	"github.com/batchfit/batchfit/internal/cli"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/validation"
)

const safetyCorpusDir = "../testdata/gpu"

// bandErrors are the errors the safety band is made of, one per case: the
// device total against nvidia-smi's used memory where the case gives it,
// else peak reserved against max_memory_reserved, else peak allocated
// against max_memory_allocated. A reserved or allocated figure
// under-predicted by x leaves the device total under-predicted by less
// (the context, and the cache above the allocated bytes, add to both), so
// taking it where no device figure exists errs towards a wider band.
func bandErrors(cmps []validation.GPUComparison) (device, reserved []float64) {
	for _, c := range cmps {
		if validation.KnownCauses[c.Case.KnownCause].NeverFails {
			continue
		}
		if !math.IsNaN(c.ErrReserved) {
			reserved = append(reserved, c.ErrReserved)
		}
		switch {
		case !math.IsNaN(c.ErrDevice):
			device = append(device, c.ErrDevice)
		case !math.IsNaN(c.ErrReserved):
			device = append(device, c.ErrReserved)
		case !math.IsNaN(c.ErrAllocated):
			device = append(device, c.ErrAllocated)
		}
	}
	return device, reserved
}

// realLimit is the largest batch a case shows could run at most on its
// GPU: one below the first that ran out of memory, or one below the batch
// of a run that ran out of memory. A batch that ran is no limit: the
// largest that fits may lie anywhere below the first that failed.
func realLimit(c validation.GPUCase) (int64, bool) {
	m := c.Measured
	limit := int64(math.MaxInt64)
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

// groupErrors splits the band's errors (bandErrors) by what each
// prediction relies on.
func groupErrors(cmps []validation.GPUComparison) map[predict.Reliance][]float64 {
	out := map[predict.Reliance][]float64{}
	for _, c := range cmps {
		if d, _ := bandErrors([]validation.GPUComparison{c}); len(d) > 0 {
			out[c.Reliance] = append(out[c.Reliance], d[0])
		}
	}
	return out
}

// TestSafetyBand recomputes the error distribution of the device total
// over the GPU corpus and holds the committed bands to it: (a) the
// SafetyBand covers the corpus's worst under-prediction; (b) every group
// of predictions relying on the same things (predict.Reliance) with at
// least predict.MinBandFigures figures has its band in predict.Bands,
// covering its worst under-prediction and no wider than it, and no other
// group has one; (c) on every case with a real limit, maxbatch's default
// answer (with its band) is below the first batch that failed; (d) on
// the cases whose source searched the largest batch, the median default
// answer is at least the source's own next try below the largest batch
// that ran (within one search step).
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
	// (a), and no wider than the corpus and the published runs
	if want := max(got.Under, predict.PublishedRunsUnder); predict.SafetyBand.Under > want+0.001 {
		t.Errorf("the committed band allows %.1f %% under, wider than the corpus's %.1f %% and the published runs' %.1f %%",
			100*predict.SafetyBand.Under, 100*got.Under, 100*predict.PublishedRunsUnder)
	}
	if !predict.SafetyBand.Covers(got) {
		t.Errorf("the committed band allows %.1f %% under, the corpus shows %.1f %%: set predict.SafetyBand to Under %.4f, Over %.4f, Median %.4f, Cases %d",
			100*predict.SafetyBand.Under, 100*got.Under, math.Ceil(got.Under*1e4)/1e4, got.Over, got.Median, got.Cases)
	}
	// The batches that ran out of memory where batchfit predicted less
	// than the GPU: each an under-prediction deeper than its bound.
	bounds := map[predict.Reliance][]float64{}
	worstBound := 0.0
	for _, c := range cases {
		b, rel, ok, err := validation.FailureBound(c)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			bounds[rel] = append(bounds[rel], b)
			worstBound = min(worstBound, b)
			t.Logf("%-52s failed at batch %d, predicted %.1f %% below the GPU", c.ID, c.FailedBatch(), -100*b)
		}
	}
	if predict.SafetyBand.Under < -worstBound {
		t.Errorf("the committed band allows %.1f %% under; a batch that ran out of memory was predicted %.1f %% below the GPU", 100*predict.SafetyBand.Under, -100*worstBound)
	}
	// (b)
	groups := groupErrors(cmps)
	for rel, errs := range groups {
		b, err := predict.BandOf(errs, "")
		if err != nil {
			t.Fatal(err)
		}
		b.Limits = len(bounds[rel])
		for _, x := range bounds[rel] {
			b.Under = max(b.Under, -x)
		}
		committed, ok := predict.Bands[rel]
		t.Logf("%-28s %2d figures, %2d failures: %s, median %+.1f %%", rel, len(errs), b.Limits, b, 100*b.Median)
		switch {
		case len(errs) < predict.MinBandFigures && ok:
			t.Errorf("%s: %d figures, fewer than %d, yet a band of its own is committed", rel, len(errs), predict.MinBandFigures)
		case len(errs) < predict.MinBandFigures:
		case !ok || !committed.Covers(b) || committed.Under > b.Under+0.001 || committed.Cases != b.Cases || committed.Limits != b.Limits ||
			math.Abs(committed.Over-b.Over) > 0.001 || math.Abs(committed.Median-b.Median) > 0.001:
			t.Errorf("%s: want predict.Bands[%d] = earned(…, %.4f, %.4f, %.4f, %d, %d), have %+v",
				rel, uint8(rel), math.Ceil(b.Under*1e4)/1e4, b.Over, b.Median, b.Cases, b.Limits, committed)
		}
	}
	for rel, bs := range bounds {
		if _, ok := groups[rel]; !ok {
			t.Logf("%s: %d failures and no figure: the SafetyBand answers for it (it must cover them, above)", rel, len(bs))
		}
	}
	for rel := range predict.Bands {
		if _, ok := groups[rel]; !ok {
			t.Errorf("%s: a band is committed for a group with no figure", rel)
		}
	}
	// (c) and (d)
	checked, within, searched := 0, 0, 0
	for _, c := range cases {
		limit, hasLimit := realLimit(c)
		below := c.Measured.SearchStepBelow
		if !hasLimit && below == 0 {
			continue
		}
		args := append(append([]string{"maxbatch"}, withoutBatch(c.ResolvedArgs())...), "--json")
		var out, errs bytes.Buffer
		code := cli.Run(args, &out, &errs)
		if code != 0 && code != 1 {
			t.Errorf("%s: maxbatch exit %d: %s", c.ID, code, errs.String())
			continue
		}
		var mb report.MaxBatchJSON
		if err := json.Unmarshal(out.Bytes(), &mb); err != nil {
			t.Errorf("%s: maxbatch --json: %v", c.ID, err)
			continue
		}
		if hasLimit {
			checked++
			if mb.MaxBatch > limit {
				t.Errorf("%s: maxbatch answers %d with its band (margin %d bytes); batch %d ran out of memory", c.ID, mb.MaxBatch, mb.MarginBytes, limit+1)
			}
		}
		if below > 0 {
			searched++
			if mb.MaxBatch >= below {
				within++
			}
			t.Logf("%-52s answer %4d, ran %4d, one step below %4d, failed %d", c.ID, mb.MaxBatch, c.Measured.LargestBatch, below, c.Measured.FirstOOMBatch)
		}
	}
	t.Logf("%d cases with a real limit checked; %d of %d answers within one search step of the largest batch that ran", checked, within, searched)
	if 2*within < searched {
		t.Errorf("the median answer is more than one search step below the largest batch that ran: %d of %d within", within, searched)
	}
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
		{validation.GPUCase{Measured: validation.GPUMeasured{LargestBatch: 96, FirstOOMBatch: 112}}, 111, true},
		{validation.GPUCase{Measured: validation.GPUMeasured{LargestBatch: 96}}, 0, false},
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
		{ErrReserved: -0.10, ErrDevice: -0.05},                  // the device figure wins
		{ErrReserved: -0.12, ErrDevice: nan},                    // reserved stands in
		{ErrAllocated: -0.07, ErrReserved: nan, ErrDevice: nan}, // allocated stands in
		{ErrAllocated: nan, ErrReserved: nan, ErrDevice: nan},   // none
	})
	if len(dev) != 3 || dev[0] != -0.05 || dev[1] != -0.12 || dev[2] != -0.07 || len(res) != 2 {
		t.Errorf("bandErrors: device %v, reserved %v", dev, res)
	}
}

// FailureBound's margin is the largest at which the failed batch still
// fits: it fits at that share of the GPU and not at a step of the
// bisection (a two-thousandth of the GPU) beyond it. A case with no
// failed batch says nothing.
func TestFailureBound(t *testing.T) {
	cases, err := validation.LoadGPUCorpus(safetyCorpusDir)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, c := range cases {
		b, _, ok, err := validation.FailureBound(c)
		if err != nil {
			t.Fatal(err)
		}
		if c.FailedBatch() == 0 && ok {
			t.Errorf("%s: a bound without a failed batch", c.ID)
		}
		if !ok {
			continue
		}
		checked++
		args := c.ResolvedArgs()
		for i := range args {
			if args[i] == "--batch" {
				args[i+1] = strconv.FormatInt(c.FailedBatch(), 10)
			}
		}
		r, err := validation.EstimateRequest(args)
		if err != nil {
			t.Fatal(err)
		}
		fits := func(share float64) bool {
			rm := r
			rm.Margin = int64(share * float64(r.GPU.Capacity))
			res, err := predict.Run(context.Background(), rm)
			return err == nil && res.Fits
		}
		if !fits(-b) || fits(-b+2.0/2000) {
			t.Errorf("%s: batch %d fits at %.3f %% of the GPU held back %v, at %.3f %% %v; want yes, then no",
				c.ID, c.FailedBatch(), -100*b, fits(-b), 100*(-b+2.0/2000), fits(-b+2.0/2000))
		}
	}
	if checked == 0 {
		t.Error("no failed batch in the corpus gave a bound")
	}
}
