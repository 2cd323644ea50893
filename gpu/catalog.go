package gpu

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/suggest"
)

const mib = 1 << 20

// GPU is one catalog entry.
type GPU struct {
	Name      string // catalog name, e.g. "h100-80gb"
	Marketing string // the name the device reports
	// Capacity is what PyTorch can use, bytes: the total cudaMemGetInfo
	// reports, which PyTorch's out-of-memory message prints as "total
	// capacity". Every fit decision compares against it.
	Capacity int64
	// SMITotal is nvidia-smi's memory.total, bytes: more than Capacity by
	// what the driver keeps for itself.
	SMITotal int64
	// CapacityFrom says where Capacity comes from: the public out-of-memory
	// messages that printed it, or how it was derived.
	CapacityFrom string
	// CapacityDerived is set when no real message gave Capacity and it was
	// derived from nvidia-smi's total (see capacityShare).
	CapacityDerived bool
	Major           int // compute capability major
	Minor           int
	ContextSize     int64 // bytes taken by the CUDA context and driver outside PyTorch's allocator
	Family          string
	// Rates are the peak throughputs the step-time model runs against.
	Rates Rates
	// Link is how the GPU reaches its peers (links.go).
	Link Link
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
	// SMs is the number of streaming multiprocessors and BoostMHz the
	// boost clock the datasheet's peaks are computed at (the
	// architecture whitepapers: peak = SMs × clock × operations per SM per
	// clock); the step-time model quantizes matrix products into waves
	// over the SMs.
	SMs      int
	BoostMHz float64
	// SMSource names where SMs and BoostMHz come from.
	SMSource string
	// Achievable is the share of the peaks real kernels reach.
	Achievable Achievable
}

// Achievable is the share of a GPU's peaks that real kernels reach, and
// the rates per SM of the kernels bound by their instructions rather than
// by the peaks: the step-time model's constants, fitted on the throughput
// calibration set (docs/accuracy.md §4.1, §4.4) within the ranges the
// sources give.
type Achievable struct {
	// Matmul is the share of the dense matmul peak a large, aligned,
	// fully occupied cuDNN implicit-GEMM convolution reaches.
	Matmul float64
	// GEMM is the share of the dense matmul peak a large, aligned, fully
	// occupied cuBLAS GEMM reaches (0: Matmul's).
	GEMM float64
	// Depthwise is the bytes of operands per SM per clock cycle grouped
	// and depthwise convolution kernels move, at most the achievable
	// bandwidth (0: the achievable bandwidth). One figure for every GPU.
	Depthwise float64
	// DepthwiseCL is Depthwise for channels-last tensors, which cuDNN's
	// NHWC depthwise kernels take, and DepthwiseCLMAC the multiply-adds
	// per SM per clock cycle those kernels do besides (0: none charged):
	// their time is the sum of the two. DepthwiseCL 0 is the achievable
	// bandwidth where DepthwiseCLMAC is set, Depthwise where it is not.
	DepthwiseCL    float64
	DepthwiseCLMAC float64
	// Bandwidth is the share of the datasheet's memory bandwidth a large
	// streaming kernel (copy, elementwise) reaches.
	Bandwidth float64
	// Transpose is the elements per SM per clock cycle the layout
	// transposes cuDNN runs around a tensor-core convolution of NCHW
	// tensors move (each read once and written once), at most the
	// achievable bandwidth (0: the achievable bandwidth). One figure for
	// every GPU.
	Transpose float64
	// Source says where the figures come from.
	Source string
}

const tera = 1e12

// Known reports whether the rates were filled in.
func (r Rates) Known() bool { return r.FP32 > 0 && r.Bandwidth > 0 }

