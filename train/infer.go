package train

import (
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// Inference runs the same forward rules as training with the model in
// eval mode under torch.no_grad():
//
//	model.eval()
//	with torch.no_grad():                 # and autocast, for the mixed precisions
//	    out = model(x)
//
// Nothing is saved for backward (no autograd node exists), so every tensor
// is freed at its last use; dropout returns its input and batch norm uses
// its running statistics. Autocast still caches its parameter casts:
// cached_cast (aten/src/ATen/autocast_mode.cpp) asks whether the argument
// is a float32 leaf that requires grad and is not a view — the tensor's
// flag, which no_grad and inference_mode leave set on parameters made
// outside them — not whether grad mode is on. Only cache_enabled=False
// (Setup.Autocast.CacheOff) turns the cache off, and inference mode in the
// releases whose profile says so (pull request 165068, after 2.9). The
// copies live until the outermost autocast region ends: after each forward
// of an eval loop, after the loop when autocast encloses it
// (Setup.Autocast.AroundLoop), after the whole generation when autocast
// encloses generate(). A Hugging Face model's output keeps its logits
// (graph.Returned) until the loop rebinds it. There are no gradients, no
// optimizer state, no backward.

// NewInference starts an inference simulation: the parameters and buffers
// of g are allocated as for training (model.to(device)).
func NewInference(g *graph.Graph, s Setup) (*Simulator, error) {
	sim, err := New(g, s)
	if err != nil {
		return nil, err
	}
	sim.noGrad = true
	if _, amp := s.Precision.Autocast(); amp && s.Autocast.AroundLoop {
		// one region around the loop: the copies of the first forward
		// serve every later one, until EndAutocast
		sim.casts = map[int32]*storage{}
	}
	return sim, nil
}

// EndAutocast is the exit of an autocast region that encloses several
// forwards (Autocast.AroundLoop, or generate()): the outermost
// autocast.__exit__ clears the cache (clear_autocast_cache), and the
// copies go. Without such a region it does nothing.
func (sim *Simulator) EndAutocast() error {
	for _, p := range sim.castOrder {
		sim.unref(sim.casts[p])
	}
	sim.casts, sim.castOrder = nil, nil
	return sim.err
}

// Forward simulates one forward pass of g under no_grad: the batch is
// copied to the device (the previous one is released after), and the
// output (the graph's loss, or its Output) stays referenced by the caller
// until the next forward replaces it, as a loop variable does.
func (sim *Simulator) Forward(g *graph.Graph) error {
	if err := sim.forwardOnly(g); err != nil {
		return err
	}
	sim.endStep()
	return sim.err
}

// forwardOnly is Forward without the end of its step (generate() does
// more in the same iteration).
func (sim *Simulator) forwardOnly(g *graph.Graph) error {
	if !sim.noGrad {
		return fmt.Errorf("internal: Forward on a training simulation")
	}
	if err := sim.checkParams(g); err != nil {
		return err
	}
	mb := newMicro(sim, g)
	if sim.stepsDone == 0 {
		mb.ops = make([]OpRun, len(g.Ops))
		sim.sum.Ops = mb.ops
	}
	if sim.casts != nil {
		mb.castCache, mb.castOrder = sim.casts, sim.castOrder
	}
	mb.loadBatch()
	mb.forward()
	if sim.casts != nil {
		sim.casts, sim.castOrder = mb.castCache, mb.castOrder
	} else {
		mb.exitAutocast()
	}
	sim.ctx = fwdCtx{}
	return sim.err
}

func (sim *Simulator) endStep() {
	sim.tr.Add(trace.Event{Action: trace.StepEnd, Step: sim.step, Site: -1})
	sim.step++
	sim.stepsDone++
}

// iteration is one iteration of generate()'s loop: the forward, then with
// beams the cache's reorder for the beams picked from its logits (every
// iteration, the prefill's and the last one's too).
func (sim *Simulator) iteration(g *graph.Graph, gen Generation) error {
	if err := sim.forwardOnly(g); err != nil {
		return err
	}
	if gen.Beams > 1 {
		sim.reorderCache()
	}
	sim.endStep()
	return sim.err
}

// Generation says how transformers' generate() runs: Prompt tokens of
// prefill, then one token at a time until NewTokens are generated, with
// Beams beams (num_beams) and a dynamic or static cache.
type Generation struct {
	Prompt, NewTokens int64
	// Batch is the number of prompts; generate() runs Batch·Beams rows.
	Batch int64
	Beams int64
	// Static is cache_implementation="static": StaticCache.
	Static bool
}

// Forwards is the number of forward passes generate() makes: the prefill,
// which yields the first new token, then one decode step for each further
// token (the last token's keys and values never enter the cache).
func (gen Generation) Forwards() int64 { return gen.NewTokens }

// CacheLen is the number of positions the cache holds after the last
// forward: the prompt and every generated token but the last.
func (gen Generation) CacheLen() int64 { return gen.Prompt + gen.NewTokens - 1 }

// MaxLen is generation_config.max_length, the prompt and the new tokens:
// the max_cache_len a StaticCache is made with.
func (gen Generation) MaxLen() int64 { return gen.Prompt + gen.NewTokens }

// Rows is the batch the model runs: generate() expands input_ids to
// batch·num_beams rows (_expand_inputs_for_generation) before the prefill.
func (gen Generation) Rows() int64 { return gen.Batch * max(gen.Beams, 1) }

// Check reports a generation that cannot run.
func (gen Generation) Check() error {
	switch {
	case gen.Prompt <= 0:
		return fmt.Errorf("the prompt must have at least one token, got %d", gen.Prompt)
	case gen.NewTokens <= 0:
		return fmt.Errorf("at least one new token must be generated, got %d", gen.NewTokens)
	case gen.Batch <= 0:
		return fmt.Errorf("batch size must be positive, got %d", gen.Batch)
	case gen.Beams < 0:
		return fmt.Errorf("beams must be positive, got %d", gen.Beams)
	}
	return nil
}

// GenerationSummary holds the cache figures of a generation.
type GenerationSummary struct {
	// CacheBytes is what the key/value cache holds after the last forward
	// (a static cache: its whole preallocation).
	CacheBytes int64
	// PrefillCacheBytes is what it holds after the prefill.
	PrefillCacheBytes int64
	// CacheTensors counts the cache's tensors (keys and values per layer).
	CacheTensors int
	// PeakPrefill is the largest live sum (requested bytes) up to the end
	// of the prefill; PeakRequested in the Summary covers the decode too.
	PeakPrefill int64
}

// Generate simulates generate(): an optional static cache preallocated
// from prefill's cache ops, the prefill forward of prefill, and a decode
// forward of step(past) for each further token, past being the positions
// in the cache before it. With beams, every forward is followed by the
// cache's reorder (_beam_search: cache.reorder_cache(beam_idx), which is
// index_select per layer, a new tensor for keys and then for values, the
// old one released when its slot is rebound).
func Generate(prefill *graph.Graph, step func(past int64) (*graph.Graph, error), s Setup, gen Generation) (*Simulator, GenerationSummary, error) {
	var gs GenerationSummary
	if err := gen.Check(); err != nil {
		return nil, gs, err
	}
	sim, err := NewInference(prefill, s)
	if err != nil {
		return nil, gs, err
	}
	slots := 0
	for _, op := range prefill.Ops {
		if op.Kind == graph.KVCache {
			slots = max(slots, op.Attr.Slot+1)
		}
	}
	if slots == 0 {
		return nil, gs, fmt.Errorf("%s has no key/value cache to generate with", prefill.Name)
	}
	sim.cache = make([]*storage, slots)
	if gen.Static {
		// StaticCache allocates (batch·beams, kv_heads, max_cache_len,
		// head_dim) for keys and values of every layer before the prefill
		// runs (the releases that allocate lazily, at a layer's first
		// update, reach the same total by the end of the prefill: this
		// errs towards more memory while the prefill runs).
		sim.phase = trace.Setup
		for _, op := range prefill.Ops {
			if op.Kind != graph.KVCache || sim.cache[op.Attr.Slot] != nil {
				continue
			}
			t := prefill.Tensor(op.Output)
			sim.site = sim.tr.Site(op.Name)
			st := sim.alloc(t.Shape.Numel()*sim.dtypeOf(t).Size(), trace.KVCache)
			st.refs = 1
			sim.cache[op.Attr.Slot] = st
		}
	}
	// one autocast region around generate(): its weight copies are made
	// in the prefill and kept to the end
	sim.casts = map[int32]*storage{}
	if err := sim.iteration(prefill, gen); err != nil {
		return nil, gs, err
	}
	// Every decode step makes about as many events as the prefill (the
	// same ops, smaller): room for all of them at once spares regrowing
	// a list of millions.
	// The steps after the sixth are kept as a repetition (below): room
	// for six.
	sim.tr.Events = slices.Grow(sim.tr.Events, len(sim.tr.Events)*int(min(gen.Forwards()-1, 6)))
	gs.PeakPrefill = sim.sum.PeakRequested
	gs.PrefillCacheBytes = sim.cacheBytes()
	// A static cache's decode steps run one graph on the same storages:
	// from the third on they make the same events, one step higher each,
	// and the rest are kept once, as a repetition, the way steady
	// micro-batches are (repeatMicro). A dynamic cache's steps grow: from
	// the third on each makes the events of the one before with every
	// size that follows the cache grown by the same amount, and once three
	// steps show it the rest are kept as a repetition whose sizes grow
	// (extrapolate) rather than simulated op by op; the allocator replays
	// each of them.
	decodes := gen.Forwards() - 1
	var evAt, idAt [6]int64
	for m := int64(0); m < decodes; m++ {
		if m < int64(len(evAt)) {
			evAt[m], idAt[m] = int64(len(sim.tr.Events)), sim.next
		}
		if m == 4 && gen.Static && repeatMicroBatches && sim.repeatRuns([5]int64(evAt[:5]), [5]int64(idAt[:5]), int(decodes-4), 1) {
			sim.step += int32(decodes - 4)
			sim.stepsDone += int(decodes - 4)
			break
		}
		if m == 5 && !gen.Static && repeatMicroBatches && sim.extrapolate(evAt, idAt, decodes-5) {
			break
		}
		first := int64(2) // the runs whose storages are followed
		if !gen.Static {
			first = 3
		}
		sim.collecting = m == first || m == first+1
		if m == first+1 {
			sim.collectedAt = len(sim.collected)
		}
		g, err := step(gen.Prompt + m)
		if err != nil {
			return nil, gs, err
		}
		if err := sim.iteration(g, gen); err != nil {
			return nil, gs, err
		}
	}
	sim.collecting, sim.collected = false, sim.collected[:0]
	sim.EndAutocast() // the region around generate() ends
	gs.CacheBytes = sim.cacheBytes()
	for _, st := range sim.cache {
		if st != nil {
			gs.CacheTensors++
		}
	}
	return sim, gs, sim.err
}

// dtypeOf is a graph tensor's dtype in this setup: model.to(dtype)
// converts the floating ones, and a StaticCache is made in the model's
// dtype (its dtype argument), autocast or not.
func (sim *Simulator) dtypeOf(t *graph.Tensor) graph.DType {
	if t.DType.IsFloat() {
		return sim.s.Precision.ParamDType()
	}
	return t.DType
}

func (sim *Simulator) cacheBytes() int64 {
	var n int64
	for _, st := range sim.cache {
		if st != nil {
			n += st.bytes
		}
	}
	return n
}

// reorderCache is beam search's cache.reorder_cache(beam_idx): each
// layer's keys, then its values, become key.index_select(0, beam_idx), a
// new tensor, and the old one goes when the list slot is rebound.
func (sim *Simulator) reorderCache() {
	sim.site = sim.tr.Site("reorder_cache")
	sim.phase = trace.Forward
	for i, old := range sim.cache {
		if old == nil {
			continue
		}
		st := sim.alloc(old.bytes, trace.KVCache)
		st.refs = 1
		sim.cache[i] = st
		sim.unref(old)
	}
}

// kvCacheForward is the cache update's rule. A dynamic cache's update is
// torch.cat([cache, key_states], dim=-2): the new, longer tensor (runOp
// allocated it) is what the cache holds from now on, and the old one goes
// when the cache's slot is rebound, after the new one exists. Its first
// update keeps key_states itself where the release appends it to a list
// (Attr.Inplace; the alias rule), and concatenates onto an empty tensor
// (a copy) where DynamicLayer.lazy_initialization starts from
// torch.tensor([]). A static cache's update is index_copy_ into its
// preallocated tensor, which it returns (the storage rule).
func kvCacheForward(c *fwdCtx) {
	sim := c.m.sim
	slot := c.op.Attr.Slot
	if slot < 0 || slot >= len(sim.cache) {
		sim.fail("op %s: cache slot %d outside the cache of %d tensors", c.op.Name, slot, len(sim.cache))
		return
	}
	if c.op.Attr.Static {
		return
	}
	old := sim.cache[slot]
	if old == c.out.st {
		return
	}
	sim.ref(c.out.st)
	sim.cache[slot] = c.out.st
	sim.unref(old)
}

func kvCacheStorage(c *fwdCtx) *storage {
	sim := c.m.sim
	slot := c.op.Attr.Slot
	if !c.op.Attr.Static || slot < 0 || slot >= len(sim.cache) {
		return nil
	}
	return sim.cache[slot]
}

func kvCacheKeepsInput(m *micro, c *fwdCtx, out graph.DType) bool {
	slot := c.op.Attr.Slot
	return !c.op.Attr.Static && c.op.Attr.Inplace && slot >= 0 && slot < len(m.sim.cache) && m.sim.cache[slot] == nil
}

func kvCacheRule() rule {
	return rule{fwd: kvCacheForward, storage: kvCacheStorage, alias: kvCacheKeepsInput, cache: true,
		// a static cache is in the model's dtype, whatever key_states' is
		// (index_copy_ converts); a dynamic one is made from key_states
		out: func(m *micro, c *fwdCtx) graph.DType {
			if c.op.Attr.Static {
				return m.sim.dtypeOf(m.g.Tensor(c.op.Output))
			}
			return c.in[0].dt
		}}
}

// extrapolate adds copies more decode steps of a dynamic cache from the
// three simulated last (runs 2, 3 and 4; evAt and idAt are the event index
// and next id at the start of runs 0 to 5), as a trace.Repeat of run 4
// whose sizes grow. It holds when the runs are alike: the same events, ids
// moved on by the same delta a run, a run freeing only what it or the run
// before allocated, nothing of run 3 left alive, and each allocation's
// size changing by the same amount from run 2 to 3 as from 3 to 4. That
// is so while every size the op rules give is affine in the cache length
// (the cache's tensors, the scores, an eager mask); a rule that rounded a
// size of the key length would break it, and these three runs might not
// show it. Copy c is run 4 with its ids moved on c·delta, its steps c and
// its sizes c times their change; the storages still alive take the last
// copy's ids and sizes, and the live-bytes peaks are followed through the
// copies. It reports false, changing nothing, when the runs are not alike.
func (sim *Simulator) extrapolate(evAt, idAt [6]int64, copies int64) bool {
	ev := sim.tr.Events
	e2, e3, e4 := ev[evAt[2]:evAt[3]], ev[evAt[3]:evAt[4]], ev[evAt[4]:evAt[5]]
	delta := idAt[5] - idAt[4]
	if copies <= 0 || delta <= 0 || len(e2) != len(e3) || len(e3) != len(e4) || idAt[4]-idAt[3] != delta || idAt[3]-idAt[2] != delta ||
		int64(len(ev)) != evAt[5] {
		return false
	}
	// like says run y repeats run x (whose ids start at from) but for the
	// sizes, and sets d to the sizes' changes
	like := func(x, y []trace.Event, from int64, d []int64) bool {
		for i := range x {
			a, b := x[i], y[i]
			if a.ID >= from {
				a.ID += delta
			}
			a.Step++
			d[i] = b.Size - a.Size
			a.Size = b.Size
			if a != b {
				return false
			}
		}
		return true
	}
	d, d2 := make([]int64, len(e4)), make([]int64, len(e4))
	if !like(e2, e3, idAt[1], d2) || !like(e3, e4, idAt[2], d) || !slices.Equal(d, d2) {
		return false
	}
	at3, at4 := map[int64]int{}, map[int64]int{}
	for i := range e4 {
		if e3[i].Action == trace.Alloc {
			at3[e3[i].ID] = i
		}
		if e4[i].Action == trace.Alloc {
			at4[e4[i].ID] = i
		}
	}
	for _, e := range e4 {
		if e.Action != trace.Free {
			continue
		}
		if _, ok := at4[e.ID]; ok {
			continue
		}
		if _, ok := at3[e.ID]; !ok {
			return false // frees something older: a copy would free it again
		}
	}
	for _, st := range sim.collected[:sim.collectedAt] {
		if st.refs > 0 {
			return false // run 3 left something alive: the copies would too
		}
	}
	// the live bytes through the copies, for the peaks
	live, peak, phase := sim.live, sim.sum.PeakRequested, sim.sum.PhasePeakRequested
	for c := int64(1); c <= copies; c++ {
		for i, e := range e4 {
			switch e.Action {
			case trace.Alloc:
				live += e.Size + c*d[i]
				peak = max(peak, live)
				phase[e.Phase] = max(phase[e.Phase], live)
			case trace.Free:
				if j, ok := at4[e.ID]; ok {
					live -= e4[j].Size + c*d[j]
				} else {
					j := at3[e.ID]
					live -= e4[j].Size + (c-1)*d[j]
				}
			}
		}
	}
	sim.tr.Repeats = append(sim.tr.Repeats, trace.Repeat{Start: int(evAt[4]), End: int(evAt[5]), Times: int(copies),
		Base: idAt[4], Delta: delta, Steps: 1, Grow: d})
	for _, st := range sim.collected[sim.collectedAt:] {
		if st.refs > 0 {
			st.bytes += copies * d[at4[st.id]]
			st.id += copies * delta
		}
	}
	sim.next += copies * delta
	sim.live, sim.sum.PeakRequested, sim.sum.PhasePeakRequested = live, peak, phase
	sim.step += int32(copies)
	sim.stepsDone += int(copies)
	sim.extrapolated += copies
	return true
}
