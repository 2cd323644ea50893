package alloc

import "github.com/batchfit/batchfit/trace"

// StepRecorder keeps the allocator's state over a replay in at most
// 2·buckets stretches of events, each holding the event of its stretch
// with the most allocated (and its bytes by category) and the most
// reserved; the phases of the step are kept as runs. Its memory does not
// grow with the trace, so a replay of millions of events can be drawn.
// Its Observe is a ReplayOptions.Observe.
type StepRecorder struct {
	buckets int
	width   int
	b       []StateBucket
	phases  []PhaseRun
	events  int
}

// StateBucket is one stretch [From, To) of a replay's events: the most
// allocated in it, with its bytes by category at that event, and the most
// reserved.
type StateBucket struct {
	From, To   int
	Allocated  int64
	Reserved   int64
	ByCategory [trace.NumCategories]int64
}

// PhaseRun is a run [From, To) of events of one phase of one step.
type PhaseRun struct {
	From, To int
	Phase    trace.Phase
	Step     int32
}

// NewStepRecorder returns a recorder that keeps at most 2·buckets
// stretches.
func NewStepRecorder(buckets int) *StepRecorder {
	return &StepRecorder{buckets: buckets, width: 1}
}

// Buckets are the stretches kept, in order.
func (r *StepRecorder) Buckets() []StateBucket { return r.b }

// Phases are the phase runs kept, in order; runs narrower than the
// stretches may have been dropped.
func (r *StepRecorder) Phases() []PhaseRun { return r.phases }

// Events is the number of events observed.
func (r *StepRecorder) Events() int { return r.events }

// Observe records the state after one event.
func (r *StepRecorder) Observe(o Observation) {
	i := o.Event
	r.events = i + 1
	if e := o.E; e != nil {
		if n := len(r.phases); n > 0 && r.phases[n-1].Phase == e.Phase && r.phases[n-1].Step == e.Step {
			r.phases[n-1].To = i + 1
		} else {
			if len(r.phases) >= 8*r.buckets {
				r.thinPhases()
			}
			r.phases = append(r.phases, PhaseRun{From: i, To: i + 1, Phase: e.Phase, Step: e.Step})
		}
	}
	n := len(r.b)
	if n == 0 || i >= r.b[n-1].From+r.width {
		if n == 2*r.buckets {
			r.halve()
		}
		r.b = append(r.b, StateBucket{From: i, Allocated: -1})
		n = len(r.b)
	}
	b := &r.b[n-1]
	b.To = i + 1
	if o.Allocated > b.Allocated {
		b.Allocated = o.Allocated
		if o.ByCategory != nil {
			b.ByCategory = *o.ByCategory
		}
	}
	b.Reserved = max(b.Reserved, o.Reserved)
}

// thinPhases drops the phase runs narrower than the stretches kept, the
// narrowest first, until a quarter of the room is free: with thousands of
// micro-batches a band per pass could not be seen, and would make the
// runs grow with the trace.
func (r *StepRecorder) thinPhases() {
	for w := r.width; len(r.phases) > 6*r.buckets; w *= 2 {
		kept := r.phases[:0]
		for _, p := range r.phases {
			if p.To-p.From >= w {
				kept = append(kept, p)
			}
		}
		r.phases = kept
	}
}

// halve merges neighbouring buckets and doubles the width of new ones.
func (r *StepRecorder) halve() {
	out := r.b[:0]
	for j := 0; j < len(r.b); j += 2 {
		m := r.b[j]
		if j+1 < len(r.b) {
			o := r.b[j+1]
			m.To = o.To
			if o.Allocated > m.Allocated {
				m.Allocated, m.ByCategory = o.Allocated, o.ByCategory
			}
			m.Reserved = max(m.Reserved, o.Reserved)
		}
		out = append(out, m)
	}
	r.b = out
	r.width *= 2
}
