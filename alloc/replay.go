package alloc

import (
	"context"
	"errors"
	"fmt"

	"github.com/batchfit/batchfit/trace"
)

// ReplayOptions tunes Replay.
type ReplayOptions struct {
	// Record keeps one Sample per event (allocated and reserved after it).
	Record bool
	// Segments lists the segments and their blocks at the end in
	// Timeline.Segments (a copy of the whole allocator state, so off by
	// default: searches replay many traces and need only the figures).
	Segments bool
	// Observe, when set, is called after every event with the event and
	// the allocator's state; charts draw the step from it without keeping
	// a sample per event. Like Record, it turns off skipping repeated
	// runs: every event is replayed.
	Observe func(Observation)
	// Initial is the state the replay starts from (see
	// Allocator.Restore): segments reserved and blocks allocated before
	// the first event, whose IDs the trace's Free events may name. Its
	// blocks count as trace.Other. Empty means a fresh allocator.
	Initial []Segment
}

// Observation is the allocator state after one event, for
// ReplayOptions.Observe. ByCategory is the allocator's own account (block
// bytes, rounded as it rounds them) and is valid only during the call.
type Observation struct {
	Event      int
	E          *trace.Event
	Allocated  int64
	Reserved   int64
	ByCategory *[trace.NumCategories]int64
}

// Sample is the allocator state after one event.
type Sample struct {
	Event     int
	Allocated int64
	Reserved  int64
}

// StepStats are the figures of one training step: the events after the
// previous trace.StepEnd up to and including this one. A
// torch.cuda.empty_cache() called between two steps (right after a
// StepEnd, before the next step's first event) belongs to the step it
// follows: a training loop calls it at the end of an iteration, so what it
// releases is that iteration's cache, and the next step starts from what
// it left.
type StepStats struct {
	Step          int   // 0-based index in Timeline.Steps
	EndEvent      int   // index of the StepEnd event, or of the last event of a partial step
	Partial       bool  // the trace ended (or ran out of memory) before a StepEnd
	PeakAllocated int64 // highest allocated bytes during the step, its starting state included
	PeakReserved  int64
	EndAllocated  int64
	EndReserved   int64
	// Released is the bytes returned to the device by empty_cache() calls
	// during this step and by the one right after its end.
	Released int64
	// EmptiedAfter is set when empty_cache() was called right after the
	// step's end; ReservedAfter is reserved once it returned (allocated
	// does not change: empty_cache frees no live block).
	EmptiedAfter  bool
	ReservedAfter int64
}

// Timeline is what a replay of a trace yields.
type Timeline struct {
	PeakAllocated, PeakReserved, PeakActive int64
	// PeakAllocatedEvent and PeakReservedEvent are the event indexes where
	// each peak was first reached; -1 when nothing was ever allocated, or
	// when the peak is the starting state (ReplayOptions.Initial); the
	// index of a trace.ResetPeaks event when the peak is what was held
	// there.
	PeakAllocatedEvent, PeakReservedEvent int
	// AtPeak is allocated (rounded block) bytes by category at the
	// allocated peak; RequestedAtPeak the unrounded bytes asked for.
	AtPeak          [trace.NumCategories]int64
	RequestedAtPeak [trace.NumCategories]int64

	Steps   []StepStats
	Samples []Sample // when ReplayOptions.Record

	// OOM is set when a Malloc failed: the replay stopped at event OOMEvent.
	// Running out of memory is an answer, not a failure: Replay then
	// returns a nil error.
	OOM      *OOMError
	OOMEvent int

	Final    Stats     // counters at the end (or at the OOM)
	Segments []Segment // segments at the end (or at the OOM)

	// Skipped counts the events of repeated runs (trace.Repeat) not
	// replayed because the allocator's state had come back to one seen
	// before them: the figures above are what replaying them gives.
	Skipped int

	// FellBack counts the allocations marked trace.Event.Fallback that
	// the allocator could not supply even after freeing its cache: their
	// callers ran without them (cuDNN took an algorithm that needs no
	// workspace). It is 0 away from the device's limit.
	FellBack int
}

// Replay runs the events of t through a fresh allocator with cfg on dev.
// It returns an error for an invalid configuration and for a malformed
// trace (a free of a block that is not allocated, an id allocated twice, a
// negative size, an unknown action or category), naming the event.
func Replay(t *trace.Trace, cfg Config, dev Device, opts ReplayOptions) (*Timeline, error) {
	return ReplayContext(context.Background(), t, cfg, dev, opts)
}

// ctxEvery is how many events a replay runs between checks of its
// context: a few microseconds of work, so a cancelled replay stops at once
// and the check costs nothing measurable.
const ctxEvery = 4096

