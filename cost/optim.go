package cost

import (
	"math"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/train"
)

// Multi-tensor apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh)
// launches a kernel for at most depthToMaxTensors[depth-1] tensors and 320
// blocks of 65,536 elements.
var depthToMaxTensors = [...]int64{110, 64, 48, 36, 30}

const (
	chunkSize       = 65536
	maxBlocksPerRun = 320
)

// pass is one elementwise op of an optimizer over every parameter: how
// many parameter-sized tensors it reads and writes.
type pass struct{ reads, writes int64 }

// passes lists the ops torch.optim runs per parameter (the for-loop and
// foreach implementations run the same ops; the fused one reads and writes
// each tensor once in one kernel).
func passes(o train.Optimizer, firstStep bool) []pass {
	var ps []pass
	switch o.Kind {
	case train.SGD:
		if o.WeightDecay > 0 {
			ps = append(ps, pass{2, 1}) // grad.add(param, alpha=wd)
		}
		if o.Momentum > 0 {
			if firstStep {
				ps = append(ps, pass{1, 1}) // buf = clone(grad)
			} else {
				ps = append(ps, pass{1, 1}, pass{2, 1}) // buf.mul_(m).add_(grad)
			}
			if o.Nesterov {
				ps = append(ps, pass{2, 1})
			}
		}
		ps = append(ps, pass{2, 1}) // param.add_(buf, alpha=-lr)
	case train.Adam, train.AdamW:
		if o.WeightDecay > 0 {
			if o.Kind == train.AdamW {
				ps = append(ps, pass{1, 1}) // param.mul_(1 - lr·wd)
			} else {
				ps = append(ps, pass{2, 1}) // grad.add(param, alpha=wd)
			}
		}
		// exp_avg.lerp_(grad); exp_avg_sq.mul_(β2).addcmul_(grad, grad);
		// denom = exp_avg_sq.sqrt() / bias_correction2_sqrt, .add_(eps);
		// param.addcdiv_(exp_avg, denom)
		ps = append(ps, pass{2, 1}, pass{1, 1}, pass{2, 1}, pass{1, 1}, pass{1, 1}, pass{1, 1}, pass{3, 1})
		if o.AMSGrad {
			ps = append(ps, pass{2, 1})
		}
	case train.Adafactor:
		// grad**2 + eps; the row and column means; the factors' product;
		// update.mul_(grad); its RMS; div_, mul_(lr); -update;
		// param.add_
		ps = append(ps, pass{1, 1}, pass{1, 1}, pass{1, 0}, pass{1, 0}, pass{0, 1}, pass{2, 1}, pass{1, 0}, pass{1, 1}, pass{1, 1}, pass{1, 1}, pass{2, 1})
	}
	return ps
}

// fusedPass is what the fused kernels touch: the parameter and its
// gradient read, the parameter written, and every per-element state the
// optimizer keeps (train.OptimizerStates: SGD's momentum buffer, Adam's two
// moments and AMSGrad's maximum) read and written.
func fusedPass(o train.Optimizer) pass {
	states, _, _ := o.PerElement(4)
	return pass{2 + int64(states), 1 + int64(states)}
}

