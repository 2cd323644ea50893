package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/internal/live"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/snapshot"
)

const mainUsage = `batchfit predicts, explains and watches the GPU memory of PyTorch training.

usage: batchfit <command> [flags] [model]

Commands:
  estimate   memory breakdown at the peak, and whether it fits a GPU
  sweep      memory over a list or range of batch sizes
  maxbatch   the largest batch (or depth, width, sequence) that fits
  plan       what to change so that it fits, most samples/s per GPU first
  capture    capture your own nn.Module (a factory in a .py file) into a .bfgraph file
  models     the built-in model zoo
  gpus       the GPU catalog
  oom        explain a CUDA out-of-memory message
  snapshot   replay a torch.cuda.memory._dump_snapshot pickle (with --model, beside the prediction)
  validate   compare predictions with measurements (measure.py, run and watch recordings)
  serve      a local web page with the same answers, charts and a JSON API
  run        run a training command and record its memory step by step
  watch      every GPU and process, as nvidia-smi shows them, with PyTorch's figures
  version    the release of this binary

Run 'batchfit <command> -h' for a command's flags and examples.

Exit status: 0 when it fits (or the command answered), 1 when it does not fit
(estimate: fits: no; sweep: no batch fits; maxbatch: nothing fits; plan: no
plan fits) or another failure, 2 for a usage error (a bad command, flag or
value). run exits with the training command's status.
`

type command func(e *env, args []string) error

// env is where a command reads and writes. On the command line it is the
// process' standard streams and files; the web page runs the same
// commands with what a request uploaded in place of files, and never lets
// them open a path or read the environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// policy is what the command may reach of this machine.
	policy policy
	// jobEnv are the environment's values of the job's fields
	// (PYTORCH_CUDA_ALLOC_CONF, ...): read once by Run; a web request
	// has none, so the server's environment never shapes an answer.
	jobEnv job.Env
	// source is an uploaded model (web only).
	source predict.Source
	// snap and snapName are an uploaded snapshot (web only).
	snap     *snapshot.Snapshot
	snapName string
	// chart receives the chart a command draws instead of the file its
	// flag names (web only).
	chart io.Writer
	// ctx ends the command's predictions early: the web request's
	// context (the client left, or the request's deadline passed). Nil on
	// the command line.
	ctx context.Context
	// hooks stand in for the machine's GPUs, clock and processes (tests).
	hooks live.Hooks
}

// policy is what a command may reach of the machine it runs on: the
// command line reaches all of it (local); a web request only what it
// sent (remote): zoo names and its uploads, never a path of the
// server's, no process started, no chart written to a file.
type policy struct {
	// sources: where a model may come from.
	sources job.Sources
	// files: flags may name files to read or write (a snapshot, a chart).
	files bool
	// machine: the command may start processes and read this machine's
	// devices (run, capture, watch).
	machine bool
}

var (
	local  = policy{sources: job.Paths, files: true, machine: true}
	remote = policy{sources: job.ZooOnly}
)

// context is the context the command's predictions run under.
func (e *env) context() context.Context {
	if e.ctx == nil {
		return context.Background()
	}
	return e.ctx
}

var commands = map[string]command{
	"estimate": runEstimate,
	"sweep":    runSweep,
	"maxbatch": runMaxBatch,
	"plan":     runPlan,
	"models":   runModels,
	"gpus":     runGPUs,
	"oom":      runOOM,
	"snapshot": runSnapshot,
	"validate": runValidate,
	"version":  runVersion,
}

// serve is registered here: its handlers run the other commands, so the
// table cannot name it in its own initializer.
func init() { commands["serve"] = runServe }

func init() {
	// capture runs a command on the file it writes: registered here, as
	// serve is
	commands["capture"] = runCapture
	commands["run"] = runRun
	commands["watch"] = runWatch
}

// Options are what a command line runs with besides its arguments and
// output: its standard input, and the environment's values of the job's
// fields (job.EnvFrom). The zero Options read no input and no
// environment.
type Options struct {
	Stdin io.Reader
	Env   job.Env
	// hooks are the tests' stand-ins for the machine (live.Hooks); the
	// zero value is the machine itself.
	hooks live.Hooks
}

// Run executes the command line args (without the program name) with the
// process' standard input and environment, and returns the process exit
// code: 0 ok, 1 failure, 2 usage.
func Run(args []string, stdout, stderr io.Writer) int {
	return RunWith(args, stdout, stderr, Options{Stdin: os.Stdin, Env: job.EnvFrom(os.Getenv)})
}

// RunWith is Run with the input and environment given: a test gives its
// own, so that no answer depends on the shell it runs in.
func RunWith(args []string, stdout, stderr io.Writer, o Options) int {
	if o.Stdin == nil {
		o.Stdin = strings.NewReader("")
	}
	if len(args) == 1 && args[0] == "--version" {
		args = []string{"version"}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, mainUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		var names []string
		for n := range commands {
			names = append(names, n)
		}
		sort.Strings(names)
		msg := report.ClipQuoted(fmt.Sprintf("batchfit: unknown command %q", args[0]))
		if near := models.Nearest(args[0], names, 2); len(near) > 0 {
			msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
		}
		fmt.Fprintln(stderr, msg+" (run 'batchfit -h')")
		return 2
	}
	e := &env{stdin: o.Stdin, stdout: stdout, stderr: stderr, policy: local, jobEnv: o.Env, hooks: o.hooks}
	if err := safeRun(cmd, e, args[1:]); err != nil {
		if err.Error() == "flag: help requested" {
			return 0
		}
		var st live.ExitStatus
		if errors.As(err, &st) {
			return int(st)
		}
		fmt.Fprintf(stderr, "batchfit %s: %s\n", args[0], report.ClipQuoted(err.Error()))
		var cs live.CannotStart
		if errors.As(err, &cs) {
			return 127
		}
		// IsUsage covers what is found only past the flags (adapters
		// naming a module the model lacks, a size beyond the bounds):
		// the flags are still what is wrong
		if IsUsage(err) {
			return 2
		}
		return 1
	}
	return 0
}

// safeRun turns a panic in a command into an error, so a bug shows as a
// message rather than a stack trace.
func safeRun(cmd command, e *env, args []string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = internalError{r}
		}
	}()
	return cmd(e, args)
}

// internalError is a command's panic, recovered: a bug, not bad input.
type internalError struct{ v any }

func (e internalError) Error() string {
	return fmt.Sprintf("internal error: %v (please report it)", e.v)
}
