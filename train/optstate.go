package train

// What each optimizer keeps for a trained parameter is stated here once:
// the simulator creates these tensors at the first step (makeState,
// adafactor), the step-time model counts the states its kernels read and
// write (cost), and the planner's static bound takes their bytes per
// element (plan). The sources:
//
//   - torch.optim.SGD (torch/optim/sgd.py, _init_group and sgd): with a
//     nonzero momentum, momentum_buffer = torch.clone(grad).detach() at
//     the first step; none without.
//   - torch.optim.Adam and AdamW (torch/optim/adam.py, _init_group):
//     state["step"], a 0-d float32 tensor, on the parameter's device when
//     fused or capturable, on the host otherwise; exp_avg and exp_avg_sq,
//     torch.zeros_like(p, memory_format=torch.preserve_format); with
//     amsgrad, max_exp_avg_sq likewise.
//   - bitsandbytes' Adam8bit and AdamW8bit (bitsandbytes/optim/optimizer.py,
//     Optimizer2State.init_state, block_wise, min_8bit_size 4096): a
//     parameter under 4096 elements keeps state1 and state2 in float32; a
//     larger one state1 and state2 in uint8 and absmax1 and absmax2, one
//     float32 per 2048-element block; the quantization maps qmap1 and qmap2
//     ("dynamic" and "udynamic", 256 float32 each) go to the device once.
//     The paged variants put states of 10^5 elements or more in CUDA
//     unified memory (F.get_paged), outside PyTorch's caching allocator.
//   - bitsandbytes' 32-bit PagedAdam and PagedAdamW (the same
//     Optimizer2State with optim_bits=32 and is_paged=True; LitGPT's
//     optimizer with --quantize): init_state makes state1 and state2 in
//     float32 whatever the parameter's dtype, and get_state_buffer pages
//     them from 10^5 elements on (read in bitsandbytes 0.42.0).
//   - transformers' Adafactor with its defaults (transformers/optimization.py,
//     Adafactor.step, beta1=None): for a parameter of two or more
//     dimensions the factored second moment exp_avg_sq_row (shape[:-1]) and
//     exp_avg_sq_col (shape[:-2] + shape[-1:]), for a vector exp_avg_sq, and
//     RMS, a 0-d tensor; all float32, whatever the parameter's dtype (the
//     gradient is made float32 first and the state follows it). Its "step"
//     is a Python int.

// StateTensor is one tensor an optimizer keeps for a parameter.
type StateTensor struct {
	Name  string
	Bytes int64
	// PerElement: one value for each element of the parameter (a moment
	// or a quantized state), as opposed to a scalar, a factor or a block
	// constant.
	PerElement bool
	// Paged: in CUDA unified memory, which PyTorch's allocator does not
	// hold (bitsandbytes' paged optimizers).
	Paged bool
	// Once: made for the first parameter that needs it and shared by the
	// rest (bitsandbytes' quantization maps).
	Once bool
}

// bitsandbytes' block-wise 8-bit states (Optimizer2State.init_state).
const (
	bnbMinBits8  = 4096
	bnbBlockSize = 2048
	bnbPagedMin  = 100000
	bnbQmapSize  = 256 * 4
)

// StateParam is a trained parameter as its optimizer sees it: its shape
// and number of elements on this rank, and the bytes of an element of the
// dtype it is stepped in (the master dtype).
type StateParam struct {
	Shape []int64
	Numel int64
	Elem  int64
	// StepOnDevice: Adam's step counter lives on the device (fused, or a
	// run whose device is the host).
	StepOnDevice bool
}

// OptimizerStates lists, in the order they are made, the tensors o keeps
// for parameter p from its first step on (the sources are above).
func OptimizerStates(o Optimizer, p StateParam) []StateTensor {
	n := p.Numel
	switch o.Kind {
	case SGD:
		if o.Momentum > 0 {
			return []StateTensor{{Name: "momentum_buffer", Bytes: n * p.Elem, PerElement: true}}
		}
	case Adam, AdamW:
		if o.Paged && !o.Bits8 {
			paged := n >= bnbPagedMin
			return []StateTensor{{Name: "state1", Bytes: 4 * n, PerElement: true, Paged: paged},
				{Name: "state2", Bytes: 4 * n, PerElement: true, Paged: paged}}
		}
		if o.Bits8 {
			if n < bnbMinBits8 {
				return []StateTensor{{Name: "state1", Bytes: 4 * n, PerElement: true}, {Name: "state2", Bytes: 4 * n, PerElement: true}}
			}
			paged := o.Paged && n >= bnbPagedMin
			blocks := (n + bnbBlockSize - 1) / bnbBlockSize
			return []StateTensor{
				{Name: "state1", Bytes: n, PerElement: true, Paged: paged},
				{Name: "state2", Bytes: n, PerElement: true, Paged: paged},
				{Name: "absmax1", Bytes: 4 * blocks},
				{Name: "absmax2", Bytes: 4 * blocks},
				{Name: "qmap1", Bytes: bnbQmapSize, Once: true},
				{Name: "qmap2", Bytes: bnbQmapSize, Once: true},
			}
		}
		var out []StateTensor
		if p.StepOnDevice {
			out = append(out, StateTensor{Name: "step", Bytes: 4})
		}
		out = append(out, StateTensor{Name: "exp_avg", Bytes: n * p.Elem, PerElement: true},
			StateTensor{Name: "exp_avg_sq", Bytes: n * p.Elem, PerElement: true})
		if o.AMSGrad {
			out = append(out, StateTensor{Name: "max_exp_avg_sq", Bytes: n * p.Elem, PerElement: true})
		}
		return out
	case Adafactor:
		sh := p.Shape
		if len(sh) >= 2 {
			rows, cols := n/sh[len(sh)-1], n/sh[len(sh)-2]
			return []StateTensor{{Name: "exp_avg_sq_row", Bytes: 4 * rows}, {Name: "exp_avg_sq_col", Bytes: 4 * cols}, {Name: "RMS", Bytes: 4}}
		}
		return []StateTensor{{Name: "exp_avg_sq", Bytes: 4 * n, PerElement: true}, {Name: "RMS", Bytes: 4}}
	}
	return nil
}

// floorParam is the parameter the per-element figures are taken at: a
// large matrix, where 8-bit states are quantized (and paged), Adafactor's
// moments factored and the scalars negligible.
var floorParam = []int64{4096, 4096}

// PerElement is what o keeps for each element of a large matrix
// parameter stepped in elem-byte elements: the number of per-element
// states (read and written by every step's kernels), and their bytes, all
// and on the device alone (a paged state is not). For every other
// parameter o keeps at least these bytes per element (8-bit states of a
// small parameter stay float32, Adafactor keeps a vector's moment whole),
// so the planner's static bound is a floor.
func (o Optimizer) PerElement(elem int64) (states int, bytes, deviceBytes int64) {
	n := floorParam[0] * floorParam[1]
	for _, st := range OptimizerStates(o, StateParam{Shape: floorParam, Numel: n, Elem: elem}) {
		if !st.PerElement {
			continue
		}
		states++
		bytes += st.Bytes / n
		if !st.Paged {
			deviceBytes += st.Bytes / n
		}
	}
	return states, bytes, deviceBytes
}
