package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// micro is one micro-batch: forward and backward of one graph.
type micro struct {
	sim *Simulator
	g   *graph.Graph
	// noSync: the micro-batch runs inside FSDP's no_sync() (an
	// accumulating one under Parallel.NoSync), so its units keep their
	// unsharded gradients instead of reduce-scattering them.
	noSync    bool
	val       []value
	remaining []int32 // forward consumers left, per tensor
	pidx      []int32 // tensor → parameter index, -1
	bidx      []int32 // tensor → buffer index, -1
	nodes     [][]*storage
	casts     [][]inputCast // per op: activation inputs autocast copied
	wCast     []bool        // per op: weight and bias came from the cast cache
	castCache map[int32]*storage
	// castOrder lists castCache's keys in the order the copies were made:
	// the region's end releases them in that order, so that the events do
	// not depend on map iteration (PyTorch clears an unordered_map; nothing
	// is allocated in between, so the order changes no figure).
	castOrder []int32
	// expected gradient arrivals per parameter: direct uses, and uses of
	// the autocast copy (which reach AccumulateGrad through one cast node).
	direct, viaCast []int32
	grads           []*storage
	gradDT          []graph.DType
	// gradView: grads[t] is a view of another gradient (a view op's
	// backward), which its autograd meta keeps alive (accumulate)
	gradView []bool
	// gradStride: grads[t]'s strides, nil when it is contiguous
	// (gradlayout.go)
	gradStride [][]int64
	// activation checkpointing: regions are the plan's (blocks or
	// attention cores), indexed from 0
	ckpt        bool
	blockInputs [][]*storage
	// rngState is, per region, the CPU generator state its checkpoint
	// call keeps (a CPU run only: cpuRNGStateBytes)
	rngState []*storage
	// numbers holds, per op, the wrapped Python number its node keeps
	// (a CPU run only: keepNumber); leaves are this forward's leaves that
	// require grad (graph.Tensor.Leaf) that the graph holds, and their
	// .grads, which go with the graph (holdLeaf, graphHeld);
	// recomputeHeld is what a non-reentrant recomputation's graph holds
	// beside its saved tensors (its nodes' numbers, its leaves), which
	// goes when the recomputation stops
	numbers       []*storage
	leaves        []*storage
	recomputeHeld []*storage
	// reentrant: the regions run through CheckpointFunction
	// (Checkpoint.Reentrant). regionOut lists, per region, the tensors
	// its ops make that ops outside it read (the outputs the wrapped
	// function returns to the model, held by a recomputation until it
	// ends); nested holds, per region, what CheckpointFunction.backward
	// keeps through its nested backward (holdNested)
	reentrant bool
	regionOut [][]graph.TensorID
	nested    [][]*storage
	// bwdRegion is the region whose backward is running (-1 outside);
	// detached holds the gradients its ops returned for tensors made
	// outside it, in the order they first came (detachedGrad)
	bwdRegion int32
	// gradOff: the op runs with grad mode off inside a training step (a
	// reentrant region's forward), where the ops that copy their input
	// for backward do not (saveSelfOrCopy)
	gradOff    bool
	detached   []detachedGrad
	recomputed []bool
	// lastPack is, per region, the last op whose node packed a tensor in
	// its forward (-1: none yet), lastPackSlots where what it packed came
	// from and lastPackMade whether it packed one it made; stopAt is the
	// op a recomputation stops at before its kernel, or -1 (earlystop.go)
	lastPack      []int32
	lastPackSlots [][]packSlot
	lastPackMade  []bool
	stopAt        int
	blockFirst    []int
	producer      []int32 // per tensor: the block of the op that outputs it, or -1
	saving        bool
	packing       bool
	plan          *plan
	// laidOut marks the attention outputs whose kernel laid them out as
	// their query (the CPU flash kernel given a query that is not
	// contiguous), with that layout
	laidOut map[graph.TensorID]graph.QueryLayout
	// ops records each op's first forward run (the first micro-batch of
	// the first step only); run is the op being run.
	ops []OpRun
	run OpRun
	// pipelined: a pipeline stage's micro-batch, which keeps its batch
	// (and, on the last stage, its loss) until its own backward
	pipelined bool
	batch     []*storage
	out       *storage
	// gathered maps an all-gathered tensor to the shard it came from;
	// regather is, per op, the bytes its backward gathers again.
	gathered map[*storage]*storage
	regather []int64
	// returned are this forward's graph.Returned storages (eval)
	returned []*storage
	// rnnStates are the h_n and c_n an RNN call (keyed by its output)
	// wrote and its RNNState ops have not taken yet; rnnGrads the
	// gradients of h_n and c_n waiting for the call's backward
	// (rnn_cudnn.go)
	rnnStates, rnnGrads map[graph.TensorID][2]*storage
}

