package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
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

// ComparePrediction sets the prediction res beside the recording
// analysed in a, whose view is rec (snapshot.ComparePrediction), in its
// JSON form.
func ComparePrediction(a *snapshot.Analysis, rec *SnapshotJSON, snap *snapshot.Snapshot, device int, res *predict.Result, top int) (*SnapshotPredictionJSON, error) {
	c, err := snapshot.ComparePrediction(a, snap, device, snapshot.Prediction{Trace: res.Trace, Inference: res.Infer != nil}, top)
	if err != nil {
		return nil, err
	}
	out := &SnapshotPredictionJSON{Model: res.Model, Setup: SetupLine(res), PhasesFrom: c.PhasesFrom, PhasesHow: c.PhasesHow,
		Overall: phaseCompareJSON(c.Overall)}
	for _, p := range c.Phases {
		out.Phases = append(out.Phases, phaseCompareJSON(p))
	}
	for _, sc := range c.SizeClasses {
		out.SizeClasses = append(out.SizeClasses, SizeClassJSON{Class: sc.Class.Name, MinBytes: sc.Class.Min, MaxBytes: sc.Class.Max,
			RecordedBlocks: sc.RecordedBlocks, RecordedBytes: sc.RecordedBytes, PredictedBlocks: sc.PredictedBlocks,
			PredictedBytes: sc.PredictedBytes, DiffBytes: sc.Diff})
	}
	for _, d := range c.Sizes {
		out.Sizes = append(out.Sizes, SizeDiffJSON{SizeBytes: d.Size, RecordedBlocks: d.RecordedBlocks, PredictedBlocks: d.PredictedBlocks, DiffBytes: d.Diff})
	}
	out.RecordedSites = rec.TopSites
	out.PredictedSites = siteJSON(c.PredictedSites)
	for _, pc := range c.PredictedCategories {
		out.PredictedCategories = append(out.PredictedCategories, CategoryJSON{pc.Category.String(), pc.Bytes})
	}

	if rec.StartLiveBlocks > 0 || rec.StartReservedBytes > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("the recording starts mid-run, with %s reserved and %d blocks live at its first entry; the prediction starts from an empty device and simulates %d step(s)",
			FormatBytes(rec.StartReservedBytes), rec.StartLiveBlocks, max(res.Setup.Steps, 1)))
	}
	if !out.Phases[1].InRecording && !out.Phases[2].InRecording {
		out.Notes = append(out.Notes, "the recording shows no backward or optimizer step: compare its forward with the prediction's")
	}
	out.Notes = append(out.Notes, "the recording's phases are estimated ("+c.PhasesHow+"); sizes are requested bytes, live at each side's highest allocated point")
	return out, nil
}

func phaseCompareJSON(p snapshot.PhaseComparison) PhaseCompareJSON {
	return PhaseCompareJSON{Phase: p.Phase, InRecording: p.InRecording, RecordedEvents: p.RecordedEvents,
		RecordedPeakAllocatedBytes: p.RecordedPeakAllocated, RecordedPeakReservedBytes: p.RecordedPeakReserved,
		PredictedPeakAllocatedBytes: p.PredictedPeakAllocated, PredictedPeakReservedBytes: p.PredictedPeakReserved,
		AllocatedDiffBytes: p.AllocatedDiff, ReservedDiffBytes: p.ReservedDiff}
}

// writePrediction prints the comparison.
func writePrediction(w io.Writer, p *SnapshotPredictionJSON) {
	// The setup line starts with the model's name (see SetupLine).
	fmt.Fprintf(w, "\nprediction beside the recording: %s\n", p.Setup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  phase\trecorded allocated\tpredicted\tdifference\trecorded reserved\tpredicted\tdifference\t")
	row := func(c PhaseCompareJSON) {
		if !c.InRecording {
			fmt.Fprintf(tw, "  %s\tnot recorded\t%s\t\tnot recorded\t%s\t\t\n", c.Phase, FormatBytes(c.PredictedPeakAllocatedBytes), FormatBytes(c.PredictedPeakReservedBytes))
			return
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", c.Phase,
			FormatBytes(c.RecordedPeakAllocatedBytes), FormatBytes(c.PredictedPeakAllocatedBytes), signedPct(c.AllocatedDiffBytes, c.RecordedPeakAllocatedBytes),
			FormatBytes(c.RecordedPeakReservedBytes), FormatBytes(c.PredictedPeakReservedBytes), signedPct(c.ReservedDiffBytes, c.RecordedPeakReservedBytes))
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
		fmt.Fprintf(tw, "  %s\t%s in %d\t%s in %d\t%s\t\n", c.Class, FormatBytes(c.RecordedBytes), c.RecordedBlocks, FormatBytes(c.PredictedBytes), c.PredictedBlocks, signed(c.DiffBytes))
	}
	tw.Flush()
	if len(p.Sizes) > 0 {
		fmt.Fprintln(w, "\nrequest sizes that differ most at the peaks:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, d := range p.Sizes {
			fmt.Fprintf(tw, "  %s\trecorded %d\tpredicted %d\t%s\t\n", FormatBytes(d.SizeBytes), d.RecordedBlocks, d.PredictedBlocks, signed(d.DiffBytes))
		}
		tw.Flush()
	}
	fmt.Fprintln(w, "\nat the peaks, the recording by allocation site and the prediction by what it holds:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i := 0; i < max(len(p.RecordedSites), len(p.PredictedCategories)); i++ {
		l, r := "\t", "\t"
		if i < len(p.RecordedSites) {
			l = FormatBytes(p.RecordedSites[i].Bytes) + "\t" + p.RecordedSites[i].Site
		}
		if i < len(p.PredictedCategories) {
			r = FormatBytes(p.PredictedCategories[i].Bytes) + "\t" + p.PredictedCategories[i].Category
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