// The context sizes are per architecture: a maintainer puts it at about
// 300 MB with lazy module loading (pytorch issue 107667); cuDNN and cuBLAS
// handles and their kernels add to it on first use (under 2.11 the
// profile adds the kernels a training step loads: profile.LazyModules).
// These figures are estimates until measured; measured values replace
// them: hopper's is an H200's after torch.cuda.init, NVML's per-process
// figure less memory_reserved (PyTorch 2.11.0+cu130, driver 580.159.04;
// testdata/measured/h200-torch2.11.json, context_bytes of every case:
// 543,162,368 bytes).
// EagerContextSize is the CUDA context when every kernel of libtorch,
// cuDNN and cuBLAS loads at start-up: PyTorch built for a CUDA runtime
// before 11.7, which has no lazy module loading (pytorch pull request
// 86509), or CUDA_MODULE_LOADING=EAGER. The one published measurement on a
// named GPU is the Hugging Face transformers guide's (2022, V100, torch
// about 1.10): 1343 MiB outside the allocator; a maintainer puts it at
// more than 1000 MB (pytorch issue 107667). docs/accuracy.md §3.1.
const EagerContextSize = 1343 * mib

var contextByFamily = map[string]int64{
	"volta":     400 * mib,
	"turing":    400 * mib,
	"ampere":    450 * mib,
	"ada":       450 * mib,
	"hopper":    518 * mib,
	"blackwell": 550 * mib,
}

// achievableByArch holds the step-time model's three fitted constants of
// each architecture, by compute capability (GA100's sm_80 and GA10x's
// sm_86 are different SM designs: sm_86 doubles the FP32 lanes and halves
// the tensor cores' FP16-with-FP32-accumulate rate on GeForce parts): the
// share of the dense peak cuDNN's convolutions reach (0.50–0.90), the
// share cuBLAS's GEMMs reach (0.45–0.95) and the share of the bandwidth
// streaming kernels reach (0.70–0.93). The sources bound them: large
// cuBLAS half-precision GEMMs reach 70–90 % of the dense tensor peak
// (NVIDIA's Matrix Multiplication Background User's Guide, §2.3, A100),
// a bfloat16 GEMM of 8193 × 2501 × 5008 on an H100 509 TFLOP/s, 51 % of
// its 989 (meta-pytorch/float8_experimental pull request 145, its aligned
// twin 502), and STREAM-like copies 80–93 % of the datasheet bandwidth
// (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
// Microbenchmarking", 2018; Abdelkhalik et al., "Demystifying the Nvidia
// Ampere Architecture through Microbenchmarking", 2022; Luo et al.,
// "Benchmarking and Dissecting the Nvidia Hopper GPU Architecture",
// 2024). An architecture the calibration set has no row for takes the
// default.
//
// The GEMM share is per architecture because the rows differ by
// architecture: Hopper's dense peak counts its warpgroup MMA instructions
// at the boost clock (NVIDIA H100 Tensor Core GPU architecture
// whitepaper), and the GEMMs of eager training reach about half of it, as
// the float8_experimental H100 GEMM above does, where Ampere's reach 0.8
// (torchtitan's Llama rows on 64 A100s) and GA102's nearly all (timm's
// ViT rows on an RTX 3090). The fit (TestThroughputFit, docs/accuracy.md
// §4.4) put sm_90's at 0.45 with the H200 rows of
// testdata/throughput/own-h200.csv; Hopper rows it does not fit (their
// model or GPU differs) moved with it: torchtitan's Llama 3.1 8B on 8 and
// 128 H100s (a 96 GB, 500 W part) from +71 and +66 % to +5 and +4 %,
// Lambda's BERT SQuAD rows on the H100 SXM and the H200 from +57 and
// +58 % at the median to +5 and +1 %. Refitted once with PyTorch 2.x's
// host per op (cost.Torch2Host; docs/accuracy.md §4.6): sm_70's GEMM share
// went from 0.80 to 0.45, which the V100's exact rows barely see (their
// GEMMs are classifier heads) and the V100 BERT SQuAD rows it does not fit
// confirm (from +26 % at the median, too fast though batchfit's BERT
// carries a masked-LM head the runs did not, to −19 %); nothing else of
// this table moved. Refitted again once the kernel rates measured on the
// H200 (the spatial batch norm, the transposes, the depthwise kernels,
// docs/accuracy.md §4.7) replaced the fitted ones that had absorbed the
// batch norm: sm_70's convolution share 0.90, sm_80's GEMMs 0.70, sm_86's
// convolutions 0.825, sm_89's bandwidth 0.90; sm_90's did not move. The
// fit also took sm_70's GEMM share to 0.95 on its tie-break, which its
// exact rows barely see (their GEMMs are classifier heads) and the V100
// BERT SQuAD rows it does not fit refuse (+35 % at the median, too fast
// though batchfit's BERT carries more work than the runs did): it stays at
// 0.45. Edges of the ranges reached: sm_70's convolutions (0.90) and GEMMs
// (0.45), sm_80's
// convolutions (0.50), sm_86's GEMMs (0.95), sm_90's convolutions (0.50),
// GEMMs (0.45) and bandwidth (0.70), and every architecture's bandwidth
// but sm_89's (0.70) — read as rules still missing there, not as shares to
// push further: §4.7 names the host's cost of cuDNN's calls on
// channels-last steps as one (testdata/throughput/host-conv-h200.json).
// sm_100's two rows are not
// fitted: B200's TF32 and mixed-precision ResNet-50 rows are within 4 %
// of each other, bound by something other than the GPU.
var achievableByArch = map[[2]int]Achievable{
	{7, 0}: {Matmul: 0.90, GEMM: 0.45, Depthwise: depthwiseRate, DepthwiseCL: depthwiseCLFitted, Transpose: transposeRate, Bandwidth: 0.70, Source: fitted},
	{8, 0}: {Matmul: 0.50, GEMM: 0.70, Depthwise: depthwiseRate, DepthwiseCL: depthwiseCLFitted, Transpose: transposeRate, Bandwidth: 0.70, Source: fitted},
	{8, 6}: {Matmul: 0.825, GEMM: 0.95, Depthwise: depthwiseRate, DepthwiseCL: depthwiseCLFitted, Transpose: transposeRate, Bandwidth: 0.70, Source: fitted},
	{8, 9}: {Matmul: 0.50, GEMM: gemmShare, Depthwise: depthwiseRate, DepthwiseCL: depthwiseCLFitted, Transpose: transposeRate, Bandwidth: 0.90, Source: fitted},
	{9, 0}: {Matmul: 0.50, GEMM: 0.45, Depthwise: depthwiseRate, DepthwiseCLMAC: depthwiseCLMACs, Transpose: transposeRate, Bandwidth: 0.70, Source: fitted},
}

