package snapshot

import (
	"strings"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/trace"
)

// SizeClass is a range of request sizes, [Min, Max); Max 0 has no bound.
type SizeClass struct {
	Name     string
	Min, Max int64
}

// Contains reports whether a request of n bytes is in the class.
func (c SizeClass) Contains(n int64) bool { return n >= c.Min && (c.Max == 0 || n < c.Max) }

// SizeClasses split requests where the caching allocator's rules change:
// 1 MiB is kSmallSize (the small pool below), 10 MiB kMinLargeAlloc
// (below it a 20 MiB segment is shared), and decades above.
var SizeClasses = []SizeClass{
	{"< 1 MiB (small pool)", 0, alloc.SmallSize},
	{"1–10 MiB", alloc.SmallSize, alloc.MinLargeAlloc},
	{"10–100 MiB", alloc.MinLargeAlloc, 100 << 20},
	{"100 MiB–1 GiB", 100 << 20, 1 << 30},
	{"≥ 1 GiB", 1 << 30, 0},
}

// StepPhase is a part of a training step that a recording is split into:
// an index of StepPhases.
type StepPhase int

// The parts of a step, in order.
const (
	PhaseForward StepPhase = iota
	PhaseBackward
	PhaseOptimizer
)

// StepPhases name the parts of a step, with the simulator's phases each
// takes.
var StepPhases = [...]struct {
	Name   string
	Phases []trace.Phase
}{
	PhaseForward:   {"forward", []trace.Phase{trace.Forward, trace.Loss}},
	PhaseBackward:  {"backward", []trace.Phase{trace.Backward}},
	PhaseOptimizer: {"optimizer", []trace.Phase{trace.OptimizerStep, trace.ZeroGrad}},
}

// PhaseRange is a stretch of a conversion's events [Start, End) in one
// phase.
type PhaseRange struct {
	Phase      StepPhase
	Start, End int
}

// RecordingPhases finds the recording's phases. With stack frames on most
// allocations it reads them: PyTorch records the Python stack of the
// thread that allocates (torch.cuda.memory._record_memory_history), so an
// allocation under torch/optim/ is the optimizer's, one under a frame
// named backward (torch.autograd.backward, Tensor.backward) or with no
// Python frames (autograd's engine runs CUDA backward on a thread of its
// own, which has none) is backward's, and the rest forward's. Without
// frames it reads the allocation pattern of one step: forward allocates
// the activations autograd saves and backward frees them, so forward ends
// where the tensors that the recording both allocates and frees hold the
// most bytes, and backward once 95 % of those bytes are freed; the
// optimizer step is the rest. Parameters, gradients and optimizer state
// are not freed within a step (unless the recording includes
// zero_grad(set_to_none=True), whose freed gradients can then be taken
// for activations).
//
// from says what the phases were read from ("stack frames" or "allocation
// pattern"), how the rule in words.
func RecordingPhases(snap *Snapshot, device int, conv *Conversion) (ranges []PhaseRange, from, how string) {
	n := len(conv.Trace.Events)
	var entries []TraceEntry
	if device < len(snap.Traces) {
		entries = snap.Traces[device]
	}
	allocs, framed := 0, 0
	for i := range entries {
		if entries[i].Action == ActionAlloc {
			allocs++
			if len(entries[i].Frames) > 0 {
				framed++
			}
		}
	}
	if allocs > 0 && framed*2 >= allocs && len(conv.EntryEvent) == len(entries) {
		label := make([]StepPhase, n)
		cur := PhaseForward
		next := 0
		for i := range entries {
			e := &entries[i]
			if e.Action == ActionAlloc {
				cur = framePhase(e.Frames)
			}
			end := n
			if i+1 < len(entries) {
				end = conv.EntryEvent[i+1]
			}
			for ; next < end; next++ {
				label[next] = cur
			}
		}
		for i := 0; i < n; {
			j := i
			for j < n && label[j] == label[i] {
				j++
			}
			ranges = append(ranges, PhaseRange{label[i], i, j})
			i = j
		}
		return ranges, "stack frames", "allocations under torch/optim/ are the optimizer's; under a frame named backward, or without Python frames (autograd's engine thread), backward's; the rest forward's"
	}
	how = "forward runs until the most memory is held by tensors that the recording both allocates and frees (autograd's saved activations: forward allocates them, backward frees them); backward until 95 % of those bytes are freed; the optimizer step is the rest"
	if n == 0 {
		return nil, "allocation pattern", how
	}
	// Blocks allocated and freed within the recording: parameters,
	// gradients and optimizer state allocated before it or kept after it
	// do not count.
	freedLater := map[int64]bool{}
	allocated := map[int64]bool{}
	for _, e := range conv.Trace.Events {
		switch e.Action {
		case trace.Alloc:
			allocated[e.ID] = true
		case trace.Free:
			if allocated[e.ID] {
				freedLater[e.ID] = true
			}
		}
	}
	size := map[int64]int64{}
	var cur, best int64
	fwdEnd := -1
	for i, e := range conv.Trace.Events {
		switch e.Action {
		case trace.Alloc:
			if freedLater[e.ID] {
				size[e.ID] = e.Size
				cur += e.Size
			}
		case trace.Free:
			cur -= size[e.ID]
		}
		if cur > best {
			best, fwdEnd = cur, i
		}
	}
	if fwdEnd < 0 {
		return []PhaseRange{{PhaseForward, 0, n}}, "allocation pattern", how
	}
	live := map[int64]int64{}
	for i := 0; i <= fwdEnd; i++ {
		e := conv.Trace.Events[i]
		switch e.Action {
		case trace.Alloc:
			if freedLater[e.ID] {
				live[e.ID] = e.Size
			}
		case trace.Free:
			delete(live, e.ID)
		}
	}
	bwEnd := n
	var freed int64
	for i := fwdEnd + 1; i < n; i++ {
		e := conv.Trace.Events[i]
		if sz, ok := live[e.ID]; ok && e.Action == trace.Free {
			freed += sz
			if freed*100 >= best*95 {
				bwEnd = i + 1
				break
			}
		}
	}
	ranges = append(ranges, PhaseRange{PhaseForward, 0, fwdEnd + 1})
	if fwdEnd+1 < n {
		ranges = append(ranges, PhaseRange{PhaseBackward, fwdEnd + 1, bwEnd})
	}
	if bwEnd < n {
		ranges = append(ranges, PhaseRange{PhaseOptimizer, bwEnd, n})
	}
	return ranges, "allocation pattern", how
}

// framePhase labels an allocation by its stack (see RecordingPhases).
func framePhase(frames []Frame) StepPhase {
	if len(frames) == 0 {
		return PhaseBackward
	}
	for _, f := range frames {
		if strings.Contains(f.Filename, "torch/optim/") {
			return PhaseOptimizer
		}
	}
	for _, f := range frames {
		if f.Name == "backward" || strings.Contains(f.Name, "_engine_run_backward") {
			return PhaseBackward
		}
	}
	return PhaseForward
}
