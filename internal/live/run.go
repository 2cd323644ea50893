package live

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/outfile"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/oom"
	"github.com/batchfit/batchfit/plan"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/snapshot"
	"github.com/batchfit/batchfit/train"
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

// Run is 'batchfit run': args are its flags, "--" and the command to
// run. It returns the command's exit status as an ExitStatus when it is
// not 0, CannotStart when the command could not be started, and a usage
// error (job.IsUsage) for bad flags; the command's own output goes to
// e.Stdout and e.Stderr, batchfit's lines and summary to e.Stderr.
func Run(e Env, args []string) (err error) {
	// The child and the live line write to stderr at once: a file takes
	// whole writes in turn, any other writer is given a lock.
	stderr := e.Stderr
	if _, ok := stderr.(*os.File); !ok {
		stderr = &lockedWriter{w: stderr}
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
		f, err := outfile.Create(*out)
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
		w.Write(&record.Record{Kind: record.KindRun, Command: command, Args: flagArgs, Job: rf.fields, Started: time.Now().UTC().Format(time.RFC3339)})
	}
	snapPath := ""
	if *snap {
		if snapPath, err = filepath.Abs(*snapFile); err != nil {
			return err
		}
		os.Remove(snapPath) // a snapshot left by an earlier run is not this run's
	}
	live := newLiveLine(stderr, *every)
	reg := &runRegistry{command: command, args: flagArgs, job: rf.fields, dir: e.Hooks.runs()}
	defer reg.remove()
	res, err := record.Run(record.Options{Command: command, Snapshot: snapPath, Stdin: e.Stdin, Stdout: e.Stdout, Stderr: stderr,
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
			return CannotStart{err} // the shell's 127: no such command
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
		return ExitStatus(res.Code)
	}
	return nil
}

// runFlags are run's flags: the job's, which a recording keeps, and the
// run's own.
type runFlags struct {
	job jobFlags
	set map[string]bool // the flags given
	// fields are the job's fields the flags set (job.Fields names), as
	// the recording keeps them
	fields       map[string]string
	out          string
	snapshot     bool
	snapshotFile string
	every        int
}

// parseRunFlags parses the flags before run's "--", also when validate
// reads them back from a recording.
func parseRunFlags(e Env, args []string) (*runFlags, error) {
	rf := &runFlags{job: jobFlags{env: e.JobEnv}, set: map[string]bool{}}
	fs := newFlagSet("run", e.Stderr, runUsage)
	rf.job.register(fs)
	fs.StringVar(&rf.out, "out", "", "write the recording to this file (JSON lines; 'batchfit validate' reads it)")
	fs.BoolVar(&rf.snapshot, "snapshot", false, "record the allocator's history from the start and dump a memory snapshot if an out-of-memory error ends the run")
	fs.StringVar(&rf.snapshotFile, "snapshot-file", "oom-snapshot.pickle", "where --snapshot writes the snapshot")
	fs.IntVar(&rf.every, "every", 1, "without a terminal, print every N-th step")
	pos, err := job.ParseArgs(fs, args)
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
	fs.Visit(func(f *flag.Flag) {
		rf.set[f.Name] = true
		if _, ok := job.Fields.Lookup(f.Name); ok {
			if rf.fields == nil {
				rf.fields = map[string]string{}
			}
			rf.fields[f.Name] = f.Value.String()
		}
	})
	if rf.job.Model != "" {
		if rf.fields == nil {
			rf.fields = map[string]string{}
		}
		rf.fields["model"] = rf.job.Model
	}
	return rf, nil
}

// runFlagsFromJob is the job a recording describes, read back through the
// job's field table: each field is set as its flag would set it (the same
// checks of kind and choice), and a name the table has no field of — or
// no field run takes — is refused by name.
func runFlagsFromJob(e Env, fields map[string]string) (*runFlags, error) {
	rf := &runFlags{job: jobFlags{env: e.JobEnv}, set: map[string]bool{}}
	fs := newFlagSet("run", e.Stderr, runUsage)
	rf.job.register(fs)
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := job.Fields.Lookup(name)
		if !ok || fs.Lookup(name) == nil {
			msg := fmt.Sprintf("job field %q: run's job has no such field", name)
			if near := job.Nearest(name, job.Fields.Names("run"), 2); len(near) > 0 {
				msg += "; did you mean " + strings.Join(near, " or ") + "?"
			}
			return nil, usagef("%s", report.ClipMessage(msg))
		}
		if err := f.Check(fields[name]); err != nil {
			return nil, usagef("%s", report.ClipMessage(fmt.Sprintf("job field %s = %q: %v", name, fields[name], err)))
		}
		if err := fs.Set(name, fields[name]); err != nil {
			return nil, usagef("%s", report.ClipMessage(fmt.Sprintf("job field %s = %q: %v", name, fields[name], err)))
		}
		rf.set[name] = true
	}
	rf.fields = fields
	return rf, nil
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
	b, err := job.ParseBatches(jj.Batch)
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
			const whatIf = "expandable_segments:True"
			var an *snapshot.Analysis
			if an, err = snapshot.Analyze(context.Background(), sn, s.OOM.Snapshot, snapshot.AnalyzeOptions{WhatIf: whatIf, Top: 5}); err == nil {
				o := report.NewSnapshot(an, sn, s.OOM.Snapshot, whatIf)
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
		// every catalog GPU larger than the message's, with no margin
		// (plan's and estimate's --margin 0)
		var fits []plan.Elsewhere
		var searched, stopped []string
		if fits, searched, stopped, err = plan.Larger(context.Background(), so, gpu.All(), func(gpu.GPU) (int64, error) { return 0, nil }); err == nil {
			lg = &report.Larger{Fits: fits, Searched: searched, Stopped: stopped}
		}
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

func isHelp(a string) bool { return a == "-h" || a == "--h" || a == "-help" || a == "--help" }