// gemmShare is the share of the dense matmul peak cuBLAS's GEMMs reach on
// an architecture the fit sets none for: large half-precision GEMMs run at
// 70–90 % of the dense tensor peak (NVIDIA's Matrix Multiplication
// Background User's Guide, §2.3), the middle taken.
const gemmShare = 0.80

// depthwiseRate is the bytes of operands per SM per clock cycle that
// depthwise and grouped convolution kernels of NCHW tensors move (forward,
// data and weight gradients, as cost times them), one figure for every
// GPU: they do k_h·k_w multiply-adds per element on the CUDA cores
// with their index arithmetic, re-read each input element for every
// filter tap and reduce the weight gradient over N·OH·OW per channel, so
// the SMs' issue of those instructions binds them, not DRAM. The kernels
// differ by layout: on NCHW tensors PyTorch's conv_depthwise2d and cuDNN's
// nchw kernels, bound by their bytes; on channels-last ones cuDNN's NHWC
// depthwise kernels, three times as fast on a 3×3 filter but bound by their
// multiply-adds as the filter grows (a 7×7 one moves a fifth of a 3×3's
// bytes a clock), so they are charged their bytes at the achievable
// bandwidth and their multiply-adds at depthwiseCLMACs per SM per clock. Measured on an H200 at its
// catalog clock (validation/kernels_gpu.py, testdata/throughput/kernels-h200:
// every depthwise kernel of EfficientNet-B0's and MobileNetV3-Large's steps
// in both layouts and ConvNeXt-T's, whose permutes leave its 7×7 depthwise
// convolutions channels-last input, at batch 256, against the bytes and
// multiply-adds cost charges them; TestDepthwiseRateProfiles): 1.9 bytes,
// and the bandwidth plus 25 multiply-adds (sm_90's, below). PyTorch issue 18631's 3×3
// depthwise forward of a 2×32×512×512 float32 tensor took 1.02 ms on a
// Titan Xp: 134 MB on 30 SMs at 1,582 MHz, 2.8 bytes per SM per clock for
// a forward alone. (The 0.9 fitted before, docs/accuracy.md §4.4–4.6, had
// absorbed the spatial batch norm's time, §4.7.)
const (
	depthwiseRate   = 1.9
	depthwiseCLMACs = 25
)

