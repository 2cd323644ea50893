package cli

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
)

const estimateUsage = `usage: batchfit estimate MODEL [flags]

Predicts the GPU memory of training MODEL (or, with --mode, of running it
in eval mode or generating with it) and says whether it fits on the GPU. MODEL (or --model) is a zoo name from 'batchfit models', a .yaml layer
spec, a Hugging Face config.json or model directory (config.json and
safetensors headers), or a .onnx file.

Examples:
  batchfit estimate resnet50 --batch 64 --gpu a100-40gb
  batchfit estimate gpt2 --batch 8 --seq 1024 --precision bf16-mixed --optimizer adamw
  batchfit estimate examples/mlp.yaml --batch 32 --layers 16 --json
  batchfit estimate resnet18 --batch 64,8,32,4 --empty-cache   # a batch-size schedule
  batchfit estimate --model path/to/Llama-3.1-8B/ --batch 4 --seq 4096 --precision bf16-mixed
  batchfit estimate model.onnx --batch 16
  batchfit estimate gpt2 --batch 8 --timeline gpt2.svg    # memory over the step, as a chart
  batchfit estimate Llama-3-8B --mode generate --prompt 512 --new-tokens 256 --batch 8 --precision bf16-true
  batchfit estimate Llama-3-8B --mode generate --prompt 512 --new-tokens 256 --batch 8 --cache static --beams 4
  batchfit estimate resnet50 --mode eval --batch 256      # forward under torch.no_grad()
`

// timelineBuckets is how many stretches of events a timeline chart draws
// (up to twice as many): enough for a phase of a small model to show,
// few enough that a chart of millions of events stays small.
const timelineBuckets = 160

func runEstimate(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("estimate", stderr, estimateUsage)
	j := jobFlags{e: e, inferOK: true}
	j.register(fs)
	timeline := fs.String("timeline", "", "write allocated (by what it holds) and reserved memory over the simulated steps to this SVG file")
	r, batches, err := j.job(fs, "estimate", args)
	if err != nil {
		return err
	}
	if len(batches) > 1 {
		r.Schedule = batches
	}
	var rec *alloc.StepRecorder
	if *timeline != "" {
		rec = alloc.NewStepRecorder(timelineBuckets)
		r.Observe = rec.Observe
	}
	res, err := predict.Run(e.context(), r)
	if err != nil {
		return err
	}
	if rec != nil {
		if err := e.writeChart(*timeline, report.TimelineChart(res, rec)); err != nil {
			return err
		}
	}
	// A job that does not fit ends with the smallest changes that make it
	// fit, from the planner, with the same criterion as the verdict (no
	// margin) and the same samples per optimizer step.
	var sugg *plan.Answer
	var lg *report.Larger
	var suggErr error
	if len(batches) == 1 && !res.Fits && r.Infer == nil {
		so := plan.Options{Base: r, Objective: plan.FewestChanges, Top: 3}
		if sugg, suggErr = plan.Run(e.context(), so); suggErr == nil && len(sugg.Best) == 0 {
			lg, suggErr = searchLarger(e.context(), so, "0")
		}
	}
	if j.json {
		out := report.NewEstimate(res, batches)
		if sugg != nil {
			for _, p := range sugg.Best {
				out.Suggestions = append(out.Suggestions, report.NewPlanEntry(sugg, p))
			}
			if sugg.SameGPUs != nil {
				e := report.NewPlanEntry(sugg, sugg.SameGPUs)
				out.SameGPUsPlan = &e
			}
		}
		out.LargerGPUs, out.LargerSearched = report.LargerJSON(lg)
		if suggErr != nil {
			out.SuggestionsError = suggErr.Error()
		}
		if err := report.WriteJSON(stdout, out); err != nil {
			return err
		}
	} else {
		report.WriteEstimate(stdout, res, batches)
		if rec != nil {
			fmt.Fprintf(stdout, "\ntimeline chart: %s\n", *timeline)
		}
		if sugg != nil {
			report.WriteSuggestions(stdout, res, sugg, lg)
		}
		if suggErr != nil {
			fmt.Fprintf(stdout, "\nno suggestions: %v\n", suggErr)
		}
	}
	// the same answer ends with the same status in every output mode, and
	// "does not fit" fails (exit 1), so that `batchfit estimate … && launch`
	// launches only a job that fits
	switch {
	case res.Fits:
	case len(batches) > 1:
		return fmt.Errorf("%s does not fit on %s with the batch schedule %s", res.Model, res.GPU.Name, strings.ReplaceAll(strings.Trim(fmt.Sprint(batches), "[]"), " ", ","))
	case res.Config.Batch == 1:
		return fmt.Errorf("%s does not fit on %s even at batch 1", res.Model, res.GPU.Name)
	default:
		return fmt.Errorf("%s does not fit on %s at batch %d", res.Model, res.GPU.Name, res.Config.Batch)
	}
	return nil
}