// ReplayContext is Replay that stops with ctx's error when ctx is done.
func ReplayContext(ctx context.Context, t *trace.Trace, cfg Config, dev Device, opts ReplayOptions) (*Timeline, error) {
	if t == nil {
		return nil, errors.New("replaying trace: nil trace")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("replaying trace: %w", err)
	}
	rp := &replayer{a: New(cfg, dev), opts: opts,
		tl: &Timeline{PeakAllocatedEvent: -1, PeakReservedEvent: -1, OOMEvent: -1}}
	if len(opts.Initial) > 0 {
		if err := rp.a.Restore(opts.Initial); err != nil {
			return nil, fmt.Errorf("replaying trace: %w", err)
		}
		a := rp.a
		rp.cat[trace.Other], rp.req[trace.Other] = a.allocated, a.requested
		rp.tl.PeakAllocated, rp.tl.PeakReserved = a.allocated, a.reserved
		rp.tl.AtPeak, rp.tl.RequestedAtPeak = rp.cat, rp.req
		rp.step = StepStats{PeakAllocated: a.allocated, PeakReserved: a.reserved}
	}
	if opts.Record {
		rp.tl.Samples = make([]Sample, 0, t.Len())
	}
	// Repetitions are skipped when the state comes back (repeat.go); a
	// recorded replay needs every event, and the garbage collector's
	// counters never come back.
	skipping := !opts.Record && opts.Observe == nil && !rp.a.gcOn
	var seen stateLog
	// copied holds the copy being replayed: one variable for all, since
	// event's argument escapes (an observer receives it)
	var copied trace.Event
	ri := 0
	for i := range t.Events {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		var r *trace.Repeat
		if ri < len(t.Repeats) {
			r = &t.Repeats[ri]
		}
		if r != nil && i == r.Start && skipping {
			seen.reset()
			seen.add(rp.a, 0, r.Moved(), int64(rp.tl.FellBack))
		}
		if done, err := rp.event(&t.Events[i]); done || err != nil {
			return rp.result(err)
		}
		if r == nil || i+1 != r.End {
			continue
		}
		ri++
		n := r.End - r.Start
		// Steps that end inside the template: the skipped runs close the
		// same steps as the runs they repeat, which is only so when the
		// template ends with its last StepEnd (no step is left open at a
		// boundary); otherwise the runs are replayed one by one.
		ends := 0
		for _, e := range t.Events[r.Start:r.End] {
			if e.Action == trace.StepEnd {
				ends++
			}
		}
		// Runs whose sizes grow never repeat what came before, whatever
		// the state: they are replayed one by one.
		looking := skipping && r.Grow == nil && (ends == 0 || t.Events[r.End-1].Action == trace.StepEnd)
		for k := 1; k <= r.Times; {
			// the boundary before run k (the template is run 0); the
			// ids from moved on are the runs' own, in flight between
			// them under a lag (trace.Repeat.Lag)
			moved := r.Moved() + int64(k)*r.Delta
			if looking && looks(k) {
				if p, ok := seen.add(rp.a, k, moved, int64(rp.tl.FellBack)); ok {
					// the state of boundary p again: skip whole periods
					// of the runs left
					period := k - p
					m := (r.Times + 1 - k) / period * period
					if m > 0 {
						rp.a.skip(seen.countsAt(p), int64(m/period), moved, int64(m)*r.Delta)
						rp.skipSteps(ends*period, m/period, period*n)
						rp.v += m * n
						rp.tl.Skipped += m * n
						k += m
					}
					looking = false
					continue
				}
			}
			for j := r.Start; j < r.End; j++ {
				copied = r.CopyOf(t.Events, j, k)
				if done, err := rp.event(&copied); done || err != nil {
					return rp.result(err)
				}
			}
			k++
		}
	}
	if rp.open {
		closeStep(rp.tl, rp.a, &rp.step, rp.v-1, true)
	}
	return finish(rp.tl, rp.a, opts.Segments), nil
}

// replayer is one replay's state; v is the index of the next event in the
// sequence with repeated runs in place.
type replayer struct {
	a    *Allocator
	tl   *Timeline
	opts ReplayOptions
	// Per-category bytes are kept up to date on every event and copied
	// only when a new allocated peak is reached.
	cat, req [trace.NumCategories]int64
	step     StepStats
	open     bool
	v        int
	// fellBack holds the Fallback keys whose caller cached the choice
	// that needs no block (trace.Event.Fallback).
	fellBack map[int32]bool
}

func (rp *replayer) result(err error) (*Timeline, error) {
	if err != nil {
		return nil, err
	}
	return finish(rp.tl, rp.a, rp.opts.Segments), nil
}