// depthwiseCLFitted is the channels-last depthwise rate, bytes per SM per
// clock, of the GPUs before Hopper: the kernels measured above are
// Hopper's own (sm90_xmma_depthwise_convolution_*), and cuDNN runs others
// on older architectures, which no profile here records. Fitted on the
// calibration set within 0.5–6.0 (docs/accuracy.md §4.7).
const depthwiseCLFitted = 1.1

// transposeRate is the elements per SM per clock cycle that cuDNN's layout
// transposes around NCHW tensor-core convolutions move, one figure for
// every GPU: each element's NCHW and NHWC indices are computed, so the
// SMs bind them, not DRAM. Measured on an H200 at its catalog clock: the
// median of 144 input transposes of forward convolutions in the NCHW
// profiles of testdata/throughput/kernels-h200 (TestTransposeRateProfiles),
// 2.35. (The 1.6 fitted before from a V100's NCHW and channels-last step
// times had absorbed the spatial batch norm, §4.7.)
const transposeRate = 2.35

const fitted = "fitted on the throughput calibration set within the published ranges (docs/accuracy.md §4.1)"

// defaultAchievable is the middle of the published ranges.
var defaultAchievable = Achievable{Matmul: 0.75, GEMM: gemmShare, Depthwise: depthwiseRate, DepthwiseCL: depthwiseCLFitted, Transpose: transposeRate, Bandwidth: 0.85, Source: "middle of the published ranges (no calibration row)"}

// smClock is each GPU's SM count and boost clock, MHz, from the
// architecture whitepapers (Volta, Turing, Ampere GA100 and GA102, Ada,
// Hopper) and datasheets; TestCatalogPeaksFollowSMs holds each datasheet
// peak equal to SMs × clock × the architecture's operations per SM per
// clock.
var smSource = map[string]string{
	"volta":     "NVIDIA Tesla V100 GPU architecture whitepaper",
	"turing":    "NVIDIA Turing GPU architecture whitepaper, Tesla T4",
	"ampere":    "NVIDIA A100 Tensor Core GPU architecture whitepaper (GA100); NVIDIA Ampere GA102 GPU architecture whitepaper (A10, A6000, RTX 3090)",
	"ada":       "NVIDIA Ada GPU architecture whitepaper (RTX 4090, L4, L40S)",
	"hopper":    "NVIDIA H100 Tensor Core GPU architecture whitepaper (SXM5 and PCIe)",
	"blackwell": "NVIDIA Blackwell architecture technical brief (148 SMs; no boost clock published)",
}

var smClock = map[string]struct {
	SMs int
	MHz float64
}{
	"h100-80gb": {132, 1830}, "h100-pcie": {114, 1620}, "h200": {132, 1830}, "gh200": {132, 1830},
	"b200":      {148, 0},
	"a100-80gb": {108, 1410}, "a100-40gb": {108, 1410},
	"a10g": {72, 1695}, "a10": {72, 1695}, "a6000": {84, 1800}, "rtx-3090": {82, 1695},
	"l4": {58, 2040}, "l40s": {142, 2520}, "rtx-4090": {128, 2520},
	"t4": {40, 1590}, "v100-16gb": {80, 1530}, "v100-32gb": {80, 1530},
}

