package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/internal/report"
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
	out := an.out
	if *asJSON {
		return report.WriteJSON(stdout, out)
	}
	report.WriteSnapshot(stdout, &out)
	if *timeline != "" {
		fmt.Fprintf(stdout, "\ntimeline chart: %s\n", *timeline)
	}
	return nil
}

// predictBeside predicts the job of j's flags with the recording's
// allocator configuration and compares it with the recording.
func predictBeside(j *jobFlags, an *snapshotAnalysis, snap *snapshot.Snapshot, device, top int) (*report.SnapshotPredictionJSON, error) {
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
	return report.ComparePrediction(an.an, &an.out, snap, device, res, top)
}

// snapshotAnalysis is a snapshot replayed with its recorded allocator
// settings and with another (snapshot.Analyze), in the form the command
// line and the web page print, with the charts' recorders.
type snapshotAnalysis struct {
	an       *snapshot.Analysis
	out      report.SnapshotJSON
	cfg      alloc.Config // the recorded allocator configuration
	conv     *snapshot.Conversion
	tl, wtl  *alloc.Timeline
	rec, wrc *alloc.StepRecorder
}

func (a *snapshotAnalysis) chart() *chart.Chart {
	return report.SnapshotChart(a.out.File, a.rec, a.tl, a.out.TopSites, a.out.WhatIfConf, a.wrc)
}

// analyzeSnapshot replays device's trace of snap (read from name) with the
// recorded allocator settings and with whatIf; with charts it also keeps
// both replays' state over the events.
func analyzeSnapshot(ctx context.Context, snap *snapshot.Snapshot, name string, device int, whatIf string, top int, charts bool) (*snapshotAnalysis, error) {
	o := snapshot.AnalyzeOptions{Device: device, WhatIf: whatIf, Top: top}
	var rec, wrc *alloc.StepRecorder
	if charts {
		rec, wrc = alloc.NewStepRecorder(timelineBuckets), alloc.NewStepRecorder(timelineBuckets)
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
	out := report.NewSnapshot(a, snap, name, whatIf)
	return &snapshotAnalysis{an: a, out: out, cfg: a.Config, conv: a.Conv, tl: tl, wtl: wtl, rec: rec, wrc: wrc}, nil
}
