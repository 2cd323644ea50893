package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/batchfit/batchfit/capture"
)

const captureUsage = `usage: batchfit capture FACTORY [-o FILE] [--python python3] [--batches 2,3] [-- COMMAND FLAGS...]

Captures your own PyTorch model, without a GPU and without allocating its
weights, into a graph file that estimate, sweep, maxbatch, plan and the web
page read like a zoo name:

  batchfit capture model.py:make                       # writes model.bfgraph (-o to choose)
  batchfit estimate model.bfgraph --batch 64 --precision bf16-mixed
  batchfit capture model.py:make -- maxbatch --gpu a100-80gb

FACTORY is path/to/file.py:function, package.module:function, or a Hugging
Face model directory (needs transformers). The function takes the batch
size and returns {"model": nn.Module, "inputs": tensor(s) or shape(s),
"targets": optional, "loss": optional callable}; see the README. It runs
with your interpreter (--python) on the meta device, at two batch sizes, to
find which sizes follow the batch.
`

func runCapture(e *env, args []string) error {
	if !e.policy.machine {
		return usagef("capture runs your own Python; it is not available from the web page (upload the .bfgraph file instead)")
	}
	var then []string
	for i, a := range args {
		if a == "--" {
			args, then = args[:i], args[i+1:]
			break
		}
	}
	fs := newFlagSet("capture", e.stderr, captureUsage)
	out := fs.String("o", "", "graph file to write (default: the factory's name with .bfgraph, in the current directory)")
	python := fs.String("python", "python3", "the interpreter that has your torch and your model's packages")
	batches := fs.String("batches", "2,3", "the two batch sizes to capture at (shapes must be linear in the batch)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up on a capture that takes longer")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("capture takes one factory (file.py:function, package.module:function or a model directory), got %d arguments", len(pos))
	}
	bs := strings.Split(*batches, ",")
	var b [2]int64
	if len(bs) != 2 {
		return usagef("--batches %q: want two increasing batch sizes such as 2,3", *batches)
	}
	for i, s := range bs {
		v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || v < 1 {
			return usagef("--batches %q: want two increasing batch sizes such as 2,3", *batches)
		}
		b[i] = v
	}
	if b[1] <= b[0] {
		return usagef("--batches %q: want two increasing batch sizes such as 2,3", *batches)
	}
	if len(then) > 0 {
		switch then[0] {
		case "estimate", "sweep", "maxbatch", "plan":
		default:
			return usagef("after --, want estimate, sweep, maxbatch or plan and their flags, got %q", then[0])
		}
	}
	spec := pos[0]
	path := *out
	if path == "" {
		path = defaultGraphName(spec)
	}
	if _, err := exec.LookPath(*python); err != nil {
		return fmt.Errorf("interpreter %q not found; choose the one that has torch with --python", *python)
	}
	ctx, cancel := context.WithTimeout(e.context(), *timeout)
	defer cancel()
	start := time.Now()
	st, err := capture.Run(ctx, capture.Options{Python: *python, Spec: spec, Out: path, Batches: b})
	if err != nil {
		return err
	}
	m, err := capture.Load(path)
	if err != nil {
		os.Remove(path)
		return err
	}
	fmt.Fprintf(e.stderr, "captured %s: %d aten ops, %d tensors in %.1f s (peak %d MiB in Python) → %s\n",
		spec, st.Ops, st.Tensors, time.Since(start).Seconds(), st.MaxRSSKiB>>10, path)
	if bw := m.Backward(); bw != "run" && bw != "" {
		fmt.Fprintf(e.stderr, "  backward was not run on the meta device (%s); batchfit simulates it from its rules\n", trimTo(bw, 100))
	}
	if len(then) == 0 {
		return nil
	}
	return commands[then[0]](e, append(append([]string(nil), then[1:]...), path))
}

// defaultGraphName names the graph file after the factory: model.py:make
// becomes model.bfgraph.
func defaultGraphName(spec string) string {
	base := spec
	if i := strings.LastIndex(base, ":"); i > 0 && !(len(base) > 2 && base[1] == ':' && i == 1) {
		base = base[:i]
	}
	base = strings.TrimSuffix(filepath.Base(strings.TrimRight(base, `/\`)), ".py")
	if i := strings.LastIndex(base, "."); i >= 0 {
		base = base[i+1:]
	}
	if base == "" || base == "." {
		base = "model"
	}
	return base + ".bfgraph"
}

func trimTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
