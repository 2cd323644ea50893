package cost

import (
	"math"

	"github.com/batchfit/batchfit/gpu"
)

// The physical model of one kernel's device time, beside the roofline
// bound. Four parts, each from a published rule:
//
//   - Matrix products (cuBLAS GEMMs, cuDNN's implicit-GEMM convolutions)
//     run as CTA tiles, one wave of tiles across the GPU's SMs after
//     another. NVIDIA's "Matrix Multiplication Background User's Guide"
//     (DU-09799-001, §2.3 and §3): tile quantization pads each output
//     dimension to the tile (128 wide for a dimension of at least 128, 64
//     below), wave quantization rounds the tiles up to whole waves of
//     SMs × tiles-per-SM, and a product with fewer tiles than SMs splits
//     its inner dimension across CTAs (cuBLAS's split-K), each chunk at
//     least kChunk deep. A wave runs at the achievable share of the peak
//     (gpu.Achievable.Matmul).
//   - Tensor-core alignment (same guide, §2.2 "Tensor Core Requirements"):
//     half, bfloat16 and TF32 products whose inner dimension or output
//     columns are not a multiple of 8 elements (16 bytes) lose the
//     vectorised loads; cuBLAS ≥ 11 still runs them on the tensor cores,
//     charged here at half the aligned rate (unalignedShare).
//   - cuBLAS's GEMMs (Linear, matmul, bmm) run at their own share of the
//     peak (gpu.Achievable.GEMM), above cuDNN's implicit-GEMM
//     convolutions, which build each tile's operand from the image as they
//     load it (gpu.Achievable.Matmul): one figure for every GPU, fitted
//     within the guide's 70–90 % for large half-precision GEMMs.
//   - Grouped and depthwise convolutions have too little arithmetic per
//     byte for the tensor cores' tiles: they are timed by their traffic at
//     a share of the achievable bandwidth (gpu.Achievable.Depthwise: their
//     kernels re-read each input element for every filter tap and reduce
//     the weight gradient per channel; PyTorch issue 18631 measures 24 %
//     of a Titan Xp's bandwidth for a 3×3 depthwise forward), and never
//     faster than their arithmetic at the CUDA cores' FP32 rate.
//   - Every other kernel moves its bytes at the achievable share of the
//     datasheet bandwidth (gpu.Achievable.Bandwidth), not the datasheet's.
//
// No kernel takes less than KernelGPU on the device. The host side — the
// dispatcher and cudaLaunchKernel — is timed in stream.go.

const (
	// KernelGPU is the least device time of one kernel, seconds: the
	// launch latency of an empty kernel measured back to back in a stream,
	// about 2.5 µs on Volta to Hopper (Jia et al., "Dissecting the NVIDIA
	// Volta GPU Architecture via Microbenchmarking", 2018, and the Turing
	// and Ampere follow-ups, which report 2–3 µs).
	KernelGPU = 2.5e-6
	// kChunk is the least inner depth of one split-K chunk: four of the
	// 32-deep K tiles a CTA loads per main-loop iteration.
	kChunk = 128
	// unalignedShare is the rate of a tensor-core product with a dimension
	// not a multiple of 8, relative to an aligned one.
	unalignedShare = 0.5
)

// machine is a GPU's figures the physical model needs.
type machine struct {
	sms  float64
	mm   float64 // achievable share of the matmul peaks (cuDNN's convolutions)
	gemm float64 // achievable share for cuBLAS's GEMMs
	bw   float64 // achievable bandwidth, bytes/s
	dw   float64 // bandwidth of grouped and depthwise convolutions, bytes/s
	fp   float64 // FP32 CUDA-core peak
}

func newMachine(r gpu.Rates) machine {
	m := machine{sms: float64(r.SMs), mm: r.Achievable.Matmul, gemm: r.Achievable.GEMM, bw: r.Bandwidth * r.Achievable.Bandwidth, fp: r.FP32}
	if m.mm <= 0 {
		m.mm = 1
	}
	if m.gemm <= 0 {
		m.gemm = m.mm
	}
	m.dw = m.bw
	if d := r.Achievable.Depthwise; d > 0 {
		m.dw = m.bw * d
	}
	if m.bw <= 0 {
		m.bw = r.Bandwidth
	}
	return m
}

// gemmTime is the device time of batch products of [M, K] by [K, N] at
// the given peak, and the extra bytes split-K's partial sums move.
func (m machine) gemmTime(peak, share, rows, inner, cols, batch float64, tensor bool) (secs, extra float64) {
	rate := peak * share
	if tensor && (math.Mod(inner, 8) != 0 || math.Mod(cols, 8) != 0) {
		rate *= unalignedShare
	}
	if m.sms <= 0 || rows <= 0 || cols <= 0 || inner <= 0 {
		return 2 * batch * rows * inner * cols / rate, 0
	}
	tm, tn := tile(rows), tile(cols)
	perSM := (128 * 128) / (tm * tn) // smaller tiles share an SM
	slots := m.sms * perSM
	tiles := batch * math.Ceil(rows/tm) * math.Ceil(cols/tn)
	split := 1.0
	if tiles < slots {
		split = math.Max(1, math.Min(math.Floor(slots/tiles), math.Floor(inner/kChunk)))
	}
	waves := math.Ceil(tiles * split / slots)
	depth := math.Ceil(inner / split)
	secs = waves * 2 * tm * tn * depth / (rate / slots)
	if split > 1 {
		extra = 2 * tiles * tm * tn * split * 4 // float32 partial sums written and read back
	}
	return secs, extra
}

func tile(d float64) float64 {
	if d >= 128 {
		return 128
	}
	return 64
}
