package snapshot

import (
	"context"
	"fmt"
	"sort"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/trace"
)

// AnalyzeOptions control Analyze.
type AnalyzeOptions struct {
	// Device is the device whose trace is replayed.
	Device int
	// WhatIf is the other PYTORCH_CUDA_ALLOC_CONF the trace is replayed
	// with, to say what it would have reserved.
	WhatIf string
	// Top is how many allocation sites TopSites lists.
	Top int
	// Observe and ObserveWhatIf, when set, watch every event of the
	// replay with the recorded settings and of the one with WhatIf (a
	// chart keeps their state over the events this way).
	Observe, ObserveWhatIf func(alloc.Observation)
}

// Analysis is a snapshot's trace replayed with the allocator settings it
// recorded and with another, and the replay set against the recording's
// own segments: whether the simulator reproduces what PyTorch did is what
// makes its answers about the rest worth reading.
type Analysis struct {
	// Config is the recorded allocator configuration, parsed.
	Config alloc.Config
	// Conv is the trace replayed and the state it started from.
	Conv *Conversion
	// Timeline is the replay with Config, WhatIfTimeline the one with
	// WhatIfConf.
	Timeline, WhatIfTimeline *alloc.Timeline
	WhatIfConf               string
	// FromState is true when the replay starts from the allocator's state
	// rebuilt at the first recorded entry, false when that state could
	// not be rebuilt and the replay starts from an empty allocator (the
	// first warning says why).
	FromState bool
	// MaxFragmentation is the most reserved but unallocated memory over
	// the replay; Fragmentation is the worst point of each tenth of it.
	MaxFragmentation int64
	Fragmentation    []FragPoint
	// The recording's own figures: the segments it allocated, what it
	// held reserved at its start, at its peak and at the snapshot, and the
	// blocks live at its start.
	RecordedSegmentAllocs int
	StartReserved         int64
	RecordedPeakReserved  int64
	RecordedReserved      int64
	StartLiveBlocks       int
	// Agrees: the replay allocated as many segments as the recording, and
	// its peak and final reserved are within 0.5 % of the recording's.
	Agrees bool
	// TopSites are the allocation sites holding most at the replay's
	// allocated peak.
	TopSites []SiteBytes
	Warnings []string
}

// FragPoint is the allocator's state after one event of a replay.
type FragPoint struct {
	Event               int
	Allocated, Reserved int64
}

// SiteBytes is the requested bytes one allocation site holds live.
type SiteBytes struct {
	Site  string
	Bytes int64
}

// WhatIfConfError is Analyze's error for an AnalyzeOptions.WhatIf that
// does not parse: unlike the others it is the caller's input at fault,
// not the snapshot.
type WhatIfConfError struct {
	Conf string
	Err  error
}

func (e *WhatIfConfError) Error() string {
	return fmt.Sprintf("allocator configuration %q: %v", e.Conf, e.Err)
}

func (e *WhatIfConfError) Unwrap() error { return e.Err }

// replayTolerance is how far a replay's reserved bytes may be from the
// recording's and still agree.
const replayTolerance = 0.005

