package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/models"
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
	band, err := report.RequestBand(r)
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
		out := report.NewMaxBatch(r, d, ans, fast)
		if err := report.WriteJSON(stdout, out); err != nil {
			return err
		}
	} else if ans.Max > 0 {
		report.WriteMaxBatch(stdout, r, d, ans, fast, band)
	}
	if ans.Max == 0 {
		if !j.json {
			report.WriteEstimate(stdout, ans.Over, []int64{ans.Over.Config.Batch})
		}
		if r.Margin > 0 && ans.Over != nil && ans.Over.Timeline.OOM == nil && ans.Over.DeviceTotal <= r.GPU.Capacity {
			return fmt.Errorf("%s does not fit on %s even with %s %d with the margin of %s (--margin 0: it fits bare, by %s)",
				r.Source.Name(), r.GPU.Name, d, ans.Range.Min, report.FormatBytes(r.Margin), report.FormatBytes(r.GPU.Capacity-ans.Over.DeviceTotal))
		}
		return fmt.Errorf("%s does not fit on %s even with %s %d", r.Source.Name(), r.GPU.Name, d, ans.Range.Min)
	}
	return nil
}
