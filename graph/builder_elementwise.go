package graph

// Broadcasting binary arithmetic (Add, Mul) and Scale, with the shape and
// dtype rules they share (Broadcast, promote); the other element-wise ops
// are in builder_reduce.go.

// Broadcast returns the broadcast shape of a and c.
func Broadcast(a, c Shape) (Shape, bool) {
	n := len(a)
	if len(c) > n {
		n = len(c)
	}
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		x, y := int64(1), int64(1)
		if j := len(a) - n + i; j >= 0 {
			x = a[j]
		}
		if j := len(c) - n + i; j >= 0 {
			y = c[j]
		}
		switch {
		case x == y || y == 1:
			out[i] = x
		case x == 1:
			out[i] = y
		default:
			return nil, false
		}
	}
	return out, true
}

func (b *Builder) binary(k Kind, name string, x, y TensorID, inplace bool) TensorID {
	if !b.ok(x, y) {
		return None
	}
	s, ok := Broadcast(b.Shape(x), b.Shape(y))
	if !ok || (inplace && s.Numel() != b.Shape(x).Numel()) {
		b.Fail("%s: %s of %v and %v: shapes do not broadcast", b.path(name), k, b.Shape(x), b.Shape(y))
		return None
	}
	dt := promote(b.DTypeOf(x), b.DTypeOf(y))
	view := None
	contig := true
	if inplace {
		view, dt, contig = x, b.DTypeOf(x), b.contig[x]
	}
	in := []TensorID{x, y}
	out := b.op(k, name, in, None, None, s, dt, view, contig, Attr{Inplace: inplace})
	if inplace {
		b.cl[out] = b.cl[x]
	} else {
		// TensorIterator lays the result out like the first operand that
		// is not broadcast.
		for _, t := range in {
			if b.Shape(t).Numel() == s.Numel() && len(b.Shape(t)) == len(s) {
				b.keepChannelsLast(out, t)
				break
			}
		}
	}
	return out
}

func promote(a, c DType) DType {
	if a == c {
		return a
	}
	if a.IsFloat() && !c.IsFloat() {
		return a
	}
	if c.IsFloat() && !a.IsFloat() {
		return c
	}
	if a.Size() >= c.Size() {
		return a
	}
	return c
}

// Add is x + y with broadcasting; AddInplace is x += y.
func (b *Builder) Add(name string, x, y TensorID) TensorID { return b.binary(Add, name, x, y, false) }

// AddInplace is x += y (x keeps its storage).
func (b *Builder) AddInplace(name string, x, y TensorID) TensorID {
	return b.binary(Add, name, x, y, true)
}

// Mul is x * y with broadcasting.
func (b *Builder) Mul(name string, x, y TensorID) TensorID { return b.binary(Mul, name, x, y, false) }

// Scale is x * number (or x / number): a new tensor, nothing saved.
// TensorIterator gives the result the stride order of x, so a permuted x
// (Swin's q, a select of the permuted qkv) makes a permuted result, which a
// later reshape must copy.
func (b *Builder) Scale(name string, x TensorID) TensorID {
	if !b.ok(x) {
		return None
	}
	out := b.op(Mul, name, []TensorID{x}, None, None, b.Shape(x).Clone(), b.DTypeOf(x), None, b.contig[x], Attr{Scalar: true})
	b.cl[out] = b.cl[x]
	return out
}