// Analyze replays o.Device's trace of snap (read from name, which errors
// name) with the recorded allocator settings and with o.WhatIf.
func Analyze(ctx context.Context, snap *Snapshot, name string, o AnalyzeOptions) (*Analysis, error) {
	recordedConf := snap.AllocatorSettings.AllocConf
	cfg, err := alloc.ParseConfig(recordedConf)
	if err != nil {
		return nil, fmt.Errorf("%s: the recorded PYTORCH_CUDA_ALLOC_CONF %q: %w", name, recordedConf, err)
	}
	device := o.Device
	// A recording usually starts mid-run (the trace is a ring buffer):
	// the replay starts from the allocator's state at its first entry.
	fromState := true
	var fallback string
	conv, err := snap.ConvertFromState(device, cfg)
	if err != nil {
		fallback = fmt.Sprintf("the allocator's state at the first recorded entry could not be rebuilt (%v): replayed from an empty allocator, with the blocks allocated before the recording allocated first", err)
		fromState = false
		if conv, err = snap.Convert(device); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	wcfg, err := alloc.ParseConfig(o.WhatIf)
	if err != nil {
		return nil, &WhatIfConfError{Conf: o.WhatIf, Err: err}
	}
	an := &Analysis{Config: cfg, Conv: conv, WhatIfConf: o.WhatIf, FromState: fromState}
	opts := alloc.ReplayOptions{Record: true, Initial: conv.Initial, Observe: o.Observe}
	wopts := alloc.ReplayOptions{Initial: conv.Initial, Observe: o.ObserveWhatIf}
	// The snapshot does not record the device's size; replay on an
	// unbounded one, since the program ran (or its OOM is a marker).
	dev := alloc.Device{Capacity: 1 << 50, Total: 1 << 50}
	tl, err := alloc.ReplayContext(ctx, conv.Trace, cfg, dev, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: replaying: %w", name, err)
	}
	wtl, err := alloc.ReplayContext(ctx, conv.Trace, wcfg, dev, wopts)
	if err != nil {
		return nil, fmt.Errorf("%s: replaying with %s: %w", name, o.WhatIf, err)
	}
	an.Timeline, an.WhatIfTimeline = tl, wtl
	an.Warnings = conv.Warnings
	if fallback != "" {
		an.Warnings = append([]string{fallback}, an.Warnings...)
	}
	for _, s := range tl.Samples {
		an.MaxFragmentation = max(an.MaxFragmentation, s.Reserved-s.Allocated)
	}
	// Ten points spread over the replay, each the worst fragmentation in
	// its stretch of events.
	if n := len(tl.Samples); n > 0 {
		points := min(10, n)
		for p := 0; p < points; p++ {
			lo, hi := p*n/points, (p+1)*n/points
			best := tl.Samples[lo]
			for _, s := range tl.Samples[lo:hi] {
				if s.Reserved-s.Allocated > best.Reserved-best.Allocated {
					best = s
				}
			}
			an.Fragmentation = append(an.Fragmentation, FragPoint{best.Event, best.Allocated, best.Reserved})
		}
	}
	for _, e := range conv.Segments {
		if e.Action == "segment_alloc" || e.Action == "segment_map" {
			an.RecordedSegmentAllocs++
		}
	}
	for _, s := range snap.Segments {
		if s.Device == device {
			an.RecordedReserved += s.TotalSize
		}
	}
	var recEnd int64
	an.StartReserved, an.RecordedPeakReserved, recEnd = conv.RecordedReserved()
	if !fromState {
		// Without the starting state, the recording's own peak is only
		// known relative to it: the snapshot's end is the best bound.
		an.RecordedPeakReserved = max(an.RecordedPeakReserved-recEnd+an.RecordedReserved, an.RecordedReserved)
	}
	for _, g := range conv.Initial {
		an.StartLiveBlocks += len(g.Blocks)
	}
	an.Agrees = int64(an.RecordedSegmentAllocs) == tl.Final.NumDeviceAlloc &&
		agreeWithin(tl.Final.Reserved, an.RecordedReserved, replayTolerance) &&
		agreeWithin(tl.PeakReserved, an.RecordedPeakReserved, replayTolerance)
	an.TopSites = sitesAtPeak(conv, tl.PeakAllocatedEvent, o.Top)
	return an, nil
}

// agreeWithin reports whether got is within frac of want.
func agreeWithin(got, want int64, frac float64) bool {
	d := float64(got - want)
	return d <= frac*float64(want) && -d <= frac*float64(want)
}

// sitesAtPeak sums the requested bytes live at event peak (-1: the
// starting state) by site.
func sitesAtPeak(conv *Conversion, peak, top int) []SiteBytes {
	tr := conv.Trace
	live := map[int64]trace.Event{}
	for _, g := range conv.Initial {
		for _, b := range g.Blocks {
			live[b.ID] = trace.Event{Action: trace.Alloc, ID: b.ID, Size: b.Requested, Site: conv.InitialSites[b.ID]}
		}
	}
	if peak < 0 && len(live) == 0 {
		return nil
	}
	for i := 0; i <= peak && i < len(tr.Events); i++ {
		e := tr.Events[i]
		switch e.Action {
		case trace.Alloc:
			live[e.ID] = e
		case trace.Free:
			delete(live, e.ID)
		}
	}
	by := map[string]int64{}
	for _, e := range live {
		name := tr.SiteName(e.Site)
		if name == "" {
			name = "unknown"
		}
		by[name] += e.Size
	}
	var out []SiteBytes
	for s, n := range by {
		out = append(out, SiteBytes{s, n})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Bytes > out[j].Bytes || out[i].Bytes == out[j].Bytes && out[i].Site < out[j].Site
	})
	if len(out) > top {
		out = out[:top]
	}
	return out
}
