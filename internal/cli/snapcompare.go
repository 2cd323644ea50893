package cli

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/trace"
)

// SnapshotPredictionJSON sets a prediction beside a recording (snapshot
// --model): where the memory the prediction lacks or adds goes.
type SnapshotPredictionJSON struct {
	Model string `json:"model"`
	Setup string `json:"setup"`
	// PhasesFrom says how the recording's phases were found: "stack
	// frames", "allocation pattern", or "job" (an inference job: all
	// forward).
	PhasesFrom string `json:"recording_phases_from"`
	// PhasesHow explains it in a sentence.
	PhasesHow string `json:"recording_phases_how"`
	// Overall compares the peaks over the whole recording and the whole
	// prediction.
	Overall PhaseCompareJSON   `json:"overall"`
	Phases  []PhaseCompareJSON `json:"phases"`
	// SizeClasses compares the blocks live at each side's allocated peak
	// by size class; Sizes lists the request sizes whose live bytes at
	// the peaks differ most.
	SizeClasses []SizeClassJSON `json:"size_classes"`
	Sizes       []SizeDiffJSON  `json:"sizes"`
	// RecordedSites are the recording's allocation sites at its peak
	// (innermost frame outside torch, "unknown" without frames);
	// PredictedSites the prediction's, and PredictedCategories what its
	// blocks hold at its peak.
	RecordedSites       []SiteJSON     `json:"recorded_sites"`
	PredictedSites      []SiteJSON     `json:"predicted_sites"`
	PredictedCategories []CategoryJSON `json:"predicted_categories"`
	Notes               []string       `json:"notes"`
}

// PhaseCompareJSON is one phase's peaks, recorded and predicted; Diff is
// predicted minus recorded. InRecording is false for a phase the
// recording does not show (its recorded figures are then 0).
type PhaseCompareJSON struct {
	Phase                       string `json:"phase"`
	InRecording                 bool   `json:"in_recording"`
	RecordedEvents              int    `json:"recorded_events"`
	RecordedPeakAllocatedBytes  int64  `json:"recorded_peak_allocated_bytes"`
	RecordedPeakReservedBytes   int64  `json:"recorded_peak_reserved_bytes"`
	PredictedPeakAllocatedBytes int64  `json:"predicted_peak_allocated_bytes"`
	PredictedPeakReservedBytes  int64  `json:"predicted_peak_reserved_bytes"`
	AllocatedDiffBytes          int64  `json:"allocated_diff_bytes"`
	ReservedDiffBytes           int64  `json:"reserved_diff_bytes"`
}

// SizeClassJSON counts the blocks live at each side's allocated peak
// whose requested size is in [MinBytes, MaxBytes) (MaxBytes 0: no bound).
type SizeClassJSON struct {
	Class           string `json:"class"`
	MinBytes        int64  `json:"min_bytes"`
	MaxBytes        int64  `json:"max_bytes"`
	RecordedBlocks  int    `json:"recorded_blocks"`
	RecordedBytes   int64  `json:"recorded_bytes"`
	PredictedBlocks int    `json:"predicted_blocks"`
	PredictedBytes  int64  `json:"predicted_bytes"`
	DiffBytes       int64  `json:"diff_bytes"`
}

// SizeDiffJSON is one request size live at the peaks.
type SizeDiffJSON struct {
	SizeBytes       int64 `json:"size_bytes"`
	RecordedBlocks  int   `json:"recorded_blocks"`
	PredictedBlocks int   `json:"predicted_blocks"`
	DiffBytes       int64 `json:"diff_bytes"`
}

// CategoryJSON is what the prediction's blocks hold at its peak.
type CategoryJSON struct {
	Category string `json:"category"`
	Bytes    int64  `json:"bytes"`
}

