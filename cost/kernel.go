package cost

import (
	"math"

	"github.com/batchfit/batchfit/gpu"
)

// The physical model of one kernel's device time, beside the roofline
// bound, each part from a published rule or measurement:
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
//     peak (gpu.Achievable.GEMM), apart from cuDNN's implicit-GEMM
//     convolutions, which build each tile's operand from the image as they
//     load it (gpu.Achievable.Matmul): one figure per architecture
//     (gpu/catalog.go says why Hopper's is below the guide's 70–90 %).
//   - Grouped and depthwise convolutions have too little arithmetic per
//     byte for the tensor cores' tiles. Their kernels — cuDNN's, and
//     PyTorch's conv_depthwise2d (aten/src/ATen/native/cuda/
//     DepthwiseConv2d.cu: a thread per output element looping over the
//     kh·kw taps with its index arithmetic and bounds checks, and a
//     weight gradient of one block per channel and tap reducing over
//     N·OH·OW) — are bound by the SMs issuing those instructions and
//     loads, not by DRAM: they move their operands at a rate per SM per
//     clock, at most the achievable bandwidth, and never faster than
//     their arithmetic at the CUDA cores' FP32 rate. The rate follows the
//     layout (gpu.Achievable.Depthwise, DepthwiseCL): Hopper's NHWC
//     kernels for channels-last tensors are three times as fast as the
//     NCHW ones on a 3×3 filter and bound by their multiply-adds as it
//     grows, so those pay their bytes at the achievable bandwidth and
//     their multiply-adds (DepthwiseCLMAC); measured kernel by
//     kernel on an H200 (gpu/catalog.go, docs/accuracy.md §4.7).
//     PyTorch issue 18631's 3×3 depthwise forward moves 2.8 bytes per SM
//     per clock on a Titan Xp (131 GB/s, 24 % of its bandwidth).
//   - The layout transposes cuDNN runs around tensor-core convolutions of
//     NCHW tensors (timer.transposes) compute each element's source and
//     destination index: they move elements at a rate per SM per clock
//     (gpu.Achievable.Transpose) whatever their width, at most the
//     achievable bandwidth: 2.35 on an H200, the median of its profiles'
//     input transposes (docs/accuracy.md §4.7). A 3×3 convolution runs
//     three forward and six backward; a 1×1, stride-1 one either two and
//     four around an implicit GEMM or none, as a product per image over
//     the [C, H·W] planes, whichever is faster (timer.pointwise).
//   - Batch norm in training on an NCHW tensor runs cuDNN's
//     CUDNN_BATCHNORM_SPATIAL kernels: PyTorch asks for the persistent
//     mode only for channels-last input (getCudnnBatchNormMode,
//     aten/src/ATen/native/cudnn/BatchNorm.cpp, which keeps SPATIAL for
//     NCHW after the persistent mode's accuracy losses on ResNeXt-101).
//     Those kernels reduce each channel in one block (their names:
//     bn_fw_tr_1C11, bn_bw_1C11, "1C11" the 1×C×1×1 parameters), so a
//     layer of few channels leaves most SMs idle: the forward passes over
//     its input three times (statistics, normalization read and write),
//     the backward five (the two reductions' reads of x and dy, then x,
//     dy and dx again), each block moving bnBlock elements a clock
//     whatever their width, as the transposes do, and the SMs at most
//     bnSM each (timer.spatialBatchNorm). Measured on an
//     H200 (validation/kernels_gpu.py, testdata/throughput/kernels-h200:
//     ResNet-18, ResNet-50, DenseNet-121, MobileNetV3-Large and
//     EfficientNet-B0 in NCHW at batch 256): 1.35 G elements a second per
//     channel forward and 0.68 backward up to 128 channels, about 250 G
//     at a thousand; the two figures give each model's batch-norm time
//     within 2 % (TestSpatialBatchNormProfiles). Channels-last input runs
//     the persistent kernels, timed by the bandwidth as every other.
//   - A layer norm's forward is PyTorch's vectorized_layer_norm_kernel
//     (aten/src/ATen/native/cuda/layer_norm_kernel.cu), launched with one
//     block per row (blocks(M)), each reducing its row's statistics
//     across the block before it writes the row: beyond its bytes, each
//     row costs lnRow SM clock cycles, which short rows of many make
//     felt (ConvNeXt's and Swin's 96-channel stages: 802,816 rows of 96,
//     61 G elements a second, against 274 G for ViT's rows of 768).
//     Measured on an H200: 285 cycles, each of the 101 forward calls of
//     the profiled ViT-B/16, GPT-2, Swin-T and ConvNeXt-T steps within
//     10 % (TestLayerNormProfiles).
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
	// bnBlock and bnSM are the elements a clock cycle that one channel's
	// block of cuDNN's spatial batch-norm kernels moves in one pass, and
	// that one SM moves whatever its blocks (the batch-norm rule above).
	bnBlock = 2.05
	bnSM    = 3.5
	// lnRow is the SM clock cycles one row of a layer norm's forward costs
	// beyond its bytes (the layer-norm rule above).
	lnRow = 285
)

// machine is a GPU's figures the physical model needs.
type machine struct {
	sms  float64
	mm   float64 // achievable share of the matmul peaks (cuDNN's convolutions)
	gemm float64 // achievable share for cuBLAS's GEMMs
	bw   float64 // achievable bandwidth, bytes/s
	dw   float64 // bandwidth of grouped and depthwise convolutions, bytes/s
	dwcl float64 // the same for channels-last tensors
	dwmc float64 // multiply-adds/s of the channels-last depthwise kernels (0: none charged)
	tr   float64 // elements/s the NCHW layout transposes move (0: no per-SM rate, the bandwidth's)
	bnb  float64 // elements/s one channel's block of cuDNN's spatial batch norm moves (0: the bandwidth's)
	bns  float64 // elements/s all SMs move in those kernels
	lnr  float64 // seconds a row of a layer norm's forward costs beyond its bytes
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
	if m.bw <= 0 {
		m.bw = r.Bandwidth
	}
	m.dw = m.bw
	if c := smClocks(r); c > 0 {
		if d := r.Achievable.Depthwise; d > 0 {
			m.dw = min(m.bw, d*c)
		}
		switch d := r.Achievable.DepthwiseCL; {
		case d > 0:
			m.dwcl = min(m.bw, d*c)
		case r.Achievable.DepthwiseCLMAC > 0:
			m.dwcl = m.bw
		}
		m.dwmc = r.Achievable.DepthwiseCLMAC * c
		m.tr = r.Achievable.Transpose * c
		m.bnb = bnBlock * c / m.sms
		m.bns = bnSM * c
		m.lnr = lnRow / c
	}
	if m.dwcl <= 0 {
		m.dwcl = m.dw
	}
	return m
}

// smClocks is the GPU's SM clock cycles a second, SMs × boost clock: what
// the per-SM rates of the depthwise kernels and the layout transposes
// scale with. A GPU whose boost clock is not published (the B200) takes
// it from its FP32 peak, SMs × clock × 128 FP32 lanes × 2 on Blackwell
// (NVIDIA Blackwell architecture technical brief); without an SM count
// there are no per-SM rates (0), as there is no tile model.
func smClocks(r gpu.Rates) float64 {
	switch {
	case r.SMs <= 0:
		return 0
	case r.BoostMHz > 0:
		return float64(r.SMs) * r.BoostMHz * 1e6
	}
	return r.FP32 / (2 * 128)
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
