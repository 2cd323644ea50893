package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"

	"github.com/batchfit/batchfit/internal/live"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/validation"
)

const validateUsage = `usage: batchfit validate DATA.json|RUN.jsonl|WATCH.jsonl [--json]

Predicts every case of a file written by validation/measure.py (real
training steps measured on a GPU), the job of a recording 'batchfit run
--model ... --out RUN.jsonl' wrote, or every such job 'batchfit watch --out'
saw, and prints predicted against measured
peak allocated and reserved memory, with the errors, so anyone can check
batchfit on their own GPU and their own job.

Examples:
  python validation/measure.py --out mygpu.json && batchfit validate mygpu.json
  batchfit run --model resnet50 --out run.jsonl -- python train.py && batchfit validate run.jsonl
`

// fileKind is the "kind" of the first line of path: "run" for a recording
// of 'batchfit run', "gpus" for one of 'batchfit watch', "" otherwise (a
// measure.py file is one JSON object).
func fileKind(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 256<<10)
	n, _ := io.ReadFull(f, head)
	line, _, _ := bytes.Cut(head[:n], []byte("\n"))
	var k struct {
		Kind string `json:"kind"`
	}
	if json.Unmarshal(bytes.TrimSpace(line), &k) != nil {
		return ""
	}
	return k.Kind
}

func runValidate(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("validate", stderr, validateUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	model := fs.String("model", "", "the model of a recording's job, a path (a .yaml, .onnx, .bfgraph, config.json or model directory): a path written inside a recording is never opened, a zoo name there is taken")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("validate takes one measurement file, got %d arguments", len(pos))
	}
	var cs []validation.Comparison
	switch kind := fileKind(pos[0]); kind {
	case record.KindRun:
		recs, err := record.ReadFile(pos[0])
		if err != nil {
			return err
		}
		if cs, err = live.CompareRecording(e.context(), pos[0], recs, *model); err != nil {
			return err
		}
	case "gpus":
		if cs, err = live.CompareWatch(e.context(), pos[0], *model); err != nil {
			return err
		}
	default:
		if *model != "" {
			return usagef("--model is for a recording of 'batchfit run' or 'batchfit watch'; a measure.py file names its cases' models")
		}
		m, err := validation.Load(pos[0])
		if err != nil {
			return err
		}
		if cs, err = validation.Compare(m); err != nil {
			return fmt.Errorf("%s: %w", pos[0], err)
		}
	}
	sum := validation.Summarize(cs)
	if *asJSON {
		type row struct {
			ID                 string  `json:"id"`
			Status             string  `json:"status"`
			PredictedAllocated int64   `json:"predicted_peak_allocated_bytes"`
			MeasuredAllocated  int64   `json:"measured_peak_allocated_bytes"`
			PredictedReserved  int64   `json:"predicted_peak_reserved_bytes"`
			MeasuredReserved   int64   `json:"measured_peak_reserved_bytes"`
			ErrAllocated       float64 `json:"error_allocated,omitempty"`
			ErrReserved        float64 `json:"error_reserved,omitempty"`
			PredictedFits      bool    `json:"predicted_fits"`
			PredictedSeconds   float64 `json:"predicted_step_seconds,omitempty"`
			MeasuredSeconds    float64 `json:"measured_step_seconds,omitempty"`
		}
		var rows []row
		for _, c := range cs {
			r := row{ID: c.ID, Status: c.Status, PredictedAllocated: c.PredictedAllocated, MeasuredAllocated: c.MeasuredAllocated,
				PredictedReserved: c.PredictedReserved, MeasuredReserved: c.MeasuredReserved, PredictedFits: c.PredictedFits,
				PredictedSeconds: c.PredictedSeconds, MeasuredSeconds: c.MeasuredSeconds}
			if c.Status == "ok" {
				r.ErrAllocated, r.ErrReserved = c.ErrAllocated(), c.ErrReserved()
			}
			rows = append(rows, r)
		}
		return report.WriteJSON(stdout, struct {
			Cases   []row              `json:"cases"`
			Summary validation.Summary `json:"summary"`
		}{rows, sum})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tpeak allocated (predicted / measured)\terror\tpeak reserved (predicted / measured)\terror\t")
	for _, c := range cs {
		if c.Status == "oom" {
			verdict := "predicted: does not fit"
			if c.PredictedFits {
				verdict = "predicted: fits (missed)"
			}
			fmt.Fprintf(tw, "%s\tOOM on the GPU\t\t%s\t\t\n", c.ID, verdict)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s / %s\t%+.1f%%\t%s / %s\t%+.1f%%\t\n", c.ID, report.FormatBytes(c.PredictedAllocated), report.FormatBytes(c.MeasuredAllocated),
			100*c.ErrAllocated(), report.FormatBytes(c.PredictedReserved), report.FormatBytes(c.MeasuredReserved), 100*c.ErrReserved())
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\n%d cases: median |error| %.2f%% allocated, %.2f%% reserved; worst under-prediction %.2f%% (%s); measured OOMs predicted to fit: %d\n",
		sum.Cases, 100*sum.MedianAbsErrAllocated, 100*sum.MedianAbsErrReserved, 100*sum.WorstUnderAllocated, sum.WorstUnderCase, sum.OOMMissed)
	if sum.TimedCases > 0 {
		fmt.Fprintf(stdout, "step time (steady steps, calibrated model): %d cases, median |error| %.0f%%", sum.TimedCases, 100*sum.MedianAbsErrSeconds)
		if !math.IsNaN(sum.PairsOrdered) {
			fmt.Fprintf(stdout, "; %.0f%% of the pairs measured more than 5%% apart ranked as measured", 100*sum.PairsOrdered)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
