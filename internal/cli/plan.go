package cli

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
)

const planUsage = `usage: batchfit plan MODEL --gpu G --global-batch N [flags]

Finds what to change so that training fits, and which change costs the
least speed. Every combination of the levers — gradient accumulation
(micro-batch × accumulation = the global batch), precision, activation
checkpointing, the optimizer's implementation and the allocator's
expandable segments — is predicted (memory through the simulator and the
allocator, time through the calibrated step-time model); the plans that fit
with the margin are ranked by samples a second per GPU, each showing the
GPUs it takes (data × tensor × pipeline parallelism), and the best plan that
keeps the job's GPUs is always shown, marked =. The flags that describe the job
(--batch, --accumulate, --precision, ...) are the current setup, which
every plan is compared with; --global-batch counts the samples of a step
over every GPU (--gpus). When nothing that trains the job as it is fits,
plans may train LoRA or QLoRA adapters instead of every parameter, or swap
Adam for 8-bit, paged 8-bit or Adafactor states: such plans are marked *,
since they change what is trained or how, and rank after every plan that
does not. MODEL takes every form 'batchfit estimate' does.

Examples:
  batchfit plan Llama-3-8B --seq 4096 --gpu h100-80gb --global-batch 32 --precision bf16-mixed
  batchfit plan gpt2 --seq 1024 --gpu a10g --global-batch 64 --batch 64
  batchfit plan resnet50 --gpu t4 --global-batch 256 --fixed-precision --max-accumulate 8
  batchfit plan vit_b_16 --gpu l4 --global-batch 128 --levers accumulate,checkpoint --json
  batchfit plan Llama-3-8B --seq 2048 --gpu rtx-4090 --global-batch 16 --precision bf16-true --optimizer adamw   # LoRA, QLoRA, 8-bit
`

// planFlags are plan's own flags, shared with estimate's suggestions.
type planFlags struct {
	global          int64
	levers          string
	fixedPrecision  bool
	noCheckpointing bool
	maxAccumulate   int
	minMicro        int64
	margin          string
	top             int
	maxPredictions  int
}

func (p *planFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&p.global, "global-batch", 0, "samples per optimizer step every plan keeps, over all --gpus (default: --batch × --accumulate × --gpus; without --accumulate, the current accumulation is what makes it from --batch)")
	fs.StringVar(&p.levers, "levers", leverList(), "the levers plans may move (sharding: the data-parallel strategy over --gpus; tensor and pipeline: tensor parallelism and pipeline stages, for a job on several GPUs; lora: LoRA or QLoRA adapters instead of training every parameter; optimizer-kind: 8-bit, paged 8-bit or Adafactor instead of Adam — these two change what is trained or how, and rank after every plan that does not)")
	fs.BoolVar(&p.fixedPrecision, "fixed-precision", false, "keep the precision (the same as leaving precision out of --levers)")
	fs.BoolVar(&p.noCheckpointing, "no-checkpointing", false, "no plan may use activation checkpointing")
	fs.IntVar(&p.maxAccumulate, "max-accumulate", 64, "largest gradient accumulation a plan may use (at most 65,536)")
	fs.Int64Var(&p.minMicro, "min-micro-batch", 1, "smallest micro-batch a plan may use")
	fs.StringVar(&p.margin, "margin", "band", marginHelp)
	fs.IntVar(&p.top, "top", 5, "number of plans to show")
	fs.IntVar(&p.maxPredictions, "max-predictions", plan.DefaultMaxPredictions, "the most simulations the search runs (each pipeline stage one, a screened one a fraction); past it the plans shown are the best of those tried")
}

