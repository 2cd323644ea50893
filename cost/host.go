package cost

import (
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

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
	// PerOp says the figures were measured per op on the GPU, launch
	// included: an op (a forward op called from Python, a node of the
	// engine) pays its dispatch once, and each kernel it launches beyond
	// the first pays Launch. Without it (DefaultHost) every kernel pays
	// Forward or Backward, as the calibrated model of docs/accuracy.md
	// §4.1–§4.4 was fitted.
	PerOp bool
	// Kinds is a forward op's cost by kind where measured; Forward for the
	// rest. View is a view's (no kernel).
	Kinds map[graph.Kind]float64
	// NoGrad is an op dispatched without Python's binding and autograd's
	// node: autocast's casts, which autocast's kernel calls inside the op
	// that needs them, and BatchNorm's num_batches_tracked.add_(1).
	NoGrad float64
	// Module is one nn.Module.__call__ (_wrapped_call_impl, _call_impl,
	// the module's forward in Python) around the ops it runs.
	Module float64
	// ZeroGrad is zero_grad(set_to_none=True)'s Python loop, a parameter.
	ZeroGrad float64
	// Optim is the optimizer step's host time (Python's _init_group loop
	// over the parameters, the foreach or per-tensor ops and their
	// launches) by optimizer and implementation; an optimizer not listed
	// pays per op.
	Optim map[OptimKey]OptimHost
	// Source says where the figures come from.
	Source string
}

// OptimKey names an optimizer implementation.
type OptimKey struct {
	Kind train.OptimizerKind
	Impl train.Impl
}

// OptimHost is an optimizer step's host time: Fixed a step and PerTensor
// a parameter tensor, seconds.
type OptimHost struct{ Fixed, PerTensor float64 }

// DefaultHost is the host the calibrated model assumes under PyTorch 1.x.
// The dispatcher's share was measured with PyTorch 1.13 on an AMD EPYC core
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

// Torch2Host is the host of PyTorch 2.x, measured on the host of an H200
// (Intel Xeon, Python 3.12, PyTorch 2.11.0+cu130) with
// validation/dispatch_cpu.py --device cuda
// (testdata/measured/h200-torch2.11-dispatch.json): the wall time per call
// on tiny CUDA tensors, median of 15 repeats of 2,000 calls, where the
// kernels take less than the host and the figure is the host's, launch
// included. Forward is the median of the 13 ops that launch a kernel,
// under autograd (softmax's 13.0 µs; 7.5 µs gelu to 21.6 µs batch_norm),
// each kind measured keeps its own; Backward is the slope of a backward
// chain of 20 and 200 nodes, 16.2 µs a node, wall time: the engine runs a
// CUDA device's nodes on its own thread (torch/csrc/autograd/engine.cpp,
// Engine::start_device_threads), so the main thread's CPU time (0.6 µs a
// node) is not it. NoGrad is add without autograd (9.9 µs). The optimizer
// figures are the slopes of step() over 20 and 200 parameters (SGD with
// momentum, Adam; AdamW is Adam's code in 2.x, and the fused step runs the
// same _init_group loop, torch/optim/adam.py, so both take Adam's and
// foreach's figures).
//
// Two figures come from the phases of real steps, which the
// microbenchmark's single ops do not have
// (testdata/throughput/own-h200-launch.csv, validation/steptime_gpu.py
// --phases: each phase alone, the device drained around it, at batch 1
// where the host binds): ZeroGrad, the median over its 17 phased rows of
// zero_grad's time a parameter (1.84 µs; 1.3–2.6); Module, the median over
// the same rows of the forward's time beyond what the per-op figures
// charge, over the module paths the forward enters (18.7 µs; 10–30):
// nn.Module.__call__ (torch/nn/modules/module.py, _wrapped_call_impl and
// _call_impl's hook checks) and the Python of each module's forward
// (BatchNorm's momentum and mode checks, MultiheadAttention's
// F.multi_head_attention_forward), which no single op times.
var Torch2Host = Host{
	Forward:  13.0e-6,
	Backward: 16.2e-6,
	Launch:   3.8e-6,
	PerOp:    true,
	Kinds: map[graph.Kind]float64{
		graph.Conv2d: 21.2e-6, graph.ConvTranspose2d: 21.2e-6,
		graph.BatchNorm: 21.6e-6, graph.InstanceNorm: 21.6e-6,
		graph.Linear: 15.4e-6, graph.LayerNorm: 13.7e-6, graph.Attention: 16.8e-6,
		graph.MatMul: 11.9e-6, graph.Add: 11.9e-6, graph.Mul: 8.6e-6,
		graph.ReLU: 12.8e-6, graph.GELU: 7.5e-6, graph.Softmax: 13.0e-6,
		graph.Mean: 12.9e-6, graph.Cat: 13.9e-6,
		graph.View: 3.8e-6, graph.Slice: 3.9e-6,
	},
	NoGrad:   9.9e-6,
	ZeroGrad: 1.84e-6,
	Module:   18.7e-6,
	Optim: map[OptimKey]OptimHost{
		{train.SGD, train.Foreach}:   {44.4e-6, 2.08e-6},
		{train.SGD, train.ForLoop}:   {22.4e-6, 22.1e-6},
		{train.SGD, train.Fused}:     {44.4e-6, 2.08e-6},
		{train.Adam, train.Foreach}:  {94.6e-6, 8.32e-6},
		{train.Adam, train.ForLoop}:  {221e-6, 84.9e-6},
		{train.Adam, train.Fused}:    {94.6e-6, 8.32e-6},
		{train.AdamW, train.Foreach}: {94.6e-6, 8.32e-6},
		{train.AdamW, train.ForLoop}: {221e-6, 84.9e-6},
		{train.AdamW, train.Fused}:   {94.6e-6, 8.32e-6},
	},
	Source: "measured per op on an H200's host under PyTorch 2.11 (testdata/measured/h200-torch2.11-dispatch.json)",
}

