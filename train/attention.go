package train

import (
	"slices"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
)

// kernel picks the attention kernel the way PyTorch's SDPA dispatcher does
// on CUDA (select_sdp_backend in
// aten/src/ATen/native/transformers/cuda/sdp_utils.cpp): the backends in
// priority_order's order, the first whose checks pass. The order is
// cuDNN attention, flash, memory-efficient, math where the profile's
// release prefers cuDNN on this GPU (CudnnAttentionFirst), and flash,
// memory-efficient, math otherwise. Flash takes fp16/bf16 with a head dim
// that is a multiple of 8 up to 256 on sm80+; memory-efficient also takes
// float32, but bfloat16 only from sm80 (less_than_sm80_mem_efficient_dtypes
// is float16 and float32); math takes everything. Profiles whose
// nn.MultiheadAttention and default attention are explicit Python ops
// take the eager path.
func (m *micro) kernel(c *fwdCtx) Attention {
	s := m.sim.s
	if s.Attention != AttentionAuto {
		return s.Attention
	}
	if s.Profile.AttentionDefault == "eager" {
		return AttentionEager
	}
	if s.CPU {
		if m.cpuFlash(c) {
			return AttentionFlash
		}
		return AttentionMath
	}
	q, v := m.g.Tensors[c.op.Inputs[0]].Shape, m.g.Tensors[c.op.Inputs[2]].Shape
	kl := m.g.Tensors[c.op.Inputs[1]].Shape[2]
	dt := c.in[0].dt
	a := sdpaCase{dt: dt, dqk: q[3], dv: v[3], b: q[0], h: q[1], lq: q[2], lk: kl, p: c.op.Attr.P,
		grouped: m.g.Tensors[c.op.Inputs[1]].Shape[1] != q[1], gqa: c.op.Attr.GQA}
	if m.sim.noGrad {
		a.p = 0
	}
	return a.pick(s.Profile, s.ComputeMajor)
}

// sdpaCase is what SDPA's CUDA dispatcher checks of one call.
type sdpaCase struct {
	dt                    graph.DType
	dqk, dv, b, h, lq, lk int64
	p                     float64 // dropout_p as called (0 in eval)
	// grouped: key and value have fewer heads than the query
	// (grouped-query attention handed to SDPA unrepeated); gqa: the call
	// passes enable_gqa=True
	grouped, gqa bool
}

// pick runs select_sdp_backend's priority order over a's checks.
func (a sdpaCase) pick(p *profile.Profile, major int) Attention {
	// check_batch_size_and_num_heads_dense (sdp_utils_cpp.h): a fused
	// kernel takes key and value with fewer heads than the query only
	// under enable_gqa and where it supports grouped-query attention —
	// flash and cuDNN attention do (<true> in their constraints), the
	// memory-efficient kernel does not; elsewhere the math kernel runs it
	grouped := a.grouped && !a.gqa
	if CudnnAttentionFirst(p, major) && !grouped && a.cudnnOK(p.CudnnVersion, major) {
		return AttentionCudnn
	}
	d := a.dqk
	if (a.dt == graph.F16 || a.dt == graph.BF16) && d <= 256 && d%8 == 0 && major >= 8 && !grouped {
		return AttentionFlash
	}
	if a.grouped {
		return AttentionMath
	}
	if a.dt == graph.BF16 && major < 8 {
		return AttentionMath
	}
	if d%8 == 0 || (a.dt == graph.F32 && d%4 == 0) {
		return AttentionEfficient
	}
	return AttentionMath
}

// CudnnAttentionFirst is check_prefer_cudnn_attention (sdp_utils.cpp,
// 2.11): cudnn_version > 91500 && (major == 9 || major == 10), the runtime
// cuDNN being the one the release's wheels bundle; the majors are the
// profile's (releases that keep flash first list none). Where it holds,
// priority_order tries cuDNN attention before flash.
func CudnnAttentionFirst(p *profile.Profile, major int) bool {
	return p != nil && p.CudnnVersion > 91500 && slices.Contains(p.CudnnAttentionFirst, major)
}

