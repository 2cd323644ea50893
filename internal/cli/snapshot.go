package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
)

const snapshotUsage = `usage: batchfit snapshot FILE [flags]

Reads a torch.cuda.memory._dump_snapshot pickle, replays its recorded
allocations through the allocator simulator, and reports peak allocated and
reserved memory, the largest allocation sites at the peak, fragmentation,
how the replay compares with the segments the snapshot recorded, and what
another PYTORCH_CUDA_ALLOC_CONF would have reserved.

With --model and estimate's flags (--batch, --seq, --precision,
--optimizer, ...), it also sets batchfit's prediction of that job beside
the recording: peak allocated and reserved overall and per phase (forward,
backward, optimizer; the recording's phases are read from its stack frames,
or estimated from its allocation pattern without them), and what the
prediction lacks or adds at the peak, by request size and by the
recording's allocation sites. The prediction uses the recording's
PYTORCH_CUDA_ALLOC_CONF.

Examples:
  batchfit snapshot memory.pickle
  batchfit snapshot memory.pickle --model gpt2 --batch 8 --seq 1024 --optimizer adamw
  batchfit snapshot memory.pickle --alloc-conf expandable_segments:True
  batchfit snapshot memory.pickle --timeline memory.svg
`

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

func runSnapshot(e *env, args []string) error {
	stdout, stderr := e.stdout, e.stderr
	fs := newFlagSet("snapshot", stderr, snapshotUsage)
	whatIf := fs.String("alloc-conf", "expandable_segments:True", "allocator configuration for the what-if replay")
	device := fs.Int("device", 0, "device index whose trace to replay")
	top := fs.Int("top", 10, "allocation sites to list")
	timeline := fs.String("timeline", "", "write allocated and reserved memory over the replay (and reserved under --alloc-conf) to this SVG file")
	asJSON := fs.Bool("json", false, "print JSON")
	// estimate's flags, for --model; the snapshot's own --alloc-conf and
	// --json keep their meaning (the prediction takes the recorded
	// allocator configuration).
	j := jobFlags{e: e, inferOK: true}
	jfs := newFlagSet("snapshot", stderr, snapshotUsage)
	j.register(jfs)
	jfs.VisitAll(func(f *flag.Flag) {
		if fs.Lookup(f.Name) == nil {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if *top < 0 {
		return usagef("--top must not be negative, got %d", *top)
	}
	snap, name := e.snap, e.snapName
	switch {
	case snap != nil && len(pos) > 0:
		return usagef("a snapshot was uploaded and %q named too: give one", pos[0])
	case snap == nil && !e.policy.files:
		return usagef("no snapshot uploaded")
	case snap == nil && len(pos) != 1:
		return usagef("snapshot takes one file, got %d arguments", len(pos))
	case snap == nil:
		name = pos[0]
		if snap, err = snapshot.ReadFile(name, snapshot.Options{Frames: true}); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// said as oom and estimate say it
				return fmt.Errorf("%s: file not found (give a torch.cuda.memory._dump_snapshot pickle)", name)
			}
			return err
		}
	}
	pos = []string{name}
	an, err := analyzeSnapshot(e.context(), snap, name, *device, *whatIf, *top, *timeline != "")
	if err != nil {
		return err
	}
	if *timeline != "" {
		if err := e.writeChart(*timeline, an.chart()); err != nil {
			return err
		}
	}
	// --model, or on the web page a model uploaded beside the snapshot
	if j.Model != "" || e.source != nil {
		p, err := predictBeside(&j, an, snap, *device, *top)
		if err != nil {
			return err
		}
		an.out.Prediction = p
	}
	out, tl, wtl, recordedConf := an.out, an.tl, an.wtl, an.out.AllocConf
	if *asJSON {
		return writeJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "%s: %d events replayed (PYTORCH_CUDA_ALLOC_CONF=%q)\n\n", pos[0], out.Events, recordedConf)
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peak allocated\t%s\t\n", fmtBytes(out.PeakAllocatedBytes))
	fmt.Fprintf(tw, "peak reserved\t%s\t\n", fmtBytes(out.PeakReservedBytes))
	fmt.Fprintf(tw, "most reserved but unallocated\t%s\t(fragmentation)\n", fmtBytes(out.MaxFragmentationBytes))
	fmt.Fprintf(tw, "with %s\t%s\tpeak reserved (%s)\n", *whatIf, fmtBytes(wtl.PeakReserved), signed(wtl.PeakReserved-tl.PeakReserved))
	tw.Flush()
	if out.ReplayFrom == replayFromState {
		fmt.Fprintf(stdout, "\nreplay against the snapshot's own record (from the state rebuilt at the first recorded entry: %s reserved, %d blocks live):\n",
			fmtBytes(out.StartReservedBytes), out.StartLiveBlocks)
	} else {
		fmt.Fprintln(stdout, "\nreplay against the snapshot's own record (from an empty allocator):")
	}
	tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  segments allocated\trecorded %d\treplayed %d\t\n", out.RecordedSegmentAllocs, out.ReplaySegmentAllocs)
	fmt.Fprintf(tw, "  peak reserved\trecorded %s\treplayed %s\t\n", fmtBytes(out.RecordedPeakReservedBytes), fmtBytes(out.PeakReservedBytes))
	fmt.Fprintf(tw, "  reserved at the end\trecorded %s\treplayed %s\t\n", fmtBytes(out.RecordedReservedBytes), fmtBytes(out.ReplayReservedBytes))
	tw.Flush()
	if out.ReplayAgrees {
		fmt.Fprintln(stdout, "  they agree")
	} else {
		fmt.Fprintln(stdout, "  they disagree: another allocator setting may have been in force, or the recording is inconsistent (see the warnings)")
	}
	if len(out.Fragmentation) > 0 {
		fmt.Fprintln(stdout, "\nfragmentation over the replay (worst point of each tenth):")
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  event\tallocated\treserved\treserved but unallocated\t")
		for _, f := range out.Fragmentation {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t\n", f.Event, fmtBytes(f.AllocatedBytes), fmtBytes(f.ReservedBytes), fmtBytes(f.ReservedUnallocatedBytes))
		}
		tw.Flush()
	}
	if len(out.TopSites) > 0 {
		fmt.Fprintln(stdout, "\nlargest allocation sites at the peak:")
		tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, s := range out.TopSites {
			fmt.Fprintf(tw, "  %s\t%s\n", fmtBytes(s.Bytes), s.Site)
		}
		tw.Flush()
	}
	for _, w := range out.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	if out.Prediction != nil {
		writePrediction(stdout, out.Prediction)
	}
	if *timeline != "" {
		fmt.Fprintf(stdout, "\ntimeline chart: %s\n", *timeline)
	}
	return nil
}

// predictBeside predicts the job of j's flags with the recording's
// allocator configuration and compares it with the recording.
func predictBeside(j *jobFlags, an *snapshotAnalysis, snap *snapshot.Snapshot, device, top int) (*SnapshotPredictionJSON, error) {
	batches, err := parseBatches(j.Batch)
	if err != nil {
		return nil, err
	}
	var r predict.Request
	switch src := j.e.source; {
	case src != nil && j.Model != "":
		return nil, usagef("a model was uploaded and %q named too: give one", j.Model)
	case src != nil:
		r, err = j.requestFor(src)
	default:
		r, err = j.request(j.Model)
	}
	if err != nil {
		return nil, err
	}
	r.Config.Batch = batches[0]
	if len(batches) > 1 {
		r.Schedule = batches
	}
	r.Alloc = an.cfg
	r.KeepTrace = true
	res, err := predict.Run(j.e.context(), r)
	if err != nil {
		return nil, err
	}
	return comparePrediction(an, snap, device, res, top)
}

// snapshotAnalysis is a snapshot replayed with its recorded allocator
// settings and with another (snapshot.Analyze), in the form the command
// line and the web page print, with the charts' recorders.
type snapshotAnalysis struct {
	an       *snapshot.Analysis
	out      SnapshotJSON
	cfg      alloc.Config // the recorded allocator configuration
	conv     *snapshot.Conversion
	tl, wtl  *alloc.Timeline
	rec, wrc *stepRecorder
}

func (a *snapshotAnalysis) chart() *chart.Chart {
	return snapshotChart(a.out.File, a.rec, a.tl, a.out.TopSites, a.out.WhatIfConf, a.wrc)
}

// analyzeSnapshot replays device's trace of snap (read from name) with the
// recorded allocator settings and with whatIf; with charts it also keeps
// both replays' state over the events.
func analyzeSnapshot(ctx context.Context, snap *snapshot.Snapshot, name string, device int, whatIf string, top int, charts bool) (*snapshotAnalysis, error) {
	o := snapshot.AnalyzeOptions{Device: device, WhatIf: whatIf, Top: top}
	var rec, wrc *stepRecorder
	if charts {
		rec, wrc = newStepRecorder(timelineBuckets), newStepRecorder(timelineBuckets)
		o.Observe, o.ObserveWhatIf = rec.Observe, wrc.Observe
	}
	a, err := snapshot.Analyze(ctx, snap, name, o)
	if we := (*snapshot.WhatIfConfError)(nil); errors.As(err, &we) {
		return nil, usagef("--alloc-conf %q: %v", we.Conf, we.Err)
	}
	if err != nil {
		return nil, err
	}
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
	return &snapshotAnalysis{an: a, out: out, cfg: a.Config, conv: a.Conv, tl: tl, wtl: wtl, rec: rec, wrc: wrc}, nil
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
		return "−" + fmtBytes(-n)
	}
	return "+" + fmtBytes(n)
}

// replayFromState is SnapshotJSON.ReplayFrom for a replay from the
// rebuilt state.
const replayFromState = "recorded state"
