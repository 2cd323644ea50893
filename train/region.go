package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// A checkpointed region's own state (torch/utils/checkpoint.py): the
// generator state and the inputs its call keeps, its recomputation in
// backward, and, under reentrance, what CheckpointFunction.backward holds
// while its nested backward runs and the gradients it returns for the
// region's inputs. Also the wrapped Python numbers that nodes keep beside
// the saved-tensor hooks (keepNumber).

// cpuRNGStateBytes is what torch.get_rng_state() returns for the CPU
// generator: a uint8 tensor of sizeof(CPUGeneratorImplState)
// (aten/src/ATen/CPUGeneratorImpl.cpp, get_state): the Mersenne Twister's
// 624 64-bit words, its seed and counters and the cached normal samples,
// 5,056 bytes with the struct's padding.
const cpuRNGStateBytes = 5056

// keepRNGState is the CPU generator state a checkpoint call stashes to
// replay its dropout masks (preserve_rng_state=True, the default):
// CheckpointFunction.forward's ctx.fwd_cpu_state, or the fwd_cpu_state
// that _checkpoint_without_reentrant_generator's recompute_fn closes over
// (torch/utils/checkpoint.py). It is host memory: only a CPU run, whose
// every tensor is host memory, counts it. A GPU's generator states, which
// the call stashes too, are host tensors as well (get_device_states).
func (m *micro) keepRNGState(blk int32) {
	if !m.sim.s.CPU {
		return
	}
	st := m.sim.alloc(cpuRNGStateBytes, trace.Transient)
	st.refs = 1
	m.rngState[blk] = st
}

// dropRNGState releases a region's stashed generator state when its
// holder goes: without reentrance, the frame that recompute_fn belongs to,
// which the saved-tensor hooks of the region's nodes hold until the
// region's backward has run; with it, the CheckpointFunctionBackward
// node's ctx, which lives as long as the graph, until the loop lets the
// loss go (graphHeld).
func (m *micro) dropRNGState(blk int32) {
	st := m.rngState[blk]
	if st == nil {
		return
	}
	m.rngState[blk] = nil
	if m.sim.s.Checkpoint.Reentrant && !m.pipelined {
		m.sim.graphHeld = append(m.sim.graphHeld, st)
		return
	}
	m.sim.unref(st)
}

// keepBlockInputs is what the region's checkpoint call keeps until its
// backward: every tensor the function is handed, read or not
// (torch/utils/checkpoint.py: CheckpointFunction.forward's
// ctx.save_for_backward(*tensor_inputs) and ctx.inputs, which holds the
// tuples; _NoopSaveInputs' save_for_backward and the get_args closure).
// Where a capture recorded the block's call (graph.Graph.BlockArgs) those
// are its arguments: a Llama layer is handed position_ids, which it does
// not read when given the position embeddings. The tensors the region
// reads from outside it are kept too: its arguments where nothing else
// is known (the builders, older captures, an attention core), and
// otherwise a tensor it reads without being handed it (a module's
// attribute), which its recomputation needs.
func (m *micro) keepBlockInputs(blk int32) {
	seen := map[*storage]bool{}
	keep := func(t graph.TensorID) {
		st := m.val[t].st
		if st != nil && !seen[st] && m.g.Tensors[t].Role == graph.Activation {
			seen[st] = true
			m.sim.ref(st)
			m.blockInputs[blk] = append(m.blockInputs[blk], st)
		}
	}
	if b := m.regionBlock(blk); b >= 0 && int(b) < len(m.g.BlockArgs) {
		for _, t := range m.g.BlockArgs[b] {
			keep(t)
		}
	}
	for i := m.blockFirst[blk]; i < len(m.g.Ops) && m.plan.region[i] == blk; i++ {
		if m.g.Ops[i].Kind == graph.Release {
			// A release inside the block is Python letting go of a
			// tensor made before it (a captured model's nn.Sequential
			// holds a stage's input until the stage returns: timm
			// Swin's PatchMerging rebinds x while the caller's loop
			// variable keeps it), no read: the checkpoint keeps the
			// arguments the function is handed, not these.
			continue
		}
		for _, t := range m.g.Ops[i].Inputs {
			if !m.producedIn(t, blk) {
				keep(t)
			}
		}
	}
}