// cudnnOK is can_use_cudnn_attention (sdp_utils.cpp) for dense inputs
// without a mask, deterministic algorithms off: float16 or bfloat16 from
// sm80 (check_dtypes_low_precision, check_cudnn_hardware_support: sm80 to
// sm121); no dropout on cuDNN 9.11 to 9.13; check_cudnn_tensor_shapes:
// batch and heads at most 65535, both head dims multiples of 8 and at most
// 128 (d_qk 192 with d_v 128 on sm90 and sm10x from cuDNN 9.11; 256 needs
// a cuDNN above 9.22 built against cuDNN frontend 1.24, which no profile
// here bundles), a key length other than 1, and a query length other than
// 1 with dropout. Grouped-query attention passes
// (check_batch_size_and_num_heads_dense<supports_gqa = true>). Main's
// check_cudnn_dropout (pull request 174245, February 2026: dropout_p a
// multiple of 1/16) is not applied: GPT-2's dropout of 0.1 under half
// precision loads on the H200 under 2.11 what ViT-B/16's cuDNN attention
// loads (profile.LazyModules), where flash would be a module of its own.
func (a sdpaCase) cudnnOK(cudnn, major int) bool {
	if a.dt != graph.F16 && a.dt != graph.BF16 {
		return false
	}
	if major < 8 || major > 12 {
		return false
	}
	if a.p > 0 && cudnn > 91100 && cudnn < 91400 {
		return false
	}
	if a.b > 65535 || a.h > 65535 {
		return false
	}
	limit := int64(128)
	if (major == 9 || major == 10) && cudnn >= 91100 && a.dqk == 192 && a.dv == 128 {
		limit = 192
	}
	if a.dqk > limit || a.dv > limit || a.dqk%8 != 0 || a.dv%8 != 0 {
		return false
	}
	if a.lk == 1 || (a.p > 0 && a.lq == 1) {
		return false
	}
	return true
}

// cpuFlash says whether SDPA on the CPU runs the flash kernel
// (_scaled_dot_product_flash_attention_for_cpu): in the releases whose
// profile says so, select_sdp_backend_cpp (sdp_utils_cpp.cpp) tries it
// before math, and its gates refuse dropout (check_for_dropout), query
// and key/value heads that differ (grouped-query attention runs the math
// path, as measured on 2.5.1) and a value head dim other than the
// query's (check_head_dim_size_cpp); every float dtype passes. In eval
// transformers passes dropout_p=0.0.
func (m *micro) cpuFlash(c *fwdCtx) bool {
	if !m.sim.s.Profile.CPUFlashAttention {
		return false
	}
	if c.op.Attr.P > 0 && !m.sim.noGrad {
		return false
	}
	if c.op.Attr.KVHeads != 0 && c.op.Attr.KVHeads != c.op.Attr.Heads {
		return false
	}
	qs, vs := m.g.Tensors[c.op.Inputs[0]].Shape, m.g.Tensors[c.op.Inputs[2]].Shape
	return len(qs) == 4 && len(vs) == 4 && qs[3] == vs[3]
}

// cudnnSDPAWorkspaceExtra is the workspace cuDNN 9.19's fused attention
// graphs ask for beyond their buffers (get_workspace_size() in
// run_cudnn_SDP_fprop and run_cudnn_SDP_bprop, MHA.cpp): 256 bytes in the
// forward, and on top of the dQ accumulator and row sums in the backward,
// as the H200's ViT-B/16 recording holds (testdata/measured/snapshots).
const cudnnSDPAWorkspaceExtra = 256

func attnDims(s graph.Shape, k graph.Shape) (b, h, l, d, sl int64) {
	return s[0], s[1], s[2], s[3], k[2]
}

