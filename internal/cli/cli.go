package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

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
  plan       what to change so that it fits, fastest first
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
`

type command func(e *env, args []string) error

// Stdin is where commands that read standard input read it.
var Stdin io.Reader = os.Stdin

// env is where a command reads and writes. On the command line it is the
// process' standard streams and files; the web page runs the same
// commands with what a request uploaded in place of files, and never lets
// them open a path or read the environment.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	// web is set for a command run for the web page: a model is a zoo
	// name or the upload in source, never a path, and the allocator
	// configuration is the request's, not the server's environment.
	web bool
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
}

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

// Run executes the command line args (without the program name) and
// returns the process exit code: 0 ok, 1 failure, 2 usage.
func Run(args []string, stdout, stderr io.Writer) int {
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
		msg := clipQuoted(fmt.Sprintf("batchfit: unknown command %q", args[0]))
		if near := models.Nearest(args[0], names, 2); len(near) > 0 {
			msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
		}
		fmt.Fprintln(stderr, msg+" (run 'batchfit -h')")
		return 2
	}
	if err := safeRun(cmd, &env{stdin: Stdin, stdout: stdout, stderr: stderr}, args[1:]); err != nil {
		if err.Error() == "flag: help requested" {
			return 0
		}
		var st exitStatus
		if errors.As(err, &st) {
			return int(st)
		}
		fmt.Fprintf(stderr, "batchfit %s: %s\n", args[0], clipQuoted(err.Error()))
		var cs cannotStart
		if errors.As(err, &cs) {
			return 127
		}
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