// HostFor is the host of a runtime profile: PyTorch 2.x's measured on a
// GPU's host, 1.x's the calibrated DefaultHost.
func HostFor(p *profile.Profile) Host {
	if p == nil || strings.HasPrefix(p.Version, "1.") {
		return DefaultHost
	}
	return Torch2Host
}

// hostCost is the host time of n kernels the current op launches: each
// its op's dispatch without PerOp; with it, the op's dispatch once, with
// its first kernel, and a launch for each further one.
func (t *timer) hostCost(n int64) float64 {
	switch {
	case t.bulk:
		return 0
	case !t.host.PerOp:
		return float64(n) * t.op
	case t.fresh:
		t.fresh = false
		return t.pending + float64(n-1)*t.host.Launch
	}
	return float64(n) * t.host.Launch
}

// beginForward starts timing a forward op called from Python.
func (t *timer) beginForward(op *graph.Op) {
	switch op.Kind {
	case graph.Release, graph.Custom, graph.RNNState:
		return // a Python scope's end, a custom Function's own ops, an RNN's states
	}
	if t.part == Forward {
		t.est.Ops++
	}
	if !t.host.PerOp {
		return
	}
	c, ok := t.host.Kinds[op.Kind]
	if !ok {
		c = t.host.Forward
	}
	if t.part == Forward {
		c += float64(t.enter(op.Name)) * t.host.Module
	}
	t.fresh, t.pending = true, c
}

// enter counts the nn.Module calls an op's module path enters that no
// earlier op entered: the path and each prefix of it, once a forward (the
// model itself is entered with the first op). A module called several
// times (torchvision's Bottleneck calls its one ReLU three times) counts
// once and an op called as a function beside a module's (a residual add,
// "layer1.0.add") counts as one, so the count is within a few percent of
// the calls (ResNet-50: 170 paths, 184 calls).
func (t *timer) enter(name string) int {
	n := 0
	if t.modules == nil {
		t.modules = map[string]bool{"": true}
		n++
	}
	for p := name; p != ""; {
		if t.modules[p] {
			break
		}
		t.modules[p] = true
		n++
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return n
}

// beginNode starts timing an op's node of autograd's engine (one node an
// op; ops that record several are counted by their kernels).
func (t *timer) beginNode() {
	t.est.Nodes++
	if t.host.PerOp {
		t.fresh, t.pending = true, t.host.Backward
	}
}

// endOp ends an op: one that launched nothing still cost the host its
// dispatch (a view, a node that only hands its gradient on).
func (t *timer) endOp() {
	if t.fresh && t.pending > 0 {
		t.hostOnly(t.pending)
	}
	t.fresh, t.pending = false, 0
}

// hostOnly adds host time that issues no kernel: the next kernel is
// issued that much later.
func (t *timer) hostOnly(cpu float64) {
	// as an empty kernel: the device cannot start the next kernel before
	// the host issues it, so it waits from now, in this part
	t.issue(cpu, 0, 0)
}

// accumulateGrad adds AccumulateGrad's node for each parameter that
// receives a gradient (torch/csrc/autograd/functions/accumulate_grad.h):
// with zero_grad(set_to_none=True) it takes the incoming gradient as .grad
// and launches nothing, but the engine runs it
// (torch/csrc/autograd/engine.cpp, evaluate_function), as the profiler's
// autograd::engine::evaluate_function: torch::autograd::AccumulateGrad
// events show, one a parameter.
func (t *timer) accumulateGrad(g *graph.Graph) {
	t.setPart(Backward)
	for _, id := range g.Params() {
		if !g.Tensors[id].RequiresGrad {
			continue
		}
		t.est.Nodes++
		if t.host.PerOp {
			t.hostOnly(t.host.Backward)
		}
	}
}

// castCost is the host time of n autocast copies: in forward each is a
// dispatch inside the op that needs it (autocast's cached_cast,
// aten/src/ATen/autocast_mode.h, calls at::_to_copy), in backward each is
// a node of its own (ToCopyBackward0).
func (t *timer) castCost(n int64) float64 {
	if t.part == Backward {
		t.est.Nodes += n
	}
	if !t.host.PerOp || t.bulk {
		return t.hostCost(n)
	}
	if t.part == Backward {
		return float64(n) * t.host.Backward
	}
	return float64(n) * t.host.NoGrad
}
