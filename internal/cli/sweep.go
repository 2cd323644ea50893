package cli

import (
	"encoding/csv"
	"fmt"
	"strings"
	"text/tabwriter"

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
	j.register(fs, "1:256")
	asCSV := fs.Bool("csv", false, "print CSV")
	svg := fs.String("svg", "", "also write the chart of memory (and step time) over batch size to this SVG file")
	margin := fs.String("margin", "band", marginHelp)
	r, batches, err := j.job(fs, "sweep", args)
	if err != nil {
		return err
	}
	if r.Margin, err = parseMargin(*margin, r.GPU.Capacity); err != nil {
		return usagef("--margin: %v", err)
	}
	pts, err := solve.Sweep(r, batches)
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
		return writeJSON(stdout, out)
	case *asCSV:
		w := csv.NewWriter(stdout)
		w.Write([]string{"batch", "activations_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes", "gpu_capacity_bytes", "fits",
			"step_seconds", "samples_per_second", "tokens_per_second", "margin_bytes"})
		for _, p := range pts {
			r := p.Result
			var sec, sps, tps float64
			if r.Time != nil {
				sec, sps, tps = r.Time.Seconds, r.Time.SamplesPerSecond(), r.Time.TokensPerSecond()
			}
			w.Write([]string{fmt.Sprint(p.Value), fmt.Sprint(r.Summary.ActivationsBytes), fmt.Sprint(r.Timeline.PeakAllocated),
				fmt.Sprint(r.Timeline.PeakReserved), fmt.Sprint(r.DeviceTotal), fmt.Sprint(r.GPU.Capacity), fmt.Sprint(r.Fits),
				fmt.Sprint(sec), fmt.Sprint(sps), fmt.Sprint(tps), fmt.Sprint(r.Margin)})
		}
		w.Flush()
		return w.Error()
	}
	fmt.Fprintln(stdout, setupLine(pts[0].Result))
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
	hdr := "batch\t" + second + "\tpeak allocated\tpeak reserved\tdevice total\tfits\t"
	if timed {
		hdr += "step time\tsamples/s\t"
		if tok {
			hdr += "tokens/s\t"
		}
	}
	fmt.Fprintln(tw, hdr)
	for _, p := range pts {
		r := p.Result
		fits := "yes"
		if !r.Fits {
			fits = "no"
		}
		line := fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t", p.Value, fmtBytes(held(r)), fmtBytes(r.Timeline.PeakAllocated),
			fmtBytes(r.Timeline.PeakReserved), fmtBytes(r.DeviceTotal), fits)
		if timed {
			line += fmt.Sprintf("%s\t%s\t", fmtSeconds(r.Time.Seconds), fmtRate(r.Time.SamplesPerSecond()))
			if tok {
				line += fmtRate(r.Time.TokensPerSecond()) + "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	if timed {
		fmt.Fprintln(stdout, "\nstep time and throughput: the roofline step-time model, a bound to compare batches with (docs/accuracy.md)")
	}
	fmt.Fprintf(stdout, "\nGPU capacity %s (%s)\n", fmtBytes(pts[0].Result.GPU.Capacity), capacityNote(pts[0].Result.GPU))
	fmt.Fprintln(stdout, strings.Replace(marginLine(r.Margin, r.GPU.Capacity), "margin: ", "fits with the margin: ", 1))
	if *svg != "" {
		fmt.Fprintf(stdout, "chart: %s\n", *svg)
	}
	return nil
}