// regionBlock is the block that region r wraps whole (Regions: every
// Every-th block), or -1 where the region is an attention core.
func (m *micro) regionBlock(r int32) int32 {
	b := m.g.Ops[m.blockFirst[r]].Block
	if e := m.sim.s.Checkpoint.Every; e > 0 && b >= 0 && int(b)%e == 0 {
		return b
	}
	return -1
}

func (m *micro) producedIn(t graph.TensorID, blk int32) bool {
	return blk >= 0 && m.producer[t] == blk
}

// keepNumber is what becomes of the wrapped Python number num that op i
// was handed (Attr.Number; a CPU run only: it is a host tensor), made
// before the op's output by the argument parser and let go when the op
// returns unless the op's node keeps it. A node is built only for an
// output that requires grad with grad mode on (not in a reentrant
// region's forward, CheckpointFunction.forward's no_grad). SavedVariable
// (torch/csrc/autograd/saved_variable.cpp) keeps a wrapped number itself,
// never through the saved-tensor hooks (Profile.WrappedNumberUnhooked),
// so a non-reentrant region's node keeps it to the node's backward as an
// uncheckpointed one does, where torch 1.13 packs it and the checkpoint's
// _Holder lets it go. A non-reentrant region's recomputation builds nodes
// of its own, which go with its recomputed graph when the recomputation
// returns (recompute); a reentrant one's nodes are the graph its nested
// backward runs, each releasing its number as it runs.
func (m *micro) keepNumber(i int, num *storage) {
	sim := m.sim
	if !m.g.Tensors[m.g.Ops[i].Output].RequiresGrad || sim.noGrad || m.gradOff {
		return
	}
	recomputing := sim.phase == trace.Backward
	if !recomputing && m.ckpt && m.plan.region[i] >= 0 && !sim.s.Profile.WrappedNumberUnhooked {
		return
	}
	sim.ref(num)
	if recomputing && !m.reentrant {
		m.recomputeHeld = append(m.recomputeHeld, num)
		return
	}
	if m.numbers == nil {
		m.numbers = make([]*storage, len(m.g.Ops))
	}
	if old := m.numbers[i]; old != nil {
		sim.unref(old)
	}
	m.numbers[i] = num
}

// recompute reruns a checkpointed block's forward inside backward, saving
// what its nodes save, under the autocast state of the forward (a fresh
// autocast region, so a fresh weight-cast cache).
func (m *micro) recompute(blk int32) {
	sim := m.sim
	m.recomputed[blk] = true
	first := m.blockFirst[blk]
	m.saving = true
	last := first
	for i := first; i < len(m.g.Ops) && m.plan.region[i] == blk; i++ {
		last = i
	}
	// Consumers inside the block only: outside consumers already ran.
	// The block's outputs may carry negative counts from later blocks'
	// recomputes, which consumed them as external inputs: start from zero.
	for i := first; i <= last; i++ {
		m.remaining[m.g.Ops[i].Output] = 0
	}
	for i := first; i <= last; i++ {
		for _, t := range m.g.Ops[i].Inputs {
			if m.producedIn(t, blk) {
				m.remaining[t]++
			}
		}
	}
	// the function's return value outlives the ops inside: until its
	// nested backward under reentrance (holdNested), until the
	// recomputation stops or returns without (below)
	for _, t := range m.regionOut[blk] {
		m.remaining[t]++
	}
	prevPhase := sim.phase
	fork := m.forkRNG()
	// (from 2.1 a non-reentrant recomputation stops at the forward's last
	// pack: earlystop.go)
	end, stop := m.recomputeEnd(blk, last)
	for i := first; i <= end; i++ {
		m.runOp(i)
	}
	if stop >= 0 {
		m.stopAt = stop
		m.runOp(stop)
		m.stopAt = -1
	}
	if !m.reentrant {
		// Stopped early, the exception unwinds the function; run to its
		// end (1.13, or a last pack at its end), it returns and the
		// recomputation drops what it returned (recompute_fn and 1.13's
		// unpack discard the function's result). Either way its outputs
		// and what it held for ops that never ran go, unless a node
		// saved them, and so does the recomputed graph with its nodes'
		// numbers and leaves (recomputeHeld).
		m.stopRecompute(first, end)
	}
	// outputs of the block's last ops that nothing inside consumes are
	// recomputed and dropped unless saved (the non-reentrant checkpoint
	// holds only what the recomputed nodes save).
	m.clearCastCache()
	for _, st := range m.recomputeHeld {
		sim.unref(st)
	}
	m.recomputeHeld = m.recomputeHeld[:0]
	if fork != nil {
		sim.unref(fork)
	}
	sim.phase = prevPhase
	if m.reentrant {
		m.holdNested(blk)
	}
}

