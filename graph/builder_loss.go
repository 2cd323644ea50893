package graph

// Builder methods for the losses: cross entropy and mean squared error.

// CrossEntropy is F.cross_entropy(logits, target) with class indices and
// mean reduction; logits are [N, C] (or [N, C, ...]).
func (b *Builder) CrossEntropy(name string, logits, target TensorID) TensorID {
	if !b.ok(logits, target) {
		return None
	}
	ls, ts := b.Shape(logits), b.Shape(target)
	if len(ls) < 2 || len(ts) != len(ls)-1 || ts[0] != ls[0] {
		b.Fail("%s: cross_entropy of logits %v and targets %v (want [N, C] and [N])", b.path(name), ls, ts)
		return None
	}
	out := b.op(CrossEntropy, name, []TensorID{logits, target}, None, None, Shape{}, F32, None, true, Attr{Dim: 1})
	b.g.Loss = out
	return out
}

// MSELoss is F.mse_loss(pred, target) with mean reduction.
func (b *Builder) MSELoss(name string, pred, target TensorID) TensorID {
	if !b.ok(pred, target) {
		return None
	}
	if _, ok := Broadcast(b.Shape(pred), b.Shape(target)); !ok {
		b.Fail("%s: mse_loss of %v and %v", b.path(name), b.Shape(pred), b.Shape(target))
		return None
	}
	out := b.op(MSELoss, name, []TensorID{pred, target}, None, None, Shape{}, F32, None, true, Attr{})
	b.g.Loss = out
	return out
}
