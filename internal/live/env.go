package live

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/smi"
)

// Env is where Run and Watch read and write, and what they reach of the
// machine: the command line passes its streams, and tests their own
// stand-ins for the machine in Hooks.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// JobEnv are the environment's values of the job's fields
	// (PYTORCH_CUDA_ALLOC_CONF, ...), which Run's prediction takes as the
	// other commands' do.
	JobEnv job.Env
	Hooks  Hooks
}

// Hooks are what watch and run reach of this machine besides files: its
// GPUs, its clock and zone, its processes and where runs publish their
// state. A test gives its own, so tests that stand in for them run side
// by side; a nil field is the real one.
type Hooks struct {
	OpenSMI       func() (smi.Reader, error)
	Now           func() time.Time
	Zone          *time.Location
	RunsDir       func() string
	ProcessExists func(pid int) bool
}

func (h Hooks) openGPUs() (smi.Reader, error) {
	if h.OpenSMI != nil {
		return h.OpenSMI()
	}
	return smi.Open()
}

func (h Hooks) clock() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h Hooks) location() *time.Location {
	if h.Zone != nil {
		return h.Zone
	}
	return time.Local
}

// runs is where runs publish their state (see defaultRunsDir).
func (h Hooks) runs() string {
	if h.RunsDir != nil {
		return h.RunsDir()
	}
	return defaultRunsDir()
}

// exists tells whether a run's child is still there.
func (h Hooks) exists(pid int) bool {
	if h.ProcessExists != nil {
		return h.ProcessExists(pid)
	}
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// ExitStatus ends batchfit with a status of its own, without a message:
// the training command's, passed through by Run.
type ExitStatus int

func (e ExitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// CannotStart is Run's error for a command that could not be started:
// the shell's 127.
type CannotStart struct{ err error }

func (c CannotStart) Error() string { return c.err.Error() }
func (c CannotStart) Unwrap() error { return c.err }

// jobFlags are the flags that describe the job of a run (the fields of
// job.Job, as the prediction commands take them) and --json, which run
// accepts as they do.
type jobFlags struct {
	job.Job
	json bool
	// env: the environment's values of the job's fields
	env job.Env
	// sources: where the model may come from (a model named inside a
	// recording is looked up in the zoo only)
	sources job.Sources
}

// register defines the job's flags for the command fs is named for.
func (j *jobFlags) register(fs *flag.FlagSet) {
	job.Register(fs, &j.Job, fs.Name())
	fs.BoolVar(&j.json, "json", false, "print JSON")
}

// request builds a prediction request from the flags for model.
func (j *jobFlags) request(model string) (predict.Request, error) {
	return j.Job.RequestFor(model, job.Options{Sources: j.sources, Env: j.env})
}

func usagef(format string, args ...any) error { return job.Usagef(format, args...) }

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
