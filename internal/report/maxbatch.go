package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/solve"
)

// MaxBatchJSON is the stable JSON form of a search.
type MaxBatchJSON struct {
	Model string `json:"model"`
	Solve string `json:"solve"`
	// MarginBytes is the headroom every answer left (--margin).
	MarginBytes int64 `json:"margin_bytes"`
	MaxBatch    int64 `json:"max_batch,omitempty"`
	Max         int64 `json:"max"`
	Limited     bool  `json:"limited"`
	// LimitedBy names what in the model set the limit the search reached
	// (a learned position table), empty for the search's own --limit.
	LimitedBy string `json:"limited_by,omitempty"`
	// Beyond names the bound of batchfit's the value after max is beyond
	// (too many layers, ops or bytes to simulate).
	Beyond string `json:"beyond_bounds,omitempty"`
	// Step and StepReason: the values tried are multiples of Step (a
	// transformer's width of its head size).
	Step       int64         `json:"step,omitempty"`
	StepReason string        `json:"step_reason,omitempty"`
	Probes     int           `json:"probes"`
	Tried      []int64       `json:"tried"`
	AtMax      *EstimateJSON `json:"at_max,omitempty"`
	AtNext     *EstimateJSON `json:"at_next,omitempty"`
	// Fastest is the batch with the best predicted throughput
	// (--objective throughput).
	Fastest *FastestJSON `json:"fastest,omitempty"`
}

// FastestJSON is the throughput objective's answer.
type FastestJSON struct {
	Batch                   int64      `json:"batch"`
	SamplesPerSecond        float64    `json:"samples_per_second"`
	TokensPerSecond         float64    `json:"tokens_per_second,omitempty"`
	LargestSamplesPerSecond float64    `json:"largest_samples_per_second"`
	ShareOfLargest          float64    `json:"share_of_largest"`
	Curve                   []RateJSON `json:"curve"`
}

// RateJSON is one point of the throughput curve.
type RateJSON struct {
	Batch            int64   `json:"batch"`
	StepSeconds      float64 `json:"step_seconds"`
	SamplesPerSecond float64 `json:"samples_per_second"`
	TokensPerSecond  float64 `json:"tokens_per_second,omitempty"`
	// BoundStepSeconds is the roofline bound of the step.
	BoundStepSeconds float64 `json:"bound_step_seconds"`
}

var dimWords = map[models.Dim]string{models.DimBatch: "batch", models.DimLayers: "depth (layers)",
	models.DimHidden: "width (hidden size)", models.DimSeq: "sequence length"}

func writeFastest(w io.Writer, f *solve.Fastest) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "predicted throughput (the calibrated step-time model; bound: the roofline step time, see docs/accuracy.md §4):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	tok := f.Largest.TokensPerSecond > 0
	hdr := "batch\tstep time\tsamples/s\t"
	if tok {
		hdr += "tokens/s\t"
	}
	hdr += "bound\t"
	fmt.Fprintln(tw, hdr)
	for _, p := range f.Curve {
		line := fmt.Sprintf("%d\t%s\t%s\t", p.Batch, FormatSeconds(p.Seconds), FormatRate(p.SamplesPerSecond))
		if tok {
			line += FormatRate(p.TokensPerSecond) + "\t"
		}
		line += FormatSeconds(p.BoundSeconds) + "\t"
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	share := f.Best.SamplesPerSecond / f.Largest.SamplesPerSecond
	if f.Best.Batch == f.Largest.Batch {
		fmt.Fprintf(w, "fastest: batch %d, the largest that fits (%s samples/s): throughput still rises with the batch there\n", f.Best.Batch, FormatRate(f.Best.SamplesPerSecond))
		return
	}
	fmt.Fprintf(w, "fastest: batch %d — %s samples/s, %.1f%% of the largest batch's %s (batch %d); beyond it more batch buys less than %.0f%%\n",
		f.Best.Batch, FormatRate(f.Best.SamplesPerSecond), 100*share, FormatRate(f.Largest.SamplesPerSecond), f.Largest.Batch, 100*(1-solve.Plateau))
}

