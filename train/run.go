package train

import (
	"slices"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// fwdCtx is what an op rule sees in forward.
type fwdCtx struct {
	m      *micro
	op     *graph.Op
	i      int
	in     []value // inputs as the kernel receives them (after autocast casts)
	w, b   value   // weight and bias as the kernel receives them
	out    value
	saving bool
	// packing: the op runs in a non-reentrant region's forward, whose
	// packs the early stop counts (earlystop.go)
	packing bool
	locals  []*storage
	// held is a kernel temporary made before the output that the op's
	// node may save (auto-gptq's dequantized weight).
	held *storage
	// number is the 0-d tensor a Python number was wrapped in before the
	// op ran (graph.Number), let go after the op's locals
	number *storage
	// stats are a kernel's extra outputs made before its output, which
	// its node may save (the CPU batch norm's save_mean and save_invstd
	// under 1.13, batchNormCPUPre).
	stats []*storage
}

func (c *fwdCtx) shape(j int) graph.Shape { return c.m.g.Tensors[c.op.Inputs[j]].Shape }
func (c *fwdCtx) outShape() graph.Shape   { return c.m.g.Tensors[c.op.Output].Shape }
func (c *fwdCtx) numel(j int) int64       { return c.shape(j).Numel() }
func (c *fwdCtx) requiresGrad(j int) bool { return c.m.g.Tensors[c.op.Inputs[j]].RequiresGrad }

// save registers a tensor the op's autograd node keeps for backward.
func (c *fwdCtx) save(v value) {
	if c.packing && v.st != nil {
		c.m.packs(c, v.st)
	}
	if !c.saving || v.st == nil {
		return
	}
	if shard, ok := c.m.gathered[v.st]; ok {
		// Megatron's sequence-parallel Linear keeps the shard it was
		// given and gathers it again in backward
		c.m.regather[c.i] += v.st.bytes
		v.st = shard
	}
	for _, s := range c.m.nodes[c.i] {
		if s == v.st {
			return
		}
	}
	v.st.saves++
	c.m.sim.ref(v.st)
	c.m.nodes[c.i] = append(c.m.nodes[c.i], v.st)
}

// local allocates a tensor that lives inside the op (freed when the op
// returns unless saved).
func (c *fwdCtx) local(bytes int64, cat trace.Category) *storage {
	st := c.m.sim.alloc(bytes, cat)
	st.refs = 1
	c.locals = append(c.locals, st)
	return st
}

// drop frees a local early (an intermediate of a composite op).
func (c *fwdCtx) drop(st *storage) {
	for i, s := range c.locals {
		if s == st {
			c.locals = append(c.locals[:i], c.locals[i+1:]...)
			c.m.sim.unref(st)
			return
		}
	}
}

// saveNew allocates an extra output of the kernel that only the node keeps
// (max-pool indices, a dropout mask, normalization statistics).
func (c *fwdCtx) saveNew(bytes int64) *storage {
	st := c.local(bytes, trace.Activation)
	c.save(value{st: st})
	return st
}

// gemm notes a cuBLAS call on the thread that runs the forward op: the
// main thread, or the autograd device thread when a checkpointed block is
// recomputed in backward (torch.utils.checkpoint reruns the forward inside
// a backward node).
func (c *fwdCtx) gemm() { c.m.sim.cublas(c.m.sim.phase == trace.Backward) }

// gemmLt notes a cuBLASLt call (gemm_and_bias: an addmm whose bias goes
// into the epilogue) on the op's thread. getCUDABlasLtWorkspace
// (aten/src/ATen/cuda/CublasHandlePool.cpp) first takes the thread's cuBLAS
// handle, which sets that handle's workspace (setWorkspaceForHandle), then
// the Lt workspace of the (handle, stream), allocated through the caching
// allocator at the handle's first Lt call and kept (pytorch pull request
// 156495, June 2025: "LT now allocates one workspace per handle+stream
// combo"; TORCH_CUBLASLT_UNIFIED_WORKSPACE, which would share the cuBLAS
// one, is opt-in there). Its size, getCUDABlasLtWorkspaceSize, is
// CUBLASLT_WORKSPACE_SIZE (1024 KiB by default), capped at the cuBLAS
// workspace's.
func (c *fwdCtx) gemmLt() {
	sim := c.m.sim
	back := sim.phase == trace.Backward
	sim.cublas(back)
	n := sim.s.Profile.CublasLtWorkspaceBytes
	if n <= 0 || sim.s.CPU {
		return
	}
	done := &sim.ltForward
	if back {
		done = &sim.ltBackward
	}
	if *done {
		return
	}
	*done = true
	if ws := sim.s.Profile.CublasWorkspaceFor(sim.s.ComputeMajor, sim.s.CublasWorkspaceConfig); ws > 0 && ws < n {
		n = ws
	}
	st := sim.alloc(n, trace.Workspace)
	st.refs = 1
	sim.sum.WorkspaceBytes += n
}

func (sim *Simulator) cublas(backwardThread bool) {
	if sim.s.CPU {
		return
	}
	done := &sim.wsForward
	if backwardThread && sim.s.Profile.CublasWorkspacePerThread {
		done = &sim.wsBackward
	}
	if *done {
		return
	}
	*done = true
	n := sim.s.Profile.CublasWorkspaceFor(sim.s.ComputeMajor, sim.s.CublasWorkspaceConfig)
	if n > 0 && !sim.s.Profile.CublasWorkspaceInAllocator {
		// cuBLAS's own pool: device memory outside PyTorch's allocator.
		sim.sum.WorkspaceBytes += n
		sim.sum.LibraryBytes += n
		return
	}
	if n > 0 {
		st := sim.alloc(n, trace.Workspace)
		st.refs = 1
		sim.sum.WorkspaceBytes += n
	}
}

// runOp executes forward op i: autocast casts, the output, the op rule, and
// the release of everything whose last forward use this was.
func (m *micro) runOp(i int) {
	sim := m.sim
	op := &m.g.Ops[i]
	r := &m.plan.rules[i]
	if !m.plan.known[i] {
		sim.fail("op %s: no simulation rule for op kind %q", op.Name, op.Kind)
		return
	}
	sim.site = m.plan.sites[i]
	recomputing := sim.phase == trace.Backward
	if cap(sim.inBuf) < len(op.Inputs) {
		sim.inBuf = make([]value, 0, 2*len(op.Inputs))
	}
	c := &sim.ctx
	*c = fwdCtx{m: m, op: op, i: i, in: sim.inBuf[:len(op.Inputs)], locals: sim.localBuf[:0]}
	m.run = OpRun{}
	m.casts[i] = m.casts[i][:0]
	if m.regather != nil {
		m.regather[i] = 0
	}
	if n := op.Attr.Number; n.Wrapped && sim.s.CPU {
		// the Python number's 0-d tensor, made by the argument parser
		// before the op runs and held by the binding's arguments until
		// it returns (keepNumber)
		c.number = sim.alloc(n.DType.Size(), trace.Transient)
		c.number.refs = 1
	}
	policy := m.castOf(i, r)
	// Only an op whose output requires grad records a node, and only a
	// node has edges to the parameters' AccumulateGrad: the generated
	// VariableType kernels set grad_fn and its next edges only when
	// compute_requires_grad (torch/csrc/autograd/functions/utils.h) says
	// so, which it does not under no_grad nor for a non-differentiable
	// result (an integer one, a comparison), and factory functions
	// (torch.tensor, full) take no tensor at all. A constant the graph
	// makes "like" a parameter (the capture's anchor for a tensor no
	// recorded op made, such as Gemma's normalizer,
	// torch.tensor(hidden**0.5)) is no use of it: counted, AccumulateGrad
	// would wait for a gradient that never comes, and the parameter's
	// .grad would stay pending across zero_grad.
	edges := !recomputing && m.g.Tensors[op.Output].RequiresGrad
	for j, t := range op.Inputs {
		if p := m.pidx[t]; p >= 0 && edges && m.g.Tensors[t].RequiresGrad {
			// A parameter used as an operand (a class token expanded, a
			// position table added): one more gradient for AccumulateGrad.
			m.direct[p]++
		}
		v := m.val[t]
		if v.st == nil {
			sim.fail("op %s: input %s has no value (internal ordering error)", op.Name, m.g.Tensors[t].Name)
			return
		}
		if to, cast := m.autocastTo(policy, v.dt); cast {
			n := m.g.Tensors[t].Shape.Numel()
			st := c.local(n*to.Size(), trace.Transient)
			m.casts[i] = append(m.casts[i], inputCast{input: j, from: v.dt})
			if j < 64 {
				m.run.InputCasts |= 1 << j
				m.run.CastFrom = v.dt
			}
			v = value{st: st, dt: to}
		}
		c.in[j] = v
	}
	m.wCast[i] = false
	for k := 0; k < 2; k++ {
		t := op.Weight
		if k == 1 {
			t = op.Bias
		}
		if t == graph.None {
			continue
		}
		v := m.val[t]
		p := m.pidx[t]
		if to, cast := m.autocastTo(r.cast, v.dt); cast && p >= 0 {
			switch {
			case m.g.Tensors[t].RequiresGrad && !op.Attr.WeightView && sim.castCacheOn():
				v = value{st: m.castParam(p, to), dt: to}
				m.wCast[i] = true
			case m.g.Tensors[t].RequiresGrad:
				// the op sees a view of the weight (an einsum's rearranged
				// operand), which cached_cast does not cache (it takes
				// leaves that are not views), or the cache is off
				// (cache_enabled=False, or inference mode where the
				// release skips it): a copy made at every use, kept as
				// long as the op or what saves it; its gradient still
				// reaches the weight through ToCopyBackward
				ps := m.sim.params[p]
				m.run.ParamCasts++
				m.run.ParamCastBytes += ps.numel * (ps.dt.Size() + to.Size())
				v = value{st: c.local(ps.numel*to.Size(), trace.Transient), dt: to}
				m.wCast[i] = true
			default:
				// autocast caches the casts of leaves that require grad
				// only (cached_cast's can_try_cache in autocast_mode.cpp):
				// a frozen weight is cast anew at every use, a copy that
				// lives as long as the op, or what saves it.
				ps := m.sim.params[p]
				m.run.ParamCasts++
				m.run.ParamCastBytes += ps.numel * (ps.dt.Size() + to.Size())
				v = value{st: c.local(ps.numel*to.Size(), trace.Transient), dt: to}
			}
		}
		if p >= 0 && edges && m.g.Tensors[t].RequiresGrad && !(k == 1 && op.Bias == op.Weight) {
			if m.wCast[i] {
				m.viaCast[p]++
			} else {
				m.direct[p]++
			}
		}
		if k == 0 {
			c.w = v
		} else {
			c.b = v
		}
	}
	if i == m.stopAt {
		// an early-stopped recomputation: the packs, not the kernel
		m.packOnly(c)
		return
	}
	if c.number != nil && len(c.in) > 0 && c.in[0].dt != op.Attr.Number.DType {
		// TensorIterator casts the CPU scalar to the op's dtype
		// (aten::to, 4 bytes for float32), freed with the op's locals
		// once the output is made: measured on 1.13 and 2.5.1
		// (profile_memory, x * 0.5, x - 2 on a float32 x)
		c.local(c.in[0].dt.Size(), trace.Transient)
	}
	if r.pre != nil {
		r.pre(c)
	}
	out := op.Output
	dt := m.outDType(r, c)
	if m.ops != nil && !recomputing {
		run := m.run
		run.Out = dt
		run.In = dt
		switch {
		case len(c.in) > 0:
			run.In = c.in[0].dt
		case op.Weight != graph.None:
			run.In = c.w.dt
		}
		if op.Kind == graph.Attention {
			run.Kernel = m.kernel(c)
		}
		m.ops[i] = run
	}
	tensor := &m.g.Tensors[out]
	if r.storage != nil && r.storage(c) != nil {
		c.out = value{st: r.storage(c), dt: dt}
		sim.ref(c.out.st)
	} else if r.alias != nil && r.alias(m, c, dt) {
		c.out = value{st: c.in[0].st, dt: dt}
		sim.ref(c.in[0].st)
	} else if op.Kind == graph.Release {
		// Python letting go of tensors is no tensor: the op's result, a
		// marker nothing reads, holds no storage. Taken as a view of the
		// first tensor let go, it held that storage again in a
		// checkpointed block's recompute, where the tensor is one the
		// caller let go of in the forward (timm Swin's stage input, which
		// the captured nn.Sequential's loop variable held until the
		// stage's last block returned): the recompute freed it a second
		// time, 589,824 bytes in Swin-T's backward.
		c.out = value{dt: dt}
	} else if tensor.View != graph.None {
		base := m.val[tensor.View]
		c.out = value{st: base.st, dt: dt}
		sim.ref(base.st)
	} else {
		cat := trace.Activation
		if r.cache {
			cat = trace.KVCache
		}
		st := sim.alloc(tensor.Shape.Numel()*dt.Size(), cat)
		st.refs = 1
		c.out = value{st: st, dt: dt}
	}
	m.val[out] = c.out
	if tensor.Leaf {
		m.holdLeaf(i, c.out.st, recomputing)
	}
	if (sim.noGrad || sim.s.KeepOutput) && !recomputing && slices.Contains(m.g.Returned, out) {
		// the forward returns it (a ModelOutput's logits): alive to the
		// forward's end and beyond, whatever its last use. In training
		// it is kept only when the loop holds the output (Setup.KeepOutput):
		// Trainer.compute_loss drops it before backward.
		sim.ref(c.out.st)
		m.returned = append(m.returned, c.out.st)
	}
	c.saving = m.saving && tensor.RequiresGrad
	c.packing = m.packing && tensor.RequiresGrad
	if r.fwd != nil {
		r.fwd(c)
	}
	if c.number != nil && op.Attr.Number.Kept {
		m.keepNumber(i, c.number)
	}
	for _, st := range c.locals {
		sim.unref(st)
	}
	sim.localBuf = c.locals[:0]
	// the binding's wrapped number goes once the op has returned
	sim.unref(c.number)
	for _, t := range op.Inputs {
		m.remaining[t]--
		if m.remaining[t] == 0 {
			m.release(t)
		}
	}
	if m.remaining[out] == 0 && (out != m.g.Loss || recomputing) {
		// (a pipeline stage's output is recomputed with its checkpointed
		// block: the first one is gone, sent, and nothing reads this one)
		// Nothing reads the output: it is freed at once, and with it the
		// node, unless it is a recomputed block output whose gradient is
		// already on its way.
		m.release(out)
		if !recomputing && m.grads[out] == nil {
			m.releaseNode(i)
		}
	}
}

// autocastTo says whether an input of dtype dt is cast under the policy.
func (m *micro) autocastTo(p castPolicy, dt graph.DType) (graph.DType, bool) {
	if !m.sim.amp || !dt.IsFloat() {
		return dt, false
	}
	switch p {
	case castLower:
		return m.sim.low, dt != m.sim.low
	case castFP32:
		return graph.F32, dt != graph.F32
	}
	return dt, false
}

// castCacheOn reports whether cached_cast may cache a parameter's cast
// (can_try_cache in aten/src/ATen/autocast_mode.cpp): cache_enabled, the
// torch.autocast argument, and, in the releases that skip the cache in
// inference mode (the profile's AutocastCacheOffInInferenceMode), not
// under torch.inference_mode().
func (sim *Simulator) castCacheOn() bool {
	a := sim.s.Autocast
	return !a.CacheOff && !(a.InferenceMode && sim.noGrad && sim.s.Profile.AutocastCacheOffInInferenceMode)
}

// castParam returns autocast's cached low-precision copy of parameter p,
// making it at first use in the region (cached_casts in autocast_mode.cpp).
func (m *micro) castParam(p int32, to graph.DType) *storage {
	if st, ok := m.castCache[p]; ok {
		return st
	}
	ps := m.sim.params[p]
	m.run.ParamCasts++
	m.run.ParamCastBytes += ps.numel * (ps.dt.Size() + to.Size())
	st := m.sim.alloc(ps.numel*to.Size(), trace.CastCache)
	st.refs = 1
	m.castCache[p] = st
	m.castOrder = append(m.castOrder, p)
	return st
}

func (m *micro) outDType(r *rule, c *fwdCtx) graph.DType {
	if r.out != nil {
		return r.out(m, c)
	}
	if len(c.in) > 0 {
		return c.in[0].dt
	}
	return graph.F32
}

// bwdCtx is what an op rule sees in backward.
type bwdCtx struct {
	m    *micro
	op   *graph.Op
	i    int
	gout *storage
	gdt  graph.DType
	// gst are the incoming gradient's strides, nil when it is contiguous
	// (gradlayout.go).
	gst []int64
	// out holds the gradients the node returns. The engine hands them on
	// (to the next node's input buffer, to AccumulateGrad, through a cast
	// node) only after the node's apply() has returned, so after the
	// temporaries it freed: see backwardOp.
	out []gradOut
	// consumed: the rule freed the incoming gradient itself (consume), as
	// the engine does when the first of the several autograd nodes an op
	// stands for returns.
	consumed bool
}

// consume frees the incoming gradient inside an op that stands for several
// autograd nodes: Engine::evaluate_function drops a node's inputs when its
// apply() returns, so only the first node holds it.
func (c *bwdCtx) consume() {
	if c.consumed || c.gout == nil {
		return
	}
	c.consumed = true
	c.m.sim.unref(c.gout)
}

// releaseSaved drops one tensor the op's node saved, before the op's other
// nodes run: release_variables() of the node that saved it, within an op
// that stands for several autograd nodes (cross_entropy's NllLossBackward0
// before LogSoftmaxBackward0).
func (c *bwdCtx) releaseSaved(st *storage) {
	nodes := c.m.nodes[c.i]
	for k, s := range nodes {
		if s == st {
			c.m.nodes[c.i] = append(nodes[:k], nodes[k+1:]...)
			st.saves--
			c.m.sim.unref(st)
			return
		}
	}
}

// applyReturns is the end of the node's apply(), before the engine's
// validate_outputs sums a broadcast gradient down to its input's shape
// (sum_to: an addmm's bias): in a non-reentrant checkpointed region the
// tensors the node unpacked go now. The checkpoint's unpack hook hands the
// node the recomputed tensor and drops the frame's hold on it
// (torch/utils/checkpoint.py, unpack_hook: holder.handles[gid] = None,
// and frame.recomputed is keyed weakly by that handle), and a
// SavedVariable with hooks keeps only what the pack hook returned
// (torch/csrc/autograd/saved_variable.cpp), so apply's local is its last
// holder unless another node saved it too. Elsewhere a node's
// SavedVariables hold theirs until release_variables(), after
// validate_outputs, as 1.13's non-reentrant checkpoint (whose storage
// the SavedVariable's Holder keys) does too
// (Profile.CheckpointUnpackReleases). A wrapped Python number, which the
// node keeps itself (keepNumber), is not among them.
func (c *bwdCtx) applyReturns() {
	m := c.m
	if !m.ckpt || m.reentrant || m.plan.region[c.i] < 0 || !m.sim.s.Profile.CheckpointUnpackReleases {
		return
	}
	for len(m.nodes[c.i]) > 0 {
		c.releaseSaved(m.nodes[c.i][0])
	}
}

// gradOut is one gradient a backward node returns: for input j, or for
// parameter p (p >= 0).
type gradOut struct {
	j       int
	p       int32
	st      *storage
	dt      graph.DType
	viaCast bool
	// same: the node returned its incoming gradient tensor itself, not a
	// new tensor or view (see arrive).
	same bool
	// clone: a parameter gradient whose layout differs from the
	// parameter's, which AccumulateGrad copies instead of stealing.
	clone bool
	// view: a view of another tensor, which holds that tensor (see
	// accumulate).
	view bool
	// layout: the gradient's strides, nil when it is contiguous
	// (gradlayout.go).
	layout []int64
}

func (c *bwdCtx) numel(j int) int64 { return c.m.g.Tensors[c.op.Inputs[j]].Shape.Numel() }

// inDT is the dtype input j had inside the kernel.
func (c *bwdCtx) inDT(j int) graph.DType {
	for _, ic := range c.m.casts[c.i] {
		if ic.input == j {
			if c.m.sim.amp {
				if c.m.plan.rules[c.i].cast == castFP32 {
					return graph.F32
				}
				return c.m.sim.low
			}
		}
	}
	return c.m.val[c.op.Inputs[j]].dt
}

func (c *bwdCtx) needs(j int) bool { return c.m.g.Tensors[c.op.Inputs[j]].RequiresGrad }

// temp is a backward intermediate freed within the node.
func (c *bwdCtx) temp(bytes int64) { c.m.sim.temp(bytes, trace.Transient) }

func (c *bwdCtx) alloc(bytes int64) *storage {
	st := c.m.sim.alloc(bytes, trace.Transient)
	st.refs = 1
	return st
}

func (c *bwdCtx) gemm() { c.m.sim.cublas(true) }

// gradIn allocates the gradient of input j and hands it on, through the
// cast node when autocast copied that input.
func (c *bwdCtx) gradIn(j int) {
	if !c.needs(j) {
		return
	}
	dt := c.inDT(j)
	var st *storage
	if p := c.m.pidx[c.op.Inputs[j]]; p >= 0 {
		st = c.m.sim.alloc(c.numel(j)*dt.Size(), c.m.gradCategory(p))
		st.refs = 1
	} else {
		st = c.alloc(c.numel(j) * dt.Size())
	}
	c.route(j, st, dt)
}

// passIn hands the incoming gradient tensor itself to input j (add, a
// contiguous copy, a cast to the same dtype): no new memory, and the same
// tensor may reach several inputs.
func (c *bwdCtx) passIn(j int) {
	if !c.needs(j) {
		return
	}
	c.m.sim.ref(c.gout)
	c.route(j, c.gout, c.gdt)
	if o := &c.out[len(c.out)-1]; o.st == c.gout {
		o.same = true
		o.layout = c.gst
	} else {
		o.layout = castLayout(c.m.g.Tensors[c.op.Inputs[j]].Shape, c.gst)
	}
}

// passView hands input j a view of the incoming gradient (cat's narrow, a
// view's reshape) with strides st (nil: contiguous): no new memory, but a
// tensor of its own, which AccumulateGrad may steal even though its
// storage is shared.
func (c *bwdCtx) passView(j int, st []int64) {
	if !c.needs(j) {
		return
	}
	c.m.sim.ref(c.gout)
	c.route(j, c.gout, c.gdt)
	if o := &c.out[len(c.out)-1]; o.st == c.gout {
		o.view = true
		o.layout = st
	} else {
		o.layout = castLayout(c.m.g.Tensors[c.op.Inputs[j]].Shape, st)
	}
}

func (c *bwdCtx) route(j int, st *storage, dt graph.DType) {
	m := c.m
	t := c.op.Inputs[j]
	for _, ic := range m.casts[c.i] {
		if ic.input == j {
			// ToCopyBackward0: the gradient back in the original dtype.
			up := c.alloc(c.numel(j) * ic.from.Size())
			m.sim.unref(st)
			st, dt = up, ic.from
		}
	}
	if want := m.val[t].dt; want != dt && m.pidx[t] < 0 {
		// The engine casts a gradient to the dtype of its input
		// (validate_outputs).
		up := c.alloc(c.numel(j) * want.Size())
		m.sim.unref(st)
		st, dt = up, want
	}
	c.out = append(c.out, gradOut{j: j, p: -1, st: st, dt: dt})
}

// handOn delivers the node's gradients, in the order it produced them.
func (c *bwdCtx) handOn() {
	m := c.m
	for i, o := range c.out {
		if o.p >= 0 {
			m.arrive(o.p, o.st, o.viaCast, false, o.clone, o.view)
			continue
		}
		m.deliver(c.op.Inputs[o.j], o.st, o.dt, o.same && c.sameElsewhere(i), o.view, o.layout)
	}
	c.out = c.out[:0]
}

// sameElsewhere reports that the tensor of output i, the node's incoming
// gradient itself, is also output for another input.
func (c *bwdCtx) sameElsewhere(i int) bool {
	for k, o := range c.out {
		if k != i && o.same && o.st == c.out[i].st {
			return true
		}
	}
	return false
}

// gradWeightView allocates the gradient of a linear's weight, which is a
// view: F.linear multiplies by W.t(), a column-major operand, for which
// mm_mat2_backward (FunctionsManual.cpp) returns grad.t().mm(mat1).t(),
// and TBackward0 hands W its .t() (see accumulate).
func (c *bwdCtx) gradWeightView() {
	n := len(c.out)
	c.gradParam(c.op.Weight)
	if len(c.out) > n {
		c.out[len(c.out)-1].view = true
	}
}

// gradParam allocates the gradient of the op's weight or bias.
func (c *bwdCtx) gradParam(t graph.TensorID) {
	m := c.m
	if t == graph.None || !m.g.Tensors[t].RequiresGrad {
		return
	}
	p := m.pidx[t]
	if p < 0 {
		return
	}
	ps := m.sim.params[p]
	if m.wCast[c.i] {
		st := c.alloc(ps.numel * m.sim.low.Size())
		c.out = append(c.out, gradOut{p: p, st: st, viaCast: true})
		return
	}
	st := m.sim.alloc(ps.numel*ps.dt.Size(), m.gradCategory(p))
	st.refs = 1
	c.out = append(c.out, gradOut{p: p, st: st})
}

func (m *micro) backwardOp(i int) {
	op := &m.g.Ops[i]
	r := &m.plan.rules[i]
	c := &m.sim.bctx
	*c = bwdCtx{m: m, op: op, i: i, gout: m.grads[op.Output], gdt: m.gradDT[op.Output], gst: m.gradStride[op.Output], out: c.out[:0]}
	var again *storage
	if m.regather != nil && m.regather[i] > 0 {
		again = m.sim.alloc(m.regather[i], trace.Transient)
	}
	if r.bwd != nil {
		r.bwd(c)
	}
	if again != nil {
		m.sim.free(again)
	}
}
