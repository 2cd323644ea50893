package report

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

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

// LargerJSON is lg in its JSON form: the GPUs on which a plan fits, and
// every GPU searched.
func LargerJSON(lg *Larger) ([]LargerGPUJSON, []string) {
	if lg == nil {
		return nil, nil
	}
	var out []LargerGPUJSON
	for _, f := range lg.Fits {
		out = append(out, LargerGPUJSON{GPU: f.GPU.Name, CapacityBytes: f.GPU.Capacity, MarginBytes: f.Margin, Plan: NewPlanEntry(&plan.Answer{}, f.Plan)})
	}
	return out, lg.Searched
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

// RequestBand is the band r's answer carries: the one earned by the
// predictions that rely on what r's does (predict.BandFor).
func RequestBand(r predict.Request) (predict.Band, error) {
	rel, err := r.Reliances()
	if err != nil {
		return predict.Band{}, err
	}
	return predict.BandFor(rel), nil
}

// MarginLine is the one line that says what margin an answer was held to,
// band being the answer's own.
func MarginLine(margin, capacity int64, band predict.Band) string {
	if margin == 0 {
		return "margin: none (--margin 0): the bare prediction, which has been below the real figure on a GPU (" + band.String() + ")"
	}
	if margin == band.Margin(capacity) {
		return fmt.Sprintf("margin: %s left free, %s of the GPU: batchfit's device total has been %s; --margin 0 for the bare figure",
			FormatBytes(margin), pctOf(margin, capacity), band.String())
	}
	return fmt.Sprintf("margin: %s left free (%s of the GPU, by --margin); the default is the band (%s), 0 the bare figure", FormatBytes(margin), pctOf(margin, capacity), band.String())
}

func pctOf(n, of int64) string { return fmt.Sprintf("%.1f %%", 100*float64(n)/float64(of)) }

// Larger is what the planner found on the catalog GPUs larger than
// the job's, when nothing fits on the job's.
type Larger struct {
	// Fits are the GPUs on which a plan was simulated and fits.
	Fits []plan.Elsewhere
	// Searched are the GPUs searched, Stopped those whose search ended
	// at the prediction budget without a fit.
	Searched, Stopped []string
}

// NothingFits says what would be needed when no plan fits: the least a
// plan simulated in full needs, the bound of the model states where the
// combinations ruled out without simulation could need less, and the
// larger GPUs on which a plan was simulated and fits (lg; nil: not
// searched).
func NothingFits(r predict.Request, ans *plan.Answer, lg *Larger) error {
	msg := fmt.Sprintf("nothing fits on %s with a margin of %s", r.GPU.Name, FormatBytes(ans.Margin))
	if ans.OwnMargins {
		msg = fmt.Sprintf("nothing fits on %s with each plan's own band as its margin (at least %s)", r.GPU.Name, FormatBytes(ans.Margin))
	}
	var parts []string
	if lg != nil {
		switch {
		case len(lg.Fits) > 0:
			var gs []string
			for _, f := range lg.Fits {
				held := ""
				if f.Margin > 0 {
					held = fmt.Sprintf(", margin %s", FormatBytes(f.Margin))
				}
				gs = append(gs, fmt.Sprintf("%s (%s of %s%s: %s)", f.GPU.Name, FormatBytes(f.Plan.Result.DeviceTotal), FormatBytes(f.GPU.Capacity), held, f.Plan.Candidate))
			}
			held := "with the margin "
			if ans.Margin == 0 && !ans.OwnMargins {
				held = ""
			}
			parts = append(parts, fmt.Sprintf("a plan simulated on a larger GPU fits %son %s; or several GPUs that shard the parameters, gradients and optimizer state", held, strings.Join(gs, ", ")))
			if n := len(lg.Searched) - len(lg.Fits); n > 0 {
				// the walk goes down from the largest and ends at the
				// first GPU on which nothing fits
				parts = append(parts, fmt.Sprintf("no plan the search found fits on %s, the next GPU down, and no smaller GPU was searched", lg.Searched[0]))
			}
		case len(lg.Searched) > 0:
			parts = append(parts, fmt.Sprintf("no plan simulated on a larger GPU fits either (%s searched); several GPUs that shard the parameters, gradients and optimizer state may", strings.Join(lg.Searched, ", ")))
		default:
			parts = append(parts, "no GPU of the catalog is larger; several GPUs that shard the parameters, gradients and optimizer state may fit it")
		}
		if len(lg.Stopped) > 0 {
			parts = append(parts, fmt.Sprintf("the search on %s stopped at --max-predictions without a fit", strings.Join(lg.Stopped, ", ")))
		}
	}
	if ans.Need > 0 {
		least := FormatBytes(ans.Need)
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
		parts = append(parts, fmt.Sprintf("the combinations ruled out without simulation need at least %s for the model states alone, before any activation (%s)", FormatBytes(ans.StatesNeed), ans.StatesFrom))
	}
	if ans.Stopped {
		parts = append(parts, fmt.Sprintf("the search stopped after %s with combinations left (--max-predictions, --levers)", spentText(ans)))
	}
	if len(parts) > 0 {
		msg += ": " + strings.Join(parts, "; ")
	}
	return fmt.Errorf("%s", msg)
}

// NewPlanEntry is the view of one plan p of ans.
func NewPlanEntry(ans *plan.Answer, p *plan.Plan) PlanEntryJSON {
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

// NewPlan is the view of the planner's answer ans for r, searched with
// o; lg are the larger GPUs searched when nothing fits.
func NewPlan(r predict.Request, o plan.Options, ans *plan.Answer, lg *Larger) PlanJSON {
	out := PlanJSON{Model: r.Source.Name(), GPU: r.GPU.Name, GlobalBatch: ans.GlobalBatch, RankBatch: ans.RankBatch, Ranks: ans.Ranks, Seq: r.Config.Seq, MarginBytes: ans.Margin,
		Current: NewPlanEntry(ans, ans.Base), Best: []PlanEntryJSON{}, Evaluated: []PlanEntryJSON{}, Pruned: []PrunedJSON{},
		Predictions: len(ans.Evaluated), Simulations: ans.Simulations, ScreenedSimulations: ans.ScreenedSimulations, BudgetSpent: ans.Spent(), Stopped: ans.Stopped, GPUsTotal: ans.GPUs}
	if ans.SameGPUs != nil {
		e := NewPlanEntry(ans, ans.SameGPUs)
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
		out.LargerGPUs, out.LargerSearched = LargerJSON(lg)
	}
	if out.Seq == 0 && ans.Base.Result != nil {
		out.Seq = ans.Base.Result.Config.Seq
	}
	for _, l := range o.Levers {
		out.Levers = append(out.Levers, string(l))
	}
	for _, p := range ans.Best {
		out.Best = append(out.Best, NewPlanEntry(ans, p))
	}
	for _, p := range ans.Evaluated {
		out.Evaluated = append(out.Evaluated, NewPlanEntry(ans, p))
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
		if band, err := RequestBand(r); err == nil {
			line += fmt.Sprintf("; the current setup %s, %s of the GPU: its device total has been %s", FormatBytes(b.Result.Margin), pctOf(b.Result.Margin, r.GPU.Capacity), band.String())
		}
	}
	return line + "; --margin 0 for the bare figures"
}

// WritePlan prints the planner's answer ans for r, searched with o, as
// text.
func WritePlan(w io.Writer, r predict.Request, o plan.Options, ans *plan.Answer) {
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
	head = append(head, global, fmt.Sprintf("%s (%s)", r.GPU.Name, FormatBytes(r.GPU.Capacity)),
		fmt.Sprintf("margin %s", FormatBytes(margin)))
	fmt.Fprintln(w, strings.Join(head, " · "))
	if o.MarginFor != nil {
		fmt.Fprintln(w, planBandLine(r, ans))
	} else {
		band, err := RequestBand(r)
		if err != nil {
			band = predict.SafetyBand
		}
		fmt.Fprintln(w, MarginLine(ans.Margin, r.GPU.Capacity, band))
	}
	b := ans.Base
	verdict := "fits"
	if !b.Fits {
		word := "needs"
		if b.Result.Timeline.OOM != nil {
			word = "runs out of memory; needs at least"
		}
		verdict = fmt.Sprintf("does not fit: %s %s", word, FormatBytes(plan.Need(b.Result)+ans.Margin))
		if ans.Margin > 0 {
			verdict += " with the margin"
		}
	}
	fmt.Fprintf(w, "current: %s, %s — %s", b.Candidate, Plural(int(ans.GPUs), "GPU"), verdict)
	if b.Seconds > 0 {
		fmt.Fprintf(w, ", %s a step", FormatSeconds(b.Seconds))
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
		Plural(len(ans.Evaluated), "plan"), Plural(len(ans.Pruned), "combination"))
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
			FormatBytes(res.Timeline.PeakReserved), FormatBytes(res.DeviceTotal), secondsOrDash(p.Seconds), rateOrDash(p.Throughput()))
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
			line += FormatRate(res.Time.TokensPerSecond()) + "\t"
		}
		mfu, bound := "-", "-"
		if res.Time != nil {
			mfu = fmt.Sprintf("%.0f%%", 100*res.Time.MFU)
			bound = FormatSeconds(res.Time.Bound.Seconds)
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
			fmt.Fprintf(w, "  no plan on the job's %s fits; GPUs: data × tensor × pipeline parallelism\n", Plural(int(ans.GPUs), "GPU"))
		case below:
			fmt.Fprintf(w, "  = the best plan on the job's %s, ranked below those shown; GPUs: data × tensor × pipeline parallelism\n", Plural(int(ans.GPUs), "GPU"))
		default:
			fmt.Fprintf(w, "  = the best plan on the job's %s; GPUs: data × tensor × pipeline parallelism\n", Plural(int(ans.GPUs), "GPU"))
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
				parts = append(parts, fmt.Sprintf("%s %s%s", sv.What, sign, FormatBytes(n)))
			}
			word := "less"
			if s < 0 {
				word, s = "more", -s
			}
			fmt.Fprintf(w, "     needs %s %s at the peak", FormatBytes(s), word)
			if len(parts) > 0 {
				fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
			}
			fmt.Fprintln(w)
		}
	}
}

// Plural is n and word, with an s unless n is 1.
func Plural(n int, word string) string {
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
	return FormatSeconds(s)
}

func rateOrDash(r float64) string {
	if r <= 0 {
		return "-"
	}
	return FormatRate(r)
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
		return Plural(full, "simulation")
	}
	return fmt.Sprintf("%s in full and %d screened out (each 1/%d of one): %.4g of the budget", Plural(full, "simulation"), ans.ScreenedSimulations, plan.ScreenedPerFull, ans.Spent())
}