// comparePrediction replays the prediction's trace and sets it beside the
// recording analysed in an.
func comparePrediction(an *snapshotAnalysis, snap *snapshot.Snapshot, device int, conv *snapshot.Conversion, res *predict.Result, top int) (*SnapshotPredictionJSON, error) {
	tr := res.Trace
	if tr == nil {
		return nil, fmt.Errorf("the prediction kept no trace")
	}
	out := &SnapshotPredictionJSON{Model: res.Model, Setup: setupLine(res)}
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
	ptl, err := alloc.Replay(tr, an.cfg, dev, alloc.ReplayOptions{Observe: obs})
	if err != nil {
		return nil, fmt.Errorf("replaying the prediction: %w", err)
	}

	// The recording per phase, from its replay's samples.
	tl := an.tl
	ranges, from, how := snapshot.RecordingPhases(snap, device, conv)
	if res.Infer != nil {
		// Inference has no backward or optimizer step to find.
		ranges = []snapshot.PhaseRange{{Phase: snapshot.PhaseForward, Start: 0, End: len(conv.Trace.Events)}}
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
	out.Overall = PhaseCompareJSON{Phase: "all", InRecording: true, RecordedEvents: len(conv.Trace.Events),
		RecordedPeakAllocatedBytes: tl.PeakAllocated, RecordedPeakReservedBytes: an.out.RecordedPeakReservedBytes,
		PredictedPeakAllocatedBytes: ptl.PeakAllocated, PredictedPeakReservedBytes: ptl.PeakReserved}
	out.Overall.AllocatedDiffBytes = out.Overall.PredictedPeakAllocatedBytes - out.Overall.RecordedPeakAllocatedBytes
	out.Overall.ReservedDiffBytes = out.Overall.PredictedPeakReservedBytes - out.Overall.RecordedPeakReservedBytes
	for k, cp := range snapshot.StepPhases {
		pc := PhaseCompareJSON{Phase: cp.Name, InRecording: rn[k] > 0, RecordedEvents: rn[k],
			RecordedPeakAllocatedBytes: ra[k], RecordedPeakReservedBytes: rr[k]}
		for _, p := range cp.Phases {
			if seen[p] {
				pc.PredictedPeakAllocatedBytes = max(pc.PredictedPeakAllocatedBytes, pa[p])
				pc.PredictedPeakReservedBytes = max(pc.PredictedPeakReservedBytes, pr[p])
			}
		}
		if pc.InRecording {
			pc.AllocatedDiffBytes = pc.PredictedPeakAllocatedBytes - pc.RecordedPeakAllocatedBytes
			pc.ReservedDiffBytes = pc.PredictedPeakReservedBytes - pc.RecordedPeakReservedBytes
		}
		out.Phases = append(out.Phases, pc)
	}

	// What is live at each side's allocated peak, by requested size.
	recLive := liveAt(conv.Trace, conv.Initial, tl.PeakAllocatedEvent)
	predLive := liveAt(tr, nil, ptl.PeakAllocatedEvent)
	for _, c := range snapshot.SizeClasses {
		sc := SizeClassJSON{Class: c.Name, MinBytes: c.Min, MaxBytes: c.Max}
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
		sc.DiffBytes = sc.PredictedBytes - sc.RecordedBytes
		out.SizeClasses = append(out.SizeClasses, sc)
	}
	bySize := map[int64]*SizeDiffJSON{}
	get := func(n int64) *SizeDiffJSON {
		if d, ok := bySize[n]; ok {
			return d
		}
		d := &SizeDiffJSON{SizeBytes: n}
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
		d.DiffBytes = int64(d.PredictedBlocks-d.RecordedBlocks) * d.SizeBytes
		if d.DiffBytes != 0 {
			out.Sizes = append(out.Sizes, *d)
		}
	}
	slices.SortFunc(out.Sizes, func(x, y SizeDiffJSON) int {
		if c := cmp.Compare(abs64(y.DiffBytes), abs64(x.DiffBytes)); c != 0 {
			return c
		}
		return cmp.Compare(x.SizeBytes, y.SizeBytes)
	})
	if len(out.Sizes) > top {
		out.Sizes = out.Sizes[:top]
	}

	out.RecordedSites = an.out.TopSites
	out.PredictedSites = topSites(tr, predLive, top)
	for _, c := range trace.Categories() {
		if n := ptl.RequestedAtPeak[c]; n > 0 {
			out.PredictedCategories = append(out.PredictedCategories, CategoryJSON{c.String(), n})
		}
	}
	slices.SortStableFunc(out.PredictedCategories, func(x, y CategoryJSON) int { return cmp.Compare(y.Bytes, x.Bytes) })

	if an.out.StartLiveBlocks > 0 || an.out.StartReservedBytes > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("the recording starts mid-run, with %s reserved and %d blocks live at its first entry; the prediction starts from an empty device and simulates %d step(s)",
			fmtBytes(an.out.StartReservedBytes), an.out.StartLiveBlocks, max(res.Setup.Steps, 1)))
	}
	if !out.Phases[1].InRecording && !out.Phases[2].InRecording {
		out.Notes = append(out.Notes, "the recording shows no backward or optimizer step: compare its forward with the prediction's")
	}
	out.Notes = append(out.Notes, "the recording's phases are estimated ("+how+"); sizes are requested bytes, live at each side's highest allocated point")
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
func topSites(tr *trace.Trace, live map[int64]trace.Event, top int) []SiteJSON {
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
	var out []SiteJSON
	for s, n := range by {
		out = append(out, SiteJSON{s, n})
	}
	slices.SortFunc(out, func(x, y SiteJSON) int {
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

// writePrediction prints the comparison.
func writePrediction(w io.Writer, p *SnapshotPredictionJSON) {
	// The setup line starts with the model's name (see setupLine).
	fmt.Fprintf(w, "\nprediction beside the recording: %s\n", p.Setup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  phase\trecorded allocated\tpredicted\tdifference\trecorded reserved\tpredicted\tdifference\t")
	row := func(c PhaseCompareJSON) {
		if !c.InRecording {
			fmt.Fprintf(tw, "  %s\tnot recorded\t%s\t\tnot recorded\t%s\t\t\n", c.Phase, fmtBytes(c.PredictedPeakAllocatedBytes), fmtBytes(c.PredictedPeakReservedBytes))
			return
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Phase,
			fmtBytes(c.RecordedPeakAllocatedBytes), fmtBytes(c.PredictedPeakAllocatedBytes), signedPct(c.AllocatedDiffBytes, c.RecordedPeakAllocatedBytes),
			fmtBytes(c.RecordedPeakReservedBytes), fmtBytes(c.PredictedPeakReservedBytes), signedPct(c.ReservedDiffBytes, c.RecordedPeakReservedBytes))
	}
	row(p.Overall)
	for _, c := range p.Phases {
		row(c)
	}
	tw.Flush()
	fmt.Fprintf(w, "  (the recording's phases, from %s: %s)\n", phasesFromText[p.PhasesFrom], p.PhasesHow)

	fmt.Fprintln(w, "\nlive at each side's peak, by request size (+: the prediction adds, −: it lacks):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  size\trecorded\tpredicted\tdifference\t")
	for _, c := range p.SizeClasses {
		fmt.Fprintf(tw, "  %s\t%s in %d\t%s in %d\t%s\t\n", c.Class, fmtBytes(c.RecordedBytes), c.RecordedBlocks, fmtBytes(c.PredictedBytes), c.PredictedBlocks, signed(c.DiffBytes))
	}
	tw.Flush()
	if len(p.Sizes) > 0 {
		fmt.Fprintln(w, "\nrequest sizes that differ most at the peaks:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, d := range p.Sizes {
			fmt.Fprintf(tw, "  %s\trecorded %d\tpredicted %d\t%s\t\n", fmtBytes(d.SizeBytes), d.RecordedBlocks, d.PredictedBlocks, signed(d.DiffBytes))
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nat the peaks, the recording by allocation site and the prediction by what it holds:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i < max(len(p.RecordedSites), len(p.PredictedCategories)); i++ {
		l, r := "\t", "\t"
		if i < len(p.RecordedSites) {
			l = fmtBytes(p.RecordedSites[i].Bytes) + "\t" + p.RecordedSites[i].Site
		}
		if i < len(p.PredictedCategories) {
			r = fmtBytes(p.PredictedCategories[i].Bytes) + "\t" + p.PredictedCategories[i].Category
		}
		fmt.Fprintf(tw, "  %s\t%s\t\n", l, r)
	}
	tw.Flush()
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

var phasesFromText = map[string]string{"stack frames": "its stack frames", "allocation pattern": "its allocation pattern", "job": "the job"}

// signedPct is a difference with its share of base.
func signedPct(d, base int64) string {
	if base == 0 {
		return signed(d)
	}
	pct := 100 * float64(d) / float64(base)
	sign := "+"
	if d < 0 {
		sign, pct = "−", -pct
	}
	return fmt.Sprintf("%s (%s%.1f %%)", signed(d), sign, pct)
}