// detachedGrad is a reentrant region's gradient for one of its inputs:
// the .grad of the detached copy its recomputation read.
type detachedGrad struct {
	t    graph.TensorID
	st   *storage
	dt   graph.DType
	view bool
	// layout: its strides, nil when it is contiguous (gradlayout.go)
	layout []int64
}

type inputCast struct {
	input int         // index in op.Inputs
	from  graph.DType // dtype of the original tensor
}

func newMicro(sim *Simulator, g *graph.Graph) *micro {
	n := len(g.Tensors)
	m := &micro{sim: sim, g: g, bwdRegion: -1, stopAt: -1,
		val: make([]value, n), remaining: make([]int32, n), pidx: make([]int32, n), bidx: make([]int32, n),
		nodes: make([][]*storage, len(g.Ops)), casts: make([][]inputCast, len(g.Ops)), wCast: make([]bool, len(g.Ops)),
		castCache: map[int32]*storage{}, direct: make([]int32, len(sim.params)), viaCast: make([]int32, len(sim.params)),
		grads: make([]*storage, n), gradDT: make([]graph.DType, n), gradView: make([]bool, n), gradStride: make([][]int64, n),
		plan: sim.planFor(g)}
	m.ckpt = m.plan.regions > 0
	for i := range g.Ops {
		if g.Ops[i].Kind == graph.AllGather {
			m.regather = make([]int64, len(g.Ops))
			break
		}
	}
	p, b := int32(0), int32(0)
	for i := range g.Tensors {
		m.pidx[i], m.bidx[i] = -1, -1
		switch g.Tensors[i].Role {
		case graph.Parameter:
			m.pidx[i] = p
			m.val[i] = value{st: sim.params[p].st, dt: sim.params[p].dt}
			p++
		case graph.Buffer:
			m.bidx[i] = b
			dt := g.Tensors[i].DType
			if dt.IsFloat() {
				dt = sim.modelDType()
			}
			m.val[i] = value{st: sim.buffers[b], dt: dt}
			b++
		}
	}
	for _, op := range g.Ops {
		for _, t := range op.Inputs {
			m.remaining[t]++
		}
	}
	if m.ckpt {
		nr := m.plan.regions
		m.blockInputs = make([][]*storage, nr)
		m.rngState = make([]*storage, nr)
		m.recomputed = make([]bool, nr)
		m.lastPack = make([]int32, nr)
		m.lastPackSlots = make([][]packSlot, nr)
		m.lastPackMade = make([]bool, nr)
		m.blockFirst = make([]int, nr)
		for i := range m.blockFirst {
			m.blockFirst[i] = -1
		}
		m.producer = make([]int32, n)
		for i := range m.producer {
			m.producer[i] = -1
		}
		for i, op := range g.Ops {
			r := m.plan.region[i]
			if r >= 0 && m.blockFirst[r] < 0 {
				m.blockFirst[r] = i
			}
			m.producer[op.Output] = r
		}
		if sim.s.Checkpoint.Reentrant && !m.pipelined {
			m.reentrant = true
			m.nested = make([][]*storage, nr)
		}
		m.regionOut = make([][]graph.TensorID, nr)
		seen := map[graph.TensorID]bool{}
		for i, op := range g.Ops {
			if op.Kind == graph.Release {
				// Python letting go is no read (keepBlockInputs)
				continue
			}
			for _, t := range op.Inputs {
				if p := m.producer[t]; p >= 0 && p != m.plan.region[i] && !seen[t] {
					seen[t] = true
					m.regionOut[p] = append(m.regionOut[p], t)
				}
			}
		}
	}
	return m
}

