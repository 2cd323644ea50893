package capture

import (
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// saving builds an op whose memory rule is derivatives.yaml's list of
// what its backward node saves: a new result of the recorded shape, and
// a node keeping ins[i] for each i in saved (len(ins) is the result)
// that gives one gradient per ins[:args] needing one. The node is the
// graph's Custom, the rule a user's autograd.Function gets: what the
// op's backward computes besides the gradients it returns is not
// modelled.
func (x *bctx) saving(mod string, ins []graph.TensorID, args int, saved []int, r *tensor) graph.TensorID {
	b := x.b
	if r == nil || len(ins) == 0 || ins[0] == graph.None {
		return graph.None
	}
	dt, _ := graph.ParseDType(r.DType)
	var res graph.TensorID
	b.NoGrad(func() { res = b.Const(mod, ins[0], dt, x.shape(r)...) })
	return b.Custom(mod, ins, args, saved, res)
}

// atenSaved maps the ops whose rule is saving's; it reports false for
// the others.
func (x *bctx) atenSaved(o *op) bool {
	name := strings.TrimPrefix(o.Aten, "aten::")
	as := o.Args
	var r *tensor
	if len(o.Out) > 0 && o.Out[0] != nil {
		r = &x.m.f.Tensors[*o.Out[0]]
	}
	in := func(i int) graph.TensorID {
		if i >= len(as) {
			return graph.None
		}
		id, ok := as[i].tensor()
		if !ok {
			return graph.None
		}
		return x.in(o, id)
	}
	isT := func(i int) bool {
		if i >= len(as) {
			return false
		}
		_, ok := as[i].tensor()
		return ok
	}
	mod := x.name(o)
	var out graph.TensorID
	switch name {
	case "clamp", "clamp_min", "clamp_max":
		// derivatives.yaml (v1.13.0): clamp, clamp_min and clamp_max with
		// number bounds save self (clamp_backward, or where(self >= min,
		// grad, 0)); ClampBackward1's _saved_self on 1.13
		for i := 1; i < len(as); i++ {
			if isT(i) {
				return false // the Tensor-bound overloads also save the bounds
			}
		}
		out = x.saving(mod, []graph.TensorID{in(0)}, 1, []int{0}, r)
	case "norm", "linalg_vector_norm", "amax", "amin":
		// norm.ScalarOpt_dim: norm_backward(grad, self, p, result, dim,
		// keepdim) saves self and result; amax/amin: scale_grad_by_count(
		// ..., restore_reduced_dims(result, dim, keepdim) == self, dim)
		// saves self and result (NormBackward1, AmaxBackward0 on 1.13)
		out = x.saving(mod, []graph.TensorID{in(0)}, 1, []int{0, 1}, r)
	case "native_group_norm":
		// native_group_norm_backward(grad, input, result1, result2,
		// weight, N, C, HxW, group, ...): it saves input, weight and the
		// per-group mean and rstd ([N, group], outputs 1 and 2), as
		// NativeGroupNormBackward0's _saved_input, _saved_weight,
		// _saved_result1 and _saved_result2 on 1.13
		if len(o.Out) < 3 || o.Out[1] == nil || o.Out[2] == nil {
			return false
		}
		xin := in(0)
		if xin == graph.None {
			return true
		}
		ins := []graph.TensorID{xin}
		saved := []int{0}
		for i := 1; i <= 2; i++ {
			if i < len(as) && !as[i].null() {
				if i == 1 {
					saved = append(saved, len(ins))
				}
				ins = append(ins, in(i))
			}
		}
		args := len(ins)
		var stats [2]graph.TensorID
		for i := range stats {
			t := &x.m.f.Tensors[*o.Out[1+i]]
			dt, _ := graph.ParseDType(t.DType)
			x.b.NoGrad(func() { stats[i] = x.b.Const(mod, xin, dt, x.shape(t)...) })
			saved = append(saved, len(ins))
			ins = append(ins, stats[i])
		}
		out = x.saving(mod, ins, args, saved, r)
		x.set(o.Out[1], stats[0])
		x.set(o.Out[2], stats[1])
	case "where":
		// where.self(condition, self, other) (the Scalar overloads reach
		// it with the number wrapped in a 0-d tensor): derivatives.yaml
		// (v1.13.0 and v2.5.1) gives self where(condition, grad, 0) and
		// other where(condition, 0, grad), condition non-differentiable,
		// so WhereBackward0 saves the condition alone (GPT-2's causal
		// mask, a slice of its bias buffer)
		cond := in(0)
		if cond == graph.None || !x.anyGrad(o) {
			return false // without grad: the fallback's new tensor
		}
		var ins []graph.TensorID
		for i := 1; i <= 2; i++ {
			if isT(i) && in(i) != graph.None {
				ins = append(ins, in(i))
			}
		}
		if len(ins) == 0 {
			return false
		}
		args := len(ins)
		ins = append(ins, cond)
		out = x.saving(mod, ins, args, []int{args}, r)
	case "addcmul":
		return x.addcmul(o)
	case "transpose_":
		// x.transpose_(a, b) (at::gru's batch_first output): an in-place
		// change of x's sizes and strides, the same storage; autograd
		// records it as the view it is (TransposeBackward0, nothing
		// saved)
		src := in(0)
		if r == nil || src == graph.None {
			return true
		}
		out = x.b.ViewAs(mod, src, x.shape(r), x.contig(r))
	default:
		return false
	}
	if len(o.Out) > 0 {
		x.set(o.Out[0], out)
	}
	return true
}

// conv1dWeights are the parameters that are the weight of a 1-D
// convolution ([out, in/groups, k]).
func conv1dWeights(f *file) map[int]bool {
	ws := map[int]bool{}
	for i := range f.Ops {
		o := &f.Ops[i]
		if (o.Aten != "aten::convolution" && o.Aten != "aten::_convolution") || len(o.Args) < 2 {
			continue
		}
		if id, ok := o.Args[1].tensor(); ok && f.Tensors[id].Role == "parameter" && len(f.Tensors[id].Shape) == 3 {
			ws[id] = true
		}
	}
	return ws
}

// conv1d maps a 1-D convolution as PyTorch 1.13 runs it on the CPU:
// at::_convolution views a 3-D input and weight as 2-D ones with a height
// of 1 (view1d_as_2d, aten/src/ATen/native/Convolution.cpp), runs the 2-D
// kernel and views the result back (view3d). The views share storage, so
// ConvolutionBackward0's saved input and weight are the 2-D
// convolution's, and the kernel's buffers are its. The weight parameter
// is built [out, in, 1, k] from the start (conv1dWeights): the same
// bytes.
func (x *bctx) conv1d(o *op, mod string) graph.TensorID {
	b := x.b
	as := o.Args
	xid, ok1 := as[0].tensor()
	wid, ok2 := as[1].tensor()
	if !ok1 || !ok2 || !conv1dWeights(x.m.f)[wid] {
		x.err = x.ruleError(o, "a 1-D convolution whose weight is not a parameter")
		return graph.None
	}
	in, w := x.in(o, xid), x.in(o, wid)
	if in == graph.None || w == graph.None {
		return graph.None
	}
	bias := graph.None
	if !as[2].null() {
		if id, ok := as[2].tensor(); ok {
			bias = x.in(o, id)
		}
	}
	one := func(i int, def int64) [2]int64 {
		if i < len(as) {
			if v, ok := x.ints(as[i]); ok && len(v) > 0 {
				return [2]int64{def, v[0]}
			}
		}
		return [2]int64{def, def}
	}
	groups := int64(1)
	if len(as) > 8 {
		if g, ok := x.ints(as[8]); ok && len(g) == 1 {
			groups = g[0]
		}
	}
	s := b.Shape(in)
	if len(s) != 3 {
		x.err = x.ruleError(o, "a 1-D convolution of an input that is not [N, C, L]")
		return graph.None
	}
	in2 := b.ViewAs(mod, in, graph.Shape{s[0], s[1], 1, s[2]}, b.Contig(in))
	y := b.Conv2dWith(mod, in2, w, bias, graph.Conv2dOpts{Stride: one(3, 1), Padding: one(4, 0), Dilation: one(5, 1), Groups: groups, Bias: bias != graph.None})
	ys := b.Shape(y)
	if ys == nil {
		return graph.None
	}
	return b.ViewAs(mod, y, graph.Shape{ys[0], ys[1], ys[3]}, true)
}

// addcmul maps addcmul(self, tensor1, tensor2, value) (timm's
// GlobalResponseNorm, ConvNeXt-V2: torch.addcmul(bias, weight, x * x_n));
// it reports false for a malformed op. The hand rule is narrower than the
// generated one (derivatives_gen.go), which keeps both operands.
func (x *bctx) addcmul(o *op) bool {
	// derivatives.yaml (v2.5.1) gives tensor1
	// grad * (tensor2 * value) and tensor2 grad * (tensor1 * value),
	// self grad, so AddcmulBackward0 keeps tensor2 where tensor1
	// needs a gradient and tensor1 where tensor2 does (the generated
	// code saves a variable only for the inputs whose formula
	// uses it and that need a gradient)
	if len(o.Out) == 0 || o.Out[0] == nil || len(o.Args) < 3 {
		return false
	}
	ins := make([]graph.TensorID, 3)
	for i := range ins {
		id, ok := o.Args[i].tensor()
		if !ok {
			return false
		}
		if ins[i] = x.in(o, id); ins[i] == graph.None {
			return true
		}
	}
	grad := func(i int) bool { return x.b.TensorAt(ins[i]).RequiresGrad }
	var saved []int
	if grad(2) {
		saved = append(saved, 1)
	}
	if grad(1) {
		saved = append(saved, 2)
	}
	x.set(o.Out[0], x.saving(x.name(o), ins, 3, saved, &x.m.f.Tensors[*o.Out[0]]))
	return true
}
