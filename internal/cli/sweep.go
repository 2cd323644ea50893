package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/internal/report"
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
	band, err := report.RequestBand(r)
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
		if err := e.writeChart(*svg, report.SweepChart(pts)); err != nil {
			return err
		}
	}
	switch {
	case j.json:
		out := report.NewSweep(pts)
		if err := report.WriteJSON(stdout, out); err != nil {
			return err
		}
		return notEvenOne(pts)
	case *asCSV:
		if err := report.WriteSweepCSV(stdout, pts); err != nil {
			return err
		}
		return notEvenOne(pts)
	}
	report.WriteSweep(stdout, pts, r.Margin, r.GPU.Capacity, band)
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
