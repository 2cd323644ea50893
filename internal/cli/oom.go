package cli

import (
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"os"
	"strings"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/oom"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/solve"
)

const oomUsage = `usage: batchfit oom [MESSAGE | FILE | -] [--model MODEL and job flags]

Explains a CUDA out-of-memory message — the current format and the pre-2.1
one — given as an argument, a file (a whole log or traceback is fine) or on
standard input. With --model and the run's setup it also finds the largest
batch that would fit on that GPU, with the same margin as maxbatch
(--margin).

Examples:
  batchfit oom < train.log
  batchfit oom "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)"
  batchfit oom train.log --model resnet50 --precision 16-mixed
`

// maxInput bounds what oom reads: logs are long, but not unbounded.
const maxInput = 64 << 20

func runOOM(e *env, args []string) error {
	stdin, stdout, stderr := e.stdin, e.stdout, e.stderr
	fs := newFlagSet("oom", stderr, oomUsage)
	j := jobFlags{e: e}
	j.register(fs)
	// The same margin as maxbatch: a batch that oom answers must leave the
	// headroom a batch that maxbatch answers leaves on the same GPU.
	margin := fs.String("margin", "band", marginHelp)
	// --model (from the job flags) names the model that ran, to find the
	// batch that would have fit.
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	// The flags are checked before the message is read: a bad flag is a
	// usage error whether or not a message came with it. The margin's
	// share or size is held to the device only once the message gives
	// it.
	if _, err := parseMargin(*margin, math.MaxInt64, predict.Band{}); err != nil {
		return usagef("--margin: %v", err)
	}
	var r predict.Request
	if j.Model != "" {
		if r, err = j.request(j.Model); err != nil {
			return err
		}
		b, err := parseBatches(j.Batch)
		if err != nil {
			return err
		}
		r.Config.Batch = b[0]
	}
	var text string
	switch {
	case !e.policy.files && len(pos) > 0:
		return usagef("the message is the request's body, not an argument")
	case len(pos) == 0 || (len(pos) == 1 && pos[0] == "-"):
		b, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
		if err != nil {
			return fmt.Errorf("reading standard input: %w", err)
		}
		if len(b) > maxInput {
			return fmt.Errorf("standard input is larger than %d MiB", maxInput>>20)
		}
		text = string(b)
	case len(pos) == 1:
		if st, err := os.Stat(pos[0]); err == nil && st.IsDir() {
			return fmt.Errorf("%s is a directory; give the file that holds the message, the message in quotes, or - for standard input", pos[0])
		} else if err == nil {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(f, maxInput+1))
			f.Close()
			if err != nil {
				return fmt.Errorf("reading %s: %w", pos[0], err)
			}
			if len(b) > maxInput {
				return fmt.Errorf("%s is larger than %d MiB", pos[0], maxInput>>20)
			}
			text = string(b)
		} else if _, err := os.Stat(pos[0]); errors.Is(err, iofs.ErrNotExist) && strings.TrimSpace(pos[0]) != "" && !strings.ContainsAny(strings.TrimSpace(pos[0]), " \t\n") {
			// one word is no CUDA message: it was meant as a file
			return fmt.Errorf("%s: file not found (give a file, the message in quotes, or - for standard input)", pos[0])
		} else {
			text = pos[0]
		}
	default:
		text = strings.Join(pos, " ")
	}
	msg, err := oom.Parse(text)
	if err != nil {
		return err
	}
	ex := oom.Explain(msg)
	type fitJSON struct {
		Model    string `json:"model"`
		MaxBatch int64  `json:"max_batch"`
		// MarginBytes is the headroom the answer left (--margin).
		MarginBytes int64 `json:"margin_bytes"`
	}
	var marginText string
	var fit *fitJSON
	if j.Model != "" {
		// The device of the message: its total, with what was outside
		// PyTorch (context, other processes) taken as the context.
		r.GPU = gpu.GPU{Name: fmt.Sprintf("GPU %d", msg.DeviceIndex), Marketing: "the GPU of the message", Capacity: msg.Total,
			Major: r.GPU.Major, ContextSize: max(0, ex.OutsidePyTorch)}
		band, err := report.RequestBand(r)
		if err != nil {
			return err
		}
		if r.Margin, err = parseMargin(*margin, r.GPU.Capacity, band); err != nil {
			return usagef("--margin: %v", err)
		}
		marginText = report.MarginLine(r.Margin, r.GPU.Capacity, band)
		ans, err := solve.MaxBatch(e.context(), r, 0)
		if err != nil {
			return err
		}
		fit = &fitJSON{Model: r.Source.Name(), MaxBatch: ans.Max, MarginBytes: r.Margin}
	}
	if j.json {
		return report.WriteJSON(stdout, struct {
			oom.Explanation
			Fit *fitJSON `json:"fit,omitempty"`
		}{ex, fit})
	}
	fmt.Fprint(stdout, ex.Text())
	if fit != nil {
		with := ""
		if fit.MarginBytes > 0 {
			with = " with the margin"
		}
		if fit.MaxBatch > 0 {
			fmt.Fprintf(stdout, "\nWith %s and this setup, the largest batch that fits this GPU (%s, with %s outside PyTorch)%s is %d.\n",
				fit.Model, report.FormatBytes(msg.Total), report.FormatBytes(max(0, ex.OutsidePyTorch)), with, fit.MaxBatch)
		} else {
			fmt.Fprintf(stdout, "\n%s does not fit this GPU even at batch 1 with this setup%s.\n", fit.Model, with)
		}
		fmt.Fprintln(stdout, marginText)
	}
	return nil
}
