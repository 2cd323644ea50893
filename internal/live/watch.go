package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/batchfit/batchfit/internal/outfile"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/job"
	"github.com/batchfit/batchfit/record"
	"github.com/batchfit/batchfit/smi"
)

const watchUsage = `usage: batchfit watch [--interval 2s] [--count N] [--json] [--out FILE]

Shows every GPU and every process on it, as NVML reports them (what
nvidia-smi shows): used, free and total memory, utilisation, and each
process's memory. Beside a process that 'batchfit run' started it shows
what PyTorch says inside it — reserved and allocated memory and the step —
and how much of NVML's figure is outside PyTorch's allocator (the CUDA
context and libraries: reserved + context ≈ used).

Examples:
  batchfit watch
  batchfit watch --interval 500ms --json > gpus.jsonl
  batchfit watch --count 1              # one reading, then exit
`

// WatchFrame is one reading of watch --json and of its --out file.
type WatchFrame struct {
	Kind string         `json:"kind"` // "gpus"
	Time string         `json:"time"`
	GPUs []WatchGPUJSON `json:"gpus"`
}

// WatchGPUJSON is one GPU of a reading.
type WatchGPUJSON struct {
	smi.GPU
	Processes []WatchProcessJSON `json:"processes"`
}

// WatchProcessJSON is one process of a reading, with PyTorch's figures
// when 'batchfit run' started it.
type WatchProcessJSON struct {
	smi.Process
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Job is the run's job as its fields (record.Record.Job).
	Job     map[string]string `json:"job,omitempty"`
	PyTorch *record.Record    `json:"pytorch,omitempty"`
	Start   *record.Record    `json:"start,omitempty"`
	// Outside is NVML's used memory less PyTorch's reserved: the CUDA
	// context and the libraries' own allocations.
	Outside *int64 `json:"outside_pytorch_bytes,omitempty"`
}

// Watch is 'batchfit watch': args are its flags. It prints the readings
// to e.Stdout until --count readings are printed or it is interrupted,
// and returns a usage error (job.IsUsage) for bad flags.
func Watch(e Env, args []string) (err error) {
	stdout, stderr := e.Stdout, e.Stderr
	fs := newFlagSet("watch", stderr, watchUsage)
	interval := fs.Duration("interval", 2*time.Second, "time between readings")
	count := fs.Int("count", 0, "stop after this many readings (0: until interrupted)")
	asJSON := fs.Bool("json", false, "print one JSON object a reading")
	out := fs.String("out", "", "also write the readings to this file (JSON lines)")
	pos, err := job.ParseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("watch takes no arguments, got %q", pos[0])
	}
	if *interval < 10*time.Millisecond {
		return usagef("--interval %s is too short (at least 10ms)", *interval)
	}
	if *count < 0 {
		return usagef("--count must not be negative")
	}
	r, err := e.Hooks.openGPUs()
	if err != nil {
		if errors.Is(err, smi.ErrNoDriver) {
			return fmt.Errorf("%w: batchfit watch needs an NVIDIA GPU and its driver on this machine", err)
		}
		return err
	}
	defer r.Close()
	var rec *outfile.File
	if *out != "" {
		if rec, err = outfile.Create(*out); err != nil {
			return fmt.Errorf("creating %s: %w", *out, err)
		}
		// The samples recorded replace the file there; a watch that
		// failed (a full disk) leaves it.
		defer func() {
			if err != nil {
				rec.Abort()
				return
			}
			err = rec.Commit()
		}()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)
	tty := isTerminal(stdout) && !*asJSON
	var prev []smi.GPU
	for n := 0; *count == 0 || n < *count; n++ {
		if n > 0 {
			select {
			case <-stop:
				return nil
			case <-time.After(*interval):
			}
		}
		gpus, err := r.Read()
		if err != nil {
			return fmt.Errorf("reading the GPUs: %w", err)
		}
		frame := watchFrame(e.Hooks.clock(), gpus, readRuns(e.Hooks.runs(), e.Hooks.exists))
		if rec != nil {
			b, _ := json.Marshal(frame)
			if _, err := rec.Write(append(b, '\n')); err != nil {
				return fmt.Errorf("writing %s: %w", *out, err)
			}
		}
		if *asJSON {
			b, _ := json.Marshal(frame)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		if tty {
			fmt.Fprint(stdout, "\033[H\033[2J")
		} else if n > 0 {
			fmt.Fprintln(stdout)
		}
		for _, line := range processChanges(prev, gpus) {
			fmt.Fprintln(stdout, line)
		}
		writeWatch(stdout, frame, e.Hooks.location())
		prev = gpus
	}
	return nil
}

