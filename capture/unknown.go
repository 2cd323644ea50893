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

// UnknownOps lists the operators of the file batchfit has no rule for,
// which its builds so far (Read builds once at the captured batch) mapped
// by the default for ops without autograd: most ops first, then by name.
// Empty when every op had a rule.
func (m *Model) UnknownOps() []UnknownOp {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := make([]UnknownOp, 0, len(m.unknown))
	for name, n := range m.unknown {
		ops = append(ops, UnknownOp{Name: name, Count: n})
	}
	slices.SortFunc(ops, func(a, b UnknownOp) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Name, b.Name))
	})
	return ops
}

// Note says which ops had no rule and how they were simulated, or is ""
// when every op had one. A prediction shows its source's note
// (predict.Result.Note), so the figures that rest on the default are
// told with every answer.
func (m *Model) Note() string {
	ops := m.UnknownOps()
	if len(ops) == 0 {
		return ""
	}
	total := 0
	names := make([]string, len(ops))
	for i, o := range ops {
		total += o.Count
		names[i] = o.Name
		if o.Count > 1 {
			names[i] += fmt.Sprintf(" (%d)", o.Count)
		}
	}
	what := "ops"
	each := "each treated"
	if total == 1 {
		what, each = "op", "treated"
	}
	return fmt.Sprintf("%d %s batchfit has no rule for: %s: %s as an op without autograd (none of its operands requires grad) "+
		"that makes new tensors of the recorded sizes, freed after their last reader; a view or an in-place op takes less, "+
		"a kernel's own workspace more", total, what, strings.Join(names, ", "), each)
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