var catalog = []GPU{
	{Name: "h100-80gb", Marketing: "NVIDIA H100 80GB HBM3", SMITotal: 81559 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 3.35e12, Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column"}},
	{Name: "h100-pcie", Marketing: "NVIDIA H100 PCIe", SMITotal: 81559 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 51 * tera, TF32: 378 * tera, FP16: 756 * tera, BF16: 756 * tera, Bandwidth: 2.0e12, Source: "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column"}},
	{Name: "h200", Marketing: "NVIDIA H200", SMITotal: 143771 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 4.8e12, Source: "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column"}},
	{Name: "gh200", Marketing: "NVIDIA GH200 480GB", SMITotal: 97871 * mib, Major: 9, Family: "hopper", Rates: Rates{FP32: 67 * tera, TF32: 494.5 * tera, FP16: 989.5 * tera, BF16: 989.5 * tera, Bandwidth: 4.0e12, Source: "NVIDIA GH200 Grace Hopper Superchip datasheet, 96 GB HBM3"}},
	{Name: "b200", Marketing: "NVIDIA B200", SMITotal: 183359 * mib, Major: 10, Family: "blackwell", Rates: Rates{FP32: 75 * tera, TF32: 1125 * tera, FP16: 2250 * tera, BF16: 2250 * tera, Bandwidth: 8.0e12, Source: "NVIDIA HGX B200 datasheet (eight-GPU figures divided by eight)"}},
	{Name: "a100-80gb", Marketing: "NVIDIA A100-SXM4-80GB", SMITotal: 81920 * mib, Major: 8, Family: "ampere", Rates: Rates{FP32: 19.5 * tera, TF32: 156 * tera, FP16: 312 * tera, BF16: 312 * tera, Bandwidth: 2.039e12, Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM column"}},
	{Name: "a100-40gb", Marketing: "NVIDIA A100-SXM4-40GB", SMITotal: 40960 * mib, Major: 8, Family: "ampere", Rates: Rates{FP32: 19.5 * tera, TF32: 156 * tera, FP16: 312 * tera, BF16: 312 * tera, Bandwidth: 1.555e12, Source: "NVIDIA A100 Tensor Core GPU datasheet, A100 40GB SXM column"}},
	{Name: "a10g", Marketing: "NVIDIA A10G", SMITotal: 23028 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 31.2 * tera, TF32: 62.5 * tera, FP16: 125 * tera, BF16: 125 * tera, Bandwidth: 600e9, Source: "NVIDIA A10 datasheet (AWS publishes no separate A10G figures)"}},
	{Name: "a10", Marketing: "NVIDIA A10", SMITotal: 23028 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 31.2 * tera, TF32: 62.5 * tera, FP16: 125 * tera, BF16: 125 * tera, Bandwidth: 600e9, Source: "NVIDIA A10 Tensor Core GPU datasheet"}},
	{Name: "a6000", Marketing: "NVIDIA RTX A6000", SMITotal: 49140 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 38.7 * tera, TF32: 77.4 * tera, FP16: 154.8 * tera, BF16: 154.8 * tera, Bandwidth: 768e9, Source: "NVIDIA RTX A6000 datasheet"}},
	{Name: "rtx-3090", Marketing: "NVIDIA GeForce RTX 3090", SMITotal: 24576 * mib, Major: 8, Minor: 6, Family: "ampere", Rates: Rates{FP32: 35.6 * tera, TF32: 35.6 * tera, FP16: 71 * tera, BF16: 71 * tera, Bandwidth: 936e9, Source: "NVIDIA Ampere GA102 GPU architecture whitepaper, GeForce RTX 3090 column"}},
	{Name: "l4", Marketing: "NVIDIA L4", SMITotal: 23034 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 30.3 * tera, TF32: 60 * tera, FP16: 121 * tera, BF16: 121 * tera, Bandwidth: 300e9, Source: "NVIDIA L4 Tensor Core GPU datasheet"}},
	{Name: "l40s", Marketing: "NVIDIA L40S", SMITotal: 46068 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 91.6 * tera, TF32: 183 * tera, FP16: 366 * tera, BF16: 366 * tera, Bandwidth: 864e9, Source: "NVIDIA L40S GPU datasheet"}},
	{Name: "rtx-4090", Marketing: "NVIDIA GeForce RTX 4090", SMITotal: 24564 * mib, Major: 8, Minor: 9, Family: "ada", Rates: Rates{FP32: 82.6 * tera, TF32: 82.6 * tera, FP16: 165.2 * tera, BF16: 165.2 * tera, Bandwidth: 1008e9, Source: "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090 column"}},
	{Name: "t4", Marketing: "Tesla T4", SMITotal: 15360 * mib, Major: 7, Minor: 5, Family: "turing", Rates: Rates{FP32: 8.1 * tera, TF32: 0, FP16: 65 * tera, BF16: 0, Bandwidth: 320e9, Source: "NVIDIA T4 Tensor Core GPU datasheet"}},
	{Name: "v100-16gb", Marketing: "Tesla V100-SXM2-16GB", SMITotal: 16384 * mib, Major: 7, Family: "volta", Rates: Rates{FP32: 15.7 * tera, TF32: 0, FP16: 125 * tera, BF16: 0, Bandwidth: 900e9, Source: "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column"}},
	{Name: "v100-32gb", Marketing: "Tesla V100-SXM2-32GB", SMITotal: 32768 * mib, Major: 7, Family: "volta", Rates: Rates{FP32: 15.7 * tera, TF32: 0, FP16: 125 * tera, BF16: 0, Bandwidth: 900e9, Source: "NVIDIA V100 Tensor Core GPU datasheet, V100 SXM2 column"}},
}

