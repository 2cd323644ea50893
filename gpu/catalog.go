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
	// Rates are the peak throughputs the step-time model runs against.
	Rates Rates
}

// Rates are a GPU's peak dense arithmetic throughputs, in FLOP/s, and its
// memory bandwidth, in bytes/s, as the vendor's datasheet gives them.
// Datasheets quote tensor-core figures "with sparsity"; these are the
// dense ones, half of those. A zero tensor rate means the GPU has no
// tensor cores for that type, and PyTorch's kernels then run on the CUDA
// cores, at the FP32 rate.
type Rates struct {
	FP32 float64 // CUDA cores, float32 (what FP32 matmuls use by default)
	TF32 float64 // tensor cores, TF32 inputs (cuDNN convolutions by default)
	FP16 float64 // tensor cores, FP16 inputs with FP32 accumulation
	BF16 float64 // tensor cores, BF16 inputs with FP32 accumulation
	// Bandwidth is the memory bandwidth, bytes/s.
	Bandwidth float64
	// Floor, when set, is the least time one kernel takes, seconds (the
	// step-time model's launch floor otherwise): for a device whose
	// per-op cost was measured.
	Floor float64
	// Source names the datasheet the figures come from.
	Source string
}

const tera = 1e12

// Known reports whether the rates were filled in.
func (r Rates) Known() bool { return r.FP32 > 0 && r.Bandwidth > 0 }

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
	{Name: "h100-80gb", Marketing: "NVIDIA H100 80GB HBM3", Capacity: 81559 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 3.35e12, Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"}},
	{Name: "h100-pcie", Marketing: "NVIDIA H100 PCIe", Capacity: 81559 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 51 * tera, TF32: 378 * tera, FP16: 756 * tera, BF16: 756 * tera, Bandwidth: 2.0e12, Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column"}},
	{Name: "h200", Marketing: "NVIDIA H200", Capacity: 143771 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 4.8e12, Source: "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"}},
	{Name: "gh200", Marketing: "NVIDIA GH200 480GB", Capacity: 97871 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 4.0e12, Source: "NVIDIA GH200 Grace Hopper Superchip datasheet, 96 GB HBM3"}},
	{Name: "b200", Marketing: "NVIDIA B200", Capacity: 183359 * mib, Major: 10, Family: "blackwell", Rates: Rates{FP32: 75 * tera, TF32: 1125 * tera, FP16: 2250 * tera, BF16: 2250 * tera, Bandwidth: 8.0e12, Source: "NVIDIA HGX B200 datasheet (eight-GPU figures divided by eight)"}},
	{Name: "a100-80gb", Marketing: "NVIDIA A100-SXM4-80GB", Capacity: 81920 * mib, Major: 8, Family: "ampere", Rates: Rates{FP32: 19.5 * tera, TF32: 156 * tera, FP16: 312 * tera, BF16: 312 * tera, Bandwidth: 2.039e12, Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column"}},
	{Name: "a100-40gb", Marketing: "NVIDIA A100-SXM4-40GB", Capacity: 40960 * mib, Major: 8, Family: "ampere", Rates: Rates{FP32: 19.5 * tera, TF32: 156 * tera, FP16: 312 * tera, BF16: 312 * tera, Bandwidth: 1.555e12, Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM column"}},
	{Name: "a10g", Marketing: "NVIDIA A10G", Capacity: 23028 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 31.2 * tera, TF32: 62.5 * tera, FP16: 125 * tera, BF16: 125 * tera, Bandwidth: 600e9, Source: "NVIDIA A10 datasheet (AWS publishes no separate A10G figures)"}},
	{Name: "a10", Marketing: "NVIDIA A10", Capacity: 23028 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 31.2 * tera, TF32: 62.5 * tera, FP16: 125 * tera, BF16: 125 * tera, Bandwidth: 600e9, Source: "NVIDIA A10 Tensor Core GPU datasheet"}},
	{Name: "a6000", Marketing: "NVIDIA RTX A6000", Capacity: 49140 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 38.7 * tera, TF32: 77.4 * tera, FP16: 154.8 * tera, BF16: 154.8 * tera, Bandwidth: 768e9, Source: "NVIDIA RTX A6000 datasheet"}},
	{Name: "rtx-3090", Marketing: "NVIDIA GeForce RTX 3090", Capacity: 24576 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 35.6 * tera, TF32: 35.6 * tera, FP16: 71 * tera, BF16: 71 * tera, Bandwidth: 936e9, Source: "NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090 column"}},
	{Name: "l4", Marketing: "NVIDIA L4", Capacity: 23034 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 30.3 * tera, TF32: 60 * tera, FP16: 121 * tera, BF16: 121 * tera, Bandwidth: 300e9, Source: "NVIDIA L4 Tensor Core GPU datasheet"}},
	{Name: "l40s", Marketing: "NVIDIA L40S", Capacity: 46068 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 91.6 * tera, TF32: 183 * tera, FP16: 366 * tera, BF16: 366 * tera, Bandwidth: 864e9, Source: "NVIDIA L40S GPU datasheet"}},
	{Name: "rtx-4090", Marketing: "NVIDIA GeForce RTX 4090", Capacity: 24564 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 82.6 * tera, TF32: 82.6 * tera, FP16: 165.2 * tera, BF16: 165.2 * tera, Bandwidth: 1008e9, Source: "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090 column"}},
	{Name: "t4", Marketing: "Tesla T4", Capacity: 15360 * mib, Major: 7, Minor: 5, Family: "turing", Rates: Rates{FP32: 8.1 * tera, TF32: 0, FP16: 65 * tera, BF16: 0, Bandwidth: 320e9, Source: "NVIDIA T4 Tensor Core GPU datasheet"}},
	{Name: "v100-16gb", Marketing: "Tesla V100-SXM2-16GB", Capacity: 16384 * mib, Major: 7, Family: "volta", Rates: Rates{FP32: 15.7 * tera, TF32: 0, FP16: 125 * tera, BF16: 0, Bandwidth: 900e9, Source: "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column"}},
	{Name: "v100-32gb", Marketing: "Tesla V100-SXM2-32GB", Capacity: 32768 * mib, Major: 7, Family: "volta", Rates: Rates{FP32: 15.7 * tera, TF32: 0, FP16: 125 * tera, BF16: 0, Bandwidth: 900e9, Source: "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column"}},
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
		// A capacity alone says nothing of speed: the step-time model
		// runs it at the rates of the Hopper-class device it stands for.
		h := catalog[0]
		return GPU{Name: name, Marketing: "custom " + name, Capacity: n, Major: 9, Family: "hopper", ContextSize: contextByFamily["hopper"], Rates: h.Rates}, nil
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