// loadBatch copies the batch to the device; the previous batch is released
// only afterwards, when the loop variables are rebound.
func (m *micro) loadBatch() {
	sim := m.sim
	sim.phase = trace.Forward
	var batch []*storage
	ids := append(append([]graph.TensorID(nil), m.g.Inputs...), m.g.Targets...)
	for _, id := range ids {
		t := m.g.Tensor(id)
		sim.site = sim.tr.Site("batch." + t.Name)
		dt := t.DType
		if dt.IsFloat() && t.Role == graph.Input {
			// The *-true precisions feed the model inputs in its dtype.
			dt = sim.modelDType()
		}
		st := sim.alloc(t.Shape.Numel()*dt.Size(), trace.Batch)
		st.refs = 1
		m.val[id] = value{st: st, dt: dt}
		batch = append(batch, st)
		// One micro-batch's batch, the first step's first: a pipeline
		// stage holds its batches in m.batch, never in sim.batch, so
		// only the micro-batch that records the ops is counted there.
		if sim.stepsDone == 0 && len(sim.batch) == 0 && (!m.pipelined || m.ops != nil) {
			sim.sum.BatchDataBytes += st.bytes
		}
	}
	if m.pipelined {
		m.batch = batch
		return
	}
	for _, st := range sim.batch {
		sim.unref(st)
	}
	sim.batch = batch
}

// hold makes a graph tensor live: it keeps its storage while forward
// consumers remain.
func (m *micro) release(t graph.TensorID) {
	r := m.g.Tensors[t].Role
	if r != graph.Activation {
		return
	}
	st := m.val[t].st
	if shard, ok := m.gathered[st]; ok && st.refs == 1 {
		// the gathered tensor's last holder (it, or the last view of
		// it) is done: the all-gather's hold on its shard ends (a Linear
		// that saved the shard keeps it)
		delete(m.gathered, st)
		m.sim.unref(shard)
	}
	m.sim.unref(st)
}

func (m *micro) forward() {
	sim := m.sim
	sim.phase = trace.Forward
	sim.rebuildBuckets()
	units := sim.units != nil
	if units {
		// the root unit's pre-forward gathers its own parameters first
		m.gather(int32(len(sim.units) - 1))
	}
	for i := range m.g.Ops {
		r := m.plan.region[i]
		inCkpt := m.ckpt && r >= 0
		u := m.g.Ops[i].Block
		if units && u >= 0 && m.plan.unitFirst[u] == int32(i) {
			m.gather(u)
			if m.prefetches(false) {
				m.gather(u + 1)
			}
		}
		if inCkpt && m.blockFirst[r] == i {
			m.lastPack[r] = -1
			m.keepRNGState(r)
			if !m.plan.dead[r] {
				m.keepBlockInputs(r)
			}
		}
		m.saving = !inCkpt && !sim.noGrad
		// without reentrance the region's forward packs what it saves
		// into the checkpoint's holders (earlystop.go)
		m.packing = inCkpt && !m.reentrant && !sim.noGrad
		// CheckpointFunction.forward runs the region under no_grad
		m.gradOff = inCkpt && m.reentrant
		m.runOp(i)
		m.gradOff, m.packing = false, false
		if sim.err != nil {
			return
		}
		if inCkpt && m.plan.dead[r] && (i+1 == len(m.g.Ops) || m.plan.region[i+1] != r) {
			// the call's generator state goes with it: nothing holds
			// CheckpointFunction's ctx or the frame (DeadRegions)
			if st := m.rngState[r]; st != nil {
				m.rngState[r] = nil
				sim.unref(st)
			}
		}
		if units && u >= 0 && m.plan.unitLast[u] == int32(i) && m.reshardAfterForward(u) {
			m.reshard(u)
		}
	}
	if m.pipelined {
		// the schedule keeps the loss until this micro-batch's
		// backward; an output is sent and deallocated at once
		if m.g.Tensor(m.g.Loss).Shape.Numel() == 1 {
			m.out = m.val[m.g.Loss].st
		} else {
			sim.unref(m.val[m.g.Loss].st)
		}
		return
	}
	// The loss stays referenced by the training loop until the next
	// iteration rebinds it, and in eval so does the rest of the output
	// (outputs = model(**batch): the previous ModelOutput, logits and
	// all, goes only when the name is rebound to the new one).
	if m.sim.loss != nil {
		sim.unref(m.sim.loss)
	}
	// the previous step's graph goes with its loss
	for _, st := range sim.graphHeld {
		sim.unref(st)
	}
	sim.graphHeld = sim.graphHeld[:0]
	m.sim.loss = m.val[m.g.Loss].st
	for _, st := range sim.returned {
		sim.unref(st)
	}
	sim.returned = m.returned
}

