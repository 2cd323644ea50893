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

// derivFor is the entry of the op named name (as opName gives it) that
// the generated rule takes. An in-place op is left out: its result is
// its input, not a new tensor, and PyTorch derives its node from the
// out-of-place entry with the input rewritten, which the table does not
// say. So is an entry whose every formula is not_implemented.
func derivFor(t map[string]derivEntry, name string) (derivEntry, bool) {
	n, ok := strings.CutPrefix(name, "aten::")
	if !ok {
		return derivEntry{}, false
	}
	base, _, _ := strings.Cut(n, ".")
	if strings.HasSuffix(base, "_") && !strings.HasSuffix(base, "__") {
		return derivEntry{}, false
	}
	e, ok := t[n]
	if !ok || (len(e.Diff) == 0 && len(e.NotImpl) > 0) {
		return derivEntry{}, false
	}
	return e, true
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

// derived maps an op that requires grad by its derivatives.yaml entry:
// a node that keeps the tensors the backward formulas name, and new
// results. It reports false, building nothing, for an op without grad
// (the default's new tensors, ops.go) and for an in-place op; for an op
// with no entry, or whose input needing grad has a not_implemented
// formula, it sets the refusal.
func (x *bctx) derived(o *op) bool {
	t, ver := x.m.derivTable()
	name := opName(o)
	e, ok := derivFor(t, name)
	if !x.anyGrad(o) {
		return false
	}
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
	x.set(o.Out[0], x.saving(mod, ins, args, saved, r))
	return true
}
