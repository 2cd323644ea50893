package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/oom"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/train"
	"github.com/batchfit/batchfit/validation"
)

const runUsage = `usage: batchfit run [--model MODEL and job flags] [flags] -- COMMAND [ARGS...]

Runs your training command unchanged and reports, after every optimizer
step, what PyTorch's allocator says: memory_allocated, max_memory_allocated,
memory_reserved, max_memory_reserved, and the allocator's retries and
out-of-memory counts. A small recorder is loaded into the command's Python
through PYTHONPATH (sitecustomize; yours still runs); not a line of the
script changes. The command's output, traceback and exit status are its own.

With --model (and the job's flags, as for 'batchfit estimate') the summary
puts batchfit's prediction beside each measured figure; the batch size and
gradient accumulation default to what the run showed, and the GPU to the one
it ran on. When an out-of-memory error ends the run, batchfit explains it,
and with --snapshot replays the memory snapshot the recorder dumped.

Examples:
  batchfit run -- python train.py --epochs 1
  batchfit run --model resnet50 --precision bf16-mixed --out run.jsonl -- python train.py
  batchfit run --snapshot -- python train.py

The recorder reports from the Python process the command starts (or the
first one, through a shell). Processes that one starts do not report: a
launcher's workers (torchrun) are not recorded.
  batchfit validate run.jsonl      # the recording as a measured case
`

// exitStatus ends batchfit with a status of its own, without a message:
// the child's, passed through.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// cannotStart is a command that could not be started: the shell's 127.
type cannotStart struct{ err error }

func (c cannotStart) Error() string { return c.err.Error() }
func (c cannotStart) Unwrap() error { return c.err }

func runRun(e *env, args []string) (err error) {
	// The child and the live line write to stderr at once: a file takes
	// whole writes in turn, any other writer is given a lock.
	stderr := e.stderr
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr}
	}
	if !e.policy.machine {
		return usagef("run starts a process: not from the web page")
	}
	i := slices.Index(args, "--")
	if i < 0 && slices.ContainsFunc(args, isHelp) {
		// run -h: the help, as every command gives it
		_, err := parseRunFlags(e, args)
		return err
	}
	if i < 0 {
		return usagef("put -- before the command to run (batchfit run [flags] -- python train.py)")
	}
	flagArgs, command := args[:i], args[i+1:]
	if len(command) == 0 {
		return usagef("no command after --")
	}
	rf, err := parseRunFlags(e, flagArgs)
	if err != nil {
		return err
	}
	j, set, out, snap, snapFile, every := &rf.job, rf.set, &rf.out, &rf.snapshot, &rf.snapshotFile, &rf.every
	// The job is checked before anything runs: a typo in a flag should not
	// cost a training run.
	if j.Model != "" {
		if _, err := j.request(j.Model); err != nil {
			return err
		}
	}

	var w *record.Writer
	started := false // the command started and its recording is whole: it is kept
	if *out != "" {
		// The recording is written beside --out and put in its place
		// once the run ends: a command that cannot start, or a write
		// that fails, leaves the file there (an earlier recording).
		f, err := createOutput(*out)
		if err != nil {
			return fmt.Errorf("creating %s: %w", *out, err)
		}
		defer func() {
			if !started {
				f.Abort()
				return
			}
			if cerr := f.Commit(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		w = record.NewWriter(f)
		w.Write(&record.Record{Kind: record.KindRun, Command: command, Args: flagArgs, Started: time.Now().UTC().Format(time.RFC3339)})
	}
	snapPath := ""
	if *snap {
		if snapPath, err = filepath.Abs(*snapFile); err != nil {
			return err
		}
		os.Remove(snapPath) // a snapshot left by an earlier run is not this run's
	}
	live := newLiveLine(stderr, *every)
	reg := &runRegistry{command: command, args: flagArgs, dir: e.hooks.runs()}
	defer reg.remove()
	res, err := record.Run(record.Options{Command: command, Snapshot: snapPath, Stdin: e.stdin, Stdout: e.stdout, Stderr: stderr,
		OnRecord: func(r *record.Record) {
			live.add(r)
			reg.update(r)
			if w != nil {
				w.Write(r)
			}
		}})
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return cannotStart{err} // the shell's 127: no such command
		}
		return err
	}
	started = true
	live.finish()
	if w != nil {
		if err := w.Write(&res.Records[len(res.Records)-1]); err != nil {
			// A part of the recording does not replace what was there.
			fmt.Fprintf(stderr, "batchfit: writing %s: %v (no recording written: the file there is left as it was)\n", *out, err)
			started = false
		}
	}
	s := record.Summarize(res.Records)
	fmt.Fprintln(stderr)
	writeRunSummary(stderr, s, res)
	if j.Model != "" {
		if err := writeRunPrediction(stderr, j, set, s); err != nil {
			fmt.Fprintf(stderr, "no prediction: %v\n", err)
		}
	}
	if s.OOM != nil {
		writeRunOOM(stderr, j, set, s, snapPath)
	}
	if w != nil && started {
		fmt.Fprintf(stderr, "\nrecording: %s ('batchfit validate %s' compares it with the prediction)\n", *out, *out)
	}
	if res.Code != 0 {
		return exitStatus(res.Code)
	}
	return nil
}

