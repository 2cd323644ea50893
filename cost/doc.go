// Package cost predicts how long a training step takes on a GPU, from the
// same graph and setup the memory simulation runs on.
//
// Every op of the step becomes the kernels PyTorch eager launches for it —
// forward, backward, the forward again for checkpointed regions, autocast's
// copies, gradient accumulation, the optimizer step — each with the
// floating-point operations and the bytes it moves, worked out from the
// tensors' shapes and the dtypes the simulation gave them. Each kernel is
// timed twice.
//
// The calibrated model (the default, Estimate.Seconds) times a kernel by
// its physical parts: matrix products and convolutions as CTA tiles in
// waves over the GPU's SMs, at the achievable share of the matmul peak,
// with tensor-core alignment and implicit-GEMM convolutions, grouped and
// depthwise convolutions and every other kernel by their traffic at the
// achievable share of the bandwidth (kernel.go); and the step as the
// queue of kernels the host issues one by one, the eager dispatcher's
// cost per op against the device's time per kernel, which is what makes
// small batches slow (stream.go). The per-architecture constants — SM
// count, clock, the two achievable shares — are data in package gpu.
//
// The bound (Estimate.Bound) is the roofline: the larger of a kernel's
// arithmetic at the GPU's datasheet peak for its dtype and its traffic at
// the datasheet bandwidth, and never less than a launch floor, the fixed
// cost of one eager op (5 µs). No step runs faster.
//
// Which rate applies follows PyTorch's defaults, which the runtime profile
// holds: float32 matmuls run on the CUDA cores
// (torch.backends.cuda.matmul.allow_tf32 is False since 1.12), float32
// convolutions on the tensor cores in TF32 (torch.backends.cudnn.allow_tf32
// is True), half and bfloat16 matmuls and convolutions on the tensor cores;
// everything else is bandwidth-bound.
//
// docs/accuracy.md §4 says what both have been held against: the bound
// against CPU steps, the calibrated model against published GPU
// throughput.
package cost
