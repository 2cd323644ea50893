package record

import (
	"sort"
)

// Summary is what a recording says about the run as a whole.
type Summary struct {
	// Steps counts optimizer steps, of all optimizers; Optimizers how
	// many optimizers stepped.
	Steps      int
	Optimizers int
	// Torch, CUDA, Device, Capability and DeviceTotal are the recorder's
	// start report; Started is false when the command never imported
	// torch.
	Started     bool
	Torch       string
	CUDA        bool
	Device      string
	Capability  string
	DeviceTotal int64
	// Batch is the batch of the first step (nil when no forward pass gave
	// one), MicroBatches the forward passes before its first step
	// (gradient accumulation).
	Batch        *int64
	MicroBatches int
	// Optimizer and OptimizerSettings are the first optimizer's class and
	// settings (see Record.OptimizerSettings).
	Optimizer         string
	OptimizerSettings map[string]any
	// PeakAllocated and PeakReserved are the largest
	// max_memory_allocated and max_memory_reserved reported; nil without
	// CUDA figures.
	PeakAllocated, PeakReserved *int64
	// Retries and OOMs are the allocator's counters at the last report.
	Retries, OOMs int64
	// Outside is the most memory on the device outside PyTorch's
	// allocator seen at a step (device total − free − reserved: the CUDA
	// context, libraries, other processes).
	Outside *int64
	// PeakRSS is the largest resident set reported (runs on the CPU).
	PeakRSS *int64
	// StepSeconds is the median time between the first optimizer's
	// consecutive steps after the first (0 with fewer than three steps).
	StepSeconds float64
	// OOM and Exit are the out-of-memory report and the child's exit.
	OOM  *Record
	Exit *Record
	// Warnings are the recorder's own failures.
	Warnings []string
}

func maxp(p **int64, v *int64) {
	if v != nil && (*p == nil || *v > **p) {
		n := *v
		*p = &n
	}
}

// Summarize reads records in order.
func Summarize(recs []Record) Summary {
	var s Summary
	opts := map[int]bool{}
	var times []timed
	var batches, micros []int64
	for i := range recs {
		r := &recs[i]
		switch r.Kind {
		case KindStart:
			s.Started = true
			s.Torch = r.Torch
			s.CUDA = r.CUDA != nil && *r.CUDA
			if r.Device != "" { // recordings made before the device had a record of its own
				s.Device, s.Capability = r.Device, r.Capability
				if r.DeviceTotal != nil {
					s.DeviceTotal = *r.DeviceTotal
				}
			}
		case KindDevice:
			s.CUDA = true
			s.Device, s.Capability = r.Device, r.Capability
			if r.DeviceTotal != nil {
				s.DeviceTotal = *r.DeviceTotal
			}
		case KindStep, KindOOM:
			if r.Kind == KindStep {
				if s.Steps == 0 {
					s.Optimizer, s.OptimizerSettings = r.OptimizerClass, r.OptimizerSettings
				}
				s.Steps++
				opts[r.Optimizer] = true
				if r.Optimizer == 0 {
					if r.Batch != nil {
						batches = append(batches, *r.Batch)
					}
					micros = append(micros, int64(r.MicroBatches))
					if r.Time > 0 {
						times = append(times, timed{r.Time, r.Step})
					}
				}
			} else {
				s.OOM = r
			}
			maxp(&s.PeakAllocated, r.MaxAllocated)
			maxp(&s.PeakReserved, r.MaxReserved)
			maxp(&s.PeakRSS, r.RSS)
			if r.NumAllocRetries != nil {
				s.Retries = *r.NumAllocRetries
			}
			if r.NumOOMs != nil {
				s.OOMs = *r.NumOOMs
			}
			if r.DeviceTotal != nil && r.DeviceFree != nil && r.Reserved != nil {
				out := *r.DeviceTotal - *r.DeviceFree - *r.Reserved
				maxp(&s.Outside, &out)
			}
		case KindExit:
			s.Exit = r
		case KindWarning:
			s.Warnings = append(s.Warnings, r.Message)
		}
	}
	s.Optimizers = len(opts)
	// The batch and the forward passes a step are the most common over the
	// first optimizer's steps: a step GradScaler skipped folds its passes
	// into the next, a batch-size search starts larger.
	if b, ok := mode(batches); ok {
		s.Batch = &b
	}
	if m, ok := mode(micros); ok {
		s.MicroBatches = int(m)
	}
	if s.Steps == 0 && s.OOM != nil {
		// out of memory before the first step: what the forward passes showed
		s.Batch, s.MicroBatches = s.OOM.Batch, s.OOM.MicroBatches
	}
	if len(times) >= 3 {
		// per step, between reports after the first (a reading of watch
		// may skip steps: the time is shared among those it skipped)
		var d []float64
		for i := 2; i < len(times); i++ {
			if n := times[i].step - times[i-1].step; n > 0 {
				d = append(d, (times[i].t-times[i-1].t)/float64(n))
			}
		}
		if len(d) > 0 {
			sort.Float64s(d)
			s.StepSeconds = d[len(d)/2]
			if len(d)%2 == 0 {
				s.StepSeconds = (d[len(d)/2-1] + d[len(d)/2]) / 2
			}
		}
	}
	return s
}

type timed struct {
	t    float64
	step int
}

// mode is the most frequent value, the first seen on a tie.
func mode(xs []int64) (int64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	count := map[int64]int{}
	best := xs[0]
	for _, x := range xs {
		count[x]++
		if count[x] > count[best] {
			best = x
		}
	}
	return best, true
}