// runFlags are run's flags: the job's, which a recording keeps, and the
// run's own.
type runFlags struct {
	job          jobFlags
	set          map[string]bool // the flags given
	out          string
	snapshot     bool
	snapshotFile string
	every        int
}

// parseRunFlags parses the flags before run's "--", also when validate
// reads them back from a recording.
func parseRunFlags(e *env, args []string) (*runFlags, error) {
	rf := &runFlags{job: jobFlags{e: e}, set: map[string]bool{}}
	fs := newFlagSet("run", e.stderr, runUsage)
	rf.job.register(fs)
	fs.StringVar(&rf.out, "out", "", "write the recording to this file (JSON lines; 'batchfit validate' reads it)")
	fs.BoolVar(&rf.snapshot, "snapshot", false, "record the allocator's history from the start and dump a memory snapshot if an out-of-memory error ends the run")
	fs.StringVar(&rf.snapshotFile, "snapshot-file", "oom-snapshot.pickle", "where --snapshot writes the snapshot")
	fs.IntVar(&rf.every, "every", 1, "without a terminal, print every N-th step")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) == 1 && rf.job.Model == "":
		rf.job.Model = pos[0]
	case len(pos) > 0:
		return nil, usagef("unexpected %q before --: the model is --model MODEL", pos[0])
	}
	if rf.every < 1 {
		return nil, usagef("--every must be at least 1, got %d", rf.every)
	}
	fs.Visit(func(f *flag.Flag) { rf.set[f.Name] = true })
	return rf, nil
}

// compareRecording predicts the job of a recording and compares it with
// what the run measured, as validate does for measure.py's cases.
//
// A recording may come from anyone: a model path written in it is never
// opened (it may name a device or a file built to cost gigabytes). The
// recorded model is taken when it is a zoo name; otherwise model, a path
// the user named on validate's command line, stands for it.
func compareRecording(e *env, path string, recs []record.Record, model string) ([]validation.Comparison, error) {
	s := record.Summarize(recs)
	rf, err := parseRunFlags(&env{stdin: e.stdin, stdout: io.Discard, stderr: io.Discard}, recs[0].Args)
	if err != nil {
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
	res, err := predict.Run(e.context(), r)
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

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// liveLine prints the steps as they come: one line rewritten in place on
// a terminal, plain lines (every n-th step) otherwise.
type liveLine struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	every int
	open  bool
	last  *record.Record
}

func newLiveLine(w io.Writer, every int) *liveLine {
	return &liveLine{w: w, tty: isTerminal(w), every: every}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (l *liveLine) add(r *record.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.Kind {
	case record.KindStart:
		dev := "CPU (no CUDA figures)"
		if r.CUDA != nil && *r.CUDA {
			dev = r.Device
			if r.DeviceTotal != nil {
				dev += fmt.Sprintf(" (%s)", report.FormatBytes(*r.DeviceTotal))
			}
		}
		l.print(fmt.Sprintf("batchfit: recording · PyTorch %s · %s", r.Torch, dev), true)
	case record.KindStep:
		l.last = r
		if l.tty || r.Seq%l.every == 0 || r.Seq == 1 {
			l.print(stepLine(r), !l.tty)
		}
	case record.KindWarning:
		l.print("batchfit: "+r.Message, true)
	}
}

func (l *liveLine) print(s string, newline bool) {
	if l.tty {
		fmt.Fprint(l.w, "\r\033[K"+s)
		l.open = !newline
		if newline {
			fmt.Fprintln(l.w)
		}
		return
	}
	fmt.Fprintln(l.w, s)
}

func (l *liveLine) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		fmt.Fprintln(l.w)
		l.open = false
	}
}

