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

// Host is what one eager op costs on the host, seconds.
type Host struct {
	// Forward is an op called from Python under autograd: the Python
	// call, the dispatcher, the autograd graph node and the launch.
	Forward float64
	// Backward is one node of autograd's engine, which runs in C++: the
	// dispatcher and the launch, no Python.
	Backward float64
	// Launch is one more cudaLaunchKernel of an op that launches several
	// (a foreach op's multi-tensor launches).
	Launch float64
	// Source says where the figures come from.
	Source string
}

// DefaultHost is the host the calibrated model assumes. The dispatcher's
// share was measured with PyTorch 1.13 on an AMD EPYC core
// (validation/dispatch_cpu.py, testdata/reference/dispatch-cpu.json):
// the process CPU time per call of add, mul, mm, relu, conv2d and
// batch_norm on tiny tensors under autograd, median 2.10 µs (1.86–6.25),
// and per node of a backward chain 4.62 µs. CPU time, not wall time, is
// taken because the machine was shared (load average 8–10 on 2 cores);
// it is not scaled: the core is the same class of server CPU the
// published GPUs' hosts use (DGX A100: EPYC 7742; DGX-1: Xeon E5-2698 v4),
// which run single-threaded Python at a similar speed. The launch is not
// measurable without a GPU: 3.8 µs per kernel is what a stream of short
// kernels launched back to back took in NVIDIA's "Getting Started with
// CUDA Graphs" (Gray, NVIDIA Developer Blog, 2019), launch-bound. A CUDA
// op's dispatch also runs the device guard and the caching allocator,
// which a CPU tensor's does not; they are not counted, so these figures
// are low.
var DefaultHost = Host{
	Forward:  2.10e-6 + 3.8e-6,
	Backward: 4.62e-6 + 3.8e-6,
	Launch:   3.8e-6,
	Source:   "dispatcher measured on a CPU core (testdata/reference/dispatch-cpu.json) + cudaLaunchKernel 3.8 µs (NVIDIA, Getting Started with CUDA Graphs)",
}

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
