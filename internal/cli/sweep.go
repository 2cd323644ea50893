package cli

import (
	"encoding/csv"
	"fmt"
	"text/tabwriter"

	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/solve"
)

const sweepUsage = `usage: batchfit sweep MODEL --batch LIST|RANGE [flags]

Predicts memory for each batch size: a list (1,2,4,8) or a range,
FROM:TO doubling (1:256) or FROM:TO:STEP (8:64:8). "fits" is with --margin
(the safety band by default; 0 for the bare figure). MODEL takes every form
'batchfit estimate' does.

Examples:
  batchfit sweep resnet50 --batch 1:256 --gpu a100-40gb
  batchfit sweep gpt2 --batch 1:32 --seq 1024 --precision bf16-mixed --csv
  batchfit sweep resnet50 --batch 1:512 --gpu a100-40gb --svg resnet50.svg
`

func runSweep(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("sweep", stderr, sweepUsage)
	j := jobFlags{e: e, inferOK: true}
	j.register(fs)
	asCSV := fs.Bool("csv", false, "print CSV")
	svg := fs.String("svg", "", "also write the chart of memory (and step time) over batch size to this SVG file")
	margin := fs.String("margin", "band", marginHelp)
	r, batches, err := j.job(fs, "sweep", args)
	if err != nil {
		return err
	}
	if j.json && *asCSV {
		return usagef("--csv and --json exclude each other: give one")
	}
	band, err := requestBand(r)
	if err != nil {
		return err
	}
	if r.Margin, err = parseMargin(*margin, r.GPU.Capacity, band); err != nil {
		return usagef("--margin: %v", err)
	}
	pts, err := solve.Sweep(e.context(), r, batches)
	if err != nil {
		return err
	}
	if *svg != "" {
		if err := e.writeChart(*svg, sweepChart(pts)); err != nil {
			return err
		}
	}
	switch {
	case j.json:
		var out []EstimateJSON
		for _, p := range pts {
			out = append(out, estimateJSON(p.Result, nil))
		}
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
		return notEvenOne(pts)
	case *asCSV:
		w := csv.NewWriter(stdout)
		// out_of_memory rows: the peak figures are the allocator's at the
		// failure; needs_at_least_bytes is what the step needs (JSON's
		// needs_at_least_bytes, the chart's red line)
		w.Write([]string{"batch", "activations_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "gpu_capacity_bytes", "fits",
			"step_seconds", "samples_per_second", "tokens_per_second", "bound_step_seconds", "out_of_memory", "needs_at_least_bytes", "margin_bytes"})
		for _, p := range pts {
			r := p.Result
			var sec, sps, tps, bound float64
			if r.Time != nil {
				sec, sps, tps, bound = r.Time.Seconds, r.Time.SamplesPerSecond(), r.Time.TokensPerSecond(), r.Time.Bound.Seconds
			}
			w.Write([]string{fmt.Sprint(p.Value), fmt.Sprint(r.Summary.ActivationsBytes), fmt.Sprint(r.Timeline.PeakAllocated),
				fmt.Sprint(r.Timeline.PeakReserved), fmt.Sprint(r.DeviceTotal), fmt.Sprint(r.GPU.Capacity), fmt.Sprint(r.Fits),
				fmt.Sprint(sec), fmt.Sprint(sps), fmt.Sprint(tps), fmt.Sprint(bound), fmt.Sprint(r.Timeline.OOM != nil), fmt.Sprint(needOf(r)), fmt.Sprint(r.Margin)})
		}
		w.Flush()
		if err := w.Error(); err != nil {
			return err
		}
		return notEvenOne(pts)
	}
	fmt.Fprintln(stdout, sweepSetupLine(pts))
	fmt.Fprintln(stdout)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
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
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t", p.Value, fmtBytes(held(r)), fmtBytes(r.Timeline.PeakAllocated),
			fmtBytes(r.Timeline.PeakReserved), fmtBytes(r.DeviceTotal), fits)
		if oom {
			need := "-"
			if r.Timeline.OOM != nil {
				need = fmtBytes(needOf(r))
			}
			line += need + "\t"
		}
		if timed {
			// a step that runs out of memory trains no samples: its
			// throughput is shown as none, not as a rate it never reaches
			sps, tps := fmtRate(r.Time.SamplesPerSecond()), fmtRate(r.Time.TokensPerSecond())
			if r.Timeline.OOM != nil {
				sps, tps = "-", "-"
			}
			line += fmt.Sprintf("%s\t%s\t", fmtSeconds(r.Time.Seconds), sps)
			if tok {
				line += tps + "\t"
			}
			line += fmtSeconds(r.Time.Bound.Seconds) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	fmt.Fprintln(stdout)
	if oom {
		fmt.Fprintln(stdout, "* out of memory: the simulated step stops at the allocation that fails, so that row's peak figures are the allocator's at the failure, below what the step needs; needs at least is the step's requested peak plus the CUDA context (a lower bound: rounding and caching add to it)")
	}
	fmt.Fprintln(stdout, largestLine(pts))
	if timed {
		fmt.Fprintln(stdout, "step time and throughput: the calibrated step-time model; bound: the roofline step time of the datasheet peaks, which no step beats (docs/accuracy.md §4)")
	}
	fmt.Fprintf(stdout, "\nGPU capacity %s (%s)\n", fmtBytes(pts[0].Result.GPU.Capacity), capacityNote(pts[0].Result.GPU))
	// the one line maxbatch and plan print too: "fits" is held to it
	fmt.Fprintln(stdout, marginLine(r.Margin, r.GPU.Capacity, band))
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
				fmt.Fprintln(stdout, "note: "+n.Text)
			}
		}
	}
	if *svg != "" {
		fmt.Fprintf(stdout, "chart: %s\n", *svg)
	}
	return notEvenOne(pts)
}

// notEvenOne is a sweep's status, the same in every output mode: a sweep
// none of whose batches fits has answered that the job fails (exit 1, as
// estimate's and maxbatch's do), after printing every row.
func notEvenOne(pts []solve.Point) error {
	for _, p := range pts {
		if p.Result.Fits {
			return nil
		}
	}
	if len(pts) == 0 {
		return nil
	}
	res := pts[0].Result
	for _, p := range pts {
		if p.Value == 1 {
			return fmt.Errorf("%s does not fit on %s even at batch 1", res.Model, res.GPU.Name)
		}
	}
	return fmt.Errorf("%s does not fit on %s at any batch of the sweep", res.Model, res.GPU.Name)
}

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
