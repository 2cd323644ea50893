package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// scaleLoss is GradScaler.scale(loss): the scale and growth tracker are
// created on the device at the first call (_lazy_init_scale_growth_tracker)
// and kept; the scaled loss is a new 0-d tensor that backward starts from.
func (m *micro) scaleLoss() {
	sim := m.sim
	if len(sim.scaler) == 0 {
		sc := sim.alloc(4, trace.Other)
		sc.refs = 1
		gt := sim.alloc(4, trace.Other)
		gt.refs = 1
		sim.scaler = append(sim.scaler, sc, gt)
	}
	scaled := sim.alloc(4, trace.Transient)
	scaled.refs = 1
	sim.scaler = append(sim.scaler, scaled)
}

// optimizerStep simulates optimizer.step() (through GradScaler.step for
// 16-mixed). State is created lazily at the first step (_init_group:
// zeros_like per parameter); the temporaries are those of the
// implementation: the for-loop makes them one parameter at a time, foreach
// for all parameters at once, fused makes none.
func (sim *Simulator) optimizerStep() {
	sim.phase = trace.OptimizerStep
	sim.site = sim.tr.Site("optimizer.step")
	o := sim.s.Optimizer
	var unscale []*storage
	if sim.s.Precision == Mixed16 && o.Kind != NoOptimizer {
		// unscale_: inv_scale (via a float64 reciprocal) and found_inf,
		// per device, kept until update().
		d := sim.alloc(8, trace.Transient)
		inv := sim.alloc(4, trace.Transient)
		sim.free(d)
		fi := sim.alloc(4, trace.Transient)
		fd := sim.alloc(4, trace.Transient)
		unscale = append(unscale, inv, fi, fd)
	}
	first := sim.stepsDone == 0
	foreach := o.Impl == Foreach
	par := sim.s.Parallel
	if par.Offload && (par.IsFSDP() || par.IsZeRO()) {
		// the step runs on the host (FSDP's CPU offload, DeepSpeed's
		// CPU Adam): its state is host memory
		if first {
			sim.onHost = true
			sim.makeState(first)
			sim.onHost = false
		}
		for _, st := range unscale {
			sim.free(st)
		}
		return
	}
	if par.IsZeRO() && len(sim.trained) > 0 && o.Kind != NoOptimizer {
		// DeepSpeed's step: the partition's gradients flattened and cast
		// to the master weights' dtype (single_grad_partition), set as
		// their .grad for the step and dropped after it
		flat := sim.trained[0]
		switch {
		case par.Strategy == ZeRO3:
			// stage 3 keeps its float32 gradient buffer (of the
			// largest sub-group, sub_group_size 1e9 elements)
			if sim.zeroGrad32 == nil {
				sim.zeroGrad32 = sim.alloc(min(flat.local, 1_000_000_000)*flat.odt.Size(), trace.Gradient)
				sim.zeroGrad32.refs = 1
			}
		default:
			var low *storage
			if par.Strategy == ZeRO1 {
				low = sim.alloc(flat.local*sim.params[0].dt.Size(), trace.Transient)
			}
			g32 := sim.alloc(flat.local*flat.odt.Size(), trace.Transient)
			if low != nil {
				sim.free(low)
			}
			defer sim.free(g32)
		}
	}
	sim.makeState(first)
	switch o.Kind {
	case SGD:
		extra := 0
		if o.WeightDecay != 0 {
			extra++ // grad = grad.add(param, alpha=weight_decay)
		}
		if o.Momentum > 0 && o.Nesterov && !first {
			extra++ // grad = grad.add(buf, alpha=momentum)
		}
		if o.Impl != Fused {
			sim.optimizerTemps(extra, foreach)
		}
	case Adam, AdamW:
		if o.Bnb() {
			// optimizer_update_8bit_blockwise, or optimizer_update_32bit
			// for the 32-bit paged Adams: one fused kernel a parameter,
			// in place, with no temporaries
			break
		}
		switch {
		case o.Impl == Fused:
		case foreach:
			// exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs), divided in
			// place; denom = _foreach_add(exp_avg_sq_sqrt, eps) is a second
			// set where the profile says so; with L2 decay, grads =
			// _foreach_add(grads, params, alpha=weight_decay) came first.
			// All are locals, alive until the function returns.
			k := 1
			if sim.s.Profile.AdamForeachDenomCopy {
				k = 2
			}
			if o.Kind == Adam && o.WeightDecay != 0 {
				k++
			}
			sim.optimizerTemps(k, true)
		default:
			sim.adamForLoop(o.Kind == Adam && o.WeightDecay != 0)
		}
	case Adafactor:
		sim.adafactor(first)
	}
	for _, st := range unscale {
		sim.free(st)
	}
}