// reported is the total capacity PyTorch printed in a real out-of-memory
// message on the GPU ("GPU 0 has a total capacity of 79.11 GiB", or before
// torch 2.1 "(GPU 0; 14.75 GiB total capacity; ...)"), in GiB as printed
// (two decimals), with the public reports that show it. Where reports
// differ (driver versions reserve different amounts) the smallest is kept.
type reported struct {
	GiB    float64
	Source string
}

var reportedCapacity = map[string]reported{
	"h200":      {139.80, "testdata/measured/h200-torch2.11-maxbatch.json (NVIDIA H200 SXM, driver 580.159.04, torch 2.11: 139.80 GiB; total_memory 150109880320 bytes)"},
	"h100-80gb": {79.11, "vllm-project/vllm#27508 (H100 80GB, torch 2.8: 79.11 GiB)"},
	"a100-80gb": {79.25, "HiDream-ai/VAREdit#6 and levihsu/OOTDiffusion#235 (A100 80GB: 79.25 GiB; Instruction-Tuning-with-GPT-4/GPT-4-LLM#16 printed 79.35)"},
	// deviceQuery's "Total amount of global memory: 40441 MBytes
	// (42405855232 bytes)" on an A100 40GB SXM4 node (Paderborn PC2
	// documentation, "NVIDIA A100 40GB with NVLINK"), which PyTorch prints
	// as 39.49 GiB; TianheWu/CoSeR#10 printed 39.50 GiB.
	"a100-40gb": {39.49, "deviceQuery on an A100-SXM4-40GB (PC2 documentation): 42405855232 bytes = 39.49 GiB; TianheWu/CoSeR#10 (A100 40GB: 39.50 GiB)"},
	"a10g":      {22.20, "XavierXiao/Dreambooth-Stable-Diffusion#18 (AWS g5.12xlarge, A10G: 22.20 GiB)"},
	"a6000":     {47.54, "google-research/semivl#18 (RTX A6000: 47.54 GiB)"},
	"rtx-3090":  {23.69, "vllm-project/vllm#2140 (GeForce RTX 3090 named by nvidia-smi: 23.69 GiB); GaoLii/DSP#10 printed 23.70"},
	"rtx-4090":  {23.52, "Soul-AILab/SoulX-FlashTalk#5 (RTX 4090 24G: 23.52 GiB); ali-vilab/VGen#104 printed 23.64, zai-org/CogVideo#36 23.68"},
	"l40s":      {44.42, "stepfun-ai/Step-Video-T2V#8 (8 x L40S: 44.42 GiB)"},
	"t4":        {14.56, "Zheng-Chong/CatVTON#133 (GCP Tesla T4, driver 535: 14.56 GiB) and AlphaGPU/leetgpu-challenges#52; older drivers printed 14.75 (hpcaitech/Open-Sora#697)"},
	"v100-16gb": {15.78, "kchengiva/Shift-GCN#34 (16GB V100: 15.78 GiB)"},
	"v100-32gb": {31.74, "liucongg/ChatGLM-Finetuning#73 and haotian-liu/LLaVA#812 (V100 32GB: 31.74 GiB)"},
}

// fromPrinted is the least byte count PyTorch prints as v GiB: its
// format_size rounds to two decimals, so the total lies in
// [v−0.005, v+0.005) GiB, and the lower end is the safe one.
func fromPrinted(v float64) int64 {
	return int64((v - 0.005) * (1 << 30))
}

