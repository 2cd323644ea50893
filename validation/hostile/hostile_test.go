//go:build unix

package hostile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The limits every command-line case is held to: the probe measured 26 s
// to 45 s and 4 to 13 GB for these inputs; a refusal while reading takes
// a fraction of a second and a few tens of MiB.
const (
	cliTime   = 10 * time.Second
	cliMemory = 1 << 30 // peak resident set, bytes
)

// The bounds on the server: a normal estimate after the hostile requests
// is answered within serveAnswer, and the server's resident set (VmRSS),
// and its peak (VmHWM) over the whole run, stay under serveMemory. The
// probe saw 2.97 GB after one 10 KB upload and 5.85 GB after a 40 MB
// snapshot.
const (
	serveAnswer = time.Second
	serveMemory = 1 << 30
)

// batchfit is the binary built once for the package's tests.
var batchfit string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if runtime.GOOS != "linux" {
		fmt.Println("hostile: the suite measures memory through Linux's rusage and /proc; skipped")
		return 0
	}
	dir, err := os.MkdirTemp("", "hostile")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	batchfit = filepath.Join(dir, "batchfit")
	build := exec.Command("go", "build", "-o", batchfit, "github.com/batchfit/batchfit/cmd/batchfit")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Println("hostile: building batchfit:", err)
		return 1
	}
	return m.Run()
}

// cliCase is one command line over a hostile file.
type cliCase struct {
	name string
	file string                          // its name, whose extension picks the reader
	make func(t *testing.T, path string) // writes (or links) it
	args []string                        // the command and flags before the file
	want string                          // in the one-line refusal
}

func write(data func(t *testing.T) []byte) func(t *testing.T, path string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, data(t), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func zero(t *testing.T, path string) {
	if err := os.Symlink("/dev/zero", path); err != nil {
		t.Skipf("no symlink to /dev/zero: %v", err)
	}
}

var cliCases = []cliCase{
	{"bfgraph mutates 99", "m.bfgraph", write(func(t *testing.T) []byte { return mutates(t, 99) }), []string{"estimate"}, "mutates[0] = 99"},
	{"bfgraph mutates -1", "m.bfgraph", write(func(t *testing.T) []byte { return mutates(t, -1) }), []string{"estimate"}, "mutates[0] = -1"},
	{"bfgraph.gz of 3 million empty ops", "bomb.bfgraph.gz", write(func(t *testing.T) []byte { return opsBomb(t, 3_000_000) }), []string{"estimate"}, ""},
	{"bfgraph.gz of one 1 GiB name", "name.bfgraph.gz", write(func(t *testing.T) []byte {
		return hugeString(t, `{"format":"batchfit-graph","version":1,"name":"`, 1<<30, `"}`)
	}), []string{"estimate"}, ""},
	{"pickle.gz of 20 million references to one event", "memo.pickle.gz", write(func(t *testing.T) []byte {
		return gz(t, func(w io.Writer) { w.Write(memoBomb(20_000_000)) })
	}), []string{"snapshot"}, ""},
	{"pickle of 20 million references to one event", "memo.pickle", write(func(t *testing.T) []byte { return memoBomb(20_000_000) }), []string{"snapshot"}, ""},
	{"pickle.gz of one 1 GiB string", "str.pickle.gz", write(func(t *testing.T) []byte { return pickleHugeString(t, 1<<30) }), []string{"snapshot"}, ""},
	{"onnx linked to /dev/zero", "z.onnx", zero, []string{"estimate"}, ""},
	{"bfgraph linked to /dev/zero", "z.bfgraph", zero, []string{"estimate"}, ""},
	{"pickle linked to /dev/zero", "z.pickle", zero, []string{"snapshot"}, ""},
}

// TestCommandLine runs each hostile file through the binary and wants a
// refusal: exit status 1 or 2, a message without "internal" or a Go
// panic's trace, within cliTime and under cliMemory of peak resident set.
func TestCommandLine(t *testing.T) {
	for _, c := range cliCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), c.file)
			c.make(t, path)
			// Linux carries the resident high-water mark of the process
			// that forks over exec into the child's ru_maxrss: the test's
			// own memory (the generators') is given back first, so that
			// the figure is the child's.
			debug.FreeOSMemory()
			ctx, cancel := context.WithTimeout(context.Background(), cliTime)
			defer cancel()
			cmd := exec.CommandContext(ctx, batchfit, append(append([]string(nil), c.args...), path)...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := cmd.Run()
			elapsed := time.Since(start)
			if ctx.Err() != nil {
				t.Fatalf("still running after %s (killed)", cliTime)
			}
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code := cmd.ProcessState.ExitCode()
			rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
			msg := strings.TrimSpace(out.String())
			t.Logf("exit %d after %s, peak RSS %d MiB: %.200s", code, elapsed.Round(time.Millisecond), rss>>20, msg)
			if code != 1 && code != 2 {
				t.Errorf("exit status %d, want 1 or 2 (a refusal)", code)
			}
			if strings.Contains(msg, "internal") || strings.Contains(msg, "goroutine ") || strings.Contains(msg, "panic") {
				t.Errorf("an internal error or a panic: %.500s", msg)
			}
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %.300q, want it to contain %q", msg, c.want)
			}
			if rss > cliMemory {
				t.Errorf("peak RSS %d MiB, over the %d MiB limit", rss>>20, cliMemory>>20)
			}
		})
	}
}