// forkRNG is the generator state torch.random.fork_rng copies around a
// recomputation (preserve_rng_state=True, the default): both
// checkpointing flavours of 1.13 and 2.5 recompute inside
// fork_rng(enabled=preserve_rng_state) (torch/utils/checkpoint.py:
// CheckpointFunction.backward, 1.13's unpack, 2.5's recompute_fn), which
// takes cpu_rng_state = torch.get_rng_state() on entry and restores and
// drops it on exit (torch/random.py). A CPU run's only, as keepRNGState.
func (m *micro) forkRNG() *storage {
	if !m.sim.s.CPU {
		return nil
	}
	st := m.sim.alloc(cpuRNGStateBytes, trace.Transient)
	st.refs = 1
	return st
}

// holdNested is what CheckpointFunction.backward (torch/utils/checkpoint.py,
// use_reentrant=True) holds while it runs: it recomputes the whole
// function under enable_grad and then calls
// torch.autograd.backward(outputs_with_grad, args_with_grad), a nested
// backward through the recomputed graph. Until that returns, its frame
// keeps the recomputed outputs (the tuple the function returned) and
// args, the incoming gradients (which the engine also keeps as the
// node's inputs until apply() returns, Engine::evaluate_function), used
// as they are as the nested backward's grad_tensors (_make_grads). So the
// region's outputs live through its whole backward, and an incoming
// gradient is never the only holder of itself: InputBuffer::accumulate
// sums into a new tensor where a gradient from inside the region meets it.
// Both go when the function returns, after its ops' backward (dropNested).
func (m *micro) holdNested(blk int32) {
	for _, t := range m.regionOut[blk] {
		m.remaining[t] = 0
		if st := m.val[t].st; st != nil && m.g.Tensors[t].Role == graph.Activation {
			m.nested[blk] = append(m.nested[blk], st)
		}
		if g := m.grads[t]; g != nil {
			m.sim.ref(g)
			m.nested[blk] = append(m.nested[blk], g)
		}
	}
}

// deliverDetached is the nested backward's gradient for an input of the
// reentrant region being back-propagated: CheckpointFunction.backward
// recomputes the function on detach_variable(inputs), leaves of their
// own, so what the region's nodes return for an input goes to the input
// buffer of that leaf's AccumulateGrad, not to the node that made the
// input, and is summed there as in any input buffer
// (InputBuffer::accumulate; accumulate).
func (m *micro) deliverDetached(t graph.TensorID, st *storage, dt graph.DType, view bool, layout []int64) {
	for k := range m.detached {
		d := &m.detached[k]
		if d.t != t {
			continue
		}
		old := d.st
		d.st = m.accumulate(d.st, st, m.g.Tensors[t].Shape.Numel()*d.dt.Size(), d.view)
		if d.st != old {
			// old_var + var: laid out as the first operand (deliver)
			d.layout = denseLike(m.g.Tensors[t].Shape, d.layout)
		}
		d.view = false
		return
	}
	m.detached = append(m.detached, detachedGrad{t: t, st: st, dt: dt, view: view, layout: layout})
}