func stepLine(r *record.Record) string {
	parts := []string{fmt.Sprintf("step %d", r.Step)}
	// the step is the optimizer's own count, 1-based; the recorder numbers
	// a process' optimizers from 0, which "#0" beside "step 1" reads as a
	// second count: only a second or later optimizer is named, 1-based
	switch {
	case r.Optimizer > 0 && r.OptimizerClass != "":
		parts[0] += fmt.Sprintf(" (%s, optimizer #%d)", r.OptimizerClass, r.Optimizer+1)
	case r.Optimizer > 0:
		parts[0] += fmt.Sprintf(" (optimizer #%d)", r.Optimizer+1)
	case r.OptimizerClass != "":
		parts[0] += fmt.Sprintf(" (%s)", r.OptimizerClass)
	}
	if r.Batch != nil {
		b := fmt.Sprintf("batch %d", *r.Batch)
		if r.MicroBatches > 1 {
			b += fmt.Sprintf(" × %d micro-batches", r.MicroBatches)
		}
		parts = append(parts, b)
	}
	if r.MaxAllocated != nil {
		parts = append(parts, "allocated "+report.FormatBytes(*r.Allocated), "max "+report.FormatBytes(*r.MaxAllocated),
			"reserved "+report.FormatBytes(*r.Reserved), "max "+report.FormatBytes(*r.MaxReserved))
		if r.NumAllocRetries != nil && *r.NumAllocRetries > 0 {
			parts = append(parts, fmt.Sprintf("%d retries", *r.NumAllocRetries))
		}
	} else if r.RSS != nil {
		parts = append(parts, "resident "+report.FormatBytes(*r.RSS))
	}
	return strings.Join(parts, " · ")
}

func writeRunSummary(w io.Writer, s record.Summary, res *record.Result) {
	how := fmt.Sprintf("exit status %d", res.Code)
	if res.Signal != nil {
		how = fmt.Sprintf("killed by signal %d, %s (status %d)", res.Code-128, res.Signal, res.Code)
	}
	if !s.Started {
		fmt.Fprintf(w, "batchfit: the command ended (%s) and no Python process it started imported torch: nothing was recorded\n", how)
		return
	}
	fmt.Fprintf(w, "batchfit: %s recorded", report.Plural(s.Steps, "optimizer step"))
	if s.Optimizers > 1 {
		fmt.Fprintf(w, " (%d optimizers)", s.Optimizers)
	}
	fmt.Fprintf(w, "; the command ended with %s\n", how)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if s.PeakAllocated != nil {
		fmt.Fprintf(tw, "  peak allocated\t%s\t(max_memory_allocated)\t\n", report.FormatBytes(*s.PeakAllocated))
		fmt.Fprintf(tw, "  peak reserved\t%s\t(max_memory_reserved)\t\n", report.FormatBytes(*s.PeakReserved))
		if s.Outside != nil {
			fmt.Fprintf(tw, "  outside PyTorch\t%s\t(CUDA context, libraries, other processes)\t\n", report.FormatBytes(*s.Outside))
		}
		fmt.Fprintf(tw, "  allocator retries\t%d\t(num_alloc_retries: cudaMalloc failed and the cache was flushed)\t\n", s.Retries)
		fmt.Fprintf(tw, "  out-of-memory errors\t%d\t(num_ooms)\t\n", s.OOMs)
	} else if s.PeakRSS != nil {
		fmt.Fprintf(tw, "  peak resident memory\t%s\t(the run was on the CPU: torch.cuda reports nothing)\t\n", report.FormatBytes(*s.PeakRSS))
	}
	if s.Batch != nil {
		fmt.Fprintf(tw, "  batch\t%d\t(first dimension of the model's input)\t\n", *s.Batch)
	}
	if s.MicroBatches > 1 {
		fmt.Fprintf(tw, "  forward passes a step\t%d\t(gradient accumulation)\t\n", s.MicroBatches)
	}
	if s.StepSeconds > 0 {
		fmt.Fprintf(tw, "  step time\t%s\t(median between steps)\t\n", report.FormatSeconds(s.StepSeconds))
	}
	tw.Flush()
	for _, m := range s.Warnings {
		fmt.Fprintf(w, "  %s\n", m)
	}
	if res.ReadError != nil {
		fmt.Fprintf(w, "  the recorder's reports stopped: %v\n", res.ReadError)
	}
}