// options turns the flags into planner options around the request. When
// --accumulate was not given, the current accumulation is the one that
// makes the global batch from the current micro-batch (--batch) on every
// rank.
func (p *planFlags) options(r predict.Request, accSet bool) (plan.Options, error) {
	if ranks := plan.Ranks(r.Setup.Parallel); p.global > 0 && !accSet {
		per := r.Config.Batch * ranks
		if p.global%per != 0 {
			of := fmt.Sprintf("--batch %d", r.Config.Batch)
			if ranks > 1 {
				of += fmt.Sprintf(" × %d GPUs", ranks)
			}
			return plan.Options{}, usagef("--global-batch %d is not a multiple of %s: give the current micro-batch, and --accumulate if it is not the quotient", p.global, of)
		}
		// the quotient is checked here, where the flags that make it
		// can be named: past MaxAccumulate the prediction refuses it
		if acc := p.global / per; acc > predict.MaxAccumulate {
			return plan.Options{}, usagef("--global-batch %d over --batch %d makes an accumulation of %d, more than the %d micro-batches a step batchfit takes: give a larger --batch", p.global, r.Config.Batch, acc, predict.MaxAccumulate)
		}
		r.Setup.Accumulate = int(p.global / per)
	}
	o := plan.Options{Base: r, GlobalBatch: p.global, MaxAccumulate: p.maxAccumulate, MinMicroBatch: p.minMicro,
		NoCheckpointing: p.noCheckpointing, Top: p.top, MaxPredictions: p.maxPredictions}
	if p.global < 0 {
		return o, usagef("--global-batch must be positive, got %d", p.global)
	}
	if p.maxAccumulate < 1 {
		return o, usagef("--max-accumulate must be at least 1, got %d", p.maxAccumulate)
	}
	if p.minMicro < 1 {
		return o, usagef("--min-micro-batch must be at least 1, got %d", p.minMicro)
	}
	if p.maxPredictions < 1 {
		return o, usagef("--max-predictions must be at least 1, got %d", p.maxPredictions)
	}
	if p.top < 1 || p.top > 1000 {
		return o, usagef("--top must be between 1 and 1000, got %d", p.top)
	}
	levers, err := plan.ParseLevers(p.levers)
	if err != nil {
		return o, usagef("--levers: %v", err)
	}
	if p.fixedPrecision {
		var keep []plan.Lever
		for _, l := range levers {
			if l != plan.Precision {
				keep = append(keep, l)
			}
		}
		levers = keep
	}
	o.Levers = levers
	if strings.EqualFold(strings.TrimSpace(p.margin), "band") {
		// each plan carries the band of what it relies on, which its
		// levers change; the screens take the least of them
		least, err := leastBandMargin(r, levers)
		if err != nil {
			return o, err
		}
		o.Margin = least
		o.MarginFor = func(c predict.Request) (int64, error) {
			b, err := report.RequestBand(c)
			return b.Margin(c.GPU.Capacity), err
		}
		return o, nil
	}
	m, err := parseMargin(p.margin, r.GPU.Capacity, predict.SafetyBand)
	if err != nil {
		return o, usagef("--margin: %v", err)
	}
	o.Margin = m
	return o, nil
}

// leverList is every lever, comma-separated.
func leverList() string {
	var ls []string
	for _, l := range plan.Levers() {
		ls = append(ls, string(l))
	}
	return strings.Join(ls, ",")
}

// marginHelp is --margin's help, one meaning for maxbatch, plan and sweep.
var marginHelp = "headroom the answer must leave on the GPU, against under-prediction: band (the worst under-prediction on real GPUs of the predictions that rely on what this one does, as a share of the GPU; " +
	predict.SafetyBand.String() + " where too few such figures exist), a share of the GPU (10%), a size (2GiB), or 0 for the bare figure"

// parseMargin reads --margin as bytes of headroom on a device of the given
// capacity, band being the answer's own. A share x of the GPU is the same
// as allowing the prediction to fall x short of the real figure (see
// predict.Band.Margin).
func parseMargin(s string, capacity int64, band predict.Band) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.EqualFold(t, "band") {
		return band.Margin(capacity), nil
	}
	if strings.HasSuffix(t, "%") {
		v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(t, "%")), 64)
		if err != nil || !(v >= 0 && v < 100) {
			return 0, fmt.Errorf("%q: want band, a share from 0%% to below 100%%, or a size", s)
		}
		return int64(math.Ceil(v / 100 * float64(capacity))), nil
	}
	n, err := gpu.ParseSize(t)
	if err != nil {
		return 0, fmt.Errorf("%q: want band, a share such as 10%%, or a size such as 2GiB", s)
	}
	// A number without a unit is bytes to ParseSize, so 0.1 (meant as a
	// share) or 5 (meant as GiB) would quietly leave almost nothing free,
	// the bare figure the margin is there to guard against; only 0 means
	// that on purpose.
	if v, err := strconv.ParseFloat(t, 64); err == nil && v != 0 {
		return 0, fmt.Errorf("%q has no unit: write a share (10%%) or a size (2GiB), or 0 for the bare figure", s)
	}
	if n >= capacity {
		return 0, fmt.Errorf("%q leaves nothing of the %s device", s, report.FormatBytes(capacity))
	}
	return n, nil
}

