package train

import (
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// Quantized Linear weights (graph.Quant). The rules follow bitsandbytes
// 0.49 (bitsandbytes/functional.py quantize_4bit / dequantize_4bit /
// quantize_blockwise, nn/modules.py Params4bit._quantize, Int8Params,
// Linear4bit.forward, autograd/_functions.py MatMul4Bit, MatMul8bitLt,
// matmul_4bit, backends/cuda/ops.py) and auto-gptq's / autoawq's
// QuantLinear layouts (graph.Quant.Pieces).

// dynamicMapBytes is bitsandbytes' create_dynamic_map(): 256 float32
// values, cached once per process in name2qmap["dynamic"] on the device
// the first time quantize_blockwise runs without a code.
const dynamicMapBytes = 256 * 4

// loadQuantized allocates a quantized weight as loading the model leaves
// it. A weight quantized on load (from_pretrained with a
// BitsAndBytesConfig) first lands on the device whole in the model's
// dtype (Params4bit._quantize: self.data.contiguous().to(device);
// Int8Params._quantize: .to(device, dtype=torch.float16)) and is freed
// once quantized; a pre-quantized checkpoint's tensors load as they are.
func (sim *Simulator) loadQuantized(ps *paramState, t *graph.Tensor) {
	q := t.Quant
	out, in := t.Shape[0], t.Shape[len(t.Shape)-1]
	n := out * in
	ps.dt = graph.U8
	if q.Format == graph.Int8 {
		ps.dt = graph.I8
	}
	keep := func(bytes int64) *storage {
		st := sim.alloc(bytes, trace.Parameter)
		st.refs = 1
		sim.sum.ParametersBytes += bytes
		sim.sum.QuantizedBytes += bytes
		if ps.st == nil {
			ps.st = st
		} else {
			ps.quant = append(ps.quant, st)
		}
		return st
	}
	sim.sum.QuantizedParamCount += n
	onLoad := !q.Prequantized && (q.Format == graph.NF4 || q.Format == graph.FP4 || q.Format == graph.Int8)
	if !onLoad {
		for _, p := range q.Pieces(out, in) {
			keep(p.Bytes())
		}
		return
	}
	if q.Torchao {
		sim.loadTorchao(q, keep, n)
		return
	}
	ldt := sim.stateDType(q)
	if q.Format == graph.Int8 {
		ldt = graph.F16
	}
	w := sim.alloc(n*ldt.Size(), trace.Transient)
	switch q.Format {
	case graph.Int8:
		// int8_vectorwise_quant: row_stats (SCB) before out_row (CB)
		scb := keep(out * 4)
		cb := sim.alloc(n, trace.Parameter)
		cb.refs = 1
		sim.sum.ParametersBytes += n
		sim.sum.QuantizedBytes += n
		ps.st, ps.quant = cb, []*storage{scb}
	default:
		blocks := (n + q.BlockSize - 1) / q.BlockSize
		// the quantize_4bit op allocates absmax before the packed codes;
		// with double quantization that float32 absmax is a temporary
		var absmax *storage
		if q.DoubleQuant {
			absmax = sim.alloc(blocks*4, trace.Transient)
		}
		if !q.DoubleQuant {
			absmax = sim.alloc(blocks*4, trace.Parameter)
			absmax.refs = 1
		}
		packed := keep((n + 1) / 2)
		if !q.DoubleQuant {
			sim.sum.ParametersBytes += blocks * 4
			sim.sum.QuantizedBytes += blocks * 4
			ps.quant = append(ps.quant, absmax)
			keep(16 * 4) // get_4bit_type's code, made for every call
			break
		}
		_ = packed
		keep(16 * 4)                                // code
		keep(4)                                     // offset = _absmax.mean()
		tmp := sim.alloc(blocks*4, trace.Transient) // _absmax - offset
		if !sim.dynamicMap {
			sim.dynamicMap = true
			st := sim.alloc(dynamicMapBytes, trace.Parameter)
			st.refs = 1
			sim.sum.ParametersBytes += dynamicMapBytes
		}
		keep(((blocks + 255) / 256) * 4) // state2.absmax (quantize_blockwise: absmax first)
		keep(blocks)                     // the uint8 absmax codes
		keep(dynamicMapBytes)            // state2.code: code.to(device, copy=True)
		sim.free(tmp)
		sim.free(absmax)
	}
	sim.free(w)
}

// loadTorchao is torchtune's base Linear as its LoRALinear builds it on
// the device: nn.Linear in the model's dtype, then to_nf4(linear.weight)
// (torchao v0.1, torchao/dtypes/nf4tensor.py), whose temporaries for n
// elements in blocks of 64 (b = n/64 absmaxes, s = b/256 scaler blocks)
// are, in order:
//
//   - to_nf4: tensor.to(torch.bfloat16), a copy unless the weight is
//     bfloat16; the 16-entry nf4 table (kept);
//   - double_quantize_scalers: blocks.abs() (2n bytes) and its
//     max(dim=1) (b bfloat16 values, b int64 indices), the abs and the
//     indices freed at once; the mean (kept); scalers_1 - mean (2b, the
//     first scalers freed); the absmax of that per 256 (its abs 2b, values
//     2s, indices 8s); 2 * scaler_absmax over the expanded view (2b), then
//     256 / it (kept: the quantization factor); scaler_blocks * factor,
//     .round() and .clamp() (2b each, each freeing the one before); the
//     int8 copy (kept), after which the locals go;
//   - convert_to_norm_float_weight: the block absmax again (abs 2n, values
//     2b, indices 8b); blocks / scales (2n); quantize_tensor_nearest's
//     (value - nf4) over [n, 16] (32n) and its .abs() (32n), the
//     difference freed; diff.min(dim=-1) (values 2n, freed at once, indices
//     8n); diff freed on return; then quantized_blocks[::2] << 4 (int64,
//     4n) | quantized_blocks[1::2] (4n), the shift freed, and .to(uint8)
//     (kept); the locals go on return;
//
// then the module drops the bfloat16 weight. Loading the checkpoint
// quantizes on the host (NF4Tensor's copy_ runs from_tensor on the CPU
// tensor) and copies into these pieces: no device temporaries.
func (sim *Simulator) loadTorchao(q *graph.Quant, keep func(int64) *storage, n int64) {
	t := func(bytes int64) *storage { return sim.alloc(bytes, trace.Transient) }
	pd := sim.s.Precision.ParamDType()
	w := t(n * pd.Size())
	var w16 *storage
	if pd != graph.BF16 {
		w16 = t(2 * n)
	}
	b := (n + q.BlockSize - 1) / q.BlockSize
	s := (b + 255) / 256
	pieces := q.Pieces(n, 1)
	keep(pieces[0].Bytes()) // nf4 table
	// get_block_absmax: blocks.abs().max(dim=1).values
	absmax := func(elems, blocks int64) *storage {
		abs := t(2 * elems)
		v := t(2 * blocks)
		idx := t(8 * blocks)
		sim.free(abs)
		sim.free(idx)
		return v
	}
	// double_quantize_scalers
	s1 := absmax(n, b)
	keep(pieces[1].Bytes()) // scaler_mean
	s1b := t(2 * b)
	sim.free(s1)
	sa := absmax(b, s)
	twice := t(2 * b)
	keep(pieces[2].Bytes()) // quantization_factor
	sim.free(twice)
	prod := t(2 * b)
	rnd := t(2 * b)
	sim.free(prod)
	clamp := t(2 * b)
	sim.free(rnd)
	keep(pieces[3].Bytes()) // quantized_scalers
	sim.free(clamp)
	sim.free(sa)
	sim.free(s1b)
	// convert_to_norm_float_weight
	sc := absmax(n, b)
	scaled := t(2 * n)
	sub := t(32 * n)
	abs := t(32 * n)
	sim.free(sub)
	vals := t(2 * n)
	idx := t(8 * n)
	sim.free(vals)
	sim.free(abs)
	shift := t(8 * ((n + 1) / 2))
	or := t(8 * ((n + 1) / 2))
	sim.free(shift)
	keep(pieces[4].Bytes()) // quantized_data
	sim.free(or)
	sim.free(idx)
	sim.free(scaled)
	sim.free(sc)
	if w16 != nil {
		sim.free(w16)
	}
	sim.free(w)
}

// dequantTorchao is NF4Tensor's weight.to(dtype) (torchao v0.1
// get_original_weight, then .to): the codes' high and low halves
// ((q >> 4) and (q & 0b1111), uint8 temporaries, each made int64: 4n
// bytes), their nf4 look-ups (bfloat16, n bytes each), the scalers
// dequantized ((quantized_scalers / factor) + scaler_mean, 2b bytes twice,
// the first freed), each half scaled by a flattened copy of the expanded
// scalers (n bytes, freed after the product) into n bytes, and the
// stacked weight (2n bytes), which it returns once the locals are freed;
// .to(kd) copies it when kd is not bfloat16.
func (sim *Simulator) dequantTorchao(q *graph.Quant, n int64, kd graph.DType) *storage {
	t := func(bytes int64) *storage { return sim.alloc(bytes, trace.Transient) }
	half := (n + 1) / 2
	b := (n + q.BlockSize - 1) / q.BlockSize
	var locals []*storage
	for k := 0; k < 2; k++ {
		u8 := t(half)
		locals = append(locals, t(8*half))
		sim.free(u8)
	}
	locals = append(locals, t(2*half), t(2*half))
	d := t(2 * b)
	sc := t(2 * b)
	sim.free(d)
	locals = append(locals, sc)
	for k := 0; k < 2; k++ {
		rep := t(2 * half)
		locals = append(locals, t(2*half))
		sim.free(rep)
	}
	w := t(2 * n)
	w.refs = 1
	for _, st := range locals {
		sim.free(st)
	}
	if kd != graph.BF16 {
		wk := t(n * kd.Size())
		wk.refs = 1
		sim.unref(w)
		w = wk
	}
	return w
}

// quantOf is the stored format of the op's weight, nil when it is not
// quantized.
func quantOf(g *graph.Graph, op *graph.Op) *graph.Quant {
	if op.Kind != graph.Linear || op.Weight == graph.None {
		return nil
	}
	return g.Tensors[op.Weight].Quant
}

// castOf is the autocast policy of op i: bitsandbytes' MatMul8bitLt is a
// custom autograd Function without custom_fwd, so autocast leaves its
// input alone, and autoawq's layer casts x to float16 itself (x.half());
// the 4-bit path ends in F.linear and auto-gptq's in torch.matmul, which
// autocast casts.
func (m *micro) castOf(i int, r *rule) castPolicy {
	if q := quantOf(m.g, &m.g.Ops[i]); q != nil && (q.Format == graph.Int8 || q.Format == graph.AWQ) {
		return castNone
	}
	if r.cast == castFP32 && m.sim.s.CPU && !cpuAutocastFP32[m.g.Ops[i].Kind] {
		return castNone
	}
	return r.cast
}

// cpuAutocastFP32 are the op kinds on CPU autocast's fp32 list
// (TORCH_LIBRARY_IMPL(aten, AutocastCPU, m) in
// aten/src/ATen/autocast_mode.cpp, 1.13 to the newest: the losses, not
// layer_norm, exp, log or reciprocal, which CUDA's AT_FORALL_FP32 lists and
// the CPU falls through, running them in their input's dtype). The op
// table's cast policies are CUDA's; the CPU cross-checks read this.
var cpuAutocastFP32 = map[graph.Kind]bool{graph.MSELoss: true, graph.CrossEntropy: true}

// linearOut: Linear4bit.forward returns matmul_4bit(...).to(inp_dtype),
// the dtype x had before its cast to the compute dtype (and GPTQ's and
// AWQ's layers do the same); an ordinary Linear's output has its
// operand's dtype.
func linearOut(m *micro, c *fwdCtx) graph.DType {
	if q := quantOf(m.g, c.op); q != nil && q.Format != graph.Int8 {
		return m.val[c.op.Inputs[0]].dt
	}
	return c.in[0].dt
}

// stateDType is a 4-bit weight's QuantState.dtype, the dtype it had when
// quantize_4bit ran: the model's dtype as it is loaded, or float16 where
// the quantizer casts it first (Quant.HalfState: bitsandbytes before
// 0.43.0, Lightning Fabric's BitsandbytesPrecision). It is also the dtype
// in which a weight quantized on load lands on the device.
func (sim *Simulator) stateDType(q *graph.Quant) graph.DType {
	if q.HalfState {
		return graph.F16
	}
	return sim.s.Precision.ParamDType()
}

// dequant allocates dequantize_4bit(B, quant_state).to(kd) as MatMul4Bit
// makes it: with double quantization the absmax first
// (dequantize_blockwise into a float32 vector, freed when
// dequantize_4bit returns), then the whole weight in QuantState.dtype,
// then its copy in the matmul's dtype when that differs (the first copy
// freed once .to() returns). It returns the weight the matmul reads; the
// caller frees it.
func (sim *Simulator) dequant(q *graph.Quant, out, in int64, kd graph.DType) *storage {
	n := out * in
	if q.Torchao {
		return sim.dequantTorchao(q, n, kd)
	}
	var absmax *storage
	if q.DoubleQuant {
		absmax = sim.alloc((n+q.BlockSize-1)/q.BlockSize*4, trace.Transient)
	}
	od := sim.stateDType(q)
	w := sim.alloc(n*od.Size(), trace.Transient)
	w.refs = 1
	if absmax != nil {
		sim.free(absmax)
	}
	if od != kd {
		wk := sim.alloc(n*kd.Size(), trace.Transient)
		wk.refs = 1
		sim.unref(w)
		w = wk
	}
	return w
}

// quantLinearPre runs a quantized Linear's kernel before its output is
// allocated (rule.pre).
//
// 4-bit: Linear4bit.forward casts x to the compute dtype (a copy when it
// differs; under autocast F.linear then casts to the autocast dtype,
// which runOp has done); MatMul4Bit.forward dequantizes the whole weight
// (dequant) and runs F.linear, whose result is in the kernel's dtype;
// when that is not x's dtype the layer's .to(inp_dtype) is the op's
// output and the kernel's result a temporary. MatMul4Bit saves only the
// quantized weight (ctx.tensors = (None, B)), which persists: no
// activation. matmul_4bit skips MatMul4Bit for one row that needs no
// gradient (gemv_4bit: no dequantized copy) when the row's length is a
// multiple of the block size.
//
// Int8: MatMul8bitLt.forward quantizes A (A.to(float16) when A is not,
// freed after int8_vectorwise_quant; CA int8 and SCA float32 per row),
// runs int8_scaled_mm (an int32 product, then the dequantized output in
// A's dtype) and saves A itself for backward. Outlier columns
// (llm_int8_threshold) are data-dependent: none are modelled.
//
// GPTQ and AWQ: gptqForward and awqForward.
func quantLinearPre(c *fwdCtx) {
	q := quantOf(c.m.g, c.op)
	if q == nil {
		return
	}
	sim := c.m.sim
	wt := c.m.g.Tensors[c.op.Weight].Shape
	out, in := wt[0], wt[1]
	rows := c.numel(0) / in
	if q.Format == graph.Int8 {
		var a16 *storage
		if c.in[0].dt != graph.F16 {
			a16 = c.local(rows*in*2, trace.Transient)
		}
		c.local(rows*4, trace.Transient)  // SCA
		c.local(rows*in, trace.Transient) // CA
		if a16 != nil {
			c.drop(a16)
		}
		c.gemm()
		c.local(rows*out*4, trace.Transient) // the int32 product
		return
	}
	switch q.Format {
	case graph.GPTQ:
		gptqForward(c, q, out, in, rows)
		return
	case graph.AWQ:
		awqForward(c, out, in, rows)
		return
	}
	xd := c.in[0].dt
	if cd := sim.computeDType(q); !sim.amp && xd != cd {
		c.castInput(cd)
	}
	kd := c.in[0].dt
	orig := c.m.val[c.op.Inputs[0]].dt
	if rows == 1 && !c.requiresGrad(0) && in%q.BlockSize == 0 && !q.Torchao {
		if kd != orig {
			c.local(out*kd.Size(), trace.Transient)
		}
		return
	}
	c.gemm()
	w := sim.dequant(q, out, in, kd)
	c.locals = append(c.locals, w)
	if kd != orig {
		c.local(rows*out*kd.Size(), trace.Transient)
		c.drop(w)
	}
}

// castInput copies operand 0 to dt for the kernel (a cast the layer makes
// itself, outside autocast), recorded so that its gradient goes back
// through ToCopyBackward.
func (c *fwdCtx) castInput(dt graph.DType) {
	st := c.local(c.numel(0)*dt.Size(), trace.Transient)
	c.m.casts[c.i] = append(c.m.casts[c.i], inputCast{input: 0, from: c.in[0].dt})
	c.in[0] = value{st: st, dt: dt}
}

// gptqKernelSwitch is auto-gptq's QuantLinear kernel_switch_threshold
// (128): from that many rows on, forward rebuilds the weight with torch
// ops instead of the vecquant kernel.
const gptqKernelSwitch = 128

// gptqForward is auto-gptq's QuantLinear (qlinear_cuda) forward on the
// torch path, the one that has a gradient (PEFT fine-tuning is run with
// the exllama kernels off, as transformers' GPTQ guide recommends): the
// zeros unpacked (an int32 shift of [groups, out], then int8), the codes
// unpacked (torch.bitwise_right_shift of the expanded qweight: int32, n
// elements, then .to(int8) and bitwise_and, n bytes each), then weights
// = scales[g_idx.long()] * (weight - zeros[g_idx.long()]): an int64 index
// of in elements for each gather, the float16 gather of scales (n·2), the
// int8 gather of zeros and the int8 difference (n each), the float16
// product (n·2), which torch.matmul(x, weights) saves for x's gradient:
// the whole dequantized weight stays until backward. Under autocast the
// matmul casts it (and x) to the autocast dtype, and that copy is what is
// saved. Fewer rows than the switch take the vecquant kernel, which has no
// gradient; the torch path is modelled always (more memory).
func gptqForward(c *fwdCtx, q *graph.Quant, out, in, rows int64) {
	n := out * in
	g := q.Groups(in)
	if !c.m.sim.amp && c.in[0].dt != graph.F16 {
		c.castInput(graph.F16)
	}
	kd := c.in[0].dt
	z32 := c.local(g*out*4, trace.Transient)
	zeros := c.local(g*out, trace.Transient)
	c.drop(z32)
	w32 := c.local(n*4, trace.Transient)
	w8 := c.local(n, trace.Transient)
	c.drop(w32)
	codes := c.local(n, trace.Transient)
	c.drop(w8)
	idx := c.local(in*8, trace.Transient)
	sg := c.local(n*2, trace.Transient)
	c.drop(idx)
	idx = c.local(in*8, trace.Transient)
	zg := c.local(n, trace.Transient)
	c.drop(idx)
	diff := c.local(n, trace.Transient)
	c.drop(zg)
	weights := c.local(n*2, trace.Transient)
	c.drop(sg)
	c.drop(diff)
	c.drop(codes)
	c.drop(zeros)
	if kd != graph.F16 {
		wk := c.local(n*kd.Size(), trace.Transient)
		c.drop(weights)
		weights = wk
	}
	c.gemm()
	c.held = weights
	orig := c.m.val[c.op.Inputs[0]].dt
	if kd != orig {
		c.local(rows*out*kd.Size(), trace.Transient)
	}
}

// awqForward is autoawq's WQLinear_GEMM in training mode (0.2.9,
// WQLinearMMFunction): x.half() (a copy unless x is float16), which the
// function saves (ctx.save_for_backward(x, ...)); when x.shape[0] ·
// x.shape[1] >= 1024 the whole weight dequantized to float16 and
// torch.matmul, otherwise the fused gemm_forward_cuda; the float16 result
// goes back to x's dtype (out.to(input_dtype)).
func awqForward(c *fwdCtx, out, in, rows int64) {
	if c.in[0].dt != graph.F16 {
		c.castInput(graph.F16)
	}
	c.gemm()
	s := c.shape(0)
	if len(s) >= 2 && s[0]*s[1] >= 1024 {
		c.held = c.local(out*in*2, trace.Transient)
	}
	if c.m.val[c.op.Inputs[0]].dt != graph.F16 {
		c.local(rows*out*2, trace.Transient)
		if c.held != nil {
			c.drop(c.held)
		}
	}
	c.held = nil
}

// quantLinearForward registers what a quantized Linear's node saves.
func quantLinearForward(c *fwdCtx, q *graph.Quant) {
	switch q.Format {
	case graph.Int8, graph.AWQ:
		// MatMul8bitLt saves A; WQLinearMMFunction saves its float16 x
		if c.requiresGrad(0) {
			c.save(c.in[0])
		}
		return
	case graph.GPTQ:
		// torch.matmul(x, weights) saves the dequantized weight
		if c.requiresGrad(0) {
			c.save(value{st: c.held})
		}
		c.held = nil
		return
	}
	if c.requiresGrad(0) {
		c.save(c.w)
		if q.KeepsInput {
			c.save(c.in[0])
		}
	}
}

// quantLinearBackward is the gradient of x through a quantized Linear
// (the weight is frozen; a bias, frozen under LoRA, gets its gradient as
// an ordinary Linear's does).
//
// 4-bit: the output's ToCopyBackward gives the gradient in the kernel's
// dtype (a copy when it differs from x's), then MatMul4Bit.backward
// computes grad_A = grad_output @ dequantize_4bit(B).to(grad_output.dtype):
// the whole weight dequantized again. The gradient then goes back through
// x's casts. GPTQ: the saved weight serves (see gptqForward). AWQ: see
// the case below.
//
// Int8: MatMul8bitLt.backward: CB = state.CB.to(A.dtype,
// copy=True).mul_(SCB.unsqueeze(1).mul(1/127)) (a whole weight in A's
// dtype and a per-row temporary), grad_A = grad_output @ CB.
func quantLinearBackward(c *bwdCtx, q *graph.Quant) {
	c.gradParam(c.op.Bias)
	if !c.needs(0) {
		return
	}
	sim := c.m.sim
	wt := c.m.g.Tensors[c.op.Weight].Shape
	out, in := wt[0], wt[1]
	rows := c.numel(0) / in
	c.gemm()
	if q.Format == graph.Int8 {
		ad := c.m.val[c.op.Inputs[0]].dt
		cb := c.alloc(out * in * ad.Size())
		c.temp(out * 4)
		ga := c.alloc(rows * in * ad.Size())
		sim.unref(cb)
		c.route(0, ga, ad)
		return
	}
	kd := sim.computeDType(q)
	if sim.amp && q.Format != graph.AWQ {
		kd = sim.low
	}
	var gk *storage
	if kd != c.gdt {
		gk = c.alloc(rows * out * kd.Size())
	}
	var w, rep *storage
	switch q.Format {
	case graph.GPTQ:
		// MmBackward0: grad_output @ weights.T with the saved weight
	case graph.AWQ:
		// WQLinearMMFunction.backward: the weight dequantized to float16,
		// then grad_output.bmm(weights.transpose(0, 1).unsqueeze(0).repeat(
		// batch_size, 1, 1)): one copy of the weight per sample (a 2-D
		// input is one batch)
		w = c.alloc(out * in * 2)
		batch := int64(1)
		if s := c.m.g.Tensors[c.op.Inputs[0]].Shape; len(s) >= 3 {
			batch = s[0]
		}
		rep = c.alloc(batch * out * in * 2)
	default:
		w = sim.dequant(q, out, in, kd)
	}
	ga := c.alloc(rows * in * kd.Size())
	sim.unref(rep)
	sim.unref(w)
	sim.unref(gk)
	c.route(0, ga, kd)
}

// castOut is a cast's target: the output's dtype, or for PEFT's casts
// around a quantized layer's adapter nothing under autocast (the input
// itself) and otherwise float32 or the model's parameter dtype.
func castOut(m *micro, c *fwdCtx) graph.DType {
	switch c.op.Attr.CastTo {
	case graph.CastToDTypeOutsideAutocast:
		if m.sim.amp {
			return c.in[0].dt
		}
	case graph.CastToModelOutsideAutocast:
		if m.sim.amp {
			return c.in[0].dt
		}
		return m.sim.s.Precision.ParamDType()
	}
	return m.g.Tensors[c.op.Output].DType
}

// computeDType is the dtype a quantized layer computes in outside
// autocast: bnb_4bit_compute_dtype, or the precision's own when it
// follows the precision (the command line's default, which a plan's
// change of precision changes too).
func (sim *Simulator) computeDType(q *graph.Quant) graph.DType {
	if !q.ComputeFollowsPrecision {
		return q.Compute
	}
	if low, amp := sim.s.Precision.Autocast(); amp {
		return low
	}
	return sim.s.Precision.ParamDType()
}
