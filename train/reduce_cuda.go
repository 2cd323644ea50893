package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// CUDA's reduction kernel and the memory it takes from the caching
// allocator.
//
// A sum (or any TensorIterator reduction) on CUDA runs gpu_reduce_kernel
// (aten/src/ATen/native/cuda/Reduce.cuh). When setReduceConfig splits each
// output's inputs across several thread blocks (ctas_per_output > 1,
// should_global_reduce), the kernel stages the blocks' partial results in
// global memory: it allocates `buffer` (global_memory_size()) and then
// `semaphores` (semaphore_size(): one int per grid.x block) through the
// caching allocator, and frees them when it returns (their DataPtrs go out
// of scope, semaphores first). A linear layer's bias gradient is such a
// sum: autograd's validate_outputs (torch/csrc/autograd/engine.cpp) sums
// the [rows, out] gradient AddmmBackward0 (or AddBackward0 of
// output.add_(bias)) returns down to the bias's [out] with at::sum_to, a
// reduction over the rows. With many rows the staging buffer is large:
// measured on an H200 (torch 2.11), a 32 MiB buffer and 32 bytes of
// semaphores under each hidden layer's bias gradient of the batch-4096 MLP,
// 75 MiB under ViT-B/16's MLP bias at batch 16 in float32, 132.75 MiB under
// its in-projection bias at batch 64 under bf16 autocast: exactly what
// setReduceConfig gives on 132 SMs of 2048 threads.

// maxReduceThreads is mnt_wrapper<T>::MAX_NUM_THREADS (Reduce.cuh): 512
// for every type but complex<double>.
const maxReduceThreads = 512

// lastPow2 is Reduce.cuh's last_pow2: the largest power of two not above
// n, at least 1.
func lastPow2(n int64) int64 {
	p := int64(1)
	for p*2 <= n {
		p *= 2
	}
	return p
}

func divUp(a, b int64) int64 { return (a + b - 1) / b }

// sumRowsScratch is the staging buffer and semaphores gpu_reduce_kernel
// allocates to sum a dense row-major [rows, cols] tensor of scalar-byte
// elements over its rows into cols outputs, accumulating in acc-byte
// elements (sizeof(arg_t): float for float, half and bfloat16), on a GPU
// of sms multiprocessors with threadsPerSM resident threads each (CUDA's
// maxThreadsPerMultiProcessor). Zero where the kernel reduces each output
// within one block.
//
// It follows setReduceConfig for this iterator: TensorIterator moves the
// reduced dim to the front, its stride (cols elements) is larger than the
// output dim's (1), so the reduction is not on the fastest-striding dim:
// block.x runs along the outputs, vectorized by get_output_vec_size (4,
// halved until it divides cols; the caching allocator's blocks are 512-byte
// aligned), and block.y along the rows.
func sumRowsScratch(rows, cols, acc int64, sms, threadsPerSM int64) (buffer, semaphores int64) {
	if rows <= 1 || cols <= 0 || sms <= 0 || threadsPerSM <= 0 {
		return 0, 0
	}
	vec := int64(4)
	for cols%vec != 0 {
		vec /= 2
	}
	// set_block_dimension(dim0 = cols / vec, dim1 = rows)
	maxT := int64(maxReduceThreads) / vec
	dim0, dim1 := cols/vec, rows
	p0, p1 := maxT, maxT
	if dim0 < maxT {
		p0 = lastPow2(dim0)
	}
	if dim1 < maxT {
		p1 = lastPow2(dim1)
	}
	const warp = 32
	bw := min(p0, warp)
	bh := min(p1, maxT/bw)
	bw = min(p0, maxT/bh)
	threads := bw * bh

	// output_mult[0] = split_output(block_width)
	stepOut, stepIn := bw, int64(1)
	const minValues, maxValues = 16, 256
	splitY := false
	if vpt := divUp(rows, stepIn); vpt >= bh*16 || vpt >= maxValues {
		stepIn *= bh // input_mult[1] = split_input(block_height)
		splitY = true
	} else {
		stepOut *= bh // output_mult[1] = split_output(block_height)
	}
	blocksPerSM := threadsPerSM / threads
	target := sms * blocksPerSM
	gridX := divUp(cols/vec, stepOut)
	vpt := divUp(rows, stepIn)
	if !splitY || vpt < maxValues || gridX > target {
		return 0, 0
	}
	ctas := max(min(divUp(target, gridX), divUp(vpt, minValues)), divUp(vpt, maxValues))
	if ctas <= 1 {
		return 0, 0
	}
	// global_memory_size(): element_size_bytes × num_outputs ×
	// ctas_per_output, times block.x × output_vec_size where the block
	// does not reduce along x (it does not here); semaphore_size():
	// sizeof(int) × grid.x
	return acc * cols * ctas * bw * vec, 4 * gridX
}

// biasGradReduce runs the sum of a linear layer's [rows, out] gradient down
// to its bias on CUDA: the staging buffer and semaphores it allocates and
// frees (sumRowsScratch). The sum's own output is the bias gradient,
// allocated before.
func (c *bwdCtx) biasGradReduce(rows, out int64, dt graph.DType) {
	s := c.m.sim.s
	if s.CPU || rows*out*dt.Size() > 1<<31-1 {
		// the CPU's sum has no such buffer; a gradient too large for
		// 32-bit indexing is summed in pieces (gpu_reduce_kernel's
		// with_32bit_indexing), whose buffers are not modelled
		return
	}
	acc := int64(4) // at::acc_type: float for float, half and bfloat16
	if dt == graph.F64 {
		acc = 8
	}
	buf, sem := sumRowsScratch(rows, out, acc, s.smCount(), s.threadsPerSM())
	if buf == 0 {
		return
	}
	b := c.m.sim.alloc(buf, trace.Workspace)
	b.refs = 1
	c.m.sim.temp(sem, trace.Workspace)
	c.m.sim.unref(b)
}
