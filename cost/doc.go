// Package cost predicts how long a training step takes on a GPU, from the
// same graph and setup the memory simulation runs on.
//
// Every op of the step becomes the kernels PyTorch eager launches for it —
// forward, backward, the forward again for checkpointed regions, autocast's
// copies, gradient accumulation, the optimizer step — each with the
// floating-point operations and the bytes it moves, worked out from the
// tensors' shapes and the dtypes the simulation gave them. A kernel's time
// is a roofline: the larger of its arithmetic at the GPU's peak rate for its
// dtype and its traffic at the memory bandwidth, and never less than a
// launch floor, the fixed cost of one eager op (the dispatcher, autograd's
// bookkeeping and cudaLaunchKernel, 5–25 µs on the host side: the floor
// takes the low end, since the host runs ahead of the device while kernels
// are long). The rates are the datasheet's dense peaks (package gpu).
//
// Which rate applies follows PyTorch's defaults, which the runtime profile
// holds: float32 matmuls run on the CUDA cores
// (torch.backends.cuda.matmul.allow_tf32 is False since 1.12), float32
// convolutions on the tensor cores in TF32 (torch.backends.cudnn.allow_tf32
// is True), half and bfloat16 matmuls and convolutions on the tensor cores;
// everything else is bandwidth-bound.
//
// A roofline is an optimistic bound for each kernel: real kernels reach
// perhaps 60–80 % of peak on large matmuls and less on small or oddly
// shaped ones (depthwise convolutions, short sequences). The model is meant
// to rank configurations — how accumulation, precision, checkpointing and
// the optimizer's implementation trade speed — and to show where a step
// spends its time, not to promise a wall-clock figure; docs/accuracy.md
// says what it has been held against.
package cost