// exitAutocast leaves the outermost autocast region, which clears the
// weight-cast cache; copies that autograd saved stay alive through their
// nodes.
func (m *micro) exitAutocast() {
	m.clearCastCache()
}

func (m *micro) clearCastCache() {
	for _, p := range m.castOrder {
		m.sim.unref(m.castCache[p])
	}
	clear(m.castCache)
	m.castOrder = m.castOrder[:0]
}

// measureSaved records the activations autograd holds at the end of the
// first forward pass.
func (m *micro) measureSaved() {
	seen := map[*storage]bool{}
	sum := &m.sim.sum
	for i, saved := range m.nodes {
		var bytes int64
		for _, st := range saved {
			if seen[st] {
				continue
			}
			seen[st] = true
			switch st.cat {
			case trace.Activation, trace.Transient:
				bytes += st.bytes
			}
		}
		if bytes > 0 {
			sum.ActivationsBytes += bytes
			sum.SavedByOp = append(sum.SavedByOp, OpSaved{Op: m.g.Ops[i].Name, Kind: m.g.Ops[i].Kind, Bytes: bytes})
		}
	}
	for _, blk := range m.blockInputs {
		for _, st := range blk {
			if !seen[st] && (st.cat == trace.Activation || st.cat == trace.Transient) {
				seen[st] = true
				sum.ActivationsBytes += st.bytes
			}
		}
	}
	for _, p := range m.castOrder {
		sum.CastCacheBytes += m.castCache[p].bytes
	}
	for _, saved := range m.nodes {
		for _, st := range saved {
			if st.cat == trace.CastCache && !seen[st] {
				seen[st] = true
				sum.CastCacheBytes += st.bytes
			}
		}
	}
}

// releaseNode is release_variables(): the node's saved tensors go.
func (m *micro) releaseNode(i int) {
	for _, st := range m.nodes[i] {
		st.saves--
		m.sim.unref(st)
	}
	m.nodes[i] = nil
	if m.numbers != nil && m.numbers[i] != nil {
		m.sim.unref(m.numbers[i])
		m.numbers[i] = nil
	}
}