// NewMaxBatch is the view of maxbatch's answer for r: the largest value of
// d that fits, and with fast the throughput curve.
func NewMaxBatch(r predict.Request, d models.Dim, ans *solve.Answer, fast *solve.Fastest) MaxBatchJSON {
	out := MaxBatchJSON{Model: r.Source.Name(), Solve: string(d), MarginBytes: r.Margin, Max: ans.Max, Limited: ans.Limited, LimitedBy: ans.Bound, Beyond: ans.Beyond, Probes: ans.Probes, Tried: ans.Tried}
	if ans.Range.Step > 1 {
		out.Step, out.StepReason = ans.Range.Step, ans.Range.StepWhy
	}
	if d == models.DimBatch {
		out.MaxBatch = ans.Max
	}
	if ans.Fit != nil {
		e := NewEstimate(ans.Fit, nil)
		out.AtMax = &e
	}
	if ans.Over != nil {
		e := NewEstimate(ans.Over, nil)
		out.AtNext = &e
	}
	if fast != nil {
		f := &FastestJSON{Batch: fast.Best.Batch, SamplesPerSecond: fast.Best.SamplesPerSecond, TokensPerSecond: fast.Best.TokensPerSecond,
			LargestSamplesPerSecond: fast.Largest.SamplesPerSecond, ShareOfLargest: fast.Best.SamplesPerSecond / fast.Largest.SamplesPerSecond}
		for _, p := range fast.Curve {
			f.Curve = append(f.Curve, RateJSON{p.Batch, p.Seconds, p.SamplesPerSecond, p.TokensPerSecond, p.BoundSeconds})
		}
		out.Fastest = f
	}
	return out
}

// WriteMaxBatch prints maxbatch's answer as text, for an answer whose
// largest value is at least 1; band is the answer's own.
func WriteMaxBatch(w io.Writer, r predict.Request, d models.Dim, ans *solve.Answer, fast *solve.Fastest, band predict.Band) {
	fmt.Fprintln(w, SetupLine(ans.Fit))
	fmt.Fprintln(w)
	with := ""
	if r.Margin > 0 {
		with = " with the margin"
	}
	fmt.Fprintf(w, "largest %s that fits%s: %d", dimWords[d], with, ans.Max)
	if n := plan.Ranks(r.Setup.Parallel); d == models.DimBatch && n > 1 {
		fmt.Fprintf(w, " a rank (%d samples a micro-batch over the %d ranks)", ans.Max*n, n)
	}
	switch {
	case ans.Limited && ans.Bound != "":
		fmt.Fprintf(w, " — the model's limit, not memory: %s", ans.Bound)
	case ans.Limited && ans.Beyond != "":
		fmt.Fprintf(w, " — the most batchfit simulates, not memory: %s", ans.Beyond)
	case ans.Limited:
		fmt.Fprintf(w, " (the search limit)")
	}
	fmt.Fprintln(w)
	if ans.Range.Step > 1 {
		fmt.Fprintf(w, "  (only valid values were tried: %s)\n", ans.Range.StepWhy)
	}
	fmt.Fprintf(w, "  at %d: peak allocated %s, peak reserved %s, device total %s of %s\n", ans.Max,
		FormatBytes(ans.Fit.Timeline.PeakAllocated), FormatBytes(ans.Fit.Timeline.PeakReserved), FormatBytes(ans.Fit.DeviceTotal), FormatBytes(ans.Fit.GPU.Capacity))
	if ans.Over != nil {
		fmt.Fprintf(w, "  at %d: does not fit — %s\n", ans.Next, ans.Over.Decider)
	}
	fmt.Fprintln(w, MarginLine(r.Margin, r.GPU.Capacity, band))
	writeNotes(w, ans.Fit)
	if fast != nil {
		writeFastest(w, fast)
	}
}
