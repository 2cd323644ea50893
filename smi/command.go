//go:build !(cgo && nvml)

package smi

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Without the nvml build tag, the readings come from the nvidia-smi
// command, which the driver installs beside NVML and which reads NVML
// itself: the figures are nvidia-smi's own, memory in MiB. This keeps a
// plain 'go build' free of C: go-nvml's cgo bindings need a C compiler and
// print a warning for every function NVML deprecates. 'go build -tags
// nvml' reads NVML in process instead (nvml.go), with byte figures and
// graphics processes too.

// The queries, as 'nvidia-smi --help-query-gpu' and
// '--help-query-compute-apps' name the fields; with nounits memory is in
// MiB and utilisation in percent.
var (
	gpuQuery  = []string{"--query-gpu=index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu,utilization.memory", "--format=csv,noheader,nounits"}
	appsQuery = []string{"--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"}
)

// maxOutput bounds what one nvidia-smi call may print.
const maxOutput = 4 << 20

type commandReader struct{ path string }

// Open finds nvidia-smi; where it is missing or cannot reach a driver the
// error is ErrNoDriver.
func Open() (Reader, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, fmt.Errorf("%w (nvidia-smi is not installed)", ErrNoDriver)
	}
	r := commandReader{path}
	if _, err := r.run(gpuQuery); err != nil {
		return nil, err
	}
	return r, nil
}

func (commandReader) Close() error { return nil }

func (r commandReader) Read() ([]GPU, error) {
	out, err := r.run(gpuQuery)
	if err != nil {
		return nil, err
	}
	gpus, err := parseGPUs(out)
	if err != nil {
		return nil, err
	}
	apps, err := r.run(appsQuery)
	if err != nil {
		return nil, err
	}
	if err := addProcesses(gpus, apps); err != nil {
		return nil, err
	}
	for i := range gpus {
		for j := range gpus[i].Processes {
			gpus[i].Processes[j].Name = processName(gpus[i].Processes[j].PID)
		}
	}
	return gpus, nil
}

// run calls nvidia-smi with args; a failure (no driver, as its "NVIDIA-SMI
// has failed because it couldn't communicate with the NVIDIA driver") is
// ErrNoDriver with nvidia-smi's first line.
func (r commandReader) run(args []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &limited{w: &out, n: maxOutput}, &limited{w: &errb, n: 4096}
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(firstLine(errb.String() + "\n" + out.String()))
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("%w: nvidia-smi: %s", ErrNoDriver, msg)
	}
	return out.Bytes(), nil
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

// limited keeps the first n bytes written to it and drops the rest.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	k := min(len(p), l.n)
	l.w.Write(p[:k])
	l.n -= k
	return len(p), nil
}

const mib = 1 << 20

// parseGPUs reads the rows of gpuQuery.
func parseGPUs(b []byte) ([]GPU, error) {
	rows, err := readRows(b, 8, "--query-gpu")
	if err != nil {
		return nil, err
	}
	var gpus []GPU
	for i, f := range rows {
		g := GPU{Name: f[1], UUID: f[2]}
		var ok bool
		if g.Index, ok = count(f[0]); !ok {
			return nil, fmt.Errorf("nvidia-smi --query-gpu: row %d: index %q is not a number", i+1, f[0])
		}
		for k, p := range []*int64{&g.Total, &g.Used, &g.Free} {
			n, ok := mebibytes(f[3+k])
			if !ok || n < 0 {
				return nil, fmt.Errorf("nvidia-smi --query-gpu: row %d: memory %q is not a number of MiB", i+1, f[3+k])
			}
			*p = n
		}
		g.Util, g.MemUtil = percent(f[6]), percent(f[7])
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// addProcesses adds the rows of appsQuery to the GPUs they name.
func addProcesses(gpus []GPU, b []byte) error {
	rows, err := readRows(b, 3, "--query-compute-apps")
	if err != nil {
		return err
	}
	for i, f := range rows {
		pid, ok := count(f[1])
		if !ok {
			return fmt.Errorf("nvidia-smi --query-compute-apps: row %d: pid %q is not a number", i+1, f[1])
		}
		// [N/A]: the driver cannot attribute memory (some containers)
		used, ok := mebibytes(f[2])
		if !ok {
			used = -1
		}
		for g := range gpus {
			if gpus[g].UUID == f[0] {
				gpus[g].Processes = append(gpus[g].Processes, Process{PID: pid, Used: used})
			}
		}
	}
	return nil
}

// readRows reads nvidia-smi's CSV (fields separated by ", "), each row
// with n fields.
func readRows(b []byte, n int, what string) ([][]string, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	var rows [][]string
	for {
		f, err := r.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi %s: %w", what, err)
		}
		if len(f) == 1 && strings.TrimSpace(f[0]) == "" {
			continue
		}
		if len(f) != n {
			return nil, fmt.Errorf("nvidia-smi %s: row %d has %d fields, want %d", what, len(rows)+1, len(f), n)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows = append(rows, f)
	}
}

func count(s string) (int, bool) {
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0
}

// mebibytes reads a figure in MiB as bytes; [N/A] and [Not Supported] are
// not figures.
func mebibytes(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, false
	}
	return n * mib, true
}

// percent reads a utilisation; -1 where nvidia-smi has none.
func percent(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 100 {
		return -1
	}
	return n
}
