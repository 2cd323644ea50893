package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
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

// PlanJSON is the stable JSON form of a plan search.
type PlanJSON struct {
	Model       string `json:"model"`
	GPU         string `json:"gpu"`
	GlobalBatch int64  `json:"global_batch"`
	// RankBatch is one data-parallel rank's share of the global batch
	// (micro-batch × accumulation), Ranks the data-parallel ranks.
	RankBatch int64 `json:"rank_batch"`
	Ranks     int64 `json:"ranks"`
	// GPUsTotal is the GPUs the current setup takes (data × tensor ×
	// pipeline parallelism); SameGPUs the best plan that takes as many,
	// whether or not it is among Best (absent when none fits).
	GPUsTotal int64          `json:"gpus_total"`
	SameGPUs  *PlanEntryJSON `json:"same_gpus_plan,omitempty"`
	Seq       int64          `json:"seq,omitempty"`
	// MarginBytes is the current setup's margin; with --margin band each
	// plan has its own (PlanEntryJSON.MarginBytes), and LeastMarginBytes
	// is the least of them, which the screens took.
	MarginBytes      int64           `json:"margin_bytes"`
	LeastMarginBytes int64           `json:"least_margin_bytes,omitempty"`
	Current          PlanEntryJSON   `json:"current"`
	Best             []PlanEntryJSON `json:"best"`
	Evaluated        []PlanEntryJSON `json:"evaluated"`
	Pruned           []PrunedJSON    `json:"pruned"`
	// NeedBytes is, when nothing fits, the least device total with the
	// margin of the plans simulated in full, NeedFrom that plan;
	// NeedAtLeast: it ran out of memory, so the figure is a lower bound
	// (its requested peak with the context). Screened counts the plans
	// whose simulation stopped once they requested more than the device
	// leaves (not among them).
	NeedBytes   int64  `json:"need_bytes,omitempty"`
	NeedFrom    string `json:"need_from,omitempty"`
	NeedAtLeast bool   `json:"need_at_least,omitempty"`
	Screened    int    `json:"screened,omitempty"`
	// StatesNeedBytes is the least the combinations ruled out without
	// simulation need for the model states alone (parameters, gradients,
	// optimizer state) with the context and the margin: a lower bound
	// before any activation.
	StatesNeedBytes int64  `json:"states_need_bytes,omitempty"`
	StatesNeedFrom  string `json:"states_need_from,omitempty"`
	// LargerGPUs are, when nothing fits, the larger catalog GPUs on which
	// a plan was simulated and fits, smallest first; LargerSearched every
	// larger GPU searched.
	LargerGPUs     []LargerGPUJSON `json:"larger_gpus,omitempty"`
	LargerSearched []string        `json:"larger_gpus_searched,omitempty"`
	Predictions    int             `json:"predictions"`
	Levers         []string        `json:"levers"`
	// Simulations counts the simulations (each pipeline stage one),
	// ScreenedSimulations those screened out, which --max-predictions
	// charges a fraction of a full one (BudgetSpent, in full
	// simulations); Stopped: the search stopped at --max-predictions
	// with combinations unsearched.
	Simulations         int     `json:"simulations"`
	ScreenedSimulations int     `json:"screened_simulations"`
	BudgetSpent         float64 `json:"budget_spent"`
	Stopped             bool    `json:"stopped"`
}