// leastBandMargin is the least margin the band of any plan the levers
// can reach takes of the GPU: the lora lever adds adapters, or adapters
// on 4-bit weights (QLoRA), to what the current setup relies on; the rest
// (the model's convolutions, one GPU or several) no plan changes.
func leastBandMargin(r predict.Request, levers []plan.Lever) (int64, error) {
	base, err := r.Reliances()
	if err != nil {
		return 0, err
	}
	reach := []predict.Reliance{base}
	if len(levers) == 0 || slices.Contains(levers, plan.LoRA) {
		reach = append(reach, base|predict.Adapters, base|predict.Adapters|predict.Quantized)
	}
	least := r.GPU.Capacity
	for _, rel := range reach {
		least = min(least, predict.BandFor(rel).Margin(r.GPU.Capacity))
	}
	return least, nil
}

func runPlan(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("plan", stderr, planUsage)
	j := jobFlags{e: e}
	j.register(fs)
	var pf planFlags
	pf.register(fs)
	r, batches, err := j.job(fs, "plan", args)
	if err != nil {
		return err
	}
	if len(batches) != 1 {
		return usagef("plan takes a single --batch (the current micro-batch)")
	}
	accSet := false
	fs.Visit(func(f *flag.Flag) { accSet = accSet || f.Name == "accumulate" })
	o, err := pf.options(r, accSet)
	if err != nil {
		return err
	}
	// A size given as --gpu has no rates to rank plans by; the way to
	// give them is the same for plan as for maxbatch --objective
	// throughput.
	if !r.GPU.Rates.Known() {
		return usagef("plans are ranked by step time, and %s has no peak rates: for a size given as --gpu, --like names the catalog GPU it is (--like rtx-4090)", r.GPU.Name)
	}
	ans, err := plan.Run(e.context(), o)
	if err != nil {
		return err
	}
	var lg *report.Larger
	if len(ans.Best) == 0 {
		if lg, err = searchLarger(e.context(), o, pf.margin); err != nil {
			return err
		}
	}
	if j.json {
		if err := report.WriteJSON(stdout, report.NewPlan(r, o, ans, lg)); err != nil {
			return err
		}
	} else {
		report.WritePlan(stdout, r, o, ans)
	}
	if len(ans.Best) == 0 {
		return report.NothingFits(r, ans, lg)
	}
	return nil
}

// searchLarger runs the planner on every catalog GPU larger than the
// job's, with margin (--margin) taken of each GPU's own capacity (the
// band and a share grow with the GPU), to name only GPUs on which a plan
// was simulated and fits.
func searchLarger(ctx context.Context, o plan.Options, margin string) (*report.Larger, error) {
	marginOn := func(g gpu.GPU) (int64, error) { return parseMargin(margin, g.Capacity, predict.SafetyBand) }
	if o.MarginFor != nil {
		// each plan takes its own band of each GPU (Options.MarginFor);
		// the screens the least the levers reach
		marginOn = func(g gpu.GPU) (int64, error) {
			r := o.Base
			r.GPU = g
			return leastBandMargin(r, o.Levers)
		}
	}
	fits, searched, stopped, err := plan.Larger(ctx, o, gpu.All(), marginOn)
	if err != nil {
		return nil, err
	}
	return &report.Larger{Fits: fits, Searched: searched, Stopped: stopped}, nil
}
