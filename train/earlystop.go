package train

import "github.com/batchfit/batchfit/graph"

// The early stop of a non-reentrant checkpoint's recomputation
// (Profile.CheckpointEarlyStop). From 2.1, torch.utils.checkpoint
// (use_reentrant=False) counts the tensors the region's forward packed
// (_checkpoint_hook's pack_hook appends a weak reference to a _Holder to
// frame.weak_holders, torch/utils/checkpoint.py) and, recomputing,
// raises _StopRecomputationError at the pack that brings
// frame.recomp_counter to that count (_recomputation_hook's pack_hook):
// the rest of the function never runs again. An autograd kernel packs
// the inputs it saves before it runs the op and the outputs after
// (the generated VariableType code builds grad_fn and its SavedVariables
// of the inputs, then redispatches, then saves the result), so a last op
// that saves only tensors it was handed, autocast's copies of them among
// them (cached_cast runs before the op's autograd kernel), is stopped
// before it computes anything, and one that saves what it makes is
// stopped once it has. The exception unwinds the function: its frame
// lets go of everything it held, and only what the recomputation stored
// for the holders stays.
// 1.13's and 2.0's _checkpoint_without_reentrant has no such stop: its
// unpack runs function(*args, **kwargs) to its end under inner_pack
// (which stores every tensor whose Holder is alive), and what nothing
// inside reads or saves is made and dropped (recompute).

// packSlot is where a tensor an op packs comes from: one of its inputs
// (as the kernel receives them, after autocast's casts), its weight, its
// bias or one of its buffers.
type packSlot struct {
	kind int8 // slotInput, slotWeight, slotBias, slotBuffer
	j    int32
}

const (
	slotInput int8 = iota
	slotWeight
	slotBias
	slotBuffer
)

// packs notes a tensor the op being run packs for backward inside a
// non-reentrant region's forward (fwdCtx.save): the last op of the region
// that packs one, where what it packs comes from, and whether it packs
// one it made (its output, a kernel's extra output), which it packs only
// after running.
func (m *micro) packs(c *fwdCtx, st *storage) {
	r := m.plan.region[c.i]
	if m.lastPack[r] != int32(c.i) {
		m.lastPack[r] = int32(c.i)
		m.lastPackSlots[r] = m.lastPackSlots[r][:0]
		m.lastPackMade[r] = false
	}
	if s, ok := handedSlot(c, st); ok {
		m.lastPackSlots[r] = append(m.lastPackSlots[r], s)
		return
	}
	m.lastPackMade[r] = true
}

// handedSlot is the slot of the op that holds st, if one does.
func handedSlot(c *fwdCtx, st *storage) (packSlot, bool) {
	for j, v := range c.in {
		if v.st == st {
			return packSlot{slotInput, int32(j)}, true
		}
	}
	switch {
	case c.op.Weight != graph.None && c.w.st == st:
		return packSlot{kind: slotWeight}, true
	case c.op.Bias != graph.None && c.b.st == st:
		return packSlot{kind: slotBias}, true
	}
	for j, b := range c.op.Buffers {
		if c.m.val[b].st == st {
			return packSlot{slotBuffer, int32(j)}, true
		}
	}
	return packSlot{}, false
}

// unpacks reports whether op i's backward is the one that recomputes
// region blk. Without reentrance the recomputation runs at the first
// unpack of a tensor the region's forward packed (1.13's unpack: "if
// len(storage) == 0", 2.5's _checkpoint_hook.unpack_hook: "if not
// frame.is_recomputed[gid]"; torch/utils/checkpoint.py), so in the node of
// the region's last packing op: the ops after it, which saved nothing,
// run their backward first. A reentrant region is one node,
// CheckpointFunctionBackward, which recomputes as soon as it runs. A
// region whose forward packed nothing is recomputed at its last op, as
// before (PyTorch would never recompute it; nothing reads what it makes).
func (m *micro) unpacks(blk int32, i int) bool {
	return m.reentrant || m.lastPack[blk] < 0 || i <= int(m.lastPack[blk])
}

// recomputeEnd is the last op of region blk (its last op is last) that
// its recomputation runs to the end, and the op stopped before it
// computes, after its casts and packs, or -1: under the early stop, the
// region's last packing op, or the one before it when that op packs only
// what it was handed; the whole region otherwise, or where the forward
// packed nothing.
func (m *micro) recomputeEnd(blk int32, last int) (end, packOnly int) {
	if !m.sim.s.Profile.CheckpointEarlyStop || m.reentrant || m.lastPack[blk] < 0 {
		return last, -1
	}
	stop := int(m.lastPack[blk])
	if m.lastPackMade[blk] {
		return stop, -1
	}
	return stop - 1, stop
}

// packOnly runs op i up to its autograd kernel's packs (runOp, once the
// inputs and weights are cast): its node keeps what the forward's packed,
// and the exception comes before the kernel runs.
func (m *micro) packOnly(c *fwdCtx) {
	c.saving = true
	for _, s := range m.lastPackSlots[m.plan.region[c.i]] {
		switch s.kind {
		case slotInput:
			c.save(c.in[s.j])
		case slotWeight:
			c.save(c.w)
		case slotBias:
			c.save(c.b)
		case slotBuffer:
			c.save(m.val[c.op.Buffers[s.j]])
		}
	}
	for _, st := range c.locals {
		m.sim.unref(st)
	}
	m.sim.localBuf = c.locals[:0]
	m.sim.unref(c.number)
}

// stopRecompute ends a non-reentrant recomputation that ran ops first to
// end: every tensor the function made and held, for an op that never ran
// (an early stop: the exception unwinds its frame) or to return, goes
// (what a node saved stays).
func (m *micro) stopRecompute(first, end int) {
	for i := first; i <= end; i++ {
		if t := m.g.Ops[i].Output; m.remaining[t] > 0 {
			m.remaining[t] = 0
			if m.val[t].st != nil {
				m.release(t)
			}
		}
	}
}
