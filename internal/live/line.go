package live

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/record"
)

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// liveLine prints the steps as they come: one line rewritten in place on
// a terminal, plain lines (every n-th step) otherwise.
type liveLine struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	every int
	open  bool
	last  *record.Record
}

func newLiveLine(w io.Writer, every int) *liveLine {
	return &liveLine{w: w, tty: isTerminal(w), every: every}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (l *liveLine) add(r *record.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.Kind {
	case record.KindStart:
		dev := "CPU (no CUDA figures)"
		if r.CUDA != nil && *r.CUDA {
			dev = r.Device
			if r.DeviceTotal != nil {
				dev += fmt.Sprintf(" (%s)", report.FormatBytes(*r.DeviceTotal))
			}
		}
		l.print(fmt.Sprintf("batchfit: recording · PyTorch %s · %s", r.Torch, dev), true)
	case record.KindStep:
		l.last = r
		if l.tty || r.Seq%l.every == 0 || r.Seq == 1 {
			l.print(stepLine(r), !l.tty)
		}
	case record.KindWarning:
		l.print("batchfit: "+r.Message, true)
	}
}

func (l *liveLine) print(s string, newline bool) {
	if l.tty {
		fmt.Fprint(l.w, "\r\033[K"+s)
		l.open = !newline
		if newline {
			fmt.Fprintln(l.w)
		}
		return
	}
	fmt.Fprintln(l.w, s)
}

func (l *liveLine) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open {
		fmt.Fprintln(l.w)
		l.open = false
	}
}

func stepLine(r *record.Record) string {
	parts := []string{fmt.Sprintf("step %d", r.Step)}
	// the step is the optimizer's own count, 1-based; the recorder numbers
	// a process' optimizers from 0, which "#0" beside "step 1" reads as a
	// second count: only a second or later optimizer is named, 1-based
	switch {
	case r.Optimizer > 0 && r.OptimizerClass != "":
		parts[0] += fmt.Sprintf(" (%s, optimizer #%d)", r.OptimizerClass, r.Optimizer+1)
	case r.Optimizer > 0:
		parts[0] += fmt.Sprintf(" (optimizer #%d)", r.Optimizer+1)
	case r.OptimizerClass != "":
		parts[0] += fmt.Sprintf(" (%s)", r.OptimizerClass)
	}
	if r.Batch != nil {
		b := fmt.Sprintf("batch %d", *r.Batch)
		if r.MicroBatches > 1 {
			b += fmt.Sprintf(" × %d micro-batches", r.MicroBatches)
		}
		parts = append(parts, b)
	}
	if r.MaxAllocated != nil {
		parts = append(parts, "allocated "+report.FormatBytes(*r.Allocated), "max "+report.FormatBytes(*r.MaxAllocated),
			"reserved "+report.FormatBytes(*r.Reserved), "max "+report.FormatBytes(*r.MaxReserved))
		if r.NumAllocRetries != nil && *r.NumAllocRetries > 0 {
			parts = append(parts, fmt.Sprintf("%d retries", *r.NumAllocRetries))
		}
	} else if r.RSS != nil {
		parts = append(parts, "resident "+report.FormatBytes(*r.RSS))
	}
	return strings.Join(parts, " · ")
}