// makeState creates the optimizer's state at the first step (_init_group:
// zeros_like per parameter, or clone for SGD's momentum), and ZeRO's
// float32 master partition before it.
func (sim *Simulator) makeState(first bool) {
	if !first {
		return
	}
	o := sim.s.Optimizer
	if sim.s.Parallel.HalfModule(sim.s.Precision) && o.Kind != NoOptimizer {
		// the float32 master weights
		for _, ps := range sim.trained {
			sim.newState(ps, ps.local*ps.odt.Size())
		}
	}
	if o.Kind == Adafactor {
		// made one parameter at a time inside its loop (adafactor)
		return
	}
	once := map[string]bool{}
	for _, ps := range sim.trained {
		sim.keepStates(ps, once)
	}
}

// keepStates creates what the optimizer keeps for a parameter
// (OptimizerStates, which names the sources); a paged state goes to
// unified memory, outside the allocator, and a state made once (once
// records which) is not made again.
func (sim *Simulator) keepStates(ps *paramState, once map[string]bool) {
	o := sim.s.Optimizer
	p := StateParam{Shape: ps.optShape(), Numel: ps.local, Elem: ps.odt.Size(), StepOnDevice: o.Impl == Fused || sim.s.CPU}
	for _, st := range OptimizerStates(o, p) {
		if st.Once {
			if once[st.Name] {
				continue
			}
			once[st.Name] = true
		}
		if st.Paged {
			sim.sum.PagedOptimizerStateBytes += st.Bytes
			continue
		}
		sim.newState(ps, st.Bytes)
	}
}

// adafactor is transformers' Adafactor.step with its defaults (beta1=None:
// no first moment), one parameter at a time. State, made at the first
// step: for a parameter of two or more dimensions the factored second
// moment, exp_avg_sq_row (shape[:-1]) and exp_avg_sq_col (shape[:-2] +
// shape[-1:]); for a vector exp_avg_sq (its size); and RMS, a 0-d tensor
// (_rms). All float32 (.to(grad) of a gradient made float32). Per step: a
// half-precision gradient and parameter are first copied to float32;
// update = grad**2 + eps (the square dies with the expression); the row
// and column means; update = _approx_sq_grad(row, col) (two factor
// vectors and their n-sized product, made while the old update is alive),
// or update = exp_avg_sq.rsqrt() for a vector; RMS and clipping scalars;
// then param.add_(-update), whose negation is one more n-sized tensor.
func (sim *Simulator) adafactor(first bool) {
	once := map[string]bool{}
	for _, ps := range sim.trained {
		sh := ps.optShape()
		n := ps.local
		factored := len(sh) >= 2
		var rows, cols int64
		if factored {
			rows = n / sh[len(sh)-1]
			cols = n / sh[len(sh)-2]
		}
		if first {
			sim.keepStates(ps, once)
		}
		var grad32, p32 *storage
		if ps.odt != graph.F32 {
			grad32 = sim.alloc(4*n, trace.Transient)
			p32 = sim.alloc(4*n, trace.Transient)
		}
		scalar := func() { sim.free(sim.alloc(4, trace.Transient)) }
		scalar() // RMS of the parameter
		sq := sim.alloc(4*n, trace.Transient)
		upd := sim.alloc(4*n, trace.Transient)
		sim.free(sq)
		if factored {
			sim.free(sim.alloc(4*rows, trace.Transient)) // update.mean(dim=-1)
			sim.free(sim.alloc(4*cols, trace.Transient)) // update.mean(dim=-2)
			rf := sim.alloc(4*rows, trace.Transient)
			cf := sim.alloc(4*cols, trace.Transient)
			nu := sim.alloc(4*n, trace.Transient)
			sim.free(rf)
			sim.free(cf)
			sim.free(upd)
			upd = nu
		} else {
			nu := sim.alloc(4*n, trace.Transient) // exp_avg_sq.rsqrt()
			sim.free(upd)
			upd = nu
		}
		scalar()                               // the update's RMS and its clamp
		neg := sim.alloc(4*n, trace.Transient) // -update
		sim.free(neg)
		sim.free(upd)
		if p32 != nil {
			sim.free(p32)
			sim.free(grad32)
		}
	}
}

