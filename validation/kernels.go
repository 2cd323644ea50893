package validation

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// KernelProfile is one profiled training step of validation/kernels_gpu.py:
// every CUDA kernel the step ran, each with the op that launched it.
type KernelProfile struct {
	Run      string     `json:"run"`
	Model    string     `json:"model"`
	Layout   string     `json:"layout"`
	Batch    int64      `json:"batch"`
	GPU      string     `json:"gpu"`
	Device   string     `json:"device"`
	Software string     `json:"software"`
	StepMS   float64    `json:"step_ms"`
	DeviceUS float64    `json:"device_us"`
	Strings  []string   `json:"-"`
	Ops      []KernelOp `json:"-"`
	Kernels  []Kernel   `json:"-"`
}

// KernelOp is the op that launched kernels: its name, its ancestors
// (innermost first) and the profiler's input shapes.
type KernelOp struct {
	Name   string
	Chain  []string
	Shapes [][]int64
}

// Kernel is one kernel: its name, the op that launched it (an index into
// Ops) and its duration in microseconds.
type Kernel struct {
	Name string
	Op   int
	US   float64
}

// maxProfileBytes bounds what LoadKernelProfile reads once decompressed.
const maxProfileBytes = 256 << 20

// LoadKernelProfile reads a .json.gz profile of kernels_gpu.py.
func LoadKernelProfile(path string) (*KernelProfile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading kernel profile: %w", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("reading kernel profile %s: %w", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(z, maxProfileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading kernel profile %s: %w", path, err)
	}
	if len(b) > maxProfileBytes {
		return nil, fmt.Errorf("kernel profile %s: more than %d bytes decompressed", path, maxProfileBytes)
	}
	return ParseKernelProfile(b, path)
}

// ParseKernelProfile reads a profile's JSON (decompressed); name says
// where it came from in errors.
func ParseKernelProfile(b []byte, name string) (*KernelProfile, error) {
	path := name
	var raw struct {
		KernelProfile
		Strings []string          `json:"strings"`
		Ops     []json.RawMessage `json:"ops"`
		Kernels [][3]float64      `json:"kernels"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("kernel profile %s: %w", path, err)
	}
	p := raw.KernelProfile
	p.Strings = raw.Strings
	str := func(i int, where string) (string, error) {
		if i < 0 || i >= len(p.Strings) {
			return "", fmt.Errorf("kernel profile %s: %s names string %d of %d", path, where, i, len(p.Strings))
		}
		return p.Strings[i], nil
	}
	for i, m := range raw.Ops {
		var o struct {
			Name   int
			Chain  []int
			Shapes []json.RawMessage
		}
		var tup []json.RawMessage
		if err := json.Unmarshal(m, &tup); err != nil || len(tup) != 3 {
			return nil, fmt.Errorf("kernel profile %s: op %d: expected [name, chain, shapes]", path, i)
		}
		if json.Unmarshal(tup[0], &o.Name) != nil || json.Unmarshal(tup[1], &o.Chain) != nil || json.Unmarshal(tup[2], &o.Shapes) != nil {
			return nil, fmt.Errorf("kernel profile %s: op %d: expected [string index, [string index...], [shape...]]", path, i)
		}
		var op KernelOp
		var err error
		if op.Name, err = str(o.Name, fmt.Sprintf("op %d", i)); err != nil {
			return nil, err
		}
		for _, c := range o.Chain {
			s, err := str(c, fmt.Sprintf("op %d's chain", i))
			if err != nil {
				return nil, err
			}
			op.Chain = append(op.Chain, s)
		}
		for _, sh := range o.Shapes {
			var dims []int64
			if json.Unmarshal(sh, &dims) != nil {
				dims = nil // a scalar or a list argument: no tensor shape
			}
			op.Shapes = append(op.Shapes, dims)
		}
		p.Ops = append(p.Ops, op)
	}
	for i, k := range raw.Kernels {
		name, err := str(int(k[0]), fmt.Sprintf("kernel %d", i))
		if err != nil {
			return nil, err
		}
		if int(k[1]) < 0 || int(k[1]) >= len(p.Ops) || k[2] < 0 {
			return nil, fmt.Errorf("kernel profile %s: kernel %d: op %d of %d, %g µs", path, i, int(k[1]), len(p.Ops), k[2])
		}
		p.Kernels = append(p.Kernels, Kernel{Name: name, Op: int(k[1]), US: k[2]})
	}
	return &p, nil
}
