package trace

import (
	"fmt"
	"slices"
	"sync"
)

// Action is what an event does to a block.
type Action uint8

const (
	// Alloc asks for Size bytes for block ID.
	Alloc Action = iota
	// Free returns block ID.
	Free
	// EmptyCache is torch.cuda.empty_cache(): cached, wholly free segments go
	// back to the driver. It has no block.
	EmptyCache
	// StepEnd marks the end of a training step (optimizer.step and zero_grad
	// done); it carries no memory and lets consumers report per-step figures.
	StepEnd
	// ResetPeaks is torch.cuda.reset_peak_memory_stats(): the peaks start
	// again from what is allocated and reserved now (the allocator's
	// reset_peak_stats sets each peak to its current value), so what was
	// cached before it counts in the peak reserved and a transient peak
	// before it does not. A training script calls it after loading the
	// model, before its first step. It has no block.
	ResetPeaks
)

func (a Action) String() string {
	switch a {
	case Alloc:
		return "alloc"
	case Free:
		return "free"
	case EmptyCache:
		return "empty_cache"
	case StepEnd:
		return "step_end"
	case ResetPeaks:
		return "reset_peaks"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Category says what a block of memory holds. The breakdown at the peak is a
// sum over categories.
type Category uint8

const (
	Other Category = iota
	Parameter
	Buffer
	Gradient
	OptimizerState
	Activation // held by autograd for backward
	Transient  // produced and consumed within a phase (forward temporaries, backward gradients of activations)
	Batch      // input batch and targets
	Workspace  // library workspaces (cuBLAS, cuDNN)
	CastCache  // autocast's low-precision copies of parameters
	KVCache    // a generation's key/value cache
	numCategories
)

// NumCategories is the number of categories, for arrays indexed by Category.
const NumCategories = int(numCategories)

var categoryNames = [...]string{"other", "parameters", "buffers", "gradients", "optimizer_state", "activations", "transient", "batch_data", "workspace", "autocast_cache", "kv_cache"}

func (c Category) String() string {
	if int(c) < len(categoryNames) {
		return categoryNames[c]
	}
	return fmt.Sprintf("category(%d)", uint8(c))
}

// Categories lists every category in display order.
func Categories() []Category {
	cs := make([]Category, NumCategories)
	for i := range cs {
		cs[i] = Category(i)
	}
	return cs
}

// Phase is the part of a training step an event belongs to.
type Phase uint8

const (
	Setup Phase = iota
	Forward
	Loss
	Backward
	OptimizerStep
	ZeroGrad
	numPhases
)

// NumPhases is the number of phases, for arrays indexed by Phase.
const NumPhases = int(numPhases)

var phaseNames = [...]string{"setup", "forward", "loss", "backward", "optimizer", "zero_grad"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Event is one entry of a Trace.
type Event struct {
	Action   Action
	Category Category
	Phase    Phase
	Stream   int32
	Step     int32 // 0-based training step
	Site     int32 // index into Trace.Sites; -1 when unknown
	ID       int64 // block identity: an Alloc and its Free share it
	Size     int64 // requested bytes (unrounded), for Alloc; ignored for Free
	// Fallback marks an Alloc whose caller catches the allocator's
	// out-of-memory error and runs without the block: cuDNN's algorithm
	// loops (try_all in Conv_v7.cpp, try_configs and try_plans in
	// Conv_v8.cpp) take the next algorithm when a workspace cannot be
	// had, down to one that needs none. 0 is a plain allocation, which
	// fails the step. Above 0 it names the caller's cache of the choice
	// (cuDNN's benchmark_cache, keyed by the convolution's parameters):
	// once an allocation of a key fell back, later ones of the key start
	// from the choice that worked, which takes nothing. Below 0 the
	// choice is not cached. The loop's list falls to algorithms that need
	// less, ending with one that needs none; which sizes lie between is
	// cuDNN's heuristic's, not known without the GPU, so the fallback
	// takes none at once: the fit is decided as PyTorch decides it, and
	// near the limit the transient workspace may be less than the one
	// PyTorch found (which fitted). Consumers that do not model the
	// fallback read such an event as the plain Alloc it is when memory
	// suffices.
	Fallback int32
}

// Trace is an ordered list of events with the names of their sites.
type Trace struct {
	Events []Event
	Sites  []string
	// Label describes where the trace came from (a model and setup, a
	// snapshot file).
	Label string
	// Repeats are runs of events that repeat the run before them exactly
	// but for ids, kept once: the copies are not in Events (see Repeat).
	// Expand writes them out; Len and At read the sequence with them in
	// place.
	Repeats []Repeat

	siteIndex map[string]int32
}

// Repeat says that Events[Start:End], the template, is followed in the
// sequence by Times copies of itself that Events does not hold. Copy k
// (from 1) has every id at or above Base-Delta (Moved, with Lag 1) raised
// by k·Delta: the template allocates ids from Base on and may free ids of
// the run before it (from Base-Delta on), which each copy takes from the
// copy before. Ids below Moved are the same in every copy. Copy k also has its Step
// raised by k·Steps (a template that is one step of its own), and, when
// Grow is set, the Size of its allocation j (from Start) raised by
// k·Grow[j]: runs alike but for sizes that grow a run (a growing cache).
// Repeats are in order of Start and do not overlap.
//
// Lag, when above 1, says the template may free ids of the Lag runs
// before it, not only of the one just before: a pipeline stage's steady
// one-forward-one-backward pair frees what the forward of the pair Lag
// pairs earlier saved (the micro-batches in flight between them). Every
// id at or above Base-Lag·Delta then moves, and the Lag runs before the
// template must have allocated their ids Delta apart as well.
type Repeat struct {
	Start, End int
	Times      int
	Base       int64
	Delta      int64
	Steps      int32
	Grow       []int64
	Lag        int
}

// Moved is the lowest id of the template that its copies move: ids from
// it on were allocated by the template or by the runs it may free from.
func (r *Repeat) Moved() int64 {
	return r.Base - int64(max(r.Lag, 1))*r.Delta
}

// Copy returns event j of the template as copy k has it.
func (r *Repeat) Copy(e Event, k int) Event {
	if e.ID >= r.Moved() {
		e.ID += int64(k) * r.Delta
	}
	e.Step += int32(k) * r.Steps
	return e
}

// CopyOf returns the template's event j (an index in events) as copy k
// has it, sizes included.
func (r *Repeat) CopyOf(events []Event, j, k int) Event {
	e := r.Copy(events[j], k)
	if r.Grow != nil && e.Action == Alloc {
		e.Size += int64(k) * r.Grow[j-r.Start]
	}
	return e
}

// Len is the number of events of the sequence, copies included.
func (t *Trace) Len() int {
	n := len(t.Events)
	for _, r := range t.Repeats {
		n += r.Times * (r.End - r.Start)
	}
	return n
}

// At returns event i of the sequence, copies included.
func (t *Trace) At(i int) Event {
	off := 0 // copies before the current position
	for k := range t.Repeats {
		r := &t.Repeats[k]
		first := r.End + off // index of the first copy in the sequence
		n := r.End - r.Start
		if i < first {
			break
		}
		if i < first+r.Times*n {
			return r.CopyOf(t.Events, r.Start+(i-first)%n, (i-first)/n+1)
		}
		off += r.Times * n
	}
	return t.Events[i-off]
}

// Expand writes the copies of every repetition into Events.
func (t *Trace) Expand() {
	if len(t.Repeats) == 0 {
		return
	}
	out := make([]Event, 0, t.Len())
	pos := 0
	for k := range t.Repeats {
		r := &t.Repeats[k]
		out = append(out, t.Events[pos:r.End]...)
		for c := 1; c <= r.Times; c++ {
			for j := r.Start; j < r.End; j++ {
				out = append(out, r.CopyOf(t.Events, j, c))
			}
		}
		pos = r.End
	}
	out = append(out, t.Events[pos:]...)
	t.Events, t.Repeats = out, nil
}

// Add appends e. A full list doubles: append alone grows long slices by a
// quarter, and a trace of a large model runs to hundreds of thousands of
// events.
func (t *Trace) Add(e Event) {
	if len(t.Events) == cap(t.Events) {
		t.Events = slices.Grow(t.Events, max(cap(t.Events), 256))
	}
	t.Events = append(t.Events, e)
}

// spare holds event lists given back by Release. A search simulates the
// same model many times over; reusing a list of hundreds of thousands of
// events spares allocating, zeroing and faulting it in each time.
var spare sync.Pool

// Reserve makes room for n events on an empty trace, reusing a released
// list when one is at hand.
func (t *Trace) Reserve(n int) {
	if len(t.Events) > 0 || cap(t.Events) >= n {
		return
	}
	if p, ok := spare.Get().(*[]Event); ok && cap(*p) >= n {
		t.Events = (*p)[:0]
		return
	}
	t.Events = make([]Event, 0, n)
}

// Release gives t's event list back for reuse and empties t. Nothing may
// hold on to t.Events afterwards.
func (t *Trace) Release() {
	if cap(t.Events) > 0 {
		ev := t.Events[:0]
		spare.Put(&ev)
	}
	t.Events, t.Repeats = nil, nil
}

// Site returns the index of name in t.Sites, adding it if needed.
func (t *Trace) Site(name string) int32 {
	if t.siteIndex == nil {
		t.siteIndex = make(map[string]int32, len(t.Sites))
		for i, s := range t.Sites {
			t.siteIndex[s] = int32(i)
		}
	}
	if i, ok := t.siteIndex[name]; ok {
		return i
	}
	i := int32(len(t.Sites))
	t.Sites = append(t.Sites, name)
	t.siteIndex[name] = i
	return i
}

// ReserveSites makes room for n more sites, so that naming a large
// graph's ops does not grow the index step by step.
func (t *Trace) ReserveSites(n int) {
	if t.siteIndex != nil && len(t.siteIndex) >= n {
		return
	}
	idx := make(map[string]int32, len(t.Sites)+n)
	for i, s := range t.Sites {
		idx[s] = int32(i)
	}
	t.siteIndex = idx
	t.Sites = slices.Grow(t.Sites, n)
}

// SiteName returns the name of site i, or "" when i is out of range.
func (t *Trace) SiteName(i int32) string {
	if i < 0 || int(i) >= len(t.Sites) {
		return ""
	}
	return t.Sites[i]
}

// Validate checks that every Free names a live block and no ID is allocated
// twice while live. It returns the first problem found.
func (t *Trace) Validate() error {
	live := make(map[int64]struct{})
	for i := 0; i < t.Len(); i++ {
		e := t.At(i)
		switch e.Action {
		case Alloc:
			if e.Size < 0 {
				return fmt.Errorf("event %d: alloc of block %d has negative size %d", i, e.ID, e.Size)
			}
			if _, ok := live[e.ID]; ok {
				return fmt.Errorf("event %d: block %d allocated twice", i, e.ID)
			}
			live[e.ID] = struct{}{}
		case Free:
			if _, ok := live[e.ID]; !ok {
				return fmt.Errorf("event %d: free of block %d that is not allocated", i, e.ID)
			}
			delete(live, e.ID)
		}
	}
	return nil
}
