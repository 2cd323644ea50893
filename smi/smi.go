package smi

import (
	"errors"
	"os"
	"strconv"
	"strings"
)

// GPU is one device as NVML reports it.
type GPU struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid,omitempty"`
	// Total, Used and Free are bytes of device memory.
	Total int64 `json:"total_bytes"`
	Used  int64 `json:"used_bytes"`
	Free  int64 `json:"free_bytes"`
	// Util and MemUtil are the percentages of time a kernel ran and the
	// memory was read or written over the driver's last sample period; -1
	// when NVML does not report them.
	Util      int       `json:"utilization_gpu"`
	MemUtil   int       `json:"utilization_memory"`
	Processes []Process `json:"processes"`
}

// Process is one process holding memory on a GPU.
type Process struct {
	PID  int    `json:"pid"`
	Name string `json:"name,omitempty"`
	// Used is the device memory the driver gave the process; -1 when NVML
	// cannot tell (some drivers inside containers).
	Used int64 `json:"used_bytes"`
}

// Reader reads the devices.
type Reader interface {
	// Read returns every GPU as it is now.
	Read() ([]GPU, error)
	Close() error
}

// ErrNoDriver is the error of Open where no driver answers: NVML cannot
// be loaded, or nvidia-smi is missing or fails.
var ErrNoDriver = errors.New("no NVIDIA driver found")

// processName is the command name of pid, as /proc gives it ("" when it
// cannot be read, as for a process of another container).
func processName(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Fake is a Reader that returns its frames in turn, then the last one
// again; Err, when set, is returned by every Read.
type Fake struct {
	Frames [][]GPU
	Err    error
	n      int
	Closed bool
}

// Read returns the next frame.
func (f *Fake) Read() ([]GPU, error) {
	if f.Err != nil {
		return nil, f.Err
	}
	if len(f.Frames) == 0 {
		return nil, nil
	}
	fr := f.Frames[min(f.n, len(f.Frames)-1)]
	f.n++
	return fr, nil
}

// Close marks the fake closed.
func (f *Fake) Close() error {
	f.Closed = true
	return nil
}
