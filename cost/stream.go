package cost

// The host side of a step. PyTorch eager issues every kernel from the
// host: the Python call, the dispatcher, autograd's bookkeeping and
// cudaLaunchKernel, and the kernel runs on the device when the host has
// issued it and the device has finished the one before (one CUDA stream).
// While kernels are long the host runs ahead and its time is hidden; while
// they are short the device waits for the host, which is what makes small
// batches slow. The step is timed as that queue: each kernel starts at the
// later of its issue time and the end of the previous kernel, and a step
// begins with both idle (GradScaler's found_inf.item(), or the loss read
// back, synchronises the host with the device once a step).

// queue is the host's clock and the time the device becomes free.
type queue struct{ cpu, gpu float64 }

// issue queues a group of kernels the host issues in cpu seconds and the
// device runs in gpu seconds, and returns how much later the device
// finishes because of them.
func (q *queue) issue(cpu, gpu float64) float64 {
	q.cpu += cpu
	end := max(q.cpu, q.gpu) + gpu
	d := end - q.gpu
	q.gpu = end
	return d
}
