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
	ldt := sim.s.Precision.ParamDType()
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
// input alone (the 4-bit path ends in F.linear, which autocast casts).
func (m *micro) castOf(i int, r *rule) castPolicy {
	if q := quantOf(m.g, &m.g.Ops[i]); q != nil && q.Format == graph.Int8 {
		return castNone
	}
	return r.cast
}

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

// dequantDType is the dtype a weight dequantizes to: QuantState.dtype,
// the dtype the weight had when it was quantized (the model's dtype when
// loading), float16 for GPTQ's and AWQ's float16 scales.
func (sim *Simulator) dequantDType(q *graph.Quant) graph.DType {
	if q.Format == graph.GPTQ || q.Format == graph.AWQ {
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
	var absmax *storage
	if q.DoubleQuant && (q.Format == graph.NF4 || q.Format == graph.FP4) {
		absmax = sim.alloc((n+q.BlockSize-1)/q.BlockSize*4, trace.Transient)
	}
	od := sim.dequantDType(q)
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
// 4-bit, GPTQ, AWQ: Linear4bit.forward casts x to the compute dtype (a
// copy when it differs; under autocast F.linear then casts to the
// autocast dtype, which runOp has done); MatMul4Bit.forward dequantizes
// the whole weight (dequant) and runs F.linear, whose result is in the
// kernel's dtype; when that is not x's dtype the layer's .to(inp_dtype)
// is the op's output and the kernel's result a temporary. MatMul4Bit
// saves only the quantized weight (ctx.tensors = (None, B)), which
// persists: no activation. matmul_4bit skips MatMul4Bit for one row that
// needs no gradient (gemv_4bit: no dequantized copy) when the row's
// length is a multiple of the block size.
//
// Int8: MatMul8bitLt.forward quantizes A (A.to(float16) when A is not,
// freed after int8_vectorwise_quant; CA int8 and SCA float32 per row),
// runs int8_scaled_mm (an int32 product, then the dequantized output in
// A's dtype) and saves A itself for backward. Outlier columns
// (llm_int8_threshold) are data-dependent: none are modelled.
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
	xd := c.in[0].dt
	if !sim.amp && xd != q.Compute {
		st := c.local(c.numel(0)*q.Compute.Size(), trace.Transient)
		c.m.casts[c.i] = append(c.m.casts[c.i], inputCast{input: 0, from: xd})
		c.in[0] = value{st: st, dt: q.Compute}
	}
	kd := c.in[0].dt
	orig := c.m.val[c.op.Inputs[0]].dt
	if (q.Format == graph.NF4 || q.Format == graph.FP4) && rows == 1 && !c.requiresGrad(0) && in%q.BlockSize == 0 {
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

// quantLinearForward registers what a quantized Linear's node saves.
func quantLinearForward(c *fwdCtx, q *graph.Quant) {
	if q.Format == graph.Int8 {
		if c.requiresGrad(0) {
			c.save(c.in[0])
		}
		return
	}
	if c.requiresGrad(0) {
		c.save(c.w)
	}
}

// quantLinearBackward is the gradient of x through a quantized Linear
// (the weight is frozen; a bias, frozen under LoRA, gets its gradient as
// an ordinary Linear's does).
//
// 4-bit, GPTQ, AWQ: the output's ToCopyBackward gives the gradient in the
// kernel's dtype (a copy when it differs from x's), then
// MatMul4Bit.backward computes grad_A = grad_output @
// dequantize_4bit(B).to(grad_output.dtype): the whole weight
// dequantized again. The gradient then goes back through x's casts.
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
	kd := q.Compute
	if sim.amp {
		kd = sim.low
	}
	var gk *storage
	if kd != c.gdt {
		gk = c.alloc(rows * out * kd.Size())
	}
	w := sim.dequant(q, out, in, kd)
	ga := c.alloc(rows * in * kd.Size())
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
