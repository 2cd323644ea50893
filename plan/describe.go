package plan

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/train"
)

// How a plan is told to a person: the changes it makes to the current
// setup, its layout, and what it saves at the peak.

// sameLayout: the same data-parallel strategy and model split. Plans
// that differ in it are different plans (their step times differ by their
// communication), not variants of one.
func sameLayout(a, b Candidate) bool {
	return a.Parallel == b.Parallel && a.TP == b.TP && a.SP == b.SP && a.PP == b.PP
}

// NumericsWarning is what a move to a "-true" 16-bit precision changes
// besides memory, said with every such plan: Lightning's bf16-true and
// 16-true cast the module itself (no float32 master weights, unlike the
// -mixed precisions under autocast), so the optimizer's updates are
// rounded to 16 bits.
const NumericsWarning = "changes the numerics: the weights themselves are kept in 16 bits, with no float32 master copy"

// ChangesNumerics reports a precision that keeps the weights in 16 bits
// (NumericsWarning).
func ChangesNumerics(p train.Precision) bool { return p == train.TrueBF16 || p == train.True16 }

// changes describes how c differs from the current setup.
func (pl *planner) changes(c Candidate) []string {
	b := pl.base
	var out []string
	if c.Accumulate != b.Accumulate {
		out = append(out, fmt.Sprintf("accumulate %d → %d (micro-batch %d → %d)", b.Accumulate, c.Accumulate, b.MicroBatch, c.MicroBatch))
	}
	if c.Precision != b.Precision {
		s := fmt.Sprintf("precision %s → %s", b.Precision, c.Precision)
		if ChangesNumerics(c.Precision) && !ChangesNumerics(b.Precision) {
			s += " — " + NumericsWarning
		}
		out = append(out, s)
	}
	if c.Checkpoint != b.Checkpoint {
		out = append(out, fmt.Sprintf("checkpointing %s → %s", b.Checkpoint, c.Checkpoint))
	}
	if c.Impl != b.Impl && c.Optim == "" {
		out = append(out, fmt.Sprintf("optimizer %s → %s", b.Impl, c.Impl))
	}
	if c.Tune != b.Tune && pl.lora != nil {
		a := fmt.Sprintf("LoRA adapters (r=%d, alpha %g, on %s: PEFT's defaults)", pl.lora.Rank, pl.lora.Alpha, strings.Join(pl.lora.Targets, ","))
		switch c.Tune {
		case LoRATune:
			out = append(out, "train "+a+" instead of every parameter — changes what is trained")
		case QLoRATune:
			out = append(out, "QLoRA: the base's Linear weights in 4-bit NF4 with double quantization, "+a+" trained — changes what is trained")
		}
	}
	if c.Optim != b.Optim {
		out = append(out, fmt.Sprintf("optimizer %s → %s — changes how it is optimised", pl.o.Base.Setup.Optimizer.Name(), c.Optim))
	}
	if c.Expandable != b.Expandable {
		out = append(out, fmt.Sprintf("expandable_segments %v → %v", b.Expandable, c.Expandable))
	}
	if c.Parallel != b.Parallel {
		out = append(out, fmt.Sprintf("strategy %s → %s", b.Parallel.Name(), c.Parallel.Name()))
	}
	if c.PP != b.PP {
		s := fmt.Sprintf("pipeline stages %d → %d (1F1B over the %d micro-batches", b.PP, c.PP, c.Accumulate)
		if c.PP > b.PP && c.PP%b.PP == 0 {
			s += fmt.Sprintf("; %d× the GPUs", c.PP/b.PP)
		}
		out = append(out, s+")")
	}
	if c.TP != b.TP || c.SP != b.SP {
		s := fmt.Sprintf("tensor parallel %d → %d", b.TP, c.TP)
		if c.SP {
			s += " with sequence parallelism"
		}
		if c.TP > b.TP && c.TP%b.TP == 0 {
			s += fmt.Sprintf(" (%d× the GPUs)", c.TP/b.TP)
		}
		out = append(out, s)
	}
	return out
}

// Layout names a candidate's GPU layout: its data-parallel strategy and
// its tensor parallelism ("fsdp, tp 4+sp").
func Layout(c Candidate) string { return c.Parallel.Name() + modelSplit(c) }

// modelSplit is a candidate's tensor and pipeline parallelism, ", tp 4+sp,
// pp 2", or nothing.
func modelSplit(c Candidate) string {
	var s string
	if c.TP > 1 {
		s += fmt.Sprintf(", tp %d", c.TP)
		if c.SP {
			s += "+sp"
		}
	}
	if c.PP > 1 {
		s += fmt.Sprintf(", pp %d", c.PP)
	}
	return s
}

func strategyPrefix(p train.Parallel) string {
	if !p.On() {
		return ""
	}
	return p.Name() + ", "
}

// describe names a candidate in one line.
func describe(c Candidate) string {
	s := fmt.Sprintf("micro-batch %d × %d, %s%s, checkpointing %s, optimizer %s", c.MicroBatch, c.Accumulate, strategyPrefix(c.Parallel), c.Precision, c.Checkpoint, c.Impl)
	s += modelSplit(c) + tuneSuffix(c.Tune, c.Optim)
	if c.Expandable {
		s += ", expandable segments"
	}
	return s
}

// Describe names a candidate in one line.
func (c Candidate) String() string { return describe(c) }

// Saving is one figure of a plan against the current setup.
type Saving struct {
	What  string
	Bytes int64 // positive: the plan needs less
}

// Savings explains why a plan fits where the current setup does not: the
// figures of the static breakdown that moved, against the base.
func (a *Answer) Savings(p *Plan) []Saving {
	if a.Base == nil || a.Base.Result == nil || p.Result == nil {
		return nil
	}
	b, q := a.Base.Result, p.Result
	bs, qs := b.Summary, q.Summary
	out := []Saving{
		{"parameters", bs.ParametersBytes - qs.ParametersBytes},
		{"gradients", bs.GradientsBytes - qs.GradientsBytes},
		{"optimizer state", bs.OptimizerStateBytes - qs.OptimizerStateBytes},
		{"saved activations", bs.ActivationsBytes - qs.ActivationsBytes},
		{"autocast weight copies", bs.CastCacheBytes - qs.CastCacheBytes},
		{"batch data", bs.BatchDataBytes - qs.BatchDataBytes},
	}
	// Figures that moved by less than 1 % of the device (the grad
	// scaler's few bytes) explain nothing.
	var kept []Saving
	for _, s := range out {
		if s.Bytes != 0 && 100*abs(s.Bytes) >= b.GPU.Capacity {
			kept = append(kept, s)
		}
	}
	return kept
}

// PeakSaving is how much less the plan needs on the device than the
// current setup at its peak (what nvidia-smi would show); for a setup that
// ran out of memory, what it asked for.
func (a *Answer) PeakSaving(p *Plan) int64 {
	if a.Base == nil || a.Base.Result == nil || p.Result == nil {
		return 0
	}
	return need(a.Base.Result) - need(p.Result)
}

// tuneSuffix names what a combination trains and steps with, ", LoRA,
// optimizer adamw8bit", or nothing.
func tuneSuffix(t Tune, optim string) string {
	var s string
	switch t {
	case LoRATune:
		s += ", LoRA"
	case QLoRATune:
		s += ", QLoRA"
	}
	if optim != "" {
		s += ", optimizer " + optim
	}
	return s
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
