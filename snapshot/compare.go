package snapshot

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/trace"
)

// Prediction is what ComparePrediction needs of a prediction: its trace,
// and whether the job is inference. It is not predict.Result so that this
// package stays below predict.
type Prediction struct {
	Trace *trace.Trace
	// Inference: the job has no backward or optimizer step, so the whole
	// recording is taken as forward.
	Inference bool
}

// Comparison sets a prediction beside a recording: where the memory the
// prediction lacks or adds goes, which is what tells a wrong estimate's
// cause from its size.
type Comparison struct {
	// PhasesFrom says how the recording's phases were found: "stack
	// frames", "allocation pattern", or "job" (an inference job: all
	// forward); PhasesHow explains it in a sentence.
	PhasesFrom, PhasesHow string
	// Overall compares the peaks over the whole recording and the whole
	// prediction; Phases per step phase, in StepPhases' order.
	Overall PhaseComparison
	Phases  []PhaseComparison
	// SizeClasses compares the blocks live at each side's allocated peak
	// by size class; Sizes lists the request sizes whose live bytes at
	// the peaks differ most.
	SizeClasses []SizeClassComparison
	Sizes       []SizeDiff
	// PredictedSites are the prediction's allocation sites at its peak,
	// and PredictedCategories what its blocks hold there, most first.
	PredictedSites      []SiteBytes
	PredictedCategories []CategoryBytes
}

// PhaseComparison is one phase's peaks, recorded and predicted; the
// differences are predicted minus recorded. InRecording is false for a
// phase the recording does not show (its recorded figures and the
// differences are then 0).
type PhaseComparison struct {
	Phase                                         string
	InRecording                                   bool
	RecordedEvents                                int
	RecordedPeakAllocated, RecordedPeakReserved   int64
	PredictedPeakAllocated, PredictedPeakReserved int64
	AllocatedDiff, ReservedDiff                   int64
}

// SizeClassComparison counts the blocks live at each side's allocated
// peak whose requested size is in Class.
type SizeClassComparison struct {
	Class                           SizeClass
	RecordedBlocks, PredictedBlocks int
	RecordedBytes, PredictedBytes   int64
	Diff                            int64
}

// SizeDiff is one request size live at the peaks.
type SizeDiff struct {
	Size                            int64
	RecordedBlocks, PredictedBlocks int
	Diff                            int64
}

// CategoryBytes is what the prediction's blocks of one category hold at
// its peak.
type CategoryBytes struct {
	Category trace.Category
	Bytes    int64
}