// optimizer times everything between the last backward and the next
// forward: AccumulateGrad's in-place sums of accumulated micro-batches,
// GradScaler's unscaling, the optimizer step and zero_grad.
func optimizer(t *timer, g *graph.Graph, s train.Setup, acc int64) {
	var sizes []int64
	var total int64
	for _, id := range g.Params() {
		if !g.Tensors[id].RequiresGrad {
			continue
		}
		n := g.Tensors[id].Shape.Numel()
		sizes = append(sizes, n)
		total += n
	}
	if len(sizes) == 0 {
		return
	}
	e := size(s.Precision.ParamDType())
	count := int64(len(sizes))
	// AccumulateGrad adds into .grad in place when it exists: from the
	// second micro-batch on, or from the first when zero_grad zeroes the
	// gradients instead of dropping them (set_to_none=False)
	adds := acc - 1
	if !s.Profile.ZeroGradSetToNone {
		adds = acc
	}
	if adds > 0 {
		t.setPart(Backward)
		t.kernels(adds*count, vector, graph.F32, 0, float64(adds)*3*float64(total)*e)
		t.setPart(Optimizer)
	}
	// GradScaler.step unscales the gradients first, except for an
	// optimizer that takes the scale itself (the fused ones,
	// _step_supports_amp_scaling), which folds it into its one pass
	if s.Precision == train.Mixed16 && s.Optimizer.Impl != train.Fused {
		// _amp_foreach_non_finite_check_and_unscale_ and
		// _amp_update_scale_
		t.launches(foreachLaunches(sizes, 1), vector, graph.F32, 0, 2*float64(total)*e)
		t.kernel(vector, graph.F32, 0, 16)
	}
	if s.Optimizer.Kind != train.NoOptimizer {
		// The step's host time as measured as a whole (Host.Optim):
		// _init_group's Python loop over the parameters, then the
		// foreach (or per-tensor) ops, their launches included.
		if oh, ok := t.host.Optim[OptimKey{s.Optimizer.Kind, s.Optimizer.Impl}]; ok && t.host.PerOp && !s.Optimizer.Bnb() {
			t.hostOnly(oh.Fixed + oh.PerTensor*float64(count))
			t.bulk = true
		}
		if s.Optimizer.Bnb() {
			// bitsandbytes' optimizer_update_8bit_blockwise (or
			// optimizer_update_32bit), a kernel a parameter: gradient and
			// parameter read, the parameter written, the states
			// (train.OptimizerStates) read and written
			_, stateBytes, _ := s.Optimizer.PerElement(int64(e))
			t.kernels(count, vector, graph.F32, 0, float64(total)*(3*e+2*float64(stateBytes)))
		} else if s.Optimizer.Impl == train.Fused {
			p := fusedPass(s.Optimizer)
			t.launches(foreachLaunches(sizes, p.reads), vector, graph.F32, 0, float64(p.reads+p.writes)*float64(total)*e)
		} else {
			// The later steps are the steady state; the first differs
			// only by SGD's buffer clone.
			for _, p := range passes(s.Optimizer, false) {
				b := float64(p.reads+p.writes) * float64(total) * e
				if s.Optimizer.Impl == train.Foreach {
					t.launches(foreachLaunches(sizes, p.reads), vector, graph.F32, 0, b)
				} else {
					t.kernels(count, vector, graph.F32, 0, b)
				}
			}
		}
	}
	t.bulk = false
	if !s.Profile.ZeroGradSetToNone {
		// zero_grad(set_to_none=False): one zero_ per gradient (foreach
		// where the optimizer is)
		t.launches(foreachLaunches(sizes, 1), vector, graph.F32, 0, float64(total)*e)
	} else if t.host.PerOp {
		// Optimizer.zero_grad (torch/optim/optimizer.py) sets each
		// parameter's .grad to None in a Python loop
		t.hostOnly(t.host.ZeroGrad * float64(count))
	}
}

// foreachLaunches is the number of multi-tensor kernels one foreach op
// over these tensors needs at the given list depth.
func foreachLaunches(sizes []int64, depth int64) int64 {
	d := min(max(depth, 1), int64(len(depthToMaxTensors)))
	maxT := depthToMaxTensors[d-1]
	var launches, tensors, blocks int64
	for _, n := range sizes {
		c := (n + chunkSize - 1) / chunkSize
		tensors++
		for c > 0 {
			take := min(c, maxBlocksPerRun-blocks)
			blocks += take
			c -= take
			if blocks == maxBlocksPerRun {
				launches++
				blocks, tensors = 0, 0
				if c > 0 {
					tensors = 1
				}
			}
		}
		if tensors == maxT {
			launches++
			blocks, tensors = 0, 0
		}
	}
	if blocks > 0 || tensors > 0 {
		launches++
	}
	return int64(math.Max(1, float64(launches)))
}
