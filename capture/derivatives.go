package capture

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// The rule for an aten op no hand-written rule maps is PyTorch's own
// declaration of its backward: tools/autograd/derivatives.yaml, from
// which PyTorch generates each op's autograd node and the variables the
// node saves. derivatives_gen.go is the table derivgen makes of the
// vendored files (testdata/derivatives, README there).

//go:generate go run ./internal/derivgen/cmd

// derivArg is one argument of an op's schema as derivatives.yaml gives
// it; Tensor is 0 for a non-tensor, 1 Tensor, 2 Tensor?, 3 a list.
type derivArg struct {
	Name   string
	Tensor int
	KwOnly bool
}

// derivEntry is one op's derivatives.yaml entry: the arguments and
// results its backward formulas name (Saved), those they read only
// through sizes, options or dtype (SizesOnly: nothing kept), the inputs
// with a formula (Diff) or a not_implemented one (NotImpl), and the
// results output_differentiability marks non-differentiable.
type derivEntry struct {
	Args                                     []derivArg
	Returns, Saved, SizesOnly, Diff, NotImpl []string
	NonDiff                                  []int
}

// derivTable is the table of the PyTorch release the file was captured
// with (producer.torch): 1.x takes v1.13's, anything else v2.5.1's.
func (m *Model) derivTable() (map[string]derivEntry, string) {
	var p struct {
		Torch string `json:"torch"`
	}
	_ = json.Unmarshal(m.f.Producer, &p)
	if strings.HasPrefix(p.Torch, "1.") {
		return derivativesV113, "1.13.1"
	}
	return derivativesV251, "2.5.1"
}

// wrapsNumbers is whether the file's release hands a Python number to the
// dispatch mode as a 0-d CPU tensor (1.13's, wrapped by the argument
// parser); 2.x's hands the number itself, so a 0-d CPU tensor there is
// one the model made (GPT-J's scale_attn, a plain attribute built on the
// host), which autograd saves like any tensor.
func (m *Model) wrapsNumbers() bool {
	_, ver := m.derivTable()
	return strings.HasPrefix(ver, "1.")
}

// derivFor is the entry of the op named name (as opName gives it) that
// the generated rule takes (derivMatch without the recorded arguments).
func derivFor(t map[string]derivEntry, name string) (derivEntry, bool) {
	return derivMatch(t, name, nil)
}