func attentionForward(c *fwdCtx) {
	m := c.m
	q, k, v := c.in[0], c.in[1], c.in[2]
	b, h, l, _, s := attnDims(c.shape(0), c.shape(1))
	switch m.kernel(c) {
	case AttentionCudnn:
		m.sim.sum.FusedAttention = true
		m.sim.sum.CudnnAttention = true
		// _cudnn_attention_forward (attention.cu) makes the dropout seed
		// and offset as one-element int64 tensors on the device before
		// run_cudnn_SDP_fprop (aten/src/ATen/native/cudnn/MHA.cpp) takes
		// o by alloc_with_matching_layout(q, ...) (the query's order of
		// strides, as flash's empty_like of q_t: the layouts below) and
		// softmaxstats [B, H, L] float32, then the graph's
		// get_workspace_size() from the caching allocator. derivatives.yaml
		// (_scaled_dot_product_cudnn_attention) hands the backward query,
		// key, value, output, logsumexp, philox_seed and philox_offset:
		// measured on an H200 (testdata/measured/snapshots, ViT-B/16 under
		// bfloat16 autocast): two 8-byte blocks, the output, the stats and
		// a 256-byte workspace, freed at once, in that order, per layer,
		// the 8-byte ones kept until the layer's backward.
		c.save(q)
		c.save(k)
		c.save(v)
		c.saveNew(8)
		c.saveNew(8)
		c.save(c.out)
		c.saveNew(b * h * l * 4)
		m.sim.temp(cudnnSDPAWorkspaceExtra, trace.Transient)
		if lay := c.op.Attr.Query; lay == graph.QueryLBHD {
			m.layOut(c.op.Output, lay)
		} else if !c.op.Attr.QueryContiguous {
			m.layOut(c.op.Output, graph.QueryBLHD)
		}
	case AttentionFlash:
		if !m.sim.s.CPU {
			m.sim.sum.FusedAttention = true
		}
		// _scaled_dot_product_flash_attention saves query, key, value,
		// output and logsumexp [B, H, L] float32. The CPU kernel's
		// (_scaled_dot_product_flash_attention_for_cpu, derivatives.yaml
		// v2.5.1) is in the accumulation dtype, float64 for float64
		// inputs; its output takes the query's layout (measured on
		// 2.5.1: a query laid out [B, L, H, D] gives an output whose
		// transpose(1, 2) is contiguous), so the .contiguous() after
		// transformers' transpose(1, 2) copies nothing.
		c.save(q)
		c.save(k)
		c.save(v)
		c.save(c.out)
		lse := int64(4)
		if m.sim.s.CPU && q.dt == graph.F64 {
			lse = 8
		}
		c.saveNew(b * h * l * lse)
		//
		// On CUDA, _scaled_dot_product_flash_attention_cuda (attention.cu)
		// hands the kernel q_t = query.transpose(1, 2), and mha_fwd
		// (flash_api.cpp) allocates out = at::empty_like(q_padded) before
		// returning output.transpose(1, 2): empty_like keeps q_t's
		// strides when q_t is dense (a query that is a permuted contiguous
		// tensor gives an output laid out as the query) and is contiguous
		// otherwise: a strided slice of a fused qkv projection (GPT-2's
		// c_attn(x).split(E, dim=2)) gives an output laid out
		// [B, L, H, D]. The CPU flash kernel lays its output out as the
		// query too (measured under 2.5.1 on the CPU). nn.MultiheadAttention's
		// query (graph.QueryLBHD) is a dense [L, B, H, D] tensor seen as
		// [B, H, L, D] (a contiguous select of 2.x's packed in-projection),
		// so CUDA's flash output is laid out [L, B, H, D] as well and
		// attn_output.permute(2, 0, 1, 3).contiguous() copies nothing:
		// measured on an H200, torch 2.11, ViT-B/16 under bf16 autocast
		// (testdata/measured/snapshots): out_proj's addmm reads the
		// attention output itself, no [B, L, E] copy between them.
		switch lay := c.op.Attr.Query; {
		case m.sim.s.CPU && lay != graph.QueryBHLD:
			m.layOut(c.op.Output, lay)
		case !m.sim.s.CPU && lay == graph.QueryLBHD:
			m.layOut(c.op.Output, lay)
		case !m.sim.s.CPU && !c.op.Attr.QueryContiguous:
			m.layOut(c.op.Output, graph.QueryBLHD)
		}
	case AttentionEfficient:
		// _efficient_attention_forward: logsumexp [B, H, ceil(L/32)*32]
		// float32 (kAlignLSE). Its output is at::empty({B, M, num_heads,
		// Kv}) (attention.cu), [B, L, H, D] whatever the query's layout,
		// returned as attention.transpose(1, 2): the .contiguous() after
		// transformers' transpose(1, 2) copies nothing (measured on an
		// H200, torch 2.11: GPT-2 in float32 allocates no copy between the
		// attention and c_proj). nn.MultiheadAttention's [L, B, H, D] order
		// is not the output's, so its .permute(2, 0, 1, 3).contiguous()
		// copies, and out_proj saves the copy beside the output the
		// attention saves (the float32 ViT-B/16 recording on the H200).
		c.save(q)
		c.save(k)
		c.save(v)
		c.save(c.out)
		c.saveNew(b * h * ((l + 31) / 32 * 32) * 4)
		if !m.sim.s.CPU {
			m.layOut(c.op.Output, graph.QueryBLHD)
		}
	case AttentionEager:
		mathAttentionForward(c, b, h, l, s, true)
	default:
		mathAttentionForward(c, b, h, l, s, false)
	}
}

