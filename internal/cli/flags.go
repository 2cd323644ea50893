package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/predict"
)

func usagef(format string, args ...any) error { return job.Usagef(format, args...) }

// IsUsage reports whether err is a command-line usage error: bad flags,
// or a setup that cannot apply to the model or the GPU (predict.SetupError).
func IsUsage(err error) bool { return job.IsUsage(err) }

// jobFlags are the flags that describe a job (the fields of job.Job),
// shared by estimate, sweep, maxbatch, plan, oom, snapshot and run, and
// the output flag --json.
type jobFlags struct {
	job.Job
	e    *env
	json bool
	// inferOK: the command answers for --mode eval and generate too
	inferOK bool
	// sources: where the model may come from, when the command's
	// environment allows paths (a model named inside a recording is
	// looked up in the zoo only)
	sources job.Sources
}

// register defines the job's flags for the command fs is named for.
func (j *jobFlags) register(fs *flag.FlagSet) {
	job.Register(fs, &j.Job, fs.Name())
	fs.BoolVar(&j.json, "json", false, "print JSON")
}

// options are what the job's request is made with: the environment's
// values and where a model may come from, as the command's env allows.
func (j *jobFlags) options() job.Options {
	o := job.Options{Sources: j.sources, Inference: j.inferOK}
	if j.e != nil {
		o.Env = j.e.jobEnv
		if j.e.policy.sources == job.ZooOnly {
			o.Sources = job.ZooOnly
		}
	}
	return o
}

// request builds a prediction request from the flags and the model
// argument.
func (j *jobFlags) request(model string) (predict.Request, error) {
	return j.Job.RequestFor(model, j.options())
}

// requestFor builds a prediction request for src from the flags.
func (j *jobFlags) requestFor(src predict.Source) (predict.Request, error) {
	return j.Job.Request(src, j.options())
}

func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) { return job.ParseArgs(fs, args) }

func parseBatches(s string) ([]int64, error) { return job.ParseBatches(s) }

func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// job parses a job command's arguments: flags anywhere, exactly one model,
// and the batch sizes of --batch. It returns the prediction request for
// that model with the flags applied, and the batch sizes.
func (j *jobFlags) job(fs *flag.FlagSet, cmd string, args []string) (predict.Request, []int64, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return predict.Request{}, nil, err
	}
	if j.Model != "" {
		pos = append([]string{j.Model}, pos...)
	}
	uploaded := j.e != nil && j.e.source != nil
	switch {
	case uploaded && len(pos) > 0:
		return predict.Request{}, nil, usagef("a model was uploaded and %q named too: give one", pos[0])
	case !uploaded && len(pos) != 1:
		return predict.Request{}, nil, usagef("%s takes one model, got %d (see 'batchfit %s -h')", cmd, len(pos), cmd)
	}
	batches, err := parseBatches(j.Batch)
	if err != nil {
		return predict.Request{}, nil, err
	}
	var r predict.Request
	if uploaded {
		r, err = j.requestFor(j.e.source)
	} else {
		r, err = j.request(pos[0])
	}
	if err != nil {
		return predict.Request{}, nil, err
	}
	r.Config.Batch = batches[0]
	return r, batches, nil
}
