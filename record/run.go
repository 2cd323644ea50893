package record

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

//go:embed recorder/sitecustomize.py
var recorderSource []byte

// Options describe one run.
type Options struct {
	// Command is the program and its arguments, run unchanged.
	Command []string
	// Env is the child's environment before the recorder's variables are
	// added (nil: this process's).
	Env []string
	// Snapshot is where the recorder dumps a memory snapshot when an
	// out-of-memory error ends the program ("": none). Asking for one
	// also turns on the allocator's history from the start.
	Snapshot string
	// Stdin, Stdout and Stderr are the child's (nil: this process's).
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// OnRecord, when set, receives every record as it arrives, from one
	// goroutine.
	OnRecord func(*Record)
}

// Result is how a run ended and what it reported.
type Result struct {
	// Code is the child's exit status, or 128 + the signal that killed
	// it (the shell's convention).
	Code int
	// Signal is the signal that killed the child, nil if it exited.
	Signal os.Signal
	// Records are the recorder's reports in order, then the exit record.
	Records []Record
	// ReadError is a malformed report (the run itself went on).
	ReadError error
}

// drainTimeout bounds the wait for reports after the child exits: a
// process it left behind (a DataLoader worker) may hold the pipe open.
const drainTimeout = 2 * time.Second

// Run runs o.Command with the recorder and waits for it. It returns an
// error only when the command could not be started; how the command ended
// is in the Result. SIGTERM, SIGHUP and SIGQUIT sent to this process are
// passed to the child; SIGINT is not, because a terminal's Ctrl-C reaches
// the child directly and a second one would interrupt its clean-up.
func Run(o Options) (*Result, error) {
	if len(o.Command) == 0 {
		return nil, errors.New("no command to run")
	}
	path, err := exec.LookPath(o.Command[0])
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", o.Command[0], err)
	}
	dir, err := os.MkdirTemp("", "batchfit-recorder-")
	if err != nil {
		return nil, fmt.Errorf("installing the recorder: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "sitecustomize.py"), recorderSource, 0o644); err != nil {
		return nil, fmt.Errorf("installing the recorder: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("opening the recorder's pipe: %w", err)
	}
	defer pr.Close()

	cmd := exec.Command(path, o.Command[1:]...)
	cmd.Args[0] = o.Command[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = o.Stdin, o.Stdout, o.Stderr
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if cmd.Stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.ExtraFiles = []*os.File{pw} // the child's fd 3
	cmd.Env = recorderEnv(o.Env, dir, o.Snapshot)

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGINT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		pw.Close()
		return nil, fmt.Errorf("starting %s: %w", o.Command[0], err)
	}
	pw.Close() // the child holds the only writer now

	res := &Result{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := NewReader(pr, "the recorder's reports")
		for {
			rec, err := rd.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				res.ReadError = err
				io.Copy(io.Discard, pr) // never block the child on a full pipe
				return
			}
			if len(res.Records) < MaxRecords {
				res.Records = append(res.Records, *rec)
			}
			if o.OnRecord != nil {
				o.OnRecord(rec)
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
wait:
	for {
		select {
		case s := <-sigs:
			if s != syscall.SIGINT {
				cmd.Process.Signal(s)
			}
		case werr = <-waited:
			break wait
		}
	}
	select {
	case <-done:
	case <-time.After(drainTimeout):
		// a process the child left holds the pipe: stop listening, which
		// is not a malformed report
		pr.Close()
		<-done
		if errors.Is(res.ReadError, os.ErrClosed) {
			res.ReadError = nil
		}
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return nil, fmt.Errorf("waiting for %s: %w", o.Command[0], werr)
	}
	exit := Record{Kind: KindExit}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		res.Signal = ws.Signal()
		res.Code = 128 + int(ws.Signal())
		exit.Signal = ws.Signal().String()
	} else {
		res.Code = cmd.ProcessState.ExitCode()
	}
	code := res.Code
	exit.Code = &code
	res.Records = append(res.Records, exit)
	return res, nil
}

// recorderEnv is the child's environment: PYTHONPATH with the recorder's
// directory first (before any the user set, whose sitecustomize the
// recorder then runs), and the recorder's variables.
func recorderEnv(base []string, dir, snapshot string) []string {
	if base == nil {
		base = os.Environ()
	}
	env := make([]string, 0, len(base)+3)
	pythonPath := dir
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "PYTHONPATH":
			if v != "" {
				pythonPath = dir + string(os.PathListSeparator) + v
			}
			continue
		case "BATCHFIT_RECORD_FD", "BATCHFIT_SNAPSHOT":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "PYTHONPATH="+pythonPath, "BATCHFIT_RECORD_FD=3")
	if snapshot != "" {
		env = append(env, "BATCHFIT_SNAPSHOT="+snapshot)
	}
	return env
}