// mathAttentionForward is the explicit path: scale, q @ k^T, softmax,
// dropout, @ v, either as Python-level ops (eager) or inside SDPA's math
// kernel. The profile says which operands are scaled into copies (torch
// 1.13's MHA divides q, Hugging Face's eager functions scale the scores,
// SDPA's math kernel scales q and k). Python-level ops are visible to
// autocast: softmax then runs in float32 and the second matmul gets a half
// copy of the probabilities; the math kernel may upcast half inputs itself.
func mathAttentionForward(c *fwdCtx, b, h, l, s int64, eager bool) {
	m := c.m
	p := m.sim.s.Profile
	q, k, v := c.in[0], c.in[1], c.in[2]
	dt := q.dt
	c.gemm()
	cdt := dt
	pythonOps := eager
	if !pythonOps && p.MathAttentionUpcastsHalf && dt != graph.F32 {
		cdt = graph.F32
		q = value{st: c.local(c.numel(0)*4, trace.Activation), dt: cdt}
		k = value{st: c.local(c.numel(1)*4, trace.Activation), dt: cdt}
		v = value{st: c.local(c.numel(2)*4, trace.Activation), dt: cdt}
	}
	copies := p.MathAttentionScaledCopies
	if eager {
		copies = p.EagerAttentionScaledCopies
	}
	rep, gqa := kvRepeat(c.op, eager)
	if copies != "none" {
		q = value{st: c.local(c.numel(0)*cdt.Size(), trace.Activation), dt: cdt}
	}
	if gqa {
		// enable_gqa: key.repeat_interleave and value.repeat_interleave
		// (an expand and a contiguous clone each) before the products;
		// the repeated key lives to the kernel's end
		k = value{st: c.local(c.numel(1)*rep*cdt.Size(), trace.Activation), dt: cdt}
		v = value{st: c.local(c.numel(2)*rep*cdt.Size(), trace.Activation), dt: cdt}
	}
	kn := c.numel(1)
	if gqa {
		kn *= rep
	}
	var scaledKey *storage
	if copies == "query_key" {
		scaledKey = c.local(kn*cdt.Size(), trace.Activation)
		k = value{st: scaledKey, dt: cdt}
	}
	if rep > 1 && !gqa {
		// at::matmul broadcasts the batch dims (_matmul_impl,
		// aten/src/ATen/native/LinearAlgebra.cpp): the key's
		// expand(...).reshape({B*H, D, S}) cannot be a view of a tensor
		// whose heads are repeated, so it is a contiguous copy, which bmm
		// saves in place of the key
		k = value{st: c.local(kn*rep*cdt.Size(), trace.Activation), dt: cdt}
	}
	c.save(q)
	c.save(k)
	ns := b * h * l * s
	scores := c.local(ns*cdt.Size(), trace.Activation)
	if rep > 1 && !gqa && scaledKey != nil {
		// the scaled key, a temporary of the matmul's expression, goes
		// when the first product returns
		c.drop(scaledKey)
	}
	pdt := cdt
	if pythonOps && m.sim.amp {
		pdt = graph.F32
	}
	m.run.Scores, m.run.Probs = cdt, pdt
	probs := c.local(ns*pdt.Size(), trace.Activation)
	c.save(value{st: probs})
	c.drop(scores)
	a := probs
	// In eval mode Hugging Face's attention passes dropout=0.0 and
	// nn.MultiheadAttention dropout_p=0.0: no mask.
	if pp := c.op.Attr.P; pp > 0 && !m.sim.noGrad {
		if m.sim.s.CPU {
			c.saveNew(ns * pdt.Size())
		} else {
			c.saveNew(ns)
		}
		a = c.local(ns*pdt.Size(), trace.Activation)
	}
	if pdt != cdt {
		a = c.local(ns*cdt.Size(), trace.Activation)
	}
	c.save(value{st: a})
	if rep > 1 && !gqa {
		// the value's broadcast in the second matmul: a contiguous copy
		// at the query's heads, which bmm saves
		v = value{st: c.local(c.numel(2)*rep*cdt.Size(), trace.Activation), dt: cdt}
	}
	c.save(v)
}

// kvRepeat says how many query heads share each key/value head of an
// attention op (1 without grouped-query attention), and whether the math
// kernel repeats the key and value itself (SDPA's enable_gqa) rather than
// leaving it to at::matmul's broadcast. Either way the products read, and
// bmm saves, key and value tensors at the query's heads: measured on
// 2.5.1's CPU, where the math kernel runs any grouped-query call.
func kvRepeat(op *graph.Op, eager bool) (int64, bool) {
	h, kv := op.Attr.Heads, op.Attr.KVHeads
	if kv <= 0 || kv >= h {
		return 1, false
	}
	return h / kv, op.Attr.GQA && !eager
}

