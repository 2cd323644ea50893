package live

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/batchfit/batchfit/record"
)

// runRegistry tells 'batchfit watch' which processes a run started and
// what PyTorch last said in them: a small file per child in the runs
// directory (defaultRunsDir), named by the child's PID, removed at the
// end.
type runRegistry struct {
	// dir is where the file goes (Hooks.runs).
	dir     string
	command []string
	args    []string
	job     map[string]string
	path    string
	last    *record.Record
	start   *record.Record
}

// RunState is what a running 'batchfit run' publishes for watch: the JSON
// of its file in the runs directory. Run writes it and Watch reads it; it
// is exported so that a test can stand in for a run.
type RunState struct {
	PID     int      `json:"pid"`
	Command []string `json:"command"`
	Args    []string `json:"args,omitempty"`
	// Job is the run's job as its fields (record.Record.Job).
	Job   map[string]string `json:"job,omitempty"`
	Start *record.Record    `json:"start,omitempty"`
	Last  *record.Record    `json:"last,omitempty"`
}

// defaultRunsDir is where runs publish their state: a directory of this
// user's alone (another user on a shared machine cannot plant files in it
// or redirect writes); tests move it (Hooks.RunsDir).
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
	return !ownedByOther(st)
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
	b, err := json.Marshal(RunState{PID: g.start.PID, Command: g.command, Args: g.args, Job: g.job, Start: g.start, Last: g.last})
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
