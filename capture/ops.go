package capture

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// group maps a whole torch function call to one simulator op where the
// simulator has a rule for the function as a unit. It reports false to
// have the call's aten ops mapped one by one.
func (x *bctx) group(ops []op) bool {
	o := &ops[0]
	fn := o.Fn
	if fn == "" || len(o.FnOut) == 0 || o.FnOut[0] == nil {
		return false
	}
	if mode, ok := rnnModes[fn]; ok && !x.cpu {
		return x.rnn(o, mode)
	}
	name := fn[strings.LastIndex(fn, ".")+1:]
	as, kw := o.FnArgs, o.FnKwargs
	b := x.b
	out := o.FnOut[0]
	switch name {
	case "linear":
		xi, ok1 := argAt(as, kw, 0, "input")
		wi, ok2 := argAt(as, kw, 1, "weight")
		xt, okx := xi.tensor()
		wt, okw := wi.tensor()
		if !ok1 || !ok2 || !okx || !okw {
			return false
		}
		bias := graph.None
		if bi, ok := argAt(as, kw, 2, "bias"); ok && !bi.null() {
			bt, ok := bi.tensor()
			if !ok {
				return false
			}
			bias = x.in(o, bt)
		}
		w := x.in(o, wt)
		if w != graph.None && b.TensorAt(w).Role != graph.Parameter {
			return false
		}
		x.set(out, b.LinearOf(x.name(o), x.in(o, xt), w, bias))
		return true
	case "cross_entropy":
		li, _ := argAt(as, kw, 0, "input")
		ti, _ := argAt(as, kw, 1, "target")
		lt, ok1 := li.tensor()
		tt, ok2 := ti.tensor()
		if !ok1 || !ok2 {
			return false
		}
		for k, a := range kw {
			switch k {
			case "reduction":
				if a.str() != "mean" {
					return false
				}
			case "ignore_index":
			case "label_smoothing":
				if v, _ := a.float(); v != 0 {
					return false
				}
			case "weight":
				if !a.null() {
					return false
				}
			}
		}
		if len(as) > 2 {
			return false
		}
		l, t := x.in(o, lt), x.in(o, tt)
		ls := b.Shape(l)
		if len(ls) > 2 {
			// [N, C, d1, ...]: the builder's rule is for [N, C]; the
			// per-element loss is mapped op by op
			return false
		}
		x.set(out, b.CrossEntropy(x.name(o), l, t))
		return true
	case "mse_loss":
		pi, _ := argAt(as, kw, 0, "input")
		ti, _ := argAt(as, kw, 1, "target")
		pt, ok1 := pi.tensor()
		tt, ok2 := ti.tensor()
		if r, ok := kw["reduction"]; (ok && r.str() != "mean") || !ok1 || !ok2 {
			return false
		}
		x.set(out, b.MSELoss(x.name(o), x.in(o, pt), x.in(o, tt)))
		return true
	case "dropout":
		xi, _ := argAt(as, kw, 0, "input")
		xt, ok := xi.tensor()
		if !ok {
			return false
		}
		p := 0.5
		if a, ok := argAt(as, kw, 1, "p"); ok {
			p, _ = a.float()
		}
		training := true
		if a, ok := argAt(as, kw, 2, "training"); ok {
			training, _ = a.boolean()
		}
		inplace := false
		if a, ok := argAt(as, kw, 3, "inplace"); ok {
			inplace, _ = a.boolean()
		}
		in := x.in(o, xt)
		if !training || p == 0 {
			x.set(out, in)
			return true
		}
		x.set(out, b.Dropout(x.name(o), in, p, inplace))
		return true
	case "relu", "relu6", "hardtanh", "silu", "hardswish", "hardsigmoid", "gelu", "sigmoid", "tanh":
		// An in-place activation writes its input (the aten op X_ on CPU
		// and CUDA). On the meta device PyTorch 1.13 runs some of them as a
		// clone and an in-place op on the clone, which no real device does:
		// the function's inplace argument is the rule.
		inplace := false
		if a, ok := kw["inplace"]; ok {
			inplace, _ = a.boolean()
		} else if n := map[string]int{"relu": 1, "relu6": 1, "silu": 1, "hardswish": 1, "hardsigmoid": 1, "hardtanh": 3}[name]; n > 0 && n < len(as) {
			inplace, _ = as[n].boolean()
		}
		xi, _ := argAt(as, kw, 0, "input")
		xt, ok := xi.tensor()
		if !inplace || !ok {
			return false
		}
		k := map[string]graph.Kind{"relu": graph.ReLU, "relu6": graph.Hardtanh, "hardtanh": graph.Hardtanh, "silu": graph.SiLU,
			"hardswish": graph.Hardswish, "hardsigmoid": graph.Hardsigmoid, "gelu": graph.GELU, "sigmoid": graph.Sigmoid, "tanh": graph.Tanh}[name]
		x.set(out, b.Act(k, x.name(o), x.in(o, xt), true))
		return true
	case "instance_norm":
		// nn.InstanceNorm without running statistics (its default):
		// at::instance_norm's repeat, view and batch_norm as one op
		xi, _ := argAt(as, kw, 0, "input")
		xt, ok := xi.tensor()
		if !ok {
			return false
		}
		for i, n := range []string{"running_mean", "running_var"} {
			if a, ok := argAt(as, kw, 1+i, n); ok && !a.null() {
				return false
			}
		}
		if a, ok := argAt(as, kw, 5, "use_input_stats"); ok {
			if v, _ := a.boolean(); !v {
				return false
			}
		}
		var ps [2]graph.TensorID
		for i, n := range []string{"weight", "bias"} {
			ps[i] = graph.None
			if a, ok := argAt(as, kw, 3+i, n); ok && !a.null() {
				pt, ok := a.tensor()
				if !ok {
					return false
				}
				ps[i] = x.in(o, pt)
				if ps[i] == graph.None || b.TensorAt(ps[i]).Role != graph.Parameter {
					return false
				}
			}
		}
		x.set(out, b.InstanceNormWith(x.name(o), x.in(o, xt), ps[0], ps[1]))
		return true
	case "leaky_relu":
		xi, _ := argAt(as, kw, 0, "input")
		xt, ok := xi.tensor()
		if !ok {
			return false
		}
		inplace := false
		if a, ok := argAt(as, kw, 2, "inplace"); ok {
			inplace, _ = a.boolean()
		}
		x.set(out, b.Act(graph.LeakyReLU, x.name(o), x.in(o, xt), inplace))
		return true
	case "scaled_dot_product_attention":
		var qkv [3]graph.TensorID
		qT := graph.QueryBHLD
		for i, n := range []string{"query", "key", "value"} {
			a, _ := argAt(as, kw, i, n)
			t, ok := a.tensor()
			if !ok {
				return false
			}
			qkv[i] = x.in(o, t)
			if i == 0 {
				qT = x.queryLayout(&x.m.f.Tensors[t])
			}
		}
		if a, ok := argAt(as, kw, 3, "attn_mask"); ok && !a.null() {
			return false
		}
		p := 0.0
		if a, ok := argAt(as, kw, 4, "dropout_p"); ok {
			p, _ = a.float()
		}
		causal := false
		if a, ok := argAt(as, kw, 5, "is_causal"); ok {
			causal, _ = a.boolean()
		}
		// enable_gqa (torch >= 2.5, the eighth argument): the math kernel
		// repeats fewer key/value heads than the query's
		gqa := false
		if a, ok := argAt(as, kw, 7, "enable_gqa"); ok {
			gqa, _ = a.boolean()
		}
		x.set(out, b.AttentionGQA(x.name(o), qkv[0], qkv[1], qkv[2], causal, p, qT, gqa))
		return true
	}
	return false
}