// derivMatch is the entry of the op named name: its own, or, for an
// in-place op without one, its out-of-place function's, from which
// PyTorch's autograd codegen derives the in-place variant's node (the
// out-of-place declaration covers the function's in-place and out=
// variants: tools/autograd/derivatives.yaml's header, "the in-place
// variant ... is handled by the same declaration"). An in-place op's
// overload names differ from its function's (pow_.Scalar is
// pow.Tensor_Scalar), so o, when given, picks the overload whose
// arguments are tensors where o's are. An entry whose every formula is
// not_implemented is none.
func derivMatch(t map[string]derivEntry, name string, o *op) (derivEntry, bool) {
	n, ok := strings.CutPrefix(name, "aten::")
	if !ok {
		return derivEntry{}, false
	}
	usable := func(e derivEntry) bool { return len(e.Diff) > 0 || len(e.NotImpl) == 0 }
	if e, ok := t[n]; ok {
		return e, usable(e)
	}
	base, overload, _ := strings.Cut(n, ".")
	if !inplaceName(base) {
		return derivEntry{}, false
	}
	fn := strings.TrimSuffix(base, "_")
	if overload != "" {
		if e, ok := t[fn+"."+overload]; ok && argsMatch(e, o) {
			return e, usable(e)
		}
	}
	var keys []string
	for k := range t {
		if k == fn || strings.HasPrefix(k, fn+".") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // the function's default overload first
	for _, k := range keys {
		if e := t[k]; argsMatch(e, o) {
			return e, usable(e)
		}
	}
	return derivEntry{}, false
}

// inplaceName is whether an aten base name is an in-place op's (add_,
// not __iadd__).
func inplaceName(base string) bool {
	return strings.HasSuffix(base, "_") && !strings.HasSuffix(base, "__")
}

// argsMatch is whether o's positional arguments are tensors where e's
// are (any o when none is given).
func argsMatch(e derivEntry, o *op) bool {
	if o == nil {
		return true
	}
	pos := 0
	for _, a := range e.Args {
		if a.KwOnly {
			continue
		}
		if pos >= len(o.Args) {
			break
		}
		v := o.Args[pos]
		_, isT := v.tensor()
		isT = isT || len(v.Ts) > 0
		if isT != (a.Tensor != 0) && !v.null() {
			return false
		}
		pos++
	}
	return pos == len(o.Args) || pos == len(e.Args)
}

// derivArgAt is the recorded argument for a: by position unless the
// schema makes it keyword-only (PyTorch's dispatcher passes those by
// name).
func derivArgAt(o *op, e *derivEntry, a int) (arg, bool) {
	pos := 0
	for i := 0; i < a; i++ {
		if !e.Args[i].KwOnly {
			pos++
		}
	}
	if !e.Args[a].KwOnly && pos < len(o.Args) {
		return o.Args[pos], true
	}
	v, ok := o.Kwargs[e.Args[a].Name]
	return v, ok
}

// floatResult is whether an output of o can require grad: an op whose
// results are all integers or booleans (argmax, bucketize, a comparison)
// makes no node whatever its inputs, as autograd differentiates floating
// and complex results only (compute_requires_grad,
// isDifferentiableType), and needs no derivative.
func (x *bctx) floatResult(o *op) bool {
	for _, p := range o.Out {
		if p == nil {
			continue
		}
		if dt, err := graph.ParseDType(x.m.f.Tensors[*p].DType); err != nil || dt.IsFloat() {
			return true
		}
	}
	return false
}

// derived maps an op that requires grad by its derivatives.yaml entry:
// a node that keeps the tensors the backward formulas name, and new
// results. It reports false, building nothing, for an op without grad
// (the default's new tensors, ops.go) and for an in-place op; for an op
// with no entry, or whose input needing grad has a not_implemented
// formula, it sets the refusal.
func (x *bctx) derived(o *op) bool {
	t, ver := x.m.derivTable()
	name := opName(o)
	e, ok := derivMatch(t, name, o)
	if !x.anyGrad(o) || !x.floatResult(o) {
		return false
	}
	base, _, _ := strings.Cut(strings.TrimPrefix(name, "aten::"), ".")
	inplace := inplaceName(base)
	if !ok {
		if _, has := t[strings.TrimPrefix(name, "aten::")]; has {
			x.err = x.ruleError(o, "its derivative is not_implemented in PyTorch "+ver+"'s derivatives.yaml")
		} else {
			x.err = x.ruleError(o, "nor has PyTorch "+ver+"'s derivatives.yaml an entry for it")
		}
		return true
	}
	tensorsOf := func(a int) []int {
		v, ok := derivArgAt(o, &e, a)
		if !ok {
			return nil
		}
		if id, ok := v.tensor(); ok {
			return []int{id}
		}
		var ids []int
		for _, p := range v.Ts {
			if p != nil {
				ids = append(ids, *p)
			}
		}
		return ids
	}
	needsGrad := func(id int) bool {
		if g := x.ids[id]; g != graph.None && x.b.TensorAt(g).RequiresGrad {
			return true
		}
		_, ok := x.pview[id]
		return ok && x.m.f.Tensors[id].RequiresGrad
	}
	var ins []graph.TensorID
	var saved []int
	at := map[graph.TensorID]int{}
	for i, a := range e.Args {
		if a.Tensor == 0 {
			continue
		}
		for _, id := range tensorsOf(i) {
			if slices.Contains(e.NotImpl, a.Name) && needsGrad(id) {
				x.err = x.ruleError(o, "the derivative for "+a.Name+" is not_implemented in PyTorch "+ver+"'s derivatives.yaml")
				return true
			}
		}
		if !slices.Contains(e.Diff, a.Name) {
			continue
		}
		for _, id := range tensorsOf(i) {
			if g := x.in(o, id); g != graph.None {
				at[g] = len(ins)
				ins = append(ins, g)
			}
		}
	}
	args := len(ins)
	if args == 0 {
		return false // no input with a formula was built: no node
	}
	// counted with the default's ops; the note tells them apart by the
	// table (unknown.go)
	if x.unknown == nil {
		x.unknown = map[string]int{}
	}
	x.unknown[name]++
	mod := x.name(o)
	for i, a := range e.Args {
		if a.Tensor == 0 || !slices.Contains(e.Saved, a.Name) {
			continue
		}
		for _, id := range tensorsOf(i) {
			g := x.in(o, id)
			if g == graph.None {
				continue
			}
			if inplace && i == 0 {
				// the input as it was: the codegen saves self.clone()
				// taken before the kernel writes it (measured on 2.5.1:
				// exp_'s node keeps the output, clamp_min_'s, abs_'s,
				// log_'s and pow_'s a copy of their own)
				var c graph.TensorID
				x.b.NoGrad(func() { c = x.b.Const(mod, g, x.b.DTypeOf(g), x.b.Shape(g)...) })
				saved = append(saved, len(ins))
				ins = append(ins, c)
				continue
			}
			if j, ok := at[g]; ok {
				saved = append(saved, j)
				continue
			}
			at[g] = len(ins)
			saved = append(saved, len(ins))
			ins = append(ins, g)
		}
	}
	// results past the first: new tensors of the recorded sizes, kept by
	// the node where a formula names them (native_layer_norm's mean and
	// rstd)
	keepResult := false
	for i := range o.Out {
		if o.Out[i] == nil {
			continue
		}
		named := i < len(e.Returns) && slices.Contains(e.Saved, e.Returns[i])
		if i == 0 {
			keepResult = named
			continue
		}
		r := &x.m.f.Tensors[*o.Out[i]]
		dt, _ := graph.ParseDType(r.DType)
		var g graph.TensorID
		x.b.NoGrad(func() { g = x.b.Const(mod, ins[0], dt, x.shape(r)...) })
		if named {
			saved = append(saved, len(ins))
			ins = append(ins, g)
		}
		x.set(o.Out[i], g)
	}
	if keepResult {
		saved = append(saved, len(ins))
	}
	var r *tensor
	if len(o.Out) > 0 && o.Out[0] != nil {
		r = &x.m.f.Tensors[*o.Out[0]]
	}
	if r == nil {
		return true
	}
	if inplace {
		// the result is self, written in place: a node over an alias
		// of its storage
		self := graph.None
		if len(o.Args) == 0 {
			// self given by keyword only (a hand-made file): no alias to make
			x.err = x.ruleError(o, "an in-place op whose self is not its first argument")
			return true
		}
		if id, ok := o.Args[0].tensor(); ok {
			self = x.in(o, id)
		}
		if self == graph.None {
			return false
		}
		var res graph.TensorID
		x.b.NoGrad(func() { res = x.b.ViewAs(mod, self, x.shape(r), x.contig(r)) })
		x.set(o.Out[0], x.b.Custom(mod, ins, args, saved, res))
		return true
	}
	x.set(o.Out[0], x.saving(mod, ins, args, saved, r))
	return true
}