func attentionBackward(c *bwdCtx) {
	m := c.m
	// Recover the kernel from the forward's choice: rerun the selection on
	// the same inputs.
	fc := fwdCtx{m: m, op: c.op, i: c.i, in: []value{{dt: c.inDT(0)}}}
	b, h, l, d, s := attnDims(m.g.Tensors[c.op.Inputs[0]].Shape, m.g.Tensors[c.op.Inputs[1]].Shape)
	switch k := m.kernel(&fc); k {
	case AttentionCudnn:
		// _scaled_dot_product_cudnn_attention_backward_cuda allocates dq,
		// dk and dv (empty_like of q, k, v), then run_cudnn_SDP_bprop
		// (MHA.cpp) takes the backward graph's get_workspace_size() from
		// the caching allocator and frees it when the call returns. The
		// size is cuDNN's: on the H200 with cuDNN 9.19 it is a float32 dQ
		// accumulator [B, H, L, D] and a float32 [B, H, L] sum (the
		// softmax's dO·O row sums) plus the 256 bytes the forward's
		// workspace is (testdata/measured/snapshots: 39,337,216 bytes at
		// batch 64, ViT-B/16).
		c.gradIn(0)
		c.gradIn(1)
		c.gradIn(2)
		c.temp(b*h*l*(d+1)*4 + cudnnSDPAWorkspaceExtra)
	case AttentionFlash:
		if m.sim.s.CPU {
			// the CPU kernel's backward writes dq, dk and dv; its
			// per-thread blocks are not modelled
			c.gradIn(0)
			c.gradIn(1)
			c.gradIn(2)
			return
		}
		// flash backward: dq, dk, dv, plus a float32 dq accumulator and
		// softmax_d [B, H, L] for the duration of the kernel.
		acc := c.alloc(b * l * h * d * 4)
		sd := c.alloc(b * h * l * 4)
		c.gradIn(0)
		c.gradIn(1)
		c.gradIn(2)
		m.sim.unref(sd)
		m.sim.unref(acc)
	case AttentionEfficient:
		var acc *storage
		if c.inDT(0) != graph.F32 {
			acc = c.alloc(b * l * h * d * 4)
		}
		c.gradIn(0)
		c.gradIn(1)
		c.gradIn(2)
		if acc != nil {
			m.sim.unref(acc)
		}
	default:
		c.gemm()
		p := m.sim.s.Profile
		dt := c.inDT(0)
		pdt := dt
		if k != AttentionEager && p.MathAttentionUpcastsHalf {
			pdt = graph.F32
		}
		ns := b * h * l * s
		rep, gqa := kvRepeat(c.op, k == AttentionEager)
		ga := c.alloc(ns * pdt.Size()) // grad @ v^T
		var gv *storage
		switch {
		case rep > 1 && gqa:
			// probs^T @ grad, the repeated value's gradient: the repeat's
			// nodes were made before every other node of the kernel but
			// the query's scaling, so the engine sums it (ExpandBackward0)
			// only after the key's
			gv = c.alloc(c.numel(2) * rep * pdt.Size())
		case rep > 1:
			// the broadcast copy's gradient, summed over the repeated
			// heads at once (ExpandBackward0, made after the softmax)
			gv = c.alloc(c.numel(2) * rep * pdt.Size())
			c.gradIn(2)
			m.sim.unref(gv)
			gv = nil
		default:
			c.gradIn(2) // probs^T @ grad
		}
		if c.op.Attr.P > 0 {
			g := c.alloc(ns * pdt.Size()) // dropout backward
			m.sim.unref(ga)
			ga = g
		}
		gs := c.alloc(ns * pdt.Size()) // softmax backward
		m.sim.unref(ga)
		copies := p.MathAttentionScaledCopies
		if k == AttentionEager {
			copies = p.EagerAttentionScaledCopies
		}
		if copies != "none" {
			c.temp(c.numel(0) * pdt.Size()) // through the scaling of q
		}
		if rep == 1 {
			c.gradIn(0)
			c.gradIn(1)
			m.sim.unref(gs)
			return
		}
		// the first product's gradient of the key at the query's heads,
		// summed to the key's heads (and through its scaling)
		gk := c.alloc(c.numel(1) * rep * pdt.Size())
		c.gradIn(0)
		if gqa && copies == "query_key" {
			c.temp(c.numel(1) * rep * pdt.Size()) // MulBackward1 of the repeated key
		}
		c.gradIn(1)
		m.sim.unref(gk)
		if gv != nil {
			c.gradIn(2)
			m.sim.unref(gv)
		}
		m.sim.unref(gs)
	}
}

// layOut records that attention output t is laid out in memory in the
// order of l, so that a view of it that reads that memory in order is
// contiguous already (contiguousAttention).
func (m *micro) layOut(t graph.TensorID, l graph.QueryLayout) {
	if m.laidOut == nil {
		m.laidOut = map[graph.TensorID]graph.QueryLayout{}
	}
	m.laidOut[t] = l
}
