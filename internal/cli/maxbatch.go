package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/solve"
)

const maxbatchUsage = `usage: batchfit maxbatch MODEL [flags]

Finds the largest batch that fits on the GPU — or, with --solve, the
largest value of another dimension (layers, hidden, seq) at a fixed batch.
The answer was simulated and fits; the next value was simulated and does not.
It fits with --margin: by default the safety band, so that a real device
total as far above the prediction as any measured still fits (--margin 0
for the bare figure). MODEL takes every form 'batchfit estimate' does.

Examples:
  batchfit maxbatch resnet50 --gpu h100-80gb
  batchfit maxbatch gpt2 --seq 1024 --precision bf16-mixed --gpu a100-80gb
  batchfit maxbatch mlp --solve layers --batch 32 --gpu 16GB   # how deep can the MLP be?
  batchfit maxbatch resnet50 --gpu a10g --precision bf16-mixed --objective throughput
  batchfit maxbatch Llama-3-8B --mode generate --prompt 512 --new-tokens 256 --precision bf16-true
  batchfit maxbatch Llama-3-8B --mode generate --new-tokens 256 --batch 8 --solve seq --precision bf16-true   # longest prompt
`

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

func runMaxBatch(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("maxbatch", stderr, maxbatchUsage)
	j := jobFlags{e: e, inferOK: true}
	j.register(fs)
	dim := fs.String("solve", "batch", "dimension to maximize: batch, layers, hidden or seq")
	limit := fs.Int64("limit", solve.DefaultLimit, "largest value to try")
	objective := fs.String("objective", "memory", "memory: the largest batch that fits; throughput: the batch that trains fastest among those that fit")
	margin := fs.String("margin", "band", marginHelp)
	r, batches, err := j.job(fs, "maxbatch", args)
	if err != nil {
		return err
	}
	band, err := requestBand(r)
	if err != nil {
		return err
	}
	if r.Margin, err = parseMargin(*margin, r.GPU.Capacity, band); err != nil {
		return usagef("--margin: %v", err)
	}
	if len(batches) != 1 {
		return usagef("maxbatch takes a single --batch")
	}
	d := models.Dim(*dim)
	switch d {
	case models.DimBatch, models.DimLayers, models.DimHidden, models.DimSeq:
	default:
		return usagef("--solve %q: want batch, layers, hidden or seq", *dim)
	}
	if *objective != "memory" && *objective != "throughput" {
		return usagef("--objective %q: want memory or throughput", *objective)
	}
	if *objective == "throughput" && r.Infer != nil {
		return usagef("--objective throughput ranks training steps; it does not answer for --mode %s", r.Infer.Mode)
	}
	if *objective == "throughput" && d != models.DimBatch {
		return usagef("--objective throughput answers for the batch, not --solve %s", d)
	}
	ans, err := solve.MaxDim(e.context(), r, d, *limit)
	if err != nil {
		return err
	}
	var fast *solve.Fastest
	if *objective == "throughput" && ans.Max > 0 {
		if fast, err = solve.BestThroughput(e.context(), r, ans); err != nil {
			return err
		}
	}
	if j.json {
		out := MaxBatchJSON{Model: r.Source.Name(), Solve: string(d), MarginBytes: r.Margin, Max: ans.Max, Limited: ans.Limited, LimitedBy: ans.Bound, Beyond: ans.Beyond, Probes: ans.Probes, Tried: ans.Tried}
		if ans.Range.Step > 1 {
			out.Step, out.StepReason = ans.Range.Step, ans.Range.StepWhy
		}
		if d == models.DimBatch {
			out.MaxBatch = ans.Max
		}
		if ans.Fit != nil {
			e := estimateJSON(ans.Fit, nil)
			out.AtMax = &e
		}
		if ans.Over != nil {
			e := estimateJSON(ans.Over, nil)
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
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else if ans.Max > 0 {
		fmt.Fprintln(stdout, setupLine(ans.Fit))
		fmt.Fprintln(stdout)
		with := ""
		if r.Margin > 0 {
			with = " with the margin"
		}
		fmt.Fprintf(stdout, "largest %s that fits%s: %d", dimWords[d], with, ans.Max)
		if n := plan.Ranks(r.Setup.Parallel); d == models.DimBatch && n > 1 {
			fmt.Fprintf(stdout, " a rank (%d samples a micro-batch over the %d ranks)", ans.Max*n, n)
		}
		switch {
		case ans.Limited && ans.Bound != "":
			fmt.Fprintf(stdout, " — the model's limit, not memory: %s", ans.Bound)
		case ans.Limited && ans.Beyond != "":
			fmt.Fprintf(stdout, " — the most batchfit simulates, not memory: %s", ans.Beyond)
		case ans.Limited:
			fmt.Fprintf(stdout, " (the search limit)")
		}
		fmt.Fprintln(stdout)
		if ans.Range.Step > 1 {
			fmt.Fprintf(stdout, "  (only valid values were tried: %s)\n", ans.Range.StepWhy)
		}
		fmt.Fprintf(stdout, "  at %d: peak allocated %s, peak reserved %s, device total %s of %s\n", ans.Max,
			fmtBytes(ans.Fit.Timeline.PeakAllocated), fmtBytes(ans.Fit.Timeline.PeakReserved), fmtBytes(ans.Fit.DeviceTotal), fmtBytes(ans.Fit.GPU.Capacity))
		if ans.Over != nil {
			fmt.Fprintf(stdout, "  at %d: does not fit — %s\n", ans.Next, ans.Over.Decider)
		}
		fmt.Fprintln(stdout, marginLine(r.Margin, r.GPU.Capacity, band))
		writeNotes(stdout, ans.Fit)
		if fast != nil {
			writeFastest(stdout, fast)
		}
	}
	if ans.Max == 0 {
		if !j.json {
			writeEstimate(stdout, ans.Over, []int64{ans.Over.Config.Batch})
		}
		if r.Margin > 0 && ans.Over != nil && ans.Over.Timeline.OOM == nil && ans.Over.DeviceTotal <= r.GPU.Capacity {
			return fmt.Errorf("%s does not fit on %s even with %s %d with the margin of %s (--margin 0: it fits bare, by %s)",
				r.Source.Name(), r.GPU.Name, d, ans.Range.Min, fmtBytes(r.Margin), fmtBytes(r.GPU.Capacity-ans.Over.DeviceTotal))
		}
		return fmt.Errorf("%s does not fit on %s even with %s %d", r.Source.Name(), r.GPU.Name, d, ans.Range.Min)
	}
	return nil
}

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
		line := fmt.Sprintf("%d\t%s\t%s\t", p.Batch, fmtSeconds(p.Seconds), fmtRate(p.SamplesPerSecond))
		if tok {
			line += fmtRate(p.TokensPerSecond) + "\t"
		}
		line += fmtSeconds(p.BoundSeconds) + "\t"
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	share := f.Best.SamplesPerSecond / f.Largest.SamplesPerSecond
	if f.Best.Batch == f.Largest.Batch {
		fmt.Fprintf(w, "fastest: batch %d, the largest that fits (%s samples/s): throughput still rises with the batch there\n", f.Best.Batch, fmtRate(f.Best.SamplesPerSecond))
		return
	}
	fmt.Fprintf(w, "fastest: batch %d — %s samples/s, %.1f%% of the largest batch's %s (batch %d); beyond it more batch buys less than %.0f%%\n",
		f.Best.Batch, fmtRate(f.Best.SamplesPerSecond), 100*share, fmtRate(f.Largest.SamplesPerSecond), f.Largest.Batch, 100*(1-solve.Plateau))
}
