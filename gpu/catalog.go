package gpu

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/suggest"
)

const mib = 1 << 20

// GPU is one catalog entry.
type GPU struct {
	Name        string // catalog name, e.g. "h100-80gb"
	Marketing   string // the name the device reports
	Capacity    int64  // bytes, nvidia-smi memory.total
	Major       int    // compute capability major
	Minor       int
	ContextSize int64 // bytes taken by the CUDA context and driver outside PyTorch's allocator
	Family      string
}

// The context sizes are per architecture: a maintainer puts it at about
// 300 MB with lazy module loading (pytorch issue 107667); cuDNN and cuBLAS
// handles and their kernels add to it on first use. These figures are
// estimates until measured; measured values replace them.
var contextByFamily = map[string]int64{
	"volta":     400 * mib,
	"turing":    400 * mib,
	"ampere":    450 * mib,
	"ada":       450 * mib,
	"hopper":    500 * mib,
	"blackwell": 550 * mib,
}

var catalog = []GPU{
	{Name: "h100-80gb", Marketing: "NVIDIA H100 80GB HBM3", Capacity: 81559 * mib, Major: 9, Family: "hopper"},
	{Name: "h100-pcie", Marketing: "NVIDIA H100 PCIe", Capacity: 81559 * mib, Major: 9, Family: "hopper"},
	{Name: "h200", Marketing: "NVIDIA H200", Capacity: 143771 * mib, Major: 9, Family: "hopper"},
	{Name: "gh200", Marketing: "NVIDIA GH200 480GB", Capacity: 97871 * mib, Major: 9, Family: "hopper"},
	{Name: "b200", Marketing: "NVIDIA B200", Capacity: 183359 * mib, Major: 10, Family: "blackwell"},
	{Name: "a100-80gb", Marketing: "NVIDIA A100-SXM4-80GB", Capacity: 81920 * mib, Major: 8, Family: "ampere"},
	{Name: "a100-40gb", Marketing: "NVIDIA A100-SXM4-40GB", Capacity: 40960 * mib, Major: 8, Family: "ampere"},
	{Name: "a10g", Marketing: "NVIDIA A10G", Capacity: 23028 * mib, Major: 8, Minor: 6, Family: "ampere"},
	{Name: "a10", Marketing: "NVIDIA A10", Capacity: 23028 * mib, Major: 8, Minor: 6, Family: "ampere"},
	{Name: "a6000", Marketing: "NVIDIA RTX A6000", Capacity: 49140 * mib, Major: 8, Minor: 6, Family: "ampere"},
	{Name: "rtx-3090", Marketing: "NVIDIA GeForce RTX 3090", Capacity: 24576 * mib, Major: 8, Minor: 6, Family: "ampere"},
	{Name: "l4", Marketing: "NVIDIA L4", Capacity: 23034 * mib, Major: 8, Minor: 9, Family: "ada"},
	{Name: "l40s", Marketing: "NVIDIA L40S", Capacity: 46068 * mib, Major: 8, Minor: 9, Family: "ada"},
	{Name: "rtx-4090", Marketing: "NVIDIA GeForce RTX 4090", Capacity: 24564 * mib, Major: 8, Minor: 9, Family: "ada"},
	{Name: "t4", Marketing: "Tesla T4", Capacity: 15360 * mib, Major: 7, Minor: 5, Family: "turing"},
	{Name: "v100-16gb", Marketing: "Tesla V100-SXM2-16GB", Capacity: 16384 * mib, Major: 7, Family: "volta"},
	{Name: "v100-32gb", Marketing: "Tesla V100-SXM2-32GB", Capacity: 32768 * mib, Major: 7, Family: "volta"},
}

func init() {
	for i := range catalog {
		catalog[i].ContextSize = contextByFamily[catalog[i].Family]
	}
}

// All lists the catalog sorted by name.
func All() []GPU {
	out := append([]GPU(nil), catalog...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup finds a GPU by catalog name, case-insensitive, or accepts an
// explicit capacity ("80GB", "80GiB", "81559MiB"), which gets a Hopper-class
// compute capability and context.
func Lookup(name string) (GPU, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for _, g := range catalog {
		if g.Name == key || strings.ToLower(g.Marketing) == key || strings.ReplaceAll(g.Name, "-", "") == strings.ReplaceAll(key, "-", "") {
			return g, nil
		}
	}
	if n, err := ParseSize(name); err == nil {
		if n <= 0 {
			return GPU{}, fmt.Errorf("gpu capacity must be positive, got %q", name)
		}
		return GPU{Name: name, Marketing: "custom " + name, Capacity: n, Major: 9, Family: "hopper", ContextSize: contextByFamily["hopper"]}, nil
	}
	var names []string
	for _, g := range catalog {
		names = append(names, g.Name)
	}
	near := nearest(key, names)
	if len(near) > 0 {
		return GPU{}, fmt.Errorf("unknown gpu %q; did you mean %s? (see 'batchfit gpus', or give a capacity such as 80GB)", name, strings.Join(near, ", "))
	}
	return GPU{}, fmt.Errorf("unknown gpu %q (see 'batchfit gpus', or give a capacity such as 80GB)", name)
}

func nearest(key string, names []string) []string {
	var out []string
	for _, n := range suggest.Nearest(key, names, 4) {
		out = append(out, strconv.Quote(n))
	}
	return out
}

// ParseSize reads a byte size the way people write them: "80GB", "80GiB",
// "81559MiB", "1.5 GiB", "512", "20 MB". Like nvidia-smi and PyTorch, both
// the decimal-looking and binary units mean powers of 1024.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (B, KiB, MiB, GiB, TiB)", s)
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB or TiB)", s, t[i:])
	}
	if v*mult > 1<<60 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return int64(v * mult), nil
}