// name is the op's name in the graph: its module's path, relative to the
// checkpointable block it runs in (the block is a scope of its own).
func (x *bctx) name(o *op) string {
	m := o.Module
	if x.scope != "" {
		if m == x.scope {
			return "out"
		}
		m = strings.TrimPrefix(m, x.scope+".")
	}
	if m == "" {
		return "out"
	}
	return m
}

// aten maps one aten op.
func (x *bctx) aten(o *op) {
	b := x.b
	name := strings.TrimPrefix(o.Aten, "aten::")
	as := o.Args
	out := func(i int) *int {
		if i < len(o.Out) {
			return o.Out[i]
		}
		return nil
	}
	t := func(i int) graph.TensorID {
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
	rec := func(i int) *tensor {
		p := out(i)
		if p == nil {
			return nil
		}
		return &x.m.f.Tensors[*p]
	}
	mod := x.name(o)
	inplace := strings.HasSuffix(name, "_")
	base := strings.TrimSuffix(name, "_")

	// An out= variant (div.out, mul.out: autograd refuses them on what
	// requires grad, so they run under no_grad) writes the tensor given
	// as out: the result is that tensor, no new memory.
	if len(o.Mutates) > 0 && o.Mutates[0] >= len(as) {
		if a, ok := o.Kwargs["out"]; ok {
			if id, ok := a.tensor(); ok {
				x.set(out(0), x.in(o, id))
				return
			}
		}
	}
	// A mutation of a parameter or buffer (BatchNorm's num_batches_tracked
	// += 1, a running statistic) makes no memory: the result is the buffer.
	if len(o.Mutates) > 0 && o.Mutates[0] < len(as) {
		if id, ok := as[o.Mutates[0]].tensor(); ok {
			switch x.m.f.Tensors[id].Role {
			case "parameter", "buffer":
				x.set(out(0), x.in(o, id))
				return
			}
		}
	}
	// The tensor-creating ops: a constant made in forward, freed after
	// its last reader.
	switch name {
	case "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "new_zeros",
		"new_ones", "new_empty", "new_full", "arange", "scalar_tensor", "empty_strided", "rand", "randn", "randint",
		"rand_like", "randn_like", "tensor", "lift_fresh_copy", "linspace", "eye", "tril_indices", "triu_indices":
		r := rec(0)
		if r == nil {
			return
		}
		s := x.shape(r)
		dt, _ := graph.ParseDType(r.DType)
		like := x.anyTensor()
		if like == graph.None {
			x.err = x.ruleError(o, "a tensor made before any input")
			return
		}
		if name == "zeros" && x.leafBias[o.Module] {
			x.set(out(0), b.Leaf(mod, like, dt, s...))
			return
		}
		x.set(out(0), b.Const(mod, like, dt, s...))
		return
	case "detach":
		// an alias that requires no grad: what reads it saves nothing
		// for it and sends it no gradient
		if isT(0) && rec(0) != nil {
			var v graph.TensorID
			b.NoGrad(func() { v = b.ViewAs(mod, t(0), x.shape(rec(0)), x.contig(rec(0))) })
			x.set(out(0), v)
		}
		return
	case "lift_fresh", "alias", "_local_scalar_dense":
		if isT(0) {
			x.set(out(0), t(0))
		}
		return
	case "as_strided_", "fill_", "zero_", "bernoulli_", "uniform_", "normal_", "copy_", "masked_fill_", "clamp_", "exponential_", "random_":
		if (name == "masked_fill_" || name == "clamp_") && x.anyGrad(o) {
			// a node over the write: its derivatives.yaml entry's
			// (masked_fill_ keeps its mask, clamp_ a copy of self as
			// it was: measured on 2.5.1), below
			break
		}
		// writes into a tensor that exists: no memory. (The builders' Rand
		// is the empty+bernoulli_ pair, which the creation above makes.)
		if isT(0) {
			x.set(out(0), t(0))
		}
		return
	}

	if x.atenSaved(o) {
		return
	}
	if name == "slice" && len(o.Out) == 1 && len(as) > 1 {
		// x[a:b:c]: a view whose backward writes into zeros of x's size
		// (slice_backward), the builders' Slice
		d, _ := x.ints(as[1])
		var start, end, step int64 = 0, 1 << 62, 1
		if len(as) > 2 {
			if v, ok := x.ints(as[2]); ok && len(v) > 0 {
				start = v[0]
			}
		}
		if len(as) > 3 {
			if v, ok := x.ints(as[3]); ok && len(v) > 0 {
				end = v[0]
			}
		}
		if len(as) > 4 {
			if v, ok := x.ints(as[4]); ok && len(v) > 0 {
				step = v[0]
			}
		}
		if src := t(0); len(d) == 1 && src != graph.None {
			// aten::slice takes Python's negative positions as they are
			// written; the builder takes them from the start
			ss := b.Shape(src)
			dim := int(d[0])
			if dim < 0 {
				dim += len(ss)
			}
			if dim >= 0 && dim < len(ss) {
				if start < 0 {
					start += ss[dim]
				}
				if end < 0 {
					end += ss[dim]
				}
				start, end = max(start, 0), max(end, 0)
			}
			x.set(out(0), b.Slice(mod, src, dim, start, end, step))
			return
		}
	}
	// a view of a parameter is built when something reads it (see pview)
	if len(o.Alias) > 0 && !inplace && len(o.Mutates) == 0 && len(o.Out) == 1 && o.Out[0] != nil && len(as) > 0 {
		if id, ok := as[0].tensor(); ok && x.m.f.Tensors[id].Role == "parameter" && o.Alias[0][1] == 0 {
			x.pview[*o.Out[0]] = o
			return
		}
	}
	// views: an output that shares its first input's storage
	if len(o.Alias) > 0 && !inplace && len(o.Mutates) == 0 {
		for _, pr := range o.Alias {
			r := rec(pr[0])
			if r == nil || pr[1] >= len(as) {
				continue
			}
			src := t(pr[1])
			if src == graph.None {
				return
			}
			v := graph.None
			if in, ok := as[pr[1]].tensor(); ok {
				if perm := x.permOf(&x.m.f.Tensors[in], r); perm != nil {
					v = b.ViewPermuted(mod, src, x.shape(r), x.contig(r), perm)
				}
			}
			if v == graph.None {
				v = b.ViewAs(mod, src, x.shape(r), x.contig(r))
			}
			if x.channelsLast(r) {
				b.SetChannelsLast(v)
			}
			x.set(out(pr[0]), v)
		}
		if len(o.Out) > 0 {
			return
		}
	}
	if len(o.Out) > 0 {
		// multi-output views such as split and unbind (one output when
		// the dimension has size 1: at::gru's unbind of a one-layer h0)
		switch name {
		case "split", "split_with_sizes", "unbind", "chunk", "unsafe_split", "unsafe_split_with_sizes", "tensor_split":
			for i := range o.Out {
				if r := rec(i); r != nil {
					x.set(out(i), b.ViewAs(mod, t(0), x.shape(r), x.contig(r)))
				}
			}
			return
		}
	}
	switch name {
	case "_unsafe_view", "_reshape_alias", "view", "reshape":
		r := rec(0)
		src := t(0)
		if r == nil || src == graph.None {
			return
		}
		in, _ := as[0].tensor()
		if x.m.f.Tensors[in].Storage == r.Storage {
			x.set(out(0), b.ViewAs(mod, src, x.shape(r), x.contig(r)))
		} else {
			x.set(out(0), b.CopyAs(mod, src, x.shape(r)))
		}
		return
	case "clone", "contiguous":
		r := rec(0)
		if r == nil {
			return
		}
		x.set(out(0), b.CopyAs(mod, t(0), x.shape(r)))
		return
	case "_to_copy", "to":
		r := rec(0)
		if r == nil {
			return
		}
		dt, _ := graph.ParseDType(r.DType)
		src := t(0)
		if id, ok := as[0].tensor(); ok && x.cpu && src != graph.None && b.DTypeOf(src) == dt &&
			x.m.f.Tensors[id].Device == "cpu" && r.Device == "" {
			// a tensor on the host moved to the model's device
			// (x.to(position_ids.device): GPT-J's embed_positions, a
			// torch.tensor(...).to(device)): on a CPU run it is on the
			// device already, and Tensor.to returns it itself, no copy
			// (to_impl's to_will_alias, aten/src/ATen/native/TensorConversions.cpp)
			x.set(out(0), src)
			return
		}
		if src != graph.None && b.DTypeOf(src) == dt {
			x.set(out(0), b.CopyAs(mod, src, x.shape(r)))
		} else {
			x.set(out(0), b.CastCopy(mod, src, dt))
		}
		return
	case "convolution", "_convolution":
		transposed, _ := as[6].boolean()
		r := rec(0)
		if r != nil && len(r.Shape) == 3 && !transposed {
			if wid, ok := as[1].tensor(); ok && conv1dWeights(x.m.f)[wid] {
				x.set(out(0), x.conv1d(o, mod))
				return
			}
			// a weight the forward makes (weight_norm's): its
			// derivatives.yaml entry, below
			break
		}
		w := t(1)
		if r == nil || len(r.Shape) != 4 || (w != graph.None && b.TensorAt(w).Role != graph.Parameter) {
			// a 3-D convolution, or one whose weight is made in the
			// forward (a weight-standardized or hyper-network's): its
			// derivatives.yaml entry, which keeps input and weight
			// (convolution_backward's), below; the kernel's own
			// workspace is not counted (the note's generated ops)
			break
		}
		bias := graph.None
		if !as[2].null() {
			bias = t(2)
		}
		groups := int64(1)
		if g, ok := x.ints(as[8]); ok && len(g) == 1 {
			groups = g[0]
		}
		opts := graph.Conv2dOpts{Stride: x.pair(as, 3, 1), Padding: x.pair(as, 4, 0), Dilation: x.pair(as, 5, 1), Groups: groups, Bias: bias != graph.None}
		if transposed {
			x.set(out(0), b.ConvTranspose2dWith(mod, t(0), w, bias, opts, x.pair(as, 7, 0)))
			return
		}
		x.set(out(0), b.Conv2dWith(mod, t(0), w, bias, opts))
		return
	case "native_batch_norm", "_native_batch_norm_legit", "_batch_norm_with_update", "cudnn_batch_norm", "_native_batch_norm_legit_functional":
		w, bias := graph.None, graph.None
		if !as[1].null() {
			w = t(1)
		}
		if !as[2].null() {
			bias = t(2)
		}
		var bufs []graph.TensorID
		for i := 3; i <= 4 && i < len(as); i++ {
			if !as[i].null() {
				bufs = append(bufs, t(i))
			}
		}
		// num_batches_tracked, when the module has one: the buffer beside
		// the running statistics
		if nb := x.numBatches(o.Module); nb != graph.None {
			bufs = append(bufs, nb)
		}
		x.set(out(0), b.BatchNormWith(mod, t(0), w, bias, bufs))
		return
	case "native_layer_norm":
		ns, _ := x.ints(as[1])
		w, bias := graph.None, graph.None
		if len(as) > 2 && !as[2].null() {
			w = t(2)
		}
		if len(as) > 3 && !as[3].null() {
			bias = t(3)
		}
		x.set(out(0), b.LayerNormWith(mod, t(0), w, bias, len(ns)))
		return
	case "relu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid", "hardtanh", "sqrt", "reciprocal", "erf", "gelu", "relu6":
		k := map[string]graph.Kind{"relu": graph.ReLU, "silu": graph.SiLU, "sigmoid": graph.Sigmoid, "tanh": graph.Tanh,
			"hardswish": graph.Hardswish, "hardsigmoid": graph.Hardsigmoid, "hardtanh": graph.Hardtanh, "relu6": graph.Hardtanh,
			"sqrt": graph.Sqrt, "reciprocal": graph.Reciprocal, "erf": graph.Erf, "gelu": graph.GELU}[name]
		if name == "gelu" {
			if a, ok := argAt(as, o.Kwargs, 1, "approximate"); ok && a.str() == "tanh" {
				k = graph.GELUTanh
			}
		}
		x.set(out(0), b.Act(k, mod, t(0), false))
		return
	case "relu_", "silu_", "sigmoid_", "tanh_", "hardswish_", "hardsigmoid_", "hardtanh_", "gelu_":
		k := map[string]graph.Kind{"relu": graph.ReLU, "silu": graph.SiLU, "sigmoid": graph.Sigmoid, "tanh": graph.Tanh,
			"hardswish": graph.Hardswish, "hardsigmoid": graph.Hardsigmoid, "hardtanh": graph.Hardtanh, "gelu": graph.GELU}[base]
		x.set(out(0), b.Act(k, mod, t(0), true))
		return
	case "exp":
		x.set(out(0), b.Exp(mod, t(0)))
		return
	case "log":
		x.set(out(0), b.Log(mod, t(0)))
		return
	case "neg":
		x.set(out(0), b.Neg(mod, t(0)))
		return
	case "rsqrt":
		x.set(out(0), b.Unary(graph.Rsqrt, mod, t(0)))
		return
	case "pow":
		if o.Overload == "Tensor_Scalar" {
			x.set(out(0), b.Unary(graph.Pow, mod, t(0)))
			return
		}
	case "_softmax", "_log_softmax":
		d, _ := x.ints(as[1])
		if len(d) != 1 {
			break
		}
		x.set(out(0), b.Softmax(mod, t(0), int(d[0]), name == "_log_softmax"))
		return
	case "max_pool2d_with_indices", "avg_pool2d":
		k := x.pair(as, 1, 1)
		st := x.pair(as, 2, 0)
		if st == [2]int64{0, 0} {
			st = k
		}
		opts := graph.Pool2dOpts{Kernel: k, Stride: st, Padding: x.pair(as, 3, 0)}
		if name == "max_pool2d_with_indices" {
			opts.Dilation = x.pair(as, 4, 1)
			if len(as) > 5 {
				opts.CeilMode, _ = as[5].boolean()
			}
			x.set(out(0), b.MaxPool2d(mod, t(0), opts))
		} else {
			if len(as) > 4 {
				opts.CeilMode, _ = as[4].boolean()
			}
			x.set(out(0), b.AvgPool2d(mod, t(0), opts))
		}
		return
	case "adaptive_avg_pool2d", "_adaptive_avg_pool2d":
		hw := x.pair(as, 1, 1)
		x.set(out(0), b.AdaptiveAvgPool2d(mod, t(0), hw[0], hw[1]))
		return
	case "mean":
		r := rec(0)
		if o.Overload == "default" {
			x.set(out(0), b.MeanAll(mod, t(0)))
			return
		}
		if r == nil || len(as) < 2 {
			break
		}
		dims, _ := x.ints(as[1])
		ds := make([]int, len(dims))
		for i, d := range dims {
			ds[i] = int(d)
		}
		m := b.Mean(mod, t(0), ds...)
		if s := x.shape(r); m != graph.None && len(s) != len(b.Shape(m)) {
			// keepdim: a view of the reduced tensor
			m = b.ViewAs(mod, m, s, true)
		}
		x.set(out(0), m)
		return
	case "add", "sub", "mul", "div", "rsub":
		if len(as) < 2 {
			break
		}
		if !isT(1) || x.scalarTensor(as[1]) {
			x.set(out(0), b.ScaleNumber(mod, t(0), false, x.wrappedNumber(o, base)))
			return
		}
		k := graph.Add
		if name == "mul" || name == "div" {
			k = graph.Mul
		}
		if k == graph.Add {
			x.set(out(0), b.Add(mod, t(0), t(1)))
		} else {
			x.set(out(0), b.Mul(mod, t(0), t(1)))
		}
		return
	case "add_", "sub_", "mul_", "div_":
		if len(as) < 2 {
			break
		}
		if !isT(1) || x.scalarTensor(as[1]) {
			if base == "mul" || base == "div" {
				// x *= number: in place; MulBackward0 (DivBackward0)
				// keeps the wrapped number (wrappedNumber), and its
				// backward makes grad * number
				x.set(out(0), b.ScaleNumber(mod, t(0), true, x.wrappedNumber(o, base)))
				return
			}
			// x += number: AddBackward1 hands the gradient on as it is
			x.set(out(0), t(0))
			return
		}
		if base == "add" || base == "sub" {
			x.set(out(0), b.AddInplace(mod, t(0), t(1)))
			return
		}
		x.set(out(0), b.MulInplace(mod, t(0), t(1)))
		return
	case "cat":
		var xs []graph.TensorID
		for _, p := range as[0].Ts {
			if p != nil {
				xs = append(xs, x.in(o, *p))
			}
		}
		d := int64(0)
		if len(as) > 1 {
			if v, ok := x.ints(as[1]); ok && len(v) > 0 {
				d = v[0]
			}
		}
		x.set(out(0), b.Cat(mod, int(d), xs...))
		return
	case "stack":
		var xs []graph.TensorID
		d := int64(0)
		if len(as) > 1 {
			if v, ok := x.ints(as[1]); ok && len(v) > 0 {
				d = v[0]
			}
		}
		for _, p := range as[0].Ts {
			if p == nil {
				continue
			}
			in := x.in(o, *p)
			s := b.Shape(in)
			dd := int(d)
			if dd < 0 {
				dd += len(s) + 1
			}
			if dd < 0 || dd > len(s) {
				x.err = x.ruleError(o, fmt.Sprintf("stack along dimension %d of a tensor of rank %d", d, len(s)))
				return
			}
			ns := append(append(s[:dd:dd].Clone(), 1), s[dd:]...)
			xs = append(xs, b.ViewAs(mod, in, ns, b.Contig(in)))
		}
		x.set(out(0), b.Cat(mod, int(d), xs...))
		return
	case "mm", "bmm":
		x.set(out(0), x.matmul(o, mod, t(0), 1, graph.None))
		return
	case "addmm":
		x.set(out(0), x.matmul(o, mod, t(1), 2, t(0)))
		return
	case "embedding":
		x.set(out(0), b.EmbeddingWith(mod, t(1), t(0)))
		return
	case "native_dropout":
		p, _ := as[1].float()
		x.set(out(0), b.Dropout(mod, t(0), p, false))
		return
	case "max":
		if r := rec(0); o.Overload == "dim" && r != nil && len(as) > 1 {
			d, _ := x.ints(as[1])
			if len(d) != 1 {
				break
			}
			m := b.MaxDim(mod, t(0), int(d[0]))
			if m != graph.None && len(x.shape(r)) != len(b.Shape(m)) {
				m = b.ViewAs(mod, m, x.shape(r), true)
			}
			x.set(out(0), m)
			return
		}
	case "sum":
		if r := rec(0); o.Overload == "dim_IntList" && r != nil && len(as) > 1 {
			d, _ := x.ints(as[1])
			if len(d) >= 1 {
				dims := make([]int, len(d))
				for i, v := range d {
					dims[i] = int(v)
				}
				m := b.SumDims(mod, t(0), dims)
				if m != graph.None && len(x.shape(r)) != len(b.Shape(m)) {
					m = b.ViewAs(mod, m, x.shape(r), true)
				}
				x.set(out(0), m)
				return
			}
		}
	case "gather":
		d, _ := x.ints(as[1])
		if len(d) != 1 {
			break
		}
		x.set(out(0), b.Gather(mod, t(0), t(2), int(d[0])))
		return
	case "index":
		// src[idx] with one integer index tensor along dim 0
		if len(as) > 1 && len(as[1].Ts) == 1 && as[1].Ts[0] != nil {
			x.set(out(0), b.Index(mod, t(0), x.in(o, *as[1].Ts[0])))
			return
		}
	case "constant_pad_nd":
		p, _ := x.ints(as[1])
		x.set(out(0), b.Pad(mod, t(0), p...))
		return
	case "masked_fill":
		x.set(out(0), b.MaskedFill(mod, t(0), t(1)))
		return
	case "eq", "ne", "lt", "le", "gt", "ge":
		if isT(1) {
			x.set(out(0), b.Compare(mod, t(0), t(1)))
			return
		}
		// against a number: a bool tensor of x's shape
		x.set(out(0), b.Compare(mod, t(0), t(0)))
		return
	case "roll":
		sh, _ := x.ints(as[1])
		ds, _ := x.ints(as[2])
		dims := make([]int, len(ds))
		for i, d := range ds {
			dims[i] = int(d)
		}
		x.set(out(0), b.Roll(mod, t(0), sh, dims))
		return
	}
	// An op that requires grad and has no rule above: its derivatives.yaml
	// entry (derivatives.go), or a refusal
	if x.derived(o) {
		return
	}
	// An op none of whose operands requires grad, or whose results are
	// integers (floatResult), records nothing for backward (autograd
	// makes no node): its results are new tensors, made
	// here and freed after their last reader, whatever the op (torch.arange,
	// the rotary tables' outer, cos and sin, a mask). What the op itself
	// does with memory is not known without a rule: the op is counted
	// (UnknownOps), so that the prediction says so.
	if !x.anyGrad(o) || !x.floatResult(o) {
		if x.unknown == nil {
			x.unknown = map[string]int{}
		}
		x.unknown[opName(o)]++
		if inplace && len(as) > 0 {
			// an in-place op returns self: no new memory
			if id, ok := as[0].tensor(); ok {
				if src := x.in(o, id); src != graph.None && rec(0) != nil {
					x.set(out(0), b.ViewAs(mod, src, x.shape(rec(0)), x.contig(rec(0))))
					return
				}
			}
		}
		for i := range o.Out {
			if r := rec(i); r != nil {
				dt, _ := graph.ParseDType(r.DType)
				like := x.anyTensor()
				x.set(out(i), b.Const(mod, like, dt, x.shape(r)...))
			}
		}
		return
	}
	x.err = x.ruleError(o, "")
}

// anyGrad reports whether an operand of o requires grad as built.
func (x *bctx) anyGrad(o *op) bool {
	for _, id := range o.tensorArgs() {
		if g := x.ids[id]; g != graph.None && x.b.TensorAt(g).RequiresGrad {
			return true
		}
		if _, ok := x.pview[id]; ok && x.m.f.Tensors[id].RequiresGrad {
			return true
		}
	}
	return false
}

// matmul maps mm, bmm and addmm: against a transposed parameter it is a
// Linear (F.linear written out, or matmul's folding of one), otherwise a
// product of two activations.
func (x *bctx) matmul(o *op, mod string, a graph.TensorID, wi int, bias graph.TensorID) graph.TensorID {
	b := x.b
	if a == graph.None || wi >= len(o.Args) {
		return graph.None
	}
	if id, ok := o.Args[wi].tensor(); ok {
		if v, ok := x.pview[id]; ok && v.Aten == "aten::t" {
			// x @ w.t(): F.linear written out, or matmul's folding of one
			src, _ := v.Args[0].tensor()
			return b.LinearOf(mod, a, x.in(o, src), bias)
		}
	}
	id, _ := o.Args[wi].tensor()
	w := x.in(o, id)
	if w == graph.None {
		return graph.None
	}
	m := b.MatMul(mod, a, w)
	if bias != graph.None {
		m = b.Add(mod, m, bias)
	}
	return m
}

// scalarTensor reports whether a is a 0-d tensor that wraps a Python
// number (on CUDA it stays on the host; it makes no device memory).
func (x *bctx) scalarTensor(a arg) bool {
	id, ok := a.tensor()
	if !ok {
		return false
	}
	t := &x.m.f.Tensors[id]
	// 1.13's dispatch mode hands a Python number as a 0-d tensor wrapped
	// on the CPU; 2.x's hands the number itself. A 0-d tensor on the meta
	// device that no op made is a tensor the model made before the
	// recording (GPT-J's and CodeGen's scale_attn, a plain attribute
	// made under the meta device in __init__), which mul and div save
	// like any other operand (DivBackward0 keeps other): a constant.
	return len(t.Shape) == 0 && t.Role != "parameter" && t.Role != "buffer" && x.ids[id] == graph.None && t.Device == "cpu" &&
		x.m.wrapsNumbers()
}

// wrappedNumber is the 0-d tensor that op o (base name base: add, sub,
// mul or div, in place or not) is handed for its Python-number operand
// (graph.Number), or the zero Number. Python's x * 0.5, x / 4, x - 2,
// x.mul_(0.5) reach mul.Tensor, div.Tensor, sub.Tensor and their in-place
// forms: the argument parser wraps the number in a 0-d CPU tensor
// (scalar_to_tensor, marked a wrapped number) of the number's type, a
// double, an int64 or a bool, and the derivative formulas of
// tools/autograd/derivatives.yaml of mul and div save it (mul.Tensor's
// self: mul_tensor_backward(grad, other, ...), other saved when self
// requires grad; div.Tensor's other is read by both formulas), those of
// add and sub nothing. mul.Scalar and div.Scalar, reached only from C++
// (F.dropout's div_, SDPA's mul), keep the number as a c10::Scalar, no
// tensor. The capture records the wrapped number as a value (2.x's
// dispatch mode unwraps it: a float with its point or exponent, an int
// without), or as a 0-d CPU tensor.
func (x *bctx) wrappedNumber(o *op, base string) graph.Number {
	if (base != "mul" && base != "div" && base != "add" && base != "sub") ||
		(o.Overload != "Tensor" && o.Overload != "Tensor_mode") || len(o.Args) < 2 {
		return graph.Number{}
	}
	n := graph.Number{Wrapped: true, DType: graph.F64, Kept: base == "mul" || base == "div"}
	a := o.Args[1]
	if id, ok := a.tensor(); ok {
		t := &x.m.f.Tensors[id]
		dt, err := graph.ParseDType(t.DType)
		if t.Device != "cpu" || err != nil || !x.m.wrapsNumbers() {
			return graph.Number{}
		}
		n.DType = dt
		return n
	}
	if _, ok := a.boolean(); ok {
		n.DType = graph.Bool
		return n
	}
	if _, ok := a.float(); ok {
		if !strings.ContainsAny(strings.TrimSpace(string(a.V)), ".eE") {
			n.DType = graph.I64
		}
		return n
	}
	switch a.str() {
	case "inf", "-inf", "nan":
		// float("inf"), recorded as its repr
		return n
	}
	return graph.Number{}
}

// numBatches is the num_batches_tracked buffer of a batch-norm module.
func (x *bctx) numBatches(mod string) graph.TensorID {
	want := "num_batches_tracked"
	if mod != "" {
		want = mod + "." + want
	}
	for i := range x.m.f.Tensors {
		t := &x.m.f.Tensors[i]
		if t.Role == "buffer" && t.Name == want {
			return x.ids[i]
		}
	}
	return graph.None
}

// anyTensor is a tensor to take a constant's run-time dtype from: the
// first input.
func (x *bctx) anyTensor() graph.TensorID {
	for i := range x.m.f.Tensors {
		if x.m.f.Tensors[i].Role == "input" && x.ids[i] != graph.None {
			return x.ids[i]
		}
	}
	for _, p := range x.ids {
		if p != graph.None {
			return p
		}
	}
	return graph.None
}
