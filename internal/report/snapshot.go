package report

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/batchfit/batchfit/snapshot"
)

// SnapshotJSON is the stable JSON form of a snapshot replay.
type SnapshotJSON struct {
	File                  string `json:"file"`
	Events                int    `json:"events"`
	AllocConf             string `json:"alloc_conf"`
	PeakAllocatedBytes    int64  `json:"peak_allocated_bytes"`
	PeakReservedBytes     int64  `json:"peak_reserved_bytes"`
	MaxFragmentationBytes int64  `json:"max_reserved_unallocated_bytes"`
	// ReplayFrom is "recorded state" when the replay starts from the
	// allocator's state rebuilt at the first recorded entry, "empty" when
	// that state could not be rebuilt (see Warnings).
	ReplayFrom                string `json:"replay_from"`
	StartReservedBytes        int64  `json:"recorded_start_reserved_bytes"`
	StartLiveBlocks           int    `json:"start_live_blocks"`
	RecordedSegmentAllocs     int    `json:"recorded_segment_allocs"`
	ReplaySegmentAllocs       int64  `json:"replay_segment_allocs"`
	RecordedPeakReservedBytes int64  `json:"recorded_peak_reserved_bytes"`
	RecordedReservedBytes     int64  `json:"recorded_reserved_bytes"`
	ReplayReservedBytes       int64  `json:"replay_reserved_bytes"`
	// ReplayAgrees: the same segment allocations, and peak and final
	// reserved within 0.5 %.
	ReplayAgrees        bool       `json:"replay_agrees"`
	WhatIfConf          string     `json:"what_if_alloc_conf"`
	WhatIfReservedBytes int64      `json:"what_if_peak_reserved_bytes"`
	TopSites            []SiteJSON `json:"top_sites"`
	Fragmentation       []FragJSON `json:"fragmentation_over_time"`
	Warnings            []string   `json:"warnings,omitempty"`
	// Prediction sets batchfit's prediction beside the recording (with
	// --model).
	Prediction *SnapshotPredictionJSON `json:"prediction,omitempty"`
}

// FragJSON is the allocator state at one point of the replay.
type FragJSON struct {
	Event                    int   `json:"event"`
	AllocatedBytes           int64 `json:"allocated_bytes"`
	ReservedBytes            int64 `json:"reserved_bytes"`
	ReservedUnallocatedBytes int64 `json:"reserved_unallocated_bytes"`
}

// SiteJSON is one allocation site's live bytes at the peak.
type SiteJSON struct {
	Site  string `json:"site"`
	Bytes int64  `json:"bytes"`
}

// siteJSON is sites in their JSON form (nil for none, as the analysis
// gives them).
func siteJSON(sites []snapshot.SiteBytes) []SiteJSON {
	var out []SiteJSON
	for _, s := range sites {
		out = append(out, SiteJSON{s.Site, s.Bytes})
	}
	return out
}

func signed(n int64) string {
	if n < 0 {
		return "−" + FormatBytes(-n)
	}
	return "+" + FormatBytes(n)
}

// replayFromState is SnapshotJSON.ReplayFrom for a replay from the
// rebuilt state.
const replayFromState = "recorded state"

