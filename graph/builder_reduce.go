package graph

// Element-wise and reduction ops that models written with tensor
// operations instead of modules use: a softmax taken as exp(x − max) / sum
// and a log-softmax as x − max − log(sum(exp(x − max))), a loss that
// gathers the target's log-probability.
const (
	Exp    Kind = "exp"     // torch.exp
	Log    Kind = "log"     // torch.log
	Neg    Kind = "neg"     // -x
	MaxDim Kind = "max_dim" // torch.max(x, dim, keepdim=True): values and int64 indices
	SumDim Kind = "sum_dim" // torch.sum(x, dim, keepdim=True)
	Gather Kind = "gather"  // torch.gather(x, dim, index)
)

// Exp is torch.exp(x).
func (b *Builder) Exp(name string, x TensorID) TensorID { return b.unary(Exp, name, x) }

// Log is torch.log(x).
func (b *Builder) Log(name string, x TensorID) TensorID { return b.unary(Log, name, x) }

// Neg is -x.
func (b *Builder) Neg(name string, x TensorID) TensorID { return b.unary(Neg, name, x) }

func (b *Builder) unary(k Kind, name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	out := b.op(k, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, b.contig[x], Attr{})
	b.cl[out] = b.cl[x]
	return out
}

// MaxDim is torch.max(x, dim, keepdim=True).values; the indices are made
// and kept by the op's rule.
func (b *Builder) MaxDim(name string, x TensorID, dim int) TensorID {
	return b.reduceKeep(MaxDim, name, x, dim)
}

// SumDim is torch.sum(x, dim, keepdim=True).
func (b *Builder) SumDim(name string, x TensorID, dim int) TensorID {
	return b.reduceKeep(SumDim, name, x, dim)
}

// SumDims is torch.sum(x, dims, keepdim=True) over several dims at once:
// one reduction, whose node saves only sizes like SumDim's.
func (b *Builder) SumDims(name string, x TensorID, dims []int) TensorID {
	if !b.ok(x) {
		return None
	}
	if len(dims) == 0 {
		b.Fail("%s: sum over no dims", b.path(name))
		return None
	}
	s := b.Shape(x)
	os := s.Clone()
	for _, dim := range dims {
		d, ok := normDim(dim, len(s))
		if !ok {
			b.Fail("%s: %s over dim %d of %v", b.path(name), SumDim, dim, s)
			return None
		}
		os[d] = 1
	}
	d, _ := normDim(dims[0], len(s))
	return b.op(SumDim, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true, Attr{Dim: d})
}

func (b *Builder) reduceKeep(k Kind, name string, x TensorID, dim int) TensorID {
	if !b.ok(x) {
		return None
	}
	s := b.Shape(x)
	d, ok := normDim(dim, len(s))
	if !ok {
		b.Fail("%s: %s over dim %d of %v", b.path(name), k, dim, s)
		return None
	}
	os := s.Clone()
	os[d] = 1
	return b.op(k, name, []TensorID{x}, None, None, os, b.DTypeOf(x), None, true, Attr{Dim: d})
}

// Gather is torch.gather(x, dim, index): a tensor of index's shape.
func (b *Builder) Gather(name string, x, index TensorID, dim int) TensorID {
	if !b.ok(x, index) {
		return None
	}
	s, is := b.Shape(x), b.Shape(index)
	d, ok := normDim(dim, len(s))
	if !ok || len(is) != len(s) || b.DTypeOf(index) != I64 {
		b.Fail("%s: gather along dim %d of %v with an index %v of %s (want int64 of the same rank)", b.path(name), dim, s, is, b.DTypeOf(index))
		return None
	}
	for i := range s {
		if i != d && is[i] > s[i] {
			b.Fail("%s: gather index %v is larger than %v outside dim %d", b.path(name), is, s, d)
			return None
		}
	}
	return b.op(Gather, name, []TensorID{x, index}, None, None, is.Clone(), b.DTypeOf(x), None, true, Attr{Dim: d})
}

// MeanAll is torch.mean(x) without dims: a 0-dim mean of every element.
func (b *Builder) MeanAll(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	return b.op(Mean, name, []TensorID{x}, None, None, Shape{}, b.DTypeOf(x), None, true, Attr{All: true})
}

// LinearEinsum is a bias-free Linear computed as
// einsum(x, weight, "... d_in, d_out d_in -> ... d_out"): the same
// memory as F.linear, except under autocast, where the matmul receives a
// view of the weight and casts it at every use (Attr.WeightView).
func (b *Builder) LinearEinsum(name string, x TensorID, out int64) TensorID {
	n := len(b.g.Ops)
	y := b.Linear(name, x, out, false)
	// the layer's own matmul is the first Linear it adds; LoRA adapters
	// after it are PEFT's nn.Linear modules
	for i := n; i < len(b.g.Ops); i++ {
		if b.g.Ops[i].Kind == Linear {
			b.g.Ops[i].Attr.WeightView = true
			break
		}
	}
	return y
}
