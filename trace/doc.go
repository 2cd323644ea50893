// Package trace is the shared vocabulary between the parts of batchfit that
// produce memory events and the parts that consume them.
//
// A Trace is an ordered list of allocation and free events, the same thing a
// PyTorch memory snapshot's device_traces records. The step simulator (package
// train) emits one from a model graph; package snapshot decodes one from a
// recorded torch.cuda.memory._dump_snapshot pickle; package alloc replays
// either through a model of the CUDA caching allocator. Nothing downstream of a
// Trace knows where it came from.
//
// Each event carries a Category (what the memory is: a parameter, a gradient,
// an optimizer state, a saved activation, ...) and a Site (where it came from:
// the op or module name, the phase and the step), so every byte of a peak can
// be attributed.
//
// LiveByStep reads a Trace without an allocator: the requested bytes alive
// before each step, at its peak and at the peak and end of each phase. They
// are the figures a CPU run of PyTorch reports, where no caching allocator
// stands between the tensors and the memory, and validation's whole-step
// reference holds the simulator to them.
package trace