// capacityShare is the rule for a GPU no real message covers: PyTorch's
// total over nvidia-smi's, at its smallest among the measured GPUs of the
// same family (architecture), or among all measured GPUs when the family
// has none. The share shrinks as the driver keeps more, so the smallest
// errs towards less capacity.
func capacityShare(family string) (share float64, from []string) {
	for pass := 0; pass < 2 && from == nil; pass++ {
		share = 1
		for _, g := range catalog {
			if g.CapacityDerived || (pass == 0 && g.Family != family) {
				continue
			}
			if s := float64(g.Capacity) / float64(g.SMITotal); s < share {
				share, from = s, []string{g.Name}
			}
		}
	}
	return share, from
}

func init() {
	for i := range catalog {
		g := &catalog[i]
		g.ContextSize = contextByFamily[g.Family]
		g.Rates.SMs, g.Rates.BoostMHz = smClock[g.Name].SMs, smClock[g.Name].MHz
		g.Rates.SMSource = smSource[g.Family]
		g.Rates.Achievable = defaultAchievable
		if a, ok := achievableByArch[[2]int{g.Major, g.Minor}]; ok {
			g.Rates.Achievable = a
		}
		g.Link = links[g.Name]
		g.Link.Major = g.Major
		if r, ok := reportedCapacity[g.Name]; ok {
			g.Capacity = fromPrinted(r.GiB)
			g.CapacityFrom = fmt.Sprintf("cudaMemGetInfo's total as PyTorch prints it, %.2f GiB: %s", r.GiB, r.Source)
		} else {
			g.CapacityDerived = true
		}
	}
	for i := range catalog {
		g := &catalog[i]
		if !g.CapacityDerived {
			continue
		}
		share, from := capacityShare(g.Family)
		g.Capacity = int64(float64(g.SMITotal)*share) / mib * mib
		g.CapacityFrom = fmt.Sprintf("derived (no real message found): nvidia-smi's %d MiB × %.4f, the smallest share PyTorch reported of nvidia-smi's total (%s)",
			g.SMITotal/mib, share, from[0])
	}
}

