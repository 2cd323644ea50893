package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/solve"
)

// needOf is the device total an out-of-memory point needs (plan.Need: the
// step's requested peak and the context, a lower bound); 0 for a point
// that ran to its end.
func needOf(r *predict.Result) int64 {
	if r.Timeline.OOM == nil {
		return 0
	}
	return plan.Need(r)
}

// largestLine says which swept batch is the largest that fits, and when
// every one fits that it is the largest tried, not the limit.
func largestLine(pts []solve.Point) string {
	fit := int64(-1)
	var over []int64
	for _, p := range pts {
		if p.Result.Fits {
			fit = max(fit, p.Value)
		} else {
			over = append(over, p.Value)
		}
	}
	switch {
	case fit < 0:
		return "no batch swept fits"
	case len(over) == 0:
		return fmt.Sprintf("every batch swept fits: %d is the largest tried, not the limit ('batchfit maxbatch' finds the limit)", fit)
	}
	return fmt.Sprintf("largest batch swept that fits: %d", fit)
}

// NewSweep is the view of a sweep: every point's prediction.
func NewSweep(pts []solve.Point) []EstimateJSON {
	var out []EstimateJSON
	for _, p := range pts {
		out = append(out, NewEstimate(p.Result, nil))
	}
	return out
}

// WriteSweepCSV prints a sweep as CSV, a row a point.
func WriteSweepCSV(w io.Writer, pts []solve.Point) error {
	cw := csv.NewWriter(w)
	// out_of_memory rows: the peak figures are the allocator's at the
	// failure; needs_at_least_bytes is what the step needs (JSON's
	// needs_at_least_bytes, the chart's red line)
	cw.Write([]string{"batch", "activations_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "gpu_capacity_bytes", "fits",
		"step_seconds", "samples_per_second", "tokens_per_second", "bound_step_seconds", "out_of_memory", "needs_at_least_bytes", "margin_bytes"})
	for _, p := range pts {
		r := p.Result
		var sec, sps, tps, bound float64
		if r.Time != nil {
			sec, sps, tps, bound = r.Time.Seconds, r.Time.SamplesPerSecond(), r.Time.TokensPerSecond(), r.Time.Bound.Seconds
		}
		cw.Write([]string{fmt.Sprint(p.Value), fmt.Sprint(r.Summary.ActivationsBytes), fmt.Sprint(r.Timeline.PeakAllocated),
			fmt.Sprint(r.Timeline.PeakReserved), fmt.Sprint(r.DeviceTotal), fmt.Sprint(r.GPU.Capacity), fmt.Sprint(r.Fits),
			fmt.Sprint(sec), fmt.Sprint(sps), fmt.Sprint(tps), fmt.Sprint(bound), fmt.Sprint(r.Timeline.OOM != nil), fmt.Sprint(needOf(r)), fmt.Sprint(r.Margin)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteSweep prints a sweep as text: a row a point, the largest that
// fits, and the margin (of a GPU of the given capacity, band the answer's
// own) the verdicts were held to.
func WriteSweep(w io.Writer, pts []solve.Point, margin, capacity int64, band predict.Band) {
	fmt.Fprintln(w, sweepSetupLine(pts))
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	timed := pts[0].Result.Time != nil
	tok := timed && pts[0].Result.Time.Tokens > 0
	// the second column: what grows with the batch besides the
	// transients (autograd's saved tensors; a generation's cache)
	second := "saved activations"
	held := func(r *predict.Result) int64 { return r.Summary.ActivationsBytes }
	if pts[0].Result.Generation != nil {
		second = "KV cache"
		held = func(r *predict.Result) int64 { return r.Generation.CacheBytes }
	}
	oom := false
	for _, p := range pts {
		oom = oom || p.Result.Timeline.OOM != nil
	}
	hdr := "batch\t" + second + "\tpeak allocated\tpeak reserved\tdevice total\tfits\t"
	if oom {
		hdr += "needs at least\t"
	}
	if timed {
		hdr += "step time\tsamples/s\t"
		if tok {
			hdr += "tokens/s\t"
		}
		hdr += "bound\t"
	}
	fmt.Fprintln(tw, hdr)
	for _, p := range pts {
		r := p.Result
		fits := "yes"
		switch {
		case r.Timeline.OOM != nil:
			fits = "no: OOM*"
		case !r.Fits:
			fits = "no"
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t", p.Value, FormatBytes(held(r)), FormatBytes(r.Timeline.PeakAllocated),
			FormatBytes(r.Timeline.PeakReserved), FormatBytes(r.DeviceTotal), fits)
		if oom {
			need := "-"
			if r.Timeline.OOM != nil {
				need = FormatBytes(needOf(r))
			}
			line += need + "\t"
		}
		if timed {
			// a step that runs out of memory trains no samples: its
			// throughput is shown as none, not as a rate it never reaches
			sps, tps := FormatRate(r.Time.SamplesPerSecond()), FormatRate(r.Time.TokensPerSecond())
			if r.Timeline.OOM != nil {
				sps, tps = "-", "-"
			}
			line += fmt.Sprintf("%s\t%s\t", FormatSeconds(r.Time.Seconds), sps)
			if tok {
				line += tps + "\t"
			}
			line += FormatSeconds(r.Time.Bound.Seconds) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if oom {
		fmt.Fprintln(w, "* out of memory: the simulated step stops at the allocation that fails, so that row's peak figures are the allocator's at the failure, below what the step needs; needs at least is the step's requested peak plus the CUDA context (a lower bound: rounding and caching add to it)")
	}
	fmt.Fprintln(w, largestLine(pts))
	if timed {
		fmt.Fprintln(w, "step time and throughput: the calibrated step-time model; bound: the roofline step time of the datasheet peaks, which no step beats (docs/accuracy.md §4)")
	}
	fmt.Fprintf(w, "\nGPU capacity %s (%s)\n", FormatBytes(pts[0].Result.GPU.Capacity), capacityNote(pts[0].Result.GPU))
	// the one line maxbatch and plan print too: "fits" is held to it
	fmt.Fprintln(w, MarginLine(margin, capacity, band))
	// every kind of note once, as the largest point that has it words it
	// (a figure in it, such as the largest cuDNN workspace, grows with
	// the batch)
	// (several notes of one code, such as a source's, are told apart by
	// their order)
	seen := map[string]bool{}
	for i := len(pts) - 1; i >= 0; i-- {
		nth := map[string]int{}
		for _, n := range pts[i].Result.Notes {
			key := fmt.Sprintf("%s#%d", n.Code, nth[n.Code])
			nth[n.Code]++
			if !seen[key] && n.Code != predict.CommNoteCode {
				seen[key] = true
				fmt.Fprintln(w, "note: "+n.Text)
			}
		}
	}
}