// NewSnapshot is the view of a, the analysis of snap (read from name) with
// its recorded allocator settings and with whatIf.
func NewSnapshot(a *snapshot.Analysis, snap *snapshot.Snapshot, name, whatIf string) SnapshotJSON {
	tl, wtl := a.Timeline, a.WhatIfTimeline
	from := replayFromState
	if !a.FromState {
		from = "empty"
	}
	out := SnapshotJSON{File: name, Events: len(a.Conv.Trace.Events), AllocConf: snap.AllocatorSettings.AllocConf,
		PeakAllocatedBytes: tl.PeakAllocated, PeakReservedBytes: tl.PeakReserved, MaxFragmentationBytes: a.MaxFragmentation,
		ReplayFrom: from, StartReservedBytes: a.StartReserved, StartLiveBlocks: a.StartLiveBlocks,
		RecordedSegmentAllocs: a.RecordedSegmentAllocs, ReplaySegmentAllocs: tl.Final.NumDeviceAlloc,
		RecordedPeakReservedBytes: a.RecordedPeakReserved, RecordedReservedBytes: a.RecordedReserved,
		ReplayReservedBytes: tl.Final.Reserved, ReplayAgrees: a.Agrees,
		WhatIfConf: whatIf, WhatIfReservedBytes: wtl.PeakReserved, TopSites: siteJSON(a.TopSites), Warnings: a.Warnings}
	for _, f := range a.Fragmentation {
		out.Fragmentation = append(out.Fragmentation, FragJSON{f.Event, f.Allocated, f.Reserved, f.Reserved - f.Allocated})
	}
	return out
}

// WriteSnapshot prints a snapshot's replay, and the prediction beside it
// when there is one, as text.
func WriteSnapshot(w io.Writer, out *SnapshotJSON) {
	fmt.Fprintf(w, "%s: %d events replayed (PYTORCH_CUDA_ALLOC_CONF=%q)\n\n", out.File, out.Events, out.AllocConf)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peak allocated\t%s\t\n", FormatBytes(out.PeakAllocatedBytes))
	fmt.Fprintf(tw, "peak reserved\t%s\t\n", FormatBytes(out.PeakReservedBytes))
	fmt.Fprintf(tw, "most reserved but unallocated\t%s\t(fragmentation)\n", FormatBytes(out.MaxFragmentationBytes))
	fmt.Fprintf(tw, "with %s\t%s\tpeak reserved (%s)\n", out.WhatIfConf, FormatBytes(out.WhatIfReservedBytes), signed(out.WhatIfReservedBytes-out.PeakReservedBytes))
	tw.Flush()
	if out.ReplayFrom == replayFromState {
		fmt.Fprintf(w, "\nreplay against the snapshot's own record (from the state rebuilt at the first recorded entry: %s reserved, %d blocks live):\n",
			FormatBytes(out.StartReservedBytes), out.StartLiveBlocks)
	} else {
		fmt.Fprintln(w, "\nreplay against the snapshot's own record (from an empty allocator):")
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  segments allocated\trecorded %d\treplayed %d\t\n", out.RecordedSegmentAllocs, out.ReplaySegmentAllocs)
	fmt.Fprintf(tw, "  peak reserved\trecorded %s\treplayed %s\t\n", FormatBytes(out.RecordedPeakReservedBytes), FormatBytes(out.PeakReservedBytes))
	fmt.Fprintf(tw, "  reserved at the end\trecorded %s\treplayed %s\t\n", FormatBytes(out.RecordedReservedBytes), FormatBytes(out.ReplayReservedBytes))
	tw.Flush()
	if out.ReplayAgrees {
		fmt.Fprintln(w, "  they agree")
	} else {
		fmt.Fprintln(w, "  they disagree: another allocator setting may have been in force, or the recording is inconsistent (see the warnings)")
	}
	if len(out.Fragmentation) > 0 {
		fmt.Fprintln(w, "\nfragmentation over the replay (worst point of each tenth):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  event\tallocated\treserved\treserved but unallocated\t")
		for _, f := range out.Fragmentation {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t\n", f.Event, FormatBytes(f.AllocatedBytes), FormatBytes(f.ReservedBytes), FormatBytes(f.ReservedUnallocatedBytes))
		}
		tw.Flush()
	}
	if len(out.TopSites) > 0 {
		fmt.Fprintln(w, "\nlargest allocation sites at the peak:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, s := range out.TopSites {
			fmt.Fprintf(tw, "  %s\t%s\n", FormatBytes(s.Bytes), s.Site)
		}
		tw.Flush()
	}
	for _, warn := range out.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	if out.Prediction != nil {
		writePrediction(w, out.Prediction)
	}
}