func (m *micro) backward() {
	sim := m.sim
	sim.phase = trace.Backward
	loss := m.g.Loss
	if !m.g.Tensors[loss].RequiresGrad {
		sim.fail("the loss of %s does not require grad: nothing to train", m.g.Name)
		return
	}
	sim.site = sim.tr.Site("loss.backward")
	if sim.s.Precision == Mixed16 && m.g.Tensor(loss).Shape.Numel() == 1 {
		m.scaleLoss()
	}
	// torch.autograd.backward seeds the graph with ones_like(loss), made
	// in Python (_make_grads) and held in its grad_tensors list until the
	// engine returns: the seed outlives the node that consumes it.
	seed := sim.alloc(m.val[loss].dt.Size()*m.g.Tensor(loss).Shape.Numel(), trace.Transient)
	seed.refs = 2
	m.grads[loss], m.gradDT[loss] = seed, m.val[loss].dt
	defer sim.unref(seed)
	units := sim.units != nil
	if ipg := m.zeroBackward(); ipg != nil {
		defer sim.unref(ipg)
	}
	for i := len(m.g.Ops) - 1; i >= 0; i-- {
		op := &m.g.Ops[i]
		r := m.plan.region[i]
		u := op.Block
		if units && u >= 0 && m.plan.unitLast[u] == int32(i) {
			// the unit's pre-backward hook
			m.gather(u)
			if m.prefetches(true) && u > 0 {
				m.gather(u - 1)
			}
			sim.site = m.plan.sites[i]
		}
		if m.ckpt && r >= 0 && !m.recomputed[r] && !m.plan.dead[r] && m.unpacks(r, i) {
			m.recompute(r)
		}
		if m.reentrant {
			m.bwdRegion = r
		}
		// Engine::evaluate_function: apply() consumes the incoming
		// gradient (freed when it returns), release_variables() drops the
		// saved tensors, and only then are the outputs handed on.
		gout := m.grads[op.Output]
		ran := false
		if gout != nil && m.g.Tensors[op.Output].Leaf && m.g.Tensors[op.Output].RequiresGrad {
			m.keepLeafGrad(i, gout)
		}
		if gout != nil && m.g.Tensors[op.Output].RequiresGrad {
			sim.site = m.plan.sites[i]
			m.backwardOp(i)
			m.grads[op.Output], m.gradView[op.Output], m.gradStride[op.Output] = nil, false, nil
			if !sim.bctx.consumed {
				sim.unref(gout)
			}
			ran = true
		}
		m.releaseNode(i)
		if ran {
			sim.bctx.handOn()
		}
		if m.ckpt && r >= 0 && m.blockFirst[r] == i {
			for _, st := range m.blockInputs[r] {
				sim.unref(st)
			}
			m.blockInputs[r] = nil
			m.dropRNGState(r)
			m.dropNested(r)
			m.handOnDetached()
		}
		if units && u >= 0 && m.plan.unitFirst[u] == int32(i) {
			// the unit's post-backward hook
			if !m.noSync {
				m.reduce(u)
			}
			if !m.keepsGathered() {
				m.reshard(u)
			}
		}
		if sim.err != nil {
			return
		}
	}
	if units {
		root := int32(len(sim.units) - 1)
		if !m.noSync {
			m.reduce(root)
		}
		if !m.keepsGathered() {
			m.reshard(root)
		}
		for _, st := range []*storage{sim.heldGather, sim.heldReduce} {
			if st != nil {
				sim.free(st)
			}
		}
		sim.heldGather, sim.heldReduce = nil, nil
	}
	// the leaves and their .grads go with the graph
	sim.graphHeld = append(sim.graphHeld, m.leaves...)
	m.leaves = m.leaves[:0]
	// Gradients that reached tensors with no producer (inputs that require
	// grad) are dropped with the graph.
	for t, st := range m.grads {
		if st != nil {
			m.grads[t], m.gradView[t], m.gradStride[t] = nil, false, nil
			sim.unref(st)
		}
	}
	if len(sim.scaler) > 2 {
		// the scaled loss is a temporary of the training loop
		sim.unref(sim.scaler[2])
		sim.scaler = sim.scaler[:2]
	}
}

