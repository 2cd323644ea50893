package capture

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// UnknownOp is an operator batchfit has no rule for, and how many of the
// file's ops it ran.
type UnknownOp struct {
	// Name is the operator's qualified name with its overload when not
	// the default one (aten::scatter_.value, mylib::fused).
	Name  string
	Count int
}

// The ops a build maps by the default of aten (ops.go): an op no rule
// names whose operands do not require grad makes no autograd node, so it
// records nothing for backward, and its results are taken as new tensors
// of the sizes the capture recorded, made in forward and freed after their
// last reader. That is a guess about the op itself: a view or an in-place
// op takes no memory of its own, and a kernel may allocate workspace the
// capture does not see. Each name that fell to it is kept, so that a
// prediction can say which of its figures rest on the guess.

// opName is o's name as UnknownOp gives it.
func opName(o *op) string {
	if o.Overload == "" || o.Overload == "default" {
		return o.Aten
	}
	return o.Aten + "." + o.Overload
}

// noteUnknown merges one build's count of ops mapped by the default into
// the model's. Builds differ only where LoRA adapters freeze parameters
// (an op on a frozen weight may then have no operand that requires
// grad), so the model keeps, per name, the most any build counted.
func (m *Model) noteUnknown(seen map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, n := range seen {
		if m.unknown == nil {
			m.unknown = map[string]int{}
		}
		m.unknown[name] = max(m.unknown[name], n)
	}
}

// fallbackOps lists the ops of the file that no hand-written rule mapped
// and that ran without grad, by whether PyTorch's derivatives.yaml has an
// entry for them (derivatives.go; such an op then took the generated
// rule, which for an op without grad is the default's new tensors) or
// not (unknown): most ops first, then by name.
func (m *Model) fallbackOps() (generated, unknown []UnknownOp) {
	t, _ := m.derivTable()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, n := range m.unknown {
		if _, ok := derivFor(t, name); ok {
			generated = append(generated, UnknownOp{Name: name, Count: n})
		} else {
			unknown = append(unknown, UnknownOp{Name: name, Count: n})
		}
	}
	for _, ops := range [][]UnknownOp{generated, unknown} {
		slices.SortFunc(ops, func(a, b UnknownOp) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Name, b.Name))
		})
	}
	return generated, unknown
}

// UnknownOps lists the operators of the file batchfit has no rule for,
// neither hand-written nor an entry of PyTorch's derivatives.yaml, which
// its builds so far (Read builds once at the captured batch) mapped by
// the default for ops without autograd: most ops first, then by name.
// Empty when every op had a rule.
func (m *Model) UnknownOps() []UnknownOp {
	_, u := m.fallbackOps()
	if u == nil {
		u = []UnknownOp{}
	}
	return u
}

// GeneratedOps lists the operators of the file whose rule was their
// derivatives.yaml entry, as UnknownOps orders them.
func (m *Model) GeneratedOps() []UnknownOp {
	g, _ := m.fallbackOps()
	return g
}

// opList is ops as a note names them, and how many ops they ran.
func opList(ops []UnknownOp) (string, int) {
	total := 0
	names := make([]string, len(ops))
	for i, o := range ops {
		total += o.Count
		names[i] = o.Name
		if o.Count > 1 {
			names[i] += fmt.Sprintf(" (%d)", o.Count)
		}
	}
	return strings.Join(names, ", "), total
}

// Note says which ops took the rule of their derivatives.yaml entry and
// which had no rule at all and how they were simulated, or is "" when
// every op had a hand-written rule. A prediction shows its source's note
// (predict.Result.Note), so the figures that rest on the default are told
// with every answer.
func (m *Model) Note() string {
	gen, unk := m.fallbackOps()
	var parts []string
	if len(unk) > 0 {
		names, total := opList(unk)
		what := "ops"
		each := "each treated"
		if total == 1 {
			what, each = "op", "treated"
		}
		parts = append(parts, fmt.Sprintf("%d %s batchfit has no rule for: %s: %s as an op without autograd (none of its operands requires grad) "+
			"that makes new tensors of the recorded sizes, freed after their last reader; a view or an in-place op takes less, "+
			"a kernel's own workspace more", total, what, names, each))
	}
	if len(gen) > 0 {
		_, ver := m.derivTable()
		names, total := opList(gen)
		what := "ops"
		if total == 1 {
			what = "op"
		}
		parts = append(parts, fmt.Sprintf("%d %s by PyTorch %s's derivatives.yaml: %s: new results, and for backward the tensors its formulas name", total, what, ver, names))
	}
	return strings.Join(parts, "; ")
}

// Notes is the file's note as a prediction's typed notes take it
// (predict.Noter): the ops without a rule reach Result.Notes, and so
// estimate's --json "notes", not the header line alone.
func (m *Model) Notes() []string {
	if n := m.Note(); n != "" {
		return []string{n}
	}
	return nil
}