// PlanEntryJSON is one plan.
type PlanEntryJSON struct {
	// MarginBytes is the headroom the plan was held to: its own band's
	// with --margin band.
	MarginBytes        int64  `json:"margin_bytes"`
	MicroBatch         int64  `json:"micro_batch"`
	Accumulate         int    `json:"accumulate"`
	Precision          string `json:"precision"`
	Checkpoint         string `json:"checkpoint"`
	OptimizerImpl      string `json:"optimizer_impl"`
	ExpandableSegments bool   `json:"expandable_segments"`
	Strategy           string `json:"strategy,omitempty"`
	TP                 int64  `json:"tp,omitempty"`
	SP                 bool   `json:"sp,omitempty"`
	PP                 int64  `json:"pp,omitempty"`
	Fits               bool   `json:"fits"`
	// GPUsTotal is the GPUs the plan takes: data × tensor × pipeline
	// parallelism. SameGPUs marks the best plan that takes as many as the
	// current setup.
	GPUsTotal int64 `json:"gpus_total"`
	SameGPUs  bool  `json:"same_gpus,omitempty"`
	// Trains is "lora" or "qlora" for a plan that trains adapters
	// instead of what the job trains; Optimizer the optimizer a plan
	// swaps the job's for; ChangesResults marks either (the model the
	// job produces can differ).
	Trains             string   `json:"trains,omitempty"`
	Optimizer          string   `json:"optimizer,omitempty"`
	ChangesResults     bool     `json:"changes_results"`
	Changes            []string `json:"changes"`
	PeakAllocatedBytes int64    `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64    `json:"peak_reserved_bytes"`
	DeviceTotalBytes   int64    `json:"device_total_bytes"`
	NeedBytes          int64    `json:"need_bytes"`
	OOM                string   `json:"oom_message,omitempty"`
	StepSeconds        float64  `json:"step_seconds"`
	SamplesPerSecond   float64  `json:"samples_per_second"`
	// SamplesPerSecondPerGPU is what the plans are ranked by.
	SamplesPerSecondPerGPU float64          `json:"samples_per_second_per_gpu"`
	TokensPerSecond        float64          `json:"tokens_per_second,omitempty"`
	MFU                    float64          `json:"mfu"`
	BoundStepSeconds       float64          `json:"bound_step_seconds,omitempty"`
	PeakSavingBytes        int64            `json:"peak_saving_bytes"`
	SavingsBytes           map[string]int64 `json:"savings_bytes,omitempty"`
}

// LargerGPUJSON is a larger GPU on which a plan was simulated and fits;
// the plan's figures are those of its prediction on that GPU (no savings
// against the current setup, which ran on another).
type LargerGPUJSON struct {
	GPU           string        `json:"gpu"`
	CapacityBytes int64         `json:"capacity_bytes"`
	MarginBytes   int64         `json:"margin_bytes"`
	Plan          PlanEntryJSON `json:"plan"`
}

func largerJSON(lg *largerGPUs) ([]LargerGPUJSON, []string) {
	if lg == nil {
		return nil, nil
	}
	var out []LargerGPUJSON
	for _, f := range lg.fits {
		out = append(out, LargerGPUJSON{GPU: f.GPU.Name, CapacityBytes: f.GPU.Capacity, MarginBytes: f.Margin, Plan: planEntry(&plan.Answer{}, f.Plan)})
	}
	return out, lg.searched
}

// PrunedJSON is a combination ruled out without a search.
type PrunedJSON struct {
	Precision     string `json:"precision"`
	Checkpoint    string `json:"checkpoint"`
	OptimizerImpl string `json:"optimizer_impl"`
	Reason        string `json:"reason"`
	Trains        string `json:"trains,omitempty"`
	Optimizer     string `json:"optimizer,omitempty"`
	Strategy      string `json:"strategy,omitempty"`
	TP            int64  `json:"tp,omitempty"`
	SP            bool   `json:"sp,omitempty"`
	PP            int64  `json:"pp,omitempty"`
}

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
			b, err := requestBand(c)
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

// requestBand is the band r's answer carries: the one earned by the
// predictions that rely on what r's does (predict.BandFor).
func requestBand(r predict.Request) (predict.Band, error) {
	rel, err := r.Reliances()
	if err != nil {
		return predict.Band{}, err
	}
	return predict.BandFor(rel), nil
}

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
		return 0, fmt.Errorf("%q leaves nothing of the %s device", s, fmtBytes(capacity))
	}
	return n, nil
}

// marginLine is the one line that says what margin an answer was held to,
// band being the answer's own.
func marginLine(margin, capacity int64, band predict.Band) string {
	if margin == 0 {
		return "margin: none (--margin 0): the bare prediction, which has been below the real figure on a GPU (" + band.String() + ")"
	}
	if margin == band.Margin(capacity) {
		return fmt.Sprintf("margin: %s left free, %s of the GPU: batchfit's device total has been %s; --margin 0 for the bare figure",
			fmtBytes(margin), pctOf(margin, capacity), band.String())
	}
	return fmt.Sprintf("margin: %s left free (%s of the GPU, by --margin); the default is the band (%s), 0 the bare figure", fmtBytes(margin), pctOf(margin, capacity), band.String())
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

func pctOf(n, of int64) string { return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of)) }

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
	var lg *largerGPUs
	if len(ans.Best) == 0 {
		if lg, err = searchLarger(e.context(), o, pf.margin); err != nil {
			return err
		}
	}
	if j.json {
		if err := writeJSON(stdout, planJSON(r, o, ans, lg)); err != nil {
			return err
		}
	} else {
		writePlan(stdout, r, o, ans)
	}
	if len(ans.Best) == 0 {
		return nothingFits(r, ans, lg)
	}
	return nil
}

// largerGPUs is what the planner found on the catalog GPUs larger than
// the job's, when nothing fits on the job's.
type largerGPUs struct {
	fits              []plan.Elsewhere
	searched, stopped []string
}

// searchLarger runs the planner on every catalog GPU larger than the
// job's, with margin (--margin) taken of each GPU's own capacity (the
// band and a share grow with the GPU), to name only GPUs on which a plan
// was simulated and fits.
func searchLarger(ctx context.Context, o plan.Options, margin string) (*largerGPUs, error) {
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
	return &largerGPUs{fits: fits, searched: searched, stopped: stopped}, nil
}

// nothingFits says what would be needed when no plan fits: the least a
// plan simulated in full needs, the bound of the model states where the
// combinations ruled out without simulation could need less, and the
// larger GPUs on which a plan was simulated and fits (lg; nil: not
// searched).
func nothingFits(r predict.Request, ans *plan.Answer, lg *largerGPUs) error {
	msg := fmt.Sprintf("nothing fits on %s with a margin of %s", r.GPU.Name, fmtBytes(ans.Margin))
	if ans.OwnMargins {
		msg = fmt.Sprintf("nothing fits on %s with each plan's own band as its margin (at least %s)", r.GPU.Name, fmtBytes(ans.Margin))
	}
	var parts []string
	if lg != nil {
		switch {
		case len(lg.fits) > 0:
			var gs []string
			for _, f := range lg.fits {
				held := ""
				if f.Margin > 0 {
					held = fmt.Sprintf(", margin %s", fmtBytes(f.Margin))
				}
				gs = append(gs, fmt.Sprintf("%s (%s of %s%s: %s)", f.GPU.Name, fmtBytes(f.Plan.Result.DeviceTotal), fmtBytes(f.GPU.Capacity), held, f.Plan.Candidate))
			}
			held := "with the margin "
			if ans.Margin == 0 && !ans.OwnMargins {
				held = ""
			}
			parts = append(parts, fmt.Sprintf("a plan simulated on a larger GPU fits %son %s; or several GPUs that shard the parameters, gradients and optimizer state", held, strings.Join(gs, ", ")))
			if n := len(lg.searched) - len(lg.fits); n > 0 {
				// the walk goes down from the largest and ends at the
				// first GPU on which nothing fits
				parts = append(parts, fmt.Sprintf("no plan the search found fits on %s, the next GPU down, and no smaller GPU was searched", lg.searched[0]))
			}
		case len(lg.searched) > 0:
			parts = append(parts, fmt.Sprintf("no plan simulated on a larger GPU fits either (%s searched); several GPUs that shard the parameters, gradients and optimizer state may", strings.Join(lg.searched, ", ")))
		default:
			parts = append(parts, "no GPU of the catalog is larger; several GPUs that shard the parameters, gradients and optimizer state may fit it")
		}
		if len(lg.stopped) > 0 {
			parts = append(parts, fmt.Sprintf("the search on %s stopped at --max-predictions without a fit", strings.Join(lg.stopped, ", ")))
		}
	}
	if ans.Need > 0 {
		least := fmtBytes(ans.Need)
		if ans.NeedAtLeast {
			least = "at least " + least
		}
		p := fmt.Sprintf("on %s the least a plan simulated in full needs is %s with the margin (%s", r.GPU.Name, least, ans.NeedFrom)
		if ans.NeedAtLeast {
			p += ": it runs out of memory, so this is its requested peak and the context, a lower bound"
		}
		p += ")"
		if ans.Screened > 0 {
			p += fmt.Sprintf(", and %d more were stopped once they requested more than the device leaves the allocator", ans.Screened)
		}
		parts = append(parts, p)
	}
	if ans.StatesNeed > 0 && (ans.Need == 0 || ans.StatesNeed < ans.Need) {
		parts = append(parts, fmt.Sprintf("the combinations ruled out without simulation need at least %s for the model states alone, before any activation (%s)", fmtBytes(ans.StatesNeed), ans.StatesFrom))
	}
	if ans.Stopped {
		parts = append(parts, fmt.Sprintf("the search stopped after %s with combinations left (--max-predictions, --levers)", spentText(ans)))
	}
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, "; ")
	}
	return fmt.Errorf("%s", msg)
}

func planEntry(ans *plan.Answer, p *plan.Plan) PlanEntryJSON {
	e := PlanEntryJSON{Strategy: strategyOf(p.Parallel), SP: p.SP, MicroBatch: p.MicroBatch, Accumulate: p.Accumulate, Precision: string(p.Precision), Checkpoint: p.Checkpoint.String(),
		OptimizerImpl: string(p.Impl), ExpandableSegments: p.Expandable, Fits: p.Fits, Changes: p.Changes, StepSeconds: p.Seconds,
		SamplesPerSecond: p.Throughput(), Trains: string(p.Tune), Optimizer: p.Optim, ChangesResults: p.ChangesResults(),
		GPUsTotal: p.GPUs(), SamplesPerSecondPerGPU: p.ThroughputPerGPU(), SameGPUs: p == ans.SameGPUs}
	if e.Changes == nil {
		e.Changes = []string{}
	}
	if res := p.Result; res != nil {
		e.MarginBytes = res.Margin
		tl := res.Timeline
		e.PeakAllocatedBytes, e.PeakReservedBytes, e.DeviceTotalBytes = tl.PeakAllocated, tl.PeakReserved, res.DeviceTotal
		e.NeedBytes = plan.Need(res)
		if tl.OOM != nil {
			e.OOM = tl.OOM.Error()
		}
		if res.Time != nil {
			e.TokensPerSecond = res.Time.TokensPerSecond()
			e.MFU = res.Time.MFU
			e.BoundStepSeconds = res.Time.Bound.Seconds
		}
		e.PeakSavingBytes = ans.PeakSaving(p)
		if sv := ans.Savings(p); len(sv) > 0 {
			e.SavingsBytes = map[string]int64{}
			for _, s := range sv {
				e.SavingsBytes[s.What] = s.Bytes
			}
		}
	}
	if p.TP > 1 {
		e.TP = p.TP
	}
	if p.PP > 1 {
		e.PP = p.PP
	}
	return e
}

func planJSON(r predict.Request, o plan.Options, ans *plan.Answer, lg *largerGPUs) PlanJSON {
	out := PlanJSON{Model: r.Source.Name(), GPU: r.GPU.Name, GlobalBatch: ans.GlobalBatch, RankBatch: ans.RankBatch, Ranks: ans.Ranks, Seq: r.Config.Seq, MarginBytes: ans.Margin,
		Current: planEntry(ans, ans.Base), Best: []PlanEntryJSON{}, Evaluated: []PlanEntryJSON{}, Pruned: []PrunedJSON{},
		Predictions: len(ans.Evaluated), Simulations: ans.Simulations, ScreenedSimulations: ans.ScreenedSimulations, BudgetSpent: ans.Spent(), Stopped: ans.Stopped, GPUsTotal: ans.GPUs}
	if ans.SameGPUs != nil {
		e := planEntry(ans, ans.SameGPUs)
		out.SameGPUs = &e
	}
	if ans.OwnMargins {
		out.LeastMarginBytes = ans.Margin
		if ans.Base != nil && ans.Base.Result != nil {
			out.MarginBytes = ans.Base.Result.Margin
		}
	}
	if len(ans.Best) == 0 {
		out.NeedBytes, out.NeedFrom, out.NeedAtLeast, out.Screened = ans.Need, ans.NeedFrom, ans.NeedAtLeast, ans.Screened
		out.StatesNeedBytes, out.StatesNeedFrom = ans.StatesNeed, ans.StatesFrom
		out.LargerGPUs, out.LargerSearched = largerJSON(lg)
	}
	if out.Seq == 0 && ans.Base.Result != nil {
		out.Seq = ans.Base.Result.Config.Seq
	}
	for _, l := range o.Levers {
		out.Levers = append(out.Levers, string(l))
	}
	for _, p := range ans.Best {
		out.Best = append(out.Best, planEntry(ans, p))
	}
	for _, p := range ans.Evaluated {
		out.Evaluated = append(out.Evaluated, planEntry(ans, p))
	}
	for _, p := range ans.Pruned {
		e := PrunedJSON{Precision: string(p.Precision), Checkpoint: p.Checkpoint.String(), OptimizerImpl: string(p.Impl), Reason: p.Reason, Strategy: strategyOf(p.Parallel), SP: p.SP,
			Trains: string(p.Tune), Optimizer: p.Optim}
		if p.TP > 1 {
			e.TP = p.TP
		}
		if p.PP > 1 {
			e.PP = p.PP
		}
		out.Pruned = append(out.Pruned, e)
	}
	return out
}

// planBandLine says what margin the plans of a search held to the band
// were held to: each its own band's.
func planBandLine(r predict.Request, ans *plan.Answer) string {
	line := "margin: each plan leaves free the band its own prediction has earned on real GPUs (what it relies on: adapters, 4-bit weights, sharding, convolutions)"
	if b := ans.Base; b != nil && b.Result != nil {
		if band, err := requestBand(r); err == nil {
			line += fmt.Sprintf("; the current setup %s, %s of the GPU: its device total has been %s", fmtBytes(b.Result.Margin), pctOf(b.Result.Margin, r.GPU.Capacity), band.String())
		}
	}
	return line + "; --margin 0 for the bare figures"
}

func writePlan(w io.Writer, r predict.Request, o plan.Options, ans *plan.Answer) {
	head := []string{r.Source.Name()}
	if ans.Base.Result != nil && ans.Base.Result.Config.Seq > 0 {
		head = append(head, fmt.Sprintf("seq %d", ans.Base.Result.Config.Seq))
	}
	global := fmt.Sprintf("global batch %d", ans.GlobalBatch)
	if ans.Ranks > 1 {
		global += fmt.Sprintf(" (%d a rank × %d GPUs)", ans.RankBatch, ans.Ranks)
	}
	margin := ans.Margin
	if b := ans.Base; o.MarginFor != nil && b != nil && b.Result != nil {
		margin = b.Result.Margin
	}
	head = append(head, global, fmt.Sprintf("%s (%s)", r.GPU.Name, fmtBytes(r.GPU.Capacity)),
		fmt.Sprintf("margin %s", fmtBytes(margin)))
	fmt.Fprintln(w, strings.Join(head, " · "))
	if o.MarginFor != nil {
		fmt.Fprintln(w, planBandLine(r, ans))
	} else {
		band, err := requestBand(r)
		if err != nil {
			band = predict.SafetyBand
		}
		fmt.Fprintln(w, marginLine(ans.Margin, r.GPU.Capacity, band))
	}
	b := ans.Base
	verdict := "fits"
	if !b.Fits {
		word := "needs"
		if b.Result.Timeline.OOM != nil {
			word = "runs out of memory; needs at least"
		}
		verdict = fmt.Sprintf("does not fit: %s %s", word, fmtBytes(plan.Need(b.Result)+ans.Margin))
		if ans.Margin > 0 {
			verdict += " with the margin"
		}
	}
	fmt.Fprintf(w, "current: %s, %s — %s", b.Candidate, plural(int(ans.GPUs), "GPU"), verdict)
	if b.Seconds > 0 {
		fmt.Fprintf(w, ", %s a step", fmtSeconds(b.Seconds))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	if len(ans.Best) > 0 {
		title := "plans that fit, most samples/s per GPU first"
		if o.Objective == plan.FewestChanges || ans.Untimed {
			title = "smallest changes that fit"
		}
		fmt.Fprintln(w, title+":")
		writePlanTable(w, ans)
	}
	fmt.Fprintf(w, "\n%s simulated; %s ruled out without simulation (--json lists every one)\n",
		plural(len(ans.Evaluated), "plan"), plural(len(ans.Pruned), "combination"))
	if ans.Stopped {
		fmt.Fprintf(w, "the search stopped after %s (--max-predictions %d) with combinations left: the plans shown are the best of those tried; fewer --levers search the rest\n",
			spentText(ans), o.MaxPredictions)
	}
	if ans.Untimed {
		fmt.Fprintln(w, "no step times: the GPU's interconnect is not known, so communication under parallelism cannot be timed; the plans are ranked by the fewest changes")
		return
	}
	fmt.Fprintln(w, "step times are the calibrated step-time model's; bound: the roofline step time of the GPU's datasheet peaks (docs/accuracy.md §4)")
	if ans.Base != nil && (ans.Base.Parallel.On() || ans.Base.TP > 1 || ans.Base.PP > 1) {
		fmt.Fprintln(w, "under parallelism they add the communication the step waits for: NCCL's ring over the datasheet's NVLink, PCIe or network rate (docs/accuracy.md §4)")
	}
}

// writePlanTable prints the plans kept, and the best plan on the current
// setup's GPUs after them when it ranks below the cut. That plan is marked
// = wherever a plan shown takes another number of GPUs.
func writePlanTable(w io.Writer, ans *plan.Answer) {
	plans := ans.Best
	same := ans.SameGPUs
	below := same != nil && !slices.Contains(plans, same)
	if below {
		plans = append(slices.Clip(plans), same)
	}
	otherGPUs := slices.ContainsFunc(plans, func(p *plan.Plan) bool { return p.GPUs() != ans.GPUs })
	multi := ans.GPUs > 1 || slices.ContainsFunc(plans, func(p *plan.Plan) bool { return p.GPUs() > 1 })
	label := func(i int, p *plan.Plan) string {
		n := fmt.Sprint(i + 1)
		if i >= len(ans.Best) {
			n = ""
		}
		if otherGPUs && p == same {
			n += "="
		}
		return n
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	seq := ans.Base.Result != nil && ans.Base.Result.Time != nil && ans.Base.Result.Time.Tokens > 0
	par := ans.Base.Parallel.On() || ans.Base.TP > 1 || ans.Base.PP > 1 || slices.ContainsFunc(plans, func(p *plan.Plan) bool { return p.TP > 1 || p.PP > 1 })
	tuned := slices.ContainsFunc(plans, func(p *plan.Plan) bool { return p.Tune != plan.FullTune })
	marked := slices.ContainsFunc(plans, func(p *plan.Plan) bool { return p.ChangesResults() })
	hdr := "  #\tGPUs\tmicro × acc\tprecision\tcheckpointing\toptimizer\texpandable\tpeak reserved\tdevice total\tstep time\tsamples/s\t"
	if multi {
		hdr += "per GPU\t"
	}
	if tuned {
		hdr = "  #\ttrains" + strings.TrimPrefix(hdr, "  #")
	}
	if par {
		hdr = "  #\tstrategy" + strings.TrimPrefix(hdr, "  #")
	}
	if seq {
		hdr += "tokens/s\t"
	}
	fmt.Fprintln(tw, hdr+"MFU\tbound\t")
	for i, p := range plans {
		res := p.Result
		exp := "no"
		if p.Expandable {
			exp = "yes"
		}
		opt := string(p.Impl)
		if p.Optim != "" {
			opt = p.Optim
		}
		num := label(i, p)
		if p.ChangesResults() {
			num += "*"
		}
		line := fmt.Sprintf("\t%d\t%d × %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t", p.GPUs(), p.MicroBatch, p.Accumulate, p.Precision, p.Checkpoint, opt, exp,
			fmtBytes(res.Timeline.PeakReserved), fmtBytes(res.DeviceTotal), secondsOrDash(p.Seconds), rateOrDash(p.Throughput()))
		if multi {
			line += rateOrDash(p.ThroughputPerGPU()) + "\t"
		}
		if tuned {
			line = "\t" + trainsWord(p.Tune) + line
		}
		if par {
			line = "\t" + plan.Layout(p.Candidate) + line
		}
		line = "  " + num + line
		if seq {
			line += fmtRate(res.Time.TokensPerSecond()) + "\t"
		}
		mfu, bound := "-", "-"
		if res.Time != nil {
			mfu = fmt.Sprintf("%.0f%%", 100*res.Time.MFU)
			bound = fmtSeconds(res.Time.Bound.Seconds)
		}
		fmt.Fprintln(tw, line+mfu+"\t"+bound+"\t")
	}
	tw.Flush()
	pure := false
	for _, p := range plans {
		pure = pure || plan.ChangesNumerics(p.Precision)
	}
	if pure {
		fmt.Fprintf(w, "  (bf16-true or 16-true %s)\n", plan.NumericsWarning)
	}
	if otherGPUs {
		// the job asked for its GPUs: the plan that keeps them is the
		// answer to that, whatever a plan on more of them gives a GPU
		switch {
		case same == nil:
			fmt.Fprintf(w, "  no plan on the job's %s fits; GPUs: data × tensor × pipeline parallelism\n", plural(int(ans.GPUs), "GPU"))
		case below:
			fmt.Fprintf(w, "  = the best plan on the job's %s, ranked below those shown; GPUs: data × tensor × pipeline parallelism\n", plural(int(ans.GPUs), "GPU"))
		default:
			fmt.Fprintf(w, "  = the best plan on the job's %s; GPUs: data × tensor × pipeline parallelism\n", plural(int(ans.GPUs), "GPU"))
		}
	}
	if marked {
		fmt.Fprintln(w, "  * changes what is trained (LoRA or QLoRA adapters instead of every parameter) or how it is optimised (8-bit, paged or Adafactor states):")
		fmt.Fprintln(w, "    the model it trains can differ, unlike accumulation, checkpointing, the allocator or the layout; such plans rank after every plan that changes neither")
	}
	for i, p := range plans {
		fmt.Fprintf(w, "  %s: ", label(i, p))
		if len(p.Changes) == 0 {
			fmt.Fprint(w, "the current setup")
		} else {
			fmt.Fprint(w, strings.Join(p.Changes, "; "))
		}
		fmt.Fprintln(w)
		if s := ans.PeakSaving(p); s != 0 && len(p.Changes) > 0 {
			var parts []string
			for _, sv := range ans.Savings(p) {
				sign := "−"
				n := sv.Bytes
				if n < 0 {
					sign, n = "+", -n
				}
				parts = append(parts, fmt.Sprintf("%s %s%s", sv.What, sign, fmtBytes(n)))
			}
			word := "less"
			if s < 0 {
				word, s = "more", -s
			}
			fmt.Fprintf(w, "     needs %s %s at the peak", fmtBytes(s), word)
			if len(parts) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
			}
			fmt.Fprintln(w)
		}
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// secondsOrDash prints a step time, or "-" where none is predicted.
func secondsOrDash(s float64) string {
	if s <= 0 {
		return "-"
	}
	return fmtSeconds(s)
}

func rateOrDash(r float64) string {
	if r <= 0 {
		return "-"
	}
	return fmtRate(r)
}

// trainsWord names what a plan trains for the table.
func trainsWord(t plan.Tune) string {
	switch t {
	case plan.LoRATune:
		return "LoRA"
	case plan.QLoRATune:
		return "QLoRA"
	}
	return "as now"
}

// strategyOf names a plan's strategy for JSON ("" on one GPU).
func strategyOf(p train.Parallel) string {
	if !p.On() {
		return ""
	}
	return p.Name()
}

// spentText says what a search spent of its budget: the simulations run
// in full and those screened out, which the budget charges a fraction of
// one (plan.ScreenedPerFull).
func spentText(ans *plan.Answer) string {
	full := ans.Simulations - ans.ScreenedSimulations
	if ans.ScreenedSimulations == 0 {
		return plural(full, "simulation")
	}
	return fmt.Sprintf("%s in full and %d screened out (each 1/%d of one): %.4g of the budget", plural(full, "simulation"), ans.ScreenedSimulations, plan.ScreenedPerFull, ans.Spent())
}
