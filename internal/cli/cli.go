package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/models"
)

const mainUsage = `batchfit predicts, explains and watches the GPU memory of PyTorch training.

usage: batchfit <command> [flags] [model]

Commands:
  estimate   memory breakdown at the peak, and whether it fits a GPU
  sweep      memory over a list or range of batch sizes
  maxbatch   the largest batch (or depth, width, sequence) that fits
  plan       what to change so that it fits, fastest first
  models     the built-in model zoo
  gpus       the GPU catalog
  oom        explain a CUDA out-of-memory message
  snapshot   replay a torch.cuda.memory._dump_snapshot pickle
  validate   compare predictions with measurements from validation/measure.py

Run 'batchfit <command> -h' for a command's flags and examples.
`

type command func(args []string, stdout, stderr io.Writer) error

// Stdin is where commands that read standard input read it.
var Stdin io.Reader = os.Stdin

var commands = map[string]command{
	"estimate": runEstimate,
	"sweep":    runSweep,
	"maxbatch": runMaxBatch,
	"plan":     runPlan,
	"models":   runModels,
	"gpus":     runGPUs,
	"oom": func(args []string, stdout, stderr io.Writer) error {
		return runOOM(args, Stdin, stdout, stderr)
	},
	"snapshot": runSnapshot,
	"validate": runValidate,
}

// Run executes the command line args (without the program name) and
// returns the process exit code: 0 ok, 1 failure, 2 usage.
func Run(args []string, stdout, stderr io.Writer) int {
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
		msg := fmt.Sprintf("batchfit: unknown command %q", args[0])
		if near := models.Nearest(args[0], names, 2); len(near) > 0 {
			msg += fmt.Sprintf("; did you mean %s?", strings.Join(near, " or "))
		}
		fmt.Fprintln(stderr, msg+" (run 'batchfit -h')")
		return 2
	}
	if err := safeRun(cmd, args[1:], stdout, stderr); err != nil {
		if err.Error() == "flag: help requested" {
			return 0
		}
		fmt.Fprintf(stderr, "batchfit %s: %v\n", args[0], err)
		if IsUsage(err) {
			return 2
		}
		return 1
	}
	return 0
}

// safeRun turns a panic in a command into an error, so a bug shows as a
// message rather than a stack trace.
func safeRun(cmd command, args []string, stdout, stderr io.Writer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v (please report it)", r)
		}
	}()
	return cmd(args, stdout, stderr)
}
