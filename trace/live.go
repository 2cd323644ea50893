package trace

import "fmt"

// PhaseLive is the requested bytes of one phase of one step.
type PhaseLive struct {
	// Seen reports that the phase had at least one event in the step.
	Seen bool
	// Peak is the most bytes alive at any moment of the phase, counting
	// what was alive when it began.
	Peak int64
	// End is the bytes alive when the phase's last event was done.
	End int64
}

// StepLive is the requested bytes over one training step: what was alive
// when it began, its peak, and where the peak was first reached.
type StepLive struct {
	Step   int32
	Before int64
	Peak   int64
	// PeakPhase and PeakSite are the phase and site of the allocation that
	// first reached the peak; PeakEvent is its index in the trace.
	PeakPhase Phase
	PeakSite  int32
	PeakEvent int
	Phases    [numPhases]PhaseLive
}

// LiveByStep follows the live requested bytes (the sum of the unrounded
// sizes of the blocks allocated and not yet freed, PyTorch's
// requested_bytes) through the trace and reports them per step and phase.
// Setup events belong to step 0's Before: they happen before the first
// step begins. These are the figures a CPU run reports, where there is no
// caching allocator between the tensors and the memory. Blocks of the
// categories in skip are left out (a reference that counts what a step
// makes beside the parameters, buffers and batch).
func LiveByStep(t *Trace, skip ...Category) ([]StepLive, error) {
	sizes := make(map[int64]int64, 1024)
	var out []StepLive
	var live int64
	cur := -1
	var skipped [NumCategories]bool
	for _, c := range skip {
		if int(c) < len(skipped) {
			skipped[c] = true
		}
	}
	for i, e := range t.Events {
		if int(e.Category) < len(skipped) && skipped[e.Category] {
			continue
		}
		prev := live
		switch e.Action {
		case Alloc:
			if _, dup := sizes[e.ID]; dup {
				return nil, fmt.Errorf("event %d: block %d allocated twice", i, e.ID)
			}
			sizes[e.ID] = e.Size
			live += e.Size
		case Free:
			n, ok := sizes[e.ID]
			if !ok {
				return nil, fmt.Errorf("event %d: block %d freed but never allocated", i, e.ID)
			}
			delete(sizes, e.ID)
			live -= n
		default:
			continue
		}
		if e.Phase == Setup {
			continue
		}
		if cur < 0 || out[cur].Step != e.Step {
			if e.Step < 0 {
				return nil, fmt.Errorf("event %d: negative step %d", i, e.Step)
			}
			if cur >= 0 && e.Step < out[cur].Step {
				return nil, fmt.Errorf("event %d: step %d after step %d", i, e.Step, out[cur].Step)
			}
			out = append(out, StepLive{Step: e.Step, Before: prev, Peak: prev, PeakPhase: e.Phase, PeakSite: -1, PeakEvent: -1})
			cur = len(out) - 1
		}
		s := &out[cur]
		if int(e.Phase) >= len(s.Phases) {
			return nil, fmt.Errorf("event %d: unknown phase %d", i, e.Phase)
		}
		p := &s.Phases[e.Phase]
		if !p.Seen {
			p.Seen = true
			// The phase starts with what the previous event left alive.
			p.Peak = prev
		}
		p.Peak = max(p.Peak, live)
		p.End = live
		if live > s.Peak {
			s.Peak, s.PeakPhase, s.PeakSite, s.PeakEvent = live, e.Phase, e.Site, i
		}
	}
	// A phase without events (zero_grad that only zeroes, an SGD step
	// without momentum) held what the phase before it left.
	for i := range out {
		carry := out[i].Before
		for ph := Forward; ph < numPhases; ph++ {
			p := &out[i].Phases[ph]
			if !p.Seen {
				if ph == Loss {
					continue
				}
				p.Peak, p.End = carry, carry
				continue
			}
			carry = p.End
		}
	}
	return out, nil
}
