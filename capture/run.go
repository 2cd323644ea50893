package capture

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

//go:embed bfcapture.py
var script []byte

// Options are a capture's settings.
type Options struct {
	// Python is the interpreter that has the user's torch (default
	// "python3").
	Python string
	// Spec is the factory: path/file.py:make, package.module:make, or a
	// Hugging Face model directory.
	Spec string
	// Out is the graph file to write (".gz" compresses it).
	Out string
	// Batches are the two batch sizes captured (default 2 and 3).
	Batches [2]int64
	// Env is added to the interpreter's environment.
	Env []string
}

// Stats is what the capture module reports when it is done.
type Stats struct {
	Ops, Tensors int
	// MaxRSSKiB is the interpreter's peak resident memory.
	MaxRSSKiB int64
}

// Run runs the capture module under the user's interpreter. The module is
// written to a private temporary directory removed whatever happens; the
// output is written beside Out and renamed when complete, so a failed
// capture leaves nothing behind. A context cancel kills the interpreter.
func Run(ctx context.Context, o Options) (Stats, error) {
	var st Stats
	if o.Python == "" {
		o.Python = "python3"
	}
	if o.Batches == [2]int64{} {
		o.Batches = [2]int64{2, 3}
	}
	if o.Batches[0] < 1 || o.Batches[1] <= o.Batches[0] {
		return st, fmt.Errorf("capture: batches %v: want two increasing batch sizes", o.Batches)
	}
	if o.Spec == "" || o.Out == "" {
		return st, errors.New("capture: a factory and an output file are needed")
	}
	py, err := exec.LookPath(o.Python)
	if err != nil {
		return st, fmt.Errorf("capture: interpreter %q not found (choose one with --python)", o.Python)
	}
	dir, err := os.MkdirTemp("", "batchfit-capture-")
	if err != nil {
		return st, fmt.Errorf("capture: %w", err)
	}
	defer os.RemoveAll(dir)
	mod := filepath.Join(dir, "bfcapture.py")
	if err := os.WriteFile(mod, script, 0o600); err != nil {
		return st, fmt.Errorf("capture: %w", err)
	}
	out, err := filepath.Abs(o.Out)
	if err != nil {
		return st, fmt.Errorf("capture: %w", err)
	}
	cmd := exec.CommandContext(ctx, py, mod, o.Spec, out, "--batches", fmt.Sprintf("%d,%d", o.Batches[0], o.Batches[1]))
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), o.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// a cancelled capture does not wait on a child the interpreter left
	// holding its output
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	// whatever the module left half-written goes
	defer os.Remove(out + ".tmp")
	if ctx.Err() != nil {
		os.Remove(out + ".tmp")
		return st, fmt.Errorf("capture: %w", ctx.Err())
	}
	if err != nil {
		return st, fmt.Errorf("capture: %s", lastLine(stderr.String(), err))
	}
	_, _ = fmt.Sscanf(strings.ReplaceAll(strings.TrimSpace(stdout.String()), ",", " "), `{"ops": %d "tensors": %d "max_rss_kib": %d}`, &st.Ops, &st.Tensors, &st.MaxRSSKiB)
	return st, nil
}

// lastLine is the module's one-line error ("capture: ..."), or the last
// line a crash printed.
func lastLine(stderr string, err error) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "capture: ") {
			return strings.TrimPrefix(l, "capture: ")
		}
	}
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		if strings.Contains(stderr, "No module named 'torch'") {
			return "the interpreter has no torch module; choose one that has with --python"
		}
		return l
	}
	return err.Error()
}