// deliver hands a gradient for tensor t to autograd's input buffer,
// accumulating with one that arrived earlier (in place when the buffer is
// not shared, InputBuffer::accumulate). view says the gradient is a view
// of another (a view op's backward).
func (m *micro) deliver(t graph.TensorID, st *storage, dt graph.DType, same, view bool, layout []int64) {
	sim := m.sim
	if !m.g.Tensors[t].RequiresGrad {
		sim.unref(st)
		return
	}
	if p := m.pidx[t]; p >= 0 {
		// a strided gradient fails AccumulateGrad's obeys_layout_contract
		// (accumulate_grad.h) for a contiguous parameter: it is cloned
		m.arrive(p, st, false, same, layout != nil, view)
		return
	}
	if m.g.Tensors[t].Role != graph.Activation {
		sim.unref(st)
		return
	}
	if m.bwdRegion >= 0 && m.producer[t] != m.bwdRegion {
		m.deliverDetached(t, st, dt, view, layout)
		return
	}
	old := m.grads[t]
	if old == nil {
		m.grads[t], m.gradDT[t], m.gradView[t], m.gradStride[t] = st, dt, view, layout
		return
	}
	// The same tensor reaching t twice (x + x) or two slices of one
	// gradient (cat(h, h)) are summed into a new tensor too: the first is
	// not the only holder of itself or of its storage. Nor is a view:
	// its autograd meta holds its base (accumulate).
	if old.refs == 1 && !m.gradView[t] && sim.s.Profile.InputBufferInPlace {
		sim.unref(st)
		return
	}
	// old_var + var has t's shape: when the gradients are slices of a
	// larger one (cat's backward narrows), the sum is the slice's size,
	// not the size of the storage the slice pins.
	sum := sim.alloc(m.g.Tensors[t].Shape.Numel()*m.gradDT[t].Size(), trace.Transient)
	sum.refs = 1
	sim.unref(old)
	sim.unref(st)
	m.grads[t], m.gradView[t] = sum, false
	m.gradStride[t] = denseLike(m.g.Tensors[t].Shape, m.gradStride[t])
}

// arrive routes a parameter gradient to AccumulateGrad, through the cast
// node when it is the gradient of autocast's copy.
//
// same says the gradient is a tensor the node also handed to another of
// its inputs (add's gradient, given to both operands): AccumulateGrad
// steals a gradient only when nothing else references the tensor
// (accumulate_grad.h: new_grad.use_count() <= num_expected_refs), and
// clones it otherwise. Slices of one storage are tensors of their own.
// clone says the gradient's layout differs from the parameter's
// (obeys_layout_contract fails): it is copied, never stolen. view says it
// is a view of another tensor (accumulate).
func (m *micro) arrive(p int32, st *storage, viaCast, same, clone, view bool) {
	sim := m.sim
	ps := sim.params[p]
	if viaCast {
		if ps.castPending == nil {
			ps.castPending, ps.castPendingView = st, view
		} else {
			ps.castPending = m.accumulate(ps.castPending, st, ps.numel*sim.low.Size(), ps.castPendingView)
			ps.castPendingView = false
		}
		ps.castArrived++
		if ps.castArrived < m.viaCast[p] {
			return
		}
		// ToCopyBackward: the gradient in the parameter's dtype.
		low := ps.castPending
		ps.castPending, ps.castArrived, ps.castPendingView = nil, 0, false
		st = sim.alloc(ps.numel*ps.dt.Size(), m.gradCategory(p))
		st.refs = 1
		sim.unref(low)
	}
	if ps.pending == nil {
		ps.pending = st
		ps.pendingShared = same
		ps.pendingClone = clone
		ps.pendingView = view
	} else {
		// a parameter used more than once (a recurrent cell's weights,
		// tied embeddings): the engine sums its gradients in the
		// AccumulateGrad node's input buffer before the node runs
		ps.pending = m.accumulate(ps.pending, st, ps.numel*ps.dt.Size(), ps.pendingShared || ps.pendingClone || ps.pendingView)
		ps.pendingView = false
		if ps.pending != st {
			ps.pendingShared, ps.pendingClone = false, false
		}
	}
	ps.arrived++
	want := m.direct[p]
	if m.viaCast[p] > 0 {
		want++
	}
	if ps.arrived < want {
		return
	}
	g := ps.pending
	shared := ps.pendingShared || ps.pendingClone
	ps.pending, ps.arrived, ps.pendingShared, ps.pendingClone, ps.pendingView = nil, 0, false, false, false
	if sim.s.Parallel.On() && m.gradDone(p, g) {
		return
	}
	if ps.grad == nil {
		if shared {
			// clone_obey_contract: .grad is a copy of the parameter's
			// size (the incoming gradient may pin a larger storage).
			c := sim.alloc(ps.numel*ps.dt.Size(), trace.Gradient)
			c.refs = 1
			sim.unref(g)
			g = c
		}
		// AccumulateGrad steals the incoming gradient.
		ps.grad = g
		return
	}
	// .grad += new_grad, in place
	sim.unref(g)
}