// runRequest is the prediction of the run's job: the flags, with the batch
// size, the gradient accumulation and the GPU taken from the run where the
// flags do not give them.
func runRequest(j *jobFlags, set map[string]bool, s record.Summary) (predict.Request, error) {
	jj := *j
	if !set["batch"] {
		if s.Batch == nil {
			return predict.Request{}, errors.New("the run showed no batch size: give --batch")
		}
		jj.Batch = strconv.FormatInt(*s.Batch, 10)
	}
	if !set["accumulate"] && s.MicroBatches > 1 {
		jj.Accumulate = s.MicroBatches
	}
	if !set["optimizer"] {
		runOptimizer(&jj, set, s)
	}
	if !set["torch"] && s.Torch != "" {
		// the rules of the PyTorch that ran (its profile, or the nearest
		// older one)
		jj.Torch = s.Torch
	}
	r, err := jj.request(jj.Model)
	if err != nil {
		return r, err
	}
	b, err := parseBatches(jj.Batch)
	if err != nil {
		return r, err
	}
	r.Config.Batch = b[0]
	if !set["gpu"] && s.CUDA && s.DeviceTotal > 0 {
		// The GPU the run reported, by the name PyTorch gives it; one the
		// catalog does not know keeps the --gpu default's rates, and says so.
		g, err := gpu.Lookup(s.Device)
		if err != nil {
			g = r.GPU
			g.Name, g.Marketing = s.Device, fmt.Sprintf("%s (step times at the rates of %s)", s.Device, r.GPU.Name)
		}
		g.Capacity = s.DeviceTotal
		if c, err := strconv.Atoi(strings.SplitN(s.Capability, ".", 2)[0]); err == nil {
			g.Major = c
		}
		r.GPU = g
	}
	if !set["context"] && s.Outside != nil {
		r.Context = *s.Outside
	}
	return r, nil
}

// runOptimizer sets the job's optimizer to the run's first one where
// batchfit simulates its class, with its momentum, weight decay and
// implementation unless the flags give them.
func runOptimizer(j *jobFlags, set map[string]bool, s record.Summary) {
	o, ok := train.OptimizerByClass(s.Optimizer)
	if !ok {
		return
	}
	j.Optimizer = o.Name
	if v, ok := s.OptimizerSettings["amsgrad"].(bool); ok && v {
		j.AMSGrad = true
	}
	num := func(k string) (float64, bool) {
		v, ok := s.OptimizerSettings[k].(float64)
		return v, ok
	}
	if v, ok := num("momentum"); ok && !set["momentum"] {
		j.Momentum = v
	}
	if v, ok := num("weight_decay"); ok && !set["weight-decay"] {
		j.WeightDecay = &v
	}
	if set["foreach"] || set["fused"] || set["forloop"] {
		return
	}
	// foreach and fused are None (PyTorch picks), True or False
	fused, _ := s.OptimizerSettings["fused"].(bool)
	foreach, isSet := s.OptimizerSettings["foreach"].(bool)
	switch {
	case fused:
		j.Fused = true
	case isSet && foreach:
		j.Foreach = true
	case isSet && !foreach:
		j.ForLoop = true
	}
}