// handOnDetached returns a reentrant region's input gradients to the
// outer backward once its nested backward is done: AccumulateGrad makes
// each the detached leaf's .grad, stealing it when nothing else holds it
// (accumulate_grad.h, use_count() <= num_expected_refs) and copying it
// otherwise (clone_obey_contract), and CheckpointFunction.backward returns
// the .grads, which the engine hands to the input buffers of the nodes
// that made the inputs, summed with what they hold already.
//
// The leaf, detach() of the input, has the input's strides
// (graph.Tensor.Strides: Whisper's encoder layers read the permuted output
// of its convolutions, inputs_embeds.permute(0, 2, 1) + embed_pos, and
// each layer's residual sum keeps that order). AccumulateGrad steals a
// gradient only when it obeys the leaf's layout
// (obeys_layout_contract, torch/csrc/autograd/utils/grad_layout_contract.h:
// the strides of a dense leaf, dims of size 1 aside), and otherwise
// copies it to the leaf's strides (clone_obey_contract's
// new_empty_strided(variable.sizes(), variable.strides()).copy_): the
// .grad handed on then has them, and the layer below meets a gradient
// that its views cannot reshape without a copy (a Linear's
// ViewBackward0, linearViewCopy).
func (m *micro) handOnDetached() {
	m.bwdRegion = -1
	for _, d := range m.detached {
		st, layout := d.st, d.layout
		leaf := m.g.Tensors[d.t].Strides
		if st.refs > 1 || !obeysLayout(m.g.Tensors[d.t].Shape, layout, leaf) {
			c := m.sim.alloc(m.g.Tensors[d.t].Shape.Numel()*d.dt.Size(), trace.Transient)
			c.refs = 1
			m.sim.unref(st)
			st, layout = c, leaf
		}
		m.deliver(d.t, st, d.dt, false, false, layout)
	}
	m.detached = m.detached[:0]
}

// dropNested lets go of what holdNested kept, as
// CheckpointFunction.backward returns.
func (m *micro) dropNested(blk int32) {
	if !m.reentrant {
		return
	}
	for _, st := range m.nested[blk] {
		m.sim.unref(st)
	}
	m.nested[blk] = nil
}

// holdLeaf: leaf st (graph.Tensor.Leaf), made by op i, is held by the
// AccumulateGrad node the op reading it builds (accumulate_grad.h: the
// node keeps its variable), as long as that node: the graph's, until the
// loop lets the loss go; in a reentrant region's recomputation the nested
// graph's, until CheckpointFunction.backward returns (holdNested); in a
// non-reentrant one the recomputed graph's, which the tensors the
// function holds keep until the recomputation stops (recompute). A
// reentrant region's forward (no_grad) builds no node.
func (m *micro) holdLeaf(i int, st *storage, recomputing bool) {
	if m.sim.noGrad || m.gradOff || !m.g.Tensors[m.g.Ops[i].Output].RequiresGrad {
		return
	}
	m.sim.ref(st)
	switch {
	case recomputing && m.reentrant:
		r := m.plan.region[i]
		m.nested[r] = append(m.nested[r], st)
	case recomputing:
		m.recomputeHeld = append(m.recomputeHeld, st)
	default:
		m.leaves = append(m.leaves, st)
	}
}

// keepLeafGrad is AccumulateGrad for leaf op i's output: the gradient
// becomes its .grad (stolen: nothing else holds it, accumulate_grad.h),
// which lives with the leaf (holdLeaf).
func (m *micro) keepLeafGrad(i int, g *storage) {
	m.sim.ref(g)
	if r := m.plan.region[i]; m.reentrant && r >= 0 {
		m.nested[r] = append(m.nested[r], g)
		return
	}
	m.leaves = append(m.leaves, g)
}