// accumulate is InputBuffer::accumulate for a gradient arriving at an
// input buffer that holds one already: the second is added into the first
// in place when the profile's release does so and nothing else holds the
// first (can_accumulate_inplace), and otherwise summed into a new tensor
// (old_var + var, torch 1.13 always), both operands then freed. It
// returns what the buffer holds after. shared says something else holds
// the first: another input it was handed to, or, for a view (a view op's
// backward; a Linear's weight gradient, mm_mat2_backward's
// grad.t().mm(mat1).t() of a column-major W.t(), then TBackward0's .t()),
// the base its autograd meta keeps (as_view makes views with their base
// in no-grad mode too), so that its storage has two users:
// can_accumulate_inplace asks storage().use_count() == 1
// (torch/csrc/autograd/input_buffer.cpp, v2.5.1). Measured on 2.5.1 with
// validation/step.py (a recurrent cell's Linear weights, summed out of
// place at every step) and on a weight used twice, a tied embedding and an
// activation whose first gradient came through TBackward0: each summed
// into a new tensor.
func (m *micro) accumulate(old, st *storage, bytes int64, shared bool) *storage {
	sim := m.sim
	if sim.s.Profile.InputBufferInPlace && !shared && old.refs == 1 {
		sim.unref(st)
		return old
	}
	sum := sim.alloc(bytes, old.cat)
	sum.refs = 1
	sim.unref(old)
	sim.unref(st)
	return sum
}

// gradCategory is the category of a parameter gradient being allocated:
// the one that will become .grad is a gradient, others are transient.
func (m *micro) gradCategory(p int32) trace.Category {
	ps := m.sim.params[p]
	if ps.grad == nil && ps.pending == nil {
		return trace.Gradient
	}
	return trace.Transient
}

// contiguousAttention reports whether t is a view of an attention output
// [B, H, L, D] laid out in another order (laidOut) that reads that memory
// in order: its dims are the layout's dims in memory order, split or merged
// (the transpose(1, 2) [B, L, H, D] of a [B, L, H, D] layout;
// nn.MultiheadAttention's permute(2, 0, 1, 3) [L, B, H, D], or torch
// 1.13's transpose of the [B*H, L, D] view, [L, B*H, D], of an
// [L, B, H, D] one). Such a view is contiguous already, so .contiguous()
// returns it.
func (m *micro) contiguousAttention(t graph.TensorID) bool {
	tt := &m.g.Tensors[t]
	l, ok := m.laidOut[tt.View]
	if tt.View == graph.None || !ok {
		return false
	}
	bs := m.g.Tensors[tt.View].Shape
	if len(bs) != 4 {
		return false
	}
	var mem []int64
	for _, d := range l.Order() {
		mem = append(mem, bs[d])
	}
	return inOrder(tt.Shape, mem)
}

// inOrder reports whether shape s reads a contiguous tensor of shape mem
// in order: each of s's dims a product of consecutive dims of mem, or a
// consecutive part of one (1s anywhere).
func inOrder(s, mem []int64) bool {
	i, j := 0, 0
	for i < len(s) || j < len(mem) {
		switch {
		case i < len(s) && s[i] == 1:
			i++
		case j < len(mem) && mem[j] == 1:
			j++
		case i == len(s) || j == len(mem):
			return false
		default:
			a, b := s[i], mem[j]
			i, j = i+1, j+1
			for a != b {
				if a < b {
					if i == len(s) || b%a != 0 {
						return false
					}
					a *= s[i]
					i++
				} else {
					if j == len(mem) || a%b != 0 {
						return false
					}
					b *= mem[j]
					j++
				}
			}
		}
	}
	return true
}