func writeRunPrediction(w io.Writer, j *jobFlags, set map[string]bool, s record.Summary) error {
	r, err := runRequest(j, set, s)
	if err != nil {
		return err
	}
	res, err := predict.Run(context.Background(), r)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nbatchfit's prediction (%s):\n", report.SetupLine(res))
	if _, known := train.OptimizerByClass(s.Optimizer); s.Optimizer != "" && !set["optimizer"] && !known {
		fmt.Fprintf(w, "  (the run's optimizer is %s, which batchfit does not simulate: the prediction uses --optimizer %s)\n", s.Optimizer, j.Optimizer)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  \tpredicted\tmeasured\terror\t")
	row := func(name string, pred int64, meas *int64) {
		if meas == nil {
			fmt.Fprintf(tw, "  %s\t%s\t—\t\t\n", name, report.FormatBytes(pred))
			return
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%+.1f%%\t\n", name, report.FormatBytes(pred), report.FormatBytes(*meas), 100*float64(pred-*meas)/float64(max(*meas, 1)))
	}
	row("peak allocated", res.Timeline.PeakAllocated, s.PeakAllocated)
	row("peak reserved", res.Timeline.PeakReserved, s.PeakReserved)
	if s.PeakReserved != nil && s.Outside != nil {
		dev := *s.PeakReserved + *s.Outside
		row("device total", res.DeviceTotal, &dev)
	}
	if res.Time != nil {
		m := "—"
		if s.StepSeconds > 0 {
			m = report.FormatSeconds(s.StepSeconds)
		}
		fmt.Fprintf(tw, "  step time\t%s\t%s\t(calibrated model; bound %s)\t\n", report.FormatSeconds(res.Time.Seconds), m, report.FormatSeconds(res.Time.Bound.Seconds))
	}
	tw.Flush()
	if s.PeakAllocated == nil {
		fmt.Fprintln(w, "  the run was on the CPU, so there is nothing of CUDA's to compare with")
	}
	return nil
}

// writeRunOOM explains the out-of-memory error that ended the run: the
// message by the allocator's rules, the snapshot if one was dumped, and
// the smallest changes that fit when the model is known.
func writeRunOOM(w io.Writer, j *jobFlags, set map[string]bool, s record.Summary, snapPath string) {
	fmt.Fprintln(w, "\nthe run ended with an out-of-memory error:")
	msg, err := oom.Parse(s.OOM.Message)
	if err != nil {
		fmt.Fprintf(w, "  %s\n  (batchfit could not read its figures: %v)\n", s.OOM.Message, err)
	} else {
		fmt.Fprint(w, indent(oom.Explain(msg).Text(), "  "))
	}
	switch {
	case s.OOM.Snapshot != "":
		sn, err := snapshot.ReadFile(s.OOM.Snapshot, snapshot.Options{Frames: true})
		if err == nil {
			var an *snapshotAnalysis
			if an, err = analyzeSnapshot(context.Background(), sn, s.OOM.Snapshot, 0, "expandable_segments:True", 5, false); err == nil {
				o := an.out
				fmt.Fprintf(w, "\nthe snapshot (%s), replayed: peak allocated %s, peak reserved %s, at most %s reserved but unallocated; with expandable_segments:True %s reserved\n",
					s.OOM.Snapshot, report.FormatBytes(o.PeakAllocatedBytes), report.FormatBytes(o.PeakReservedBytes), report.FormatBytes(o.MaxFragmentationBytes), report.FormatBytes(o.WhatIfReservedBytes))
				for _, site := range o.TopSites {
					fmt.Fprintf(w, "  %s\t%s\n", report.FormatBytes(site.Bytes), site.Site)
				}
				fmt.Fprintf(w, "  ('batchfit snapshot %s' tells more)\n", s.OOM.Snapshot)
			}
		}
		if err != nil {
			fmt.Fprintf(w, "\nthe snapshot %s could not be read: %v\n", s.OOM.Snapshot, err)
		}
	case s.OOM.SnapshotError != "":
		fmt.Fprintf(w, "\nno snapshot: %s\n", s.OOM.SnapshotError)
	case snapPath == "":
		fmt.Fprintln(w, "\n(run again with --snapshot for a memory snapshot of the failure)")
	}
	if j.Model == "" || msg == nil {
		return
	}
	r, err := runRequest(j, set, s)
	if err != nil {
		return
	}
	ex := oom.Explain(msg)
	r.GPU = gpu.GPU{Name: fmt.Sprintf("GPU %d", msg.DeviceIndex), Marketing: "the GPU of the message", Capacity: msg.Total,
		Major: r.GPU.Major, ContextSize: max(0, ex.OutsidePyTorch), Rates: r.GPU.Rates}
	r.Context = -1
	res, err := predict.Run(context.Background(), r)
	if err != nil {
		return
	}
	if res.Fits {
		// The job as described fits that device: what filled it is
		// something the description leaves out.
		fmt.Fprintf(w, "\nbatchfit predicts that %s fits this GPU (device total %s of %s): the memory went to something the job's description leaves out — a larger batch or sequence than given, another process on the GPU, or tensors kept across steps (a loss summed with its graph, outputs stored for later).\n",
			report.SetupLine(res), report.FormatBytes(res.DeviceTotal), report.FormatBytes(msg.Total))
		return
	}
	so := plan.Options{Base: r, Objective: plan.FewestChanges, Top: 3}
	ans, err := plan.Run(context.Background(), so)
	var lg *report.Larger
	if err == nil && len(ans.Best) == 0 {
		lg, err = searchLarger(context.Background(), so, "0")
	}
	if err != nil {
		fmt.Fprintf(w, "\nno suggestions: %v\n", err)
		return
	}
	report.WriteSuggestions(w, res, ans, lg)
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// runRegistry tells 'batchfit watch' which processes a run started and
// what PyTorch last said in them: a small file per child in
// $TMPDIR/batchfit-runs, named by the child's PID, removed at the end.
type runRegistry struct {
	// dir is where the file goes (hooks.runs).
	dir     string
	command []string
	args    []string
	path    string
	last    *record.Record
	start   *record.Record
}

// RunState is what a running 'batchfit run' publishes for watch.
type RunState struct {
	PID     int            `json:"pid"`
	Command []string       `json:"command"`
	Args    []string       `json:"args,omitempty"`
	Start   *record.Record `json:"start,omitempty"`
	Last    *record.Record `json:"last,omitempty"`
}

// defaultRunsDir is where runs publish their state: a directory of this
// user's alone (another user on a shared machine cannot plant files in it
// or redirect writes); tests move it (hooks.runsDir).
func defaultRunsDir() string {
	return filepath.Join(os.TempDir(), "batchfit-runs-"+strconv.Itoa(os.Getuid()))
}

// ownDir makes dir (mode 0700) or accepts it only if it is a directory of
// this user's that no one else may write.
func ownDir(dir string) bool {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return false
	}
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm()&0o022 != 0 {
		return false
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return false
	}
	return true
}

func (g *runRegistry) update(r *record.Record) {
	switch r.Kind {
	case record.KindStart:
		if g.start != nil {
			return // a second interpreter's start; the first one's file stays
		}
		g.start = r
		if !ownDir(g.dir) {
			return
		}
		g.path = filepath.Join(g.dir, strconv.Itoa(r.PID)+".json")
	case record.KindStep, record.KindOOM:
		g.last = r
	default:
		return
	}
	if g.path == "" {
		return
	}
	b, err := json.Marshal(RunState{PID: g.start.PID, Command: g.command, Args: g.args, Start: g.start, Last: g.last})
	if err != nil {
		return
	}
	f, err := os.CreateTemp(filepath.Dir(g.path), ".state-*")
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil && cerr == nil {
		os.Rename(f.Name(), g.path)
	} else {
		os.Remove(f.Name())
	}
}

func (g *runRegistry) remove() {
	if g.path != "" {
		os.Remove(g.path)
	}
}

func isHelp(a string) bool { return a == "-h" || a == "--h" || a == "-help" || a == "--help" }
