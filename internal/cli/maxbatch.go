package cli

import (
	"fmt"
	"io"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/solve"
)

const maxbatchUsage = `usage: batchfit maxbatch MODEL [flags]

Finds the largest batch that fits on the GPU — or, with --solve, the
largest value of another dimension (layers, hidden, seq) at a fixed batch.
The answer was simulated and fits; the next value was simulated and does not.
MODEL takes every form 'batchfit estimate' does.

Examples:
  batchfit maxbatch resnet50 --gpu h100-80gb
  batchfit maxbatch gpt2 --seq 1024 --precision bf16-mixed --gpu a100-80gb
  batchfit maxbatch mlp --solve layers --batch 32 --gpu 16GB   # how deep can the MLP be?
`

// MaxBatchJSON is the stable JSON form of a search.
type MaxBatchJSON struct {
	Model    string        `json:"model"`
	Solve    string        `json:"solve"`
	MaxBatch int64         `json:"max_batch,omitempty"`
	Max      int64         `json:"max"`
	Limited  bool          `json:"limited"`
	Probes   int           `json:"probes"`
	Tried    []int64       `json:"tried"`
	AtMax    *EstimateJSON `json:"at_max,omitempty"`
	AtNext   *EstimateJSON `json:"at_next,omitempty"`
}

var dimWords = map[models.Dim]string{models.DimBatch: "batch", models.DimLayers: "depth (layers)",
	models.DimHidden: "width (hidden size)", models.DimSeq: "sequence length"}

func runMaxBatch(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("maxbatch", stderr, maxbatchUsage)
	var j jobFlags
	j.register(fs, "1")
	dim := fs.String("solve", "batch", "dimension to maximize: batch, layers, hidden or seq")
	limit := fs.Int64("limit", solve.DefaultLimit, "largest value to try")
	r, batches, err := j.job(fs, "maxbatch", args)
	if err != nil {
		return err
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
	ans, err := solve.MaxDim(r, d, *limit)
	if err != nil {
		return err
	}
	if j.json {
		out := MaxBatchJSON{Model: r.Source.Name(), Solve: string(d), Max: ans.Max, Limited: ans.Limited, Probes: ans.Probes, Tried: ans.Tried}
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
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else if ans.Max > 0 {
		fmt.Fprintln(stdout, setupLine(ans.Fit))
		fmt.Fprintln(stdout)
		fmt.Fprintf(stdout, "largest %s that fits: %d", dimWords[d], ans.Max)
		if ans.Limited {
			fmt.Fprintf(stdout, " (the search limit)")
		}
		fmt.Fprintln(stdout)
		fmt.Fprintf(stdout, "  at %d: peak allocated %s, peak reserved %s, device total %s of %s\n", ans.Max,
			fmtBytes(ans.Fit.Timeline.PeakAllocated), fmtBytes(ans.Fit.Timeline.PeakReserved), fmtBytes(ans.Fit.DeviceTotal), fmtBytes(ans.Fit.GPU.Capacity))
		if ans.Over != nil {
			fmt.Fprintf(stdout, "  at %d: does not fit — %s\n", ans.Max+1, ans.Over.Decider)
		}
	}
	if ans.Max == 0 {
		if !j.json {
			writeEstimate(stdout, ans.Over, []int64{1})
		}
		return fmt.Errorf("%s does not fit on %s even with %s 1", r.Source.Name(), r.GPU.Name, d)
	}
	return nil
}