// ComparePrediction replays the prediction's trace with the recorded
// allocator settings and sets it beside the recording analysed in an;
// snap and device are the snapshot and device an was made from, top how
// many request sizes and sites to list.
func ComparePrediction(an *Analysis, snap *Snapshot, device int, pred Prediction, top int) (*Comparison, error) {
	tr := pred.Trace
	if tr == nil {
		return nil, errors.New("the prediction kept no trace")
	}
	conv := an.Conv
	out := &Comparison{}
	// The prediction per phase, from a replay that watches every event.
	var pa, pr [trace.NumPhases]int64
	seen := [trace.NumPhases]bool{}
	obs := func(o alloc.Observation) {
		p := o.E.Phase
		if int(p) < trace.NumPhases {
			pa[p], pr[p], seen[p] = max(pa[p], o.Allocated), max(pr[p], o.Reserved), true
		}
	}
	// On an unbounded device, as the recording is replayed: the run
	// that was recorded ran, so the question is where the memory went,
	// not whether the job fits.
	dev := alloc.Device{Capacity: 1 << 50, Total: 1 << 50}
	ptl, err := alloc.Replay(tr, an.Config, dev, alloc.ReplayOptions{Observe: obs})
	if err != nil {
		return nil, fmt.Errorf("replaying the prediction: %w", err)
	}

	// The recording per phase, from its replay's samples.
	tl := an.Timeline
	ranges, from, how := RecordingPhases(snap, device, conv)
	if pred.Inference {
		// Inference has no backward or optimizer step to find.
		ranges = []PhaseRange{{Phase: PhaseForward, Start: 0, End: len(conv.Trace.Events)}}
		from, how = "job", "the job predicted is inference, so the whole recording is taken as forward"
	}
	out.PhasesFrom, out.PhasesHow = from, how
	var ra, rr [3]int64
	var rn [3]int
	for _, r := range ranges {
		for i := r.Start; i < r.End && i < len(tl.Samples); i++ {
			s := tl.Samples[i]
			ra[r.Phase], rr[r.Phase] = max(ra[r.Phase], s.Allocated), max(rr[r.Phase], s.Reserved)
			rn[r.Phase]++
		}
	}
	out.Overall = PhaseComparison{Phase: "all", InRecording: true, RecordedEvents: len(conv.Trace.Events),
		RecordedPeakAllocated: tl.PeakAllocated, RecordedPeakReserved: an.RecordedPeakReserved,
		PredictedPeakAllocated: ptl.PeakAllocated, PredictedPeakReserved: ptl.PeakReserved}
	out.Overall.AllocatedDiff = out.Overall.PredictedPeakAllocated - out.Overall.RecordedPeakAllocated
	out.Overall.ReservedDiff = out.Overall.PredictedPeakReserved - out.Overall.RecordedPeakReserved
	for k, cp := range StepPhases {
		pc := PhaseComparison{Phase: cp.Name, InRecording: rn[k] > 0, RecordedEvents: rn[k],
			RecordedPeakAllocated: ra[k], RecordedPeakReserved: rr[k]}
		for _, p := range cp.Phases {
			if seen[p] {
				pc.PredictedPeakAllocated = max(pc.PredictedPeakAllocated, pa[p])
				pc.PredictedPeakReserved = max(pc.PredictedPeakReserved, pr[p])
			}
		}
		if pc.InRecording {
			pc.AllocatedDiff = pc.PredictedPeakAllocated - pc.RecordedPeakAllocated
			pc.ReservedDiff = pc.PredictedPeakReserved - pc.RecordedPeakReserved
		}
		out.Phases = append(out.Phases, pc)
	}

	// What is live at each side's allocated peak, by requested size.
	recLive := liveAt(conv.Trace, conv.Initial, tl.PeakAllocatedEvent)
	predLive := liveAt(tr, nil, ptl.PeakAllocatedEvent)
	for _, c := range SizeClasses {
		sc := SizeClassComparison{Class: c}
		in := c.Contains
		for _, e := range recLive {
			if in(e.Size) {
				sc.RecordedBlocks++
				sc.RecordedBytes += e.Size
			}
		}
		for _, e := range predLive {
			if in(e.Size) {
				sc.PredictedBlocks++
				sc.PredictedBytes += e.Size
			}
		}
		sc.Diff = sc.PredictedBytes - sc.RecordedBytes
		out.SizeClasses = append(out.SizeClasses, sc)
	}
	bySize := map[int64]*SizeDiff{}
	get := func(n int64) *SizeDiff {
		if d, ok := bySize[n]; ok {
			return d
		}
		d := &SizeDiff{Size: n}
		bySize[n] = d
		return d
	}
	for _, e := range recLive {
		get(e.Size).RecordedBlocks++
	}
	for _, e := range predLive {
		get(e.Size).PredictedBlocks++
	}
	for _, d := range bySize {
		d.Diff = int64(d.PredictedBlocks-d.RecordedBlocks) * d.Size
		if d.Diff != 0 {
			out.Sizes = append(out.Sizes, *d)
		}
	}
	slices.SortFunc(out.Sizes, func(x, y SizeDiff) int {
		if c := cmp.Compare(abs64(y.Diff), abs64(x.Diff)); c != 0 {
			return c
		}
		return cmp.Compare(x.Size, y.Size)
	})
	if len(out.Sizes) > top {
		out.Sizes = out.Sizes[:top]
	}

	out.PredictedSites = topSites(tr, predLive, top)
	for _, c := range trace.Categories() {
		if n := ptl.RequestedAtPeak[c]; n > 0 {
			out.PredictedCategories = append(out.PredictedCategories, CategoryBytes{c, n})
		}
	}
	slices.SortStableFunc(out.PredictedCategories, func(x, y CategoryBytes) int { return cmp.Compare(y.Bytes, x.Bytes) })
	return out, nil
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// liveAt returns the blocks live after event peak (-1: at the start),
// with the blocks of initial live from the start.
func liveAt(tr *trace.Trace, initial []alloc.Segment, peak int) map[int64]trace.Event {
	live := map[int64]trace.Event{}
	for _, g := range initial {
		for _, b := range g.Blocks {
			live[b.ID] = trace.Event{Action: trace.Alloc, ID: b.ID, Size: b.Requested, Site: -1}
		}
	}
	for i := 0; i <= peak && i < tr.Len(); i++ {
		e := tr.At(i)
		switch e.Action {
		case trace.Alloc:
			live[e.ID] = e
		case trace.Free:
			delete(live, e.ID)
		}
	}
	return live
}

// topSites sums live bytes by site.
func topSites(tr *trace.Trace, live map[int64]trace.Event, top int) []SiteBytes {
	by := map[string]int64{}
	for _, e := range live {
		name := ""
		if e.Site >= 0 {
			name = tr.SiteName(e.Site)
		}
		if name == "" {
			name = "unknown"
		}
		by[name] += e.Size
	}
	var out []SiteBytes
	for s, n := range by {
		out = append(out, SiteBytes{s, n})
	}
	slices.SortFunc(out, func(x, y SiteBytes) int {
		if c := cmp.Compare(y.Bytes, x.Bytes); c != 0 {
			return c
		}
		return cmp.Compare(x.Site, y.Site)
	})
	if len(out) > top {
		out = out[:top]
	}
	return out
}