// adamForLoop is _single_tensor_adam's loop over the parameters. Per
// parameter: with L2 decay, grad = grad.add(param, alpha=weight_decay)
// (rebound to the next gradient at the top of the next iteration); then
// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps): the square
// root and the quotient are allocated, the root dies with the expression,
// and the previous parameter's denom is released only when the name is
// rebound, after the new one exists. The last denom dies when the function
// returns.
func (sim *Simulator) adamForLoop(l2 bool) {
	var denom, decayed *storage
	for _, ps := range sim.trained {
		n := ps.numel * ps.dt.Size()
		if decayed != nil {
			sim.free(decayed)
			decayed = nil
		}
		if l2 {
			decayed = sim.alloc(n, trace.Transient)
		}
		root := sim.alloc(n, trace.Transient)
		quot := sim.alloc(n, trace.Transient)
		sim.free(root)
		if denom != nil {
			sim.free(denom)
		}
		denom = quot
	}
	if decayed != nil {
		sim.free(decayed)
	}
	if denom != nil {
		sim.free(denom)
	}
}

func (sim *Simulator) newState(ps *paramState, bytes int64) {
	if sim.onHost {
		sim.sum.OffloadedBytes += bytes
		return
	}
	st := sim.alloc(bytes, trace.OptimizerState)
	st.refs = 1
	ps.state = append(ps.state, st)
	sim.sum.OptimizerStateBytes += bytes
}

// optimizerTemps allocates k gradient-sized temporaries per parameter: all
// at once and freed together (foreach), or one parameter at a time.
func (sim *Simulator) optimizerTemps(k int, foreach bool) {
	if k == 0 {
		return
	}
	if foreach {
		var ts []*storage
		for i := 0; i < k; i++ {
			for _, ps := range sim.trained {
				ts = append(ts, sim.alloc(ps.local*ps.odt.Size(), trace.Transient))
			}
		}
		for _, st := range ts {
			sim.free(st)
		}
		return
	}
	for _, ps := range sim.trained {
		var ts []*storage
		for i := 0; i < k; i++ {
			ts = append(ts, sim.alloc(ps.local*ps.odt.Size(), trace.Transient))
		}
		for _, st := range ts {
			sim.free(st)
		}
	}
}

// zeroGrad is optimizer.zero_grad(): with set_to_none (the default since
// 2.0) the gradients are freed; before, they were zeroed in place and kept.
func (sim *Simulator) zeroGrad() {
	sim.phase = trace.ZeroGrad
	sim.site = sim.tr.Site("optimizer.zero_grad")
	for u := range sim.units {
		un := &sim.units[u]
		if un.flatGrad != nil && sim.s.Profile.ZeroGradSetToNone {
			sim.unref(un.flatGrad)
			un.flatGrad = nil
		}
	}
	// a storage several .grad share (the views of a cuDNN RNN's dw,
	// rnn_cudnn.go) is counted once
	var counted map[*storage]bool
	if sim.stepsDone == 0 {
		counted = map[*storage]bool{}
	}
	for _, ps := range sim.params {
		if ps.grad == nil {
			continue
		}
		if sim.stepsDone == 0 && !counted[ps.grad] {
			counted[ps.grad] = true
			sim.sum.GradientsBytes += ps.grad.bytes
		}
		if sim.s.Profile.ZeroGradSetToNone {
			sim.unref(ps.grad)
			ps.grad = nil
		}
	}
}