// All lists the catalog sorted by name.
func All() []GPU {
	out := append([]GPU(nil), catalog...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// MinCustom is the smallest capacity a size given for --gpu may have: a
// bare number such as "80" reads as bytes, and below a GiB no training
// job fits beside a CUDA context, so such a size is a mistake.
const MinCustom = 1 << 30

// Lookup finds a GPU by catalog name, case-insensitive, or accepts an
// explicit size ("24GB", "80GiB", "81559MiB"): see Custom.
func Lookup(name string) (GPU, error) {
	return LookupLike(name, "")
}

// LookupLike is Lookup, where a size takes its speed, compute capability,
// CUDA context and capacity share from the catalog GPU named by like.
func LookupLike(name, like string) (GPU, error) {
	key := strings.ToLower(strings.TrimSpace(name))
	for _, g := range catalog {
		if g.Name == key || strings.ToLower(g.Marketing) == key || strings.ReplaceAll(g.Name, "-", "") == strings.ReplaceAll(key, "-", "") {
			if like != "" {
				return GPU{}, fmt.Errorf("--like applies to a size given for --gpu, and %q is a catalog GPU", name)
			}
			return g, nil
		}
	}
	if n, err := ParseSize(name); err == nil {
		if n < MinCustom {
			// "3090" or "4090" is a card, not 3,090 bytes: name the
			// catalog GPUs that carry it as a part of their name
			var near []string
			for _, g := range catalog {
				if slices.Contains(strings.Split(g.Name, "-"), key) {
					near = append(near, g.Name)
				}
			}
			if len(near) > 0 {
				return GPU{}, fmt.Errorf("gpu %q is %d bytes, not a GPU; did you mean %s? (a size needs its unit: 24GB, 80GiB, 81559MiB)", name, n, strings.Join(near, " or "))
			}
		}
		var base *GPU
		if like != "" {
			b, err := LookupLike(like, "")
			if err != nil {
				return GPU{}, fmt.Errorf("--like: %w", err)
			}
			base = &b
		}
		return Custom(name, n, base)
	} else if startsWithDigit(key) {
		return GPU{}, fmt.Errorf("gpu %q: %w", name, err)
	}
	var names []string
	for _, g := range catalog {
		names = append(names, g.Name)
	}
	near := nearest(key, names)
	if len(near) > 0 {
		return GPU{}, fmt.Errorf("unknown gpu %q; did you mean %s? (see 'batchfit gpus', or give a size such as 24GB)", name, strings.Join(near, ", "))
	}
	return GPU{}, fmt.Errorf("unknown gpu %q (see 'batchfit gpus', or give a size such as 24GB)", name)
}

func startsWithDigit(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }

// Custom is a GPU known only by its size, read as nvidia-smi's total (the
// figure people quote for their card). What PyTorch can use of it is that
// size times like's share of its own nvidia-smi total, or, with no like,
// the smallest share any measured GPU showed (see capacityShare). A size
// says nothing of speed: without like the GPU has no rates, so no step
// time is predicted. Without like it takes the largest CUDA context of the
// catalog and a Hopper's compute capability (the largest cuBLAS
// workspace), both erring towards more memory.
func Custom(label string, size int64, like *GPU) (GPU, error) {
	if size < MinCustom {
		return GPU{}, fmt.Errorf("gpu size %q is %d bytes; a GPU has at least 1 GiB (write the unit: 24GB, 80GiB, 81559MiB)", label, size)
	}
	g := GPU{Name: label, Marketing: "custom " + label, SMITotal: size, Major: 9, CapacityDerived: true}
	share, from := capacityShare("")
	for _, c := range contextByFamily {
		g.ContextSize = max(g.ContextSize, c)
	}
	if like != nil {
		share, from = float64(like.Capacity)/float64(like.SMITotal), []string{like.Name}
		g.Marketing = fmt.Sprintf("custom %s like %s", label, like.Name)
		g.Major, g.Minor, g.Family, g.ContextSize, g.Rates, g.Link = like.Major, like.Minor, like.Family, like.ContextSize, like.Rates, like.Link
	}
	g.Capacity = int64(float64(size)*share) / mib * mib
	g.CapacityFrom = fmt.Sprintf("derived: %s read as nvidia-smi's total, × %.4f, the share PyTorch can use on %s", label, share, from[0])
	return g, nil
}

func nearest(key string, names []string) []string {
	var out []string
	for _, n := range suggest.Nearest(key, names, 4) {
		out = append(out, strconv.Quote(n))
	}
	return out
}

// sizeUnits is what ParseSize accepts after the number, for its messages.
const sizeUnits = "B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB or TiB (all powers of 1024), or none for bytes"

// maxSize bounds a parsed size: 2^60 bytes (1 EiB), far past any device,
// so products of sizes stay inside an int64.
const maxSize = 1 << 60

// ParseSize reads a byte size the way people write them: "80GB", "80GiB",
// "81559MiB", "1.5 GiB", "512", "20 MB", "1e3MiB". Like nvidia-smi and
// PyTorch, both the decimal-looking and binary units mean powers of 1024.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a non-negative number with an optional unit: %s", s, sizeUnits)
	}
	// An exponent ("1e3GB"): no unit starts with e, so it is never a unit.
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		j := i + 1
		if j < len(t) && (t[j] == '+' || t[j] == '-') {
			j++
		}
		k := j
		for k < len(t) && t[k] >= '0' && t[k] <= '9' {
			k++
		}
		if k > j {
			i = k
		}
	}
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("size %q: %q is not a number", s, t[:i])
	}
	unit := strings.ToLower(strings.TrimSpace(t[i:]))
	mult := map[string]float64{"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
		"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q; want %s", s, t[i:], sizeUnits)
	}
	if err != nil || v*mult > maxSize {
		return 0, fmt.Errorf("size %q is too large: more than 2^60 bytes (1 EiB)", s)
	}
	return int64(v * mult), nil
}

// MaxThreadsPerSM is the device's maxThreadsPerMultiProcessor by its
// compute capability (CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability": maximum number of resident
// threads per SM): 1024 on 7.5, 1536 on 8.6, 8.9 and 12.x, 2048 on the
// others; 0 when the capability is unknown.
func (g GPU) MaxThreadsPerSM() int {
	switch {
	case g.Major == 0:
		return 0
	case g.Major == 7 && g.Minor == 5:
		return 1024
	case g.Major == 8 && (g.Minor == 6 || g.Minor == 9), g.Major == 12:
		return 1536
	}
	return 2048
}