// event replays one event; done reports an out-of-memory stop.
func (rp *replayer) event(e *trace.Event) (done bool, err error) {
	a, tl, i := rp.a, rp.tl, rp.v
	rp.v++
	// an empty_cache() between two steps is the closed step's (StepStats)
	between := e.Action == trace.EmptyCache && !rp.open && len(tl.Steps) > 0
	rp.open = !between
	switch e.Action {
	case trace.Alloc:
		if int(e.Category) >= trace.NumCategories {
			return false, fmt.Errorf("replaying trace: event %d: unknown category %d", i, e.Category)
		}
		size := e.Size
		if e.Fallback > 0 && rp.fellBack[e.Fallback] {
			// the caller's cache holds the choice that needed nothing
			size = 0
		}
		b, err := a.malloc(e.ID, size, e.Stream, uint8(e.Category))
		if err != nil && e.Fallback != 0 && errors.As(err, new(*OOMError)) {
			// The allocator ran its whole out-of-memory path (freeing
			// its cache, which stays freed) and raised; the caller
			// catches it and runs without the block. Its Free then
			// returns the size-0 block.
			tl.FellBack++
			if e.Fallback > 0 {
				if rp.fellBack == nil {
					rp.fellBack = map[int32]bool{}
				}
				rp.fellBack[e.Fallback] = true
			}
			size = 0
			b, err = a.malloc(e.ID, size, e.Stream, uint8(e.Category))
		}
		if err != nil {
			var oom *OOMError
			if errors.As(err, &oom) {
				tl.OOM, tl.OOMEvent = oom, i
				if a.reserved > rp.step.PeakReserved {
					rp.step.PeakReserved = a.reserved
				}
				closeStep(tl, a, &rp.step, i, true)
				return true, nil
			}
			return false, fmt.Errorf("replaying trace: event %d: %w", i, err)
		}
		rp.cat[e.Category] += b.size
		rp.req[e.Category] += size
		if a.allocated > tl.PeakAllocated {
			tl.PeakAllocated = a.allocated
			tl.PeakAllocatedEvent = i
			tl.AtPeak = rp.cat
			tl.RequestedAtPeak = rp.req
		}
		if a.reserved > tl.PeakReserved {
			tl.PeakReserved = a.reserved
			tl.PeakReservedEvent = i
		}
	case trace.Free:
		size, r, tag, err := a.free(e.ID)
		if err != nil {
			return false, fmt.Errorf("replaying trace: event %d: %w", i, err)
		}
		rp.cat[tag] -= size
		rp.req[tag] -= r
	case trace.EmptyCache:
		n := a.EmptyCache()
		if between {
			last := &tl.Steps[len(tl.Steps)-1]
			last.Released += n
			last.EmptiedAfter, last.ReservedAfter = true, a.reserved
			// the next step starts from what empty_cache left
			rp.step.PeakReserved = a.reserved
			break
		}
		rp.step.Released += n
	case trace.StepEnd:
	case trace.ResetPeaks:
		// reset_peak_memory_stats: every peak is the current value
		a.ResetPeaks()
		tl.PeakAllocated, tl.PeakAllocatedEvent = a.allocated, i
		tl.PeakReserved, tl.PeakReservedEvent = a.reserved, i
		tl.AtPeak, tl.RequestedAtPeak = rp.cat, rp.req
		rp.step.PeakAllocated, rp.step.PeakReserved = a.allocated, a.reserved
	default:
		return false, fmt.Errorf("replaying trace: event %d: unknown action %d", i, uint8(e.Action))
	}
	if a.allocated > rp.step.PeakAllocated {
		rp.step.PeakAllocated = a.allocated
	}
	if a.reserved > rp.step.PeakReserved {
		rp.step.PeakReserved = a.reserved
	}
	if rp.opts.Record {
		tl.Samples = append(tl.Samples, Sample{Event: i, Allocated: a.allocated, Reserved: a.reserved})
	}
	if rp.opts.Observe != nil {
		rp.opts.Observe(Observation{Event: i, E: e, Allocated: a.allocated, Reserved: a.reserved, ByCategory: &rp.cat})
	}
	if e.Action == trace.StepEnd {
		closeStep(tl, a, &rp.step, i, false)
		rp.open = false
	}
	return false, nil
}

// skipSteps appends the steps of times skipped periods: each repeats the
// last per steps closed, its events moved on by span a period.
func (rp *replayer) skipSteps(per, times, span int) {
	if per == 0 {
		return
	}
	last := rp.tl.Steps[len(rp.tl.Steps)-per:]
	for t := 1; t <= times; t++ {
		for _, st := range last {
			st.Step = len(rp.tl.Steps)
			st.EndEvent += t * span
			rp.tl.Steps = append(rp.tl.Steps, st)
		}
	}
}

// closeStep appends the step ending at event i and starts the next one
// from the current state.
func closeStep(tl *Timeline, a *Allocator, step *StepStats, i int, partial bool) {
	step.Step = len(tl.Steps)
	step.EndEvent = i
	step.Partial = partial
	step.EndAllocated = a.allocated
	step.EndReserved = a.reserved
	tl.Steps = append(tl.Steps, *step)
	*step = StepStats{PeakAllocated: a.allocated, PeakReserved: a.reserved}
}

func finish(tl *Timeline, a *Allocator, segments bool) *Timeline {
	tl.Final = a.Stats()
	tl.PeakActive = tl.Final.PeakActive
	if segments {
		tl.Segments = a.Segments()
	}
	return tl
}