// readRuns reads the states 'batchfit run' publishes, by the child's PID;
// the state of a process that no longer exists is left out.
func readRuns(dir string, exists func(pid int) bool) map[int]RunState {
	out := map[int]RunState{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil || len(b) > record.MaxLine {
			continue
		}
		var st RunState
		if json.Unmarshal(b, &st) != nil || st.PID <= 0 {
			continue
		}
		if !exists(st.PID) {
			continue
		}
		out[st.PID] = st
	}
	return out
}

func watchFrame(now time.Time, gpus []smi.GPU, runs map[int]RunState) WatchFrame {
	f := WatchFrame{Kind: "gpus", Time: now.UTC().Format(time.RFC3339Nano)}
	for _, g := range gpus {
		wg := WatchGPUJSON{GPU: g}
		wg.GPU.Processes = nil
		procs := append([]smi.Process(nil), g.Processes...)
		sort.Slice(procs, func(i, j int) bool { return procs[i].PID < procs[j].PID })
		for _, p := range procs {
			wp := WatchProcessJSON{Process: p}
			if st, ok := runs[p.PID]; ok {
				wp.Command, wp.Args, wp.Job, wp.PyTorch, wp.Start = st.Command, st.Args, st.Job, st.Last, st.Start
				if st.Last != nil && st.Last.Reserved != nil && p.Used >= 0 {
					o := p.Used - *st.Last.Reserved
					wp.Outside = &o
				}
			}
			wg.Processes = append(wg.Processes, wp)
		}
		if wg.Processes == nil {
			wg.Processes = []WatchProcessJSON{}
		}
		f.GPUs = append(f.GPUs, wg)
	}
	return f
}

// processChanges names the processes that appeared on or left a GPU since
// the last reading.
func processChanges(prev, cur []smi.GPU) []string {
	if prev == nil {
		return nil
	}
	key := func(gpu, pid int) string { return strconv.Itoa(gpu) + "/" + strconv.Itoa(pid) }
	before := map[string]smi.Process{}
	for _, g := range prev {
		for _, p := range g.Processes {
			before[key(g.Index, p.PID)] = p
		}
	}
	var out []string
	now := map[string]bool{}
	for _, g := range cur {
		for _, p := range g.Processes {
			now[key(g.Index, p.PID)] = true
			if _, ok := before[key(g.Index, p.PID)]; !ok {
				out = append(out, fmt.Sprintf("+ process %d (%s) started on GPU %d with %s", p.PID, orUnknown(p.Name), g.Index, usedText(p.Used)))
			}
		}
	}
	for _, g := range prev {
		for _, p := range g.Processes {
			if !now[key(g.Index, p.PID)] {
				out = append(out, fmt.Sprintf("- process %d (%s) left GPU %d, which it held %s of", p.PID, orUnknown(p.Name), g.Index, usedText(p.Used)))
			}
		}
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "name unknown"
	}
	return s
}

func usedText(n int64) string {
	if n < 0 {
		return "memory NVML cannot attribute"
	}
	return report.FormatBytes(n)
}

func percent(n int) string {
	if n < 0 {
		return "—"
	}
	return strconv.Itoa(n) + "%"
}

func writeWatch(w io.Writer, f WatchFrame, zone *time.Location) {
	t, _ := time.Parse(time.RFC3339Nano, f.Time)
	fmt.Fprintf(w, "%s\n", t.In(zone).Format("15:04:05"))
	if len(f.GPUs) == 0 {
		fmt.Fprintln(w, "no GPUs")
	}
	for _, g := range f.GPUs {
		fmt.Fprintf(w, "GPU %d  %s  used %s of %s, %s free · utilisation %s, memory %s\n", g.Index, g.Name, report.FormatBytes(g.Used), report.FormatBytes(g.Total),
			report.FormatBytes(g.Free), percent(g.Util), percent(g.MemUtil))
		if len(g.Processes) == 0 {
			fmt.Fprintln(w, "  no processes")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  pid\tprocess\tused (NVML)\tPyTorch reserved\tallocated\tmax allocated\toutside PyTorch\tstep\t")
		for _, p := range g.Processes {
			line := fmt.Sprintf("  %d\t%s\t%s\t", p.PID, orUnknown(p.Name), usedText(p.Used))
			if py := p.PyTorch; py != nil && py.Reserved != nil {
				outside := "—"
				if p.Outside != nil {
					outside = report.FormatBytes(*p.Outside)
				}
				line += fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t", report.FormatBytes(*py.Reserved), report.FormatBytes(*py.Allocated), report.FormatBytes(*py.MaxAllocated), outside, py.Step)
			} else if p.Command != nil {
				line += "\t\t\t\tstarting\t"
			} else {
				line += "\t\t\t\t\t"
			}
			fmt.Fprintln(tw, line)
		}
		tw.Flush()
	}
}
