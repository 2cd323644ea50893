package live

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/validation"
)

// CompareRecording predicts the job of a recording that 'batchfit run
// --out' wrote (recs, read from path) and compares it with what the run
// measured, as validate does for measure.py's cases.
//
// A recording may come from anyone: a model path written in it is never
// opened (it may name a device or a file built to cost gigabytes). The
// recorded model is taken when it is a zoo name; otherwise model, a path
// the user named on validate's command line, stands for it.
func CompareRecording(ctx context.Context, path string, recs []record.Record, model string) ([]validation.Comparison, error) {
	s := record.Summarize(recs)
	var rf *runFlags
	var err error
	if recs[0].Job != nil {
		// the job as its fields; recordings from before carry run's flags
		// alone
		if rf, err = runFlagsFromJob(Env{Stdout: io.Discard, Stderr: io.Discard}, recs[0].Job); err != nil {
			return nil, fmt.Errorf("%s: the recorded job: %w", path, err)
		}
	} else if rf, err = parseRunFlags(Env{Stdout: io.Discard, Stderr: io.Discard}, recs[0].Args); err != nil {
		return nil, fmt.Errorf("%s: the recorded flags %q: %w", path, recs[0].Args, err)
	}
	if model != "" {
		rf.job.Model = model
	} else if rf.job.Model != "" {
		if _, err := models.Lookup(rf.job.Model); err != nil {
			return nil, usagef("%s", report.ClipMessage(fmt.Sprintf("%s: the recorded model %q is not a zoo name, and validate opens no path a recording names: give the model as --model PATH", path, rf.job.Model)))
		}
		rf.job.sources = job.ZooOnly
	}
	switch {
	case rf.job.Model == "":
		return nil, fmt.Errorf("%s: recorded without --model, so there is no job to predict (record with 'batchfit run --model MODEL ... -- COMMAND')", path)
	case s.PeakAllocated == nil || s.PeakReserved == nil:
		return nil, fmt.Errorf("%s: the run reported no CUDA figures (it ran on the CPU or never stepped an optimizer): nothing to compare", path)
	case *s.PeakAllocated < 0 || *s.PeakReserved < 0:
		// torch.cuda.max_memory_allocated and max_memory_reserved count
		// bytes: a negative one was not written by PyTorch
		return nil, fmt.Errorf("%s: the steps' \"max_allocated\" (largest %d) and \"max_reserved\" (largest %d) must not be negative", path, *s.PeakAllocated, *s.PeakReserved)
	}
	r, err := runRequest(&rf.job, rf.set, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	res, err := predict.Run(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c := validation.Comparison{ID: filepath.Base(path) + " (" + report.SetupLine(res) + ")", Status: "ok",
		PredictedAllocated: res.Timeline.PeakAllocated, MeasuredAllocated: *s.PeakAllocated,
		PredictedReserved: res.Timeline.PeakReserved, MeasuredReserved: *s.PeakReserved, PredictedFits: res.Fits}
	if s.OOM != nil {
		c.Status = "oom"
	} else if res.Time != nil && s.StepSeconds > 0 {
		c.PredictedSeconds, c.MeasuredSeconds = res.Time.Seconds, s.StepSeconds
	}
	return []validation.Comparison{c}, nil
}

// CompareWatch reads a 'batchfit watch --out' file and compares every
// process in it that 'batchfit run --model' started: the recording that
// run would have written, rebuilt from what watch saw of it.
func CompareWatch(ctx context.Context, path, model string) ([]validation.Comparison, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	type proc struct {
		recs []record.Record
		seq  int
		oom  bool
	}
	procs := map[int]*proc{}
	var order []int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), record.MaxLine)
	line := 0
	for sc.Scan() {
		line++
		var fr WatchFrame
		if err := json.Unmarshal(sc.Bytes(), &fr); err != nil || fr.Kind != "gpus" {
			return nil, fmt.Errorf("%s:%d: not a batchfit watch reading", path, line)
		}
		for _, g := range fr.GPUs {
			for _, p := range g.Processes {
				if p.Args == nil || p.Start == nil {
					continue
				}
				pr, ok := procs[p.PID]
				if !ok {
					pr = &proc{recs: []record.Record{{Kind: record.KindRun, Command: p.Command, Args: p.Args, Job: p.Job}, *p.Start}}
					procs[p.PID] = pr
					order = append(order, p.PID)
				}
				switch py := p.PyTorch; {
				case py == nil:
				case py.Kind == record.KindOOM && !pr.oom:
					pr.recs = append(pr.recs, *py)
					pr.oom = true
				case py.Kind == record.KindStep && py.Seq > pr.seq:
					pr.recs = append(pr.recs, *py)
					pr.seq = py.Seq
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var cs []validation.Comparison
	for _, pid := range order {
		c, err := CompareRecording(ctx, fmt.Sprintf("%s (process %d)", path, pid), procs[pid].recs, model)
		if err != nil {
			return nil, err
		}
		cs = append(cs, c...)
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("%s: no process in it was started by 'batchfit run --model ...', so there is no job to predict", path)
	}
	return cs, nil
}
