// Package derivgen reads PyTorch's tools/autograd/derivatives.yaml and
// writes capture's table of what each aten op's backward keeps
// (capture/derivatives_gen.go). It follows the rules by which PyTorch's
// own generator (tools/autograd/load_derivatives.py, saved_variables)
// decides which variables a backward node saves: an argument or result a
// backward formula names is saved, except where the formula reads only
// its sizes, options, dtype and the like, which are evaluated in forward
// and kept without the tensor.
package derivgen

import (
	"bytes"
	"fmt"
	"go/format"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Arg is one argument of an op's schema.
type Arg struct {
	Name string
	// Tensor is 0 for a non-tensor, 1 Tensor, 2 Tensor?, 3 a list of
	// tensors (Tensor[], Tensor?[])
	Tensor int
	// KwOnly is an argument after the schema's "*": PyTorch passes it
	// by name, never by position
	KwOnly bool
}

// Entry is what derivatives.yaml declares of one op.
type Entry struct {
	Op      string // name.overload, or name for the default overload
	Args    []Arg
	Returns []string // the names the formulas give the results
	// Saved are the arguments and results a backward formula names (a
	// tensor that is kept); SizesOnly those it reads only through
	// sizes, options, dtype and the like (nothing of the tensor kept)
	Saved, SizesOnly []string
	// Diff are the inputs with a backward formula; NotImpl those whose
	// formula is not_implemented
	Diff, NotImpl []string
	// NonDiff are the results output_differentiability marks False
	NonDiff []int
}

// replacements are load_derivatives.py's expressions that save a
// property of a tensor instead of the tensor (REPLACEMENTS in
// saved_variables): the union of v1.13 (.sizes(), .size(n), .strides())
// and v2.5 (.sym_size(n), .sym_numel(), .sym_blocksize()). %s is the
// variable's name; like PyTorch's, the patterns have no leading word
// boundary.
var replacements = []string{
	`%s.sizes\(\)`, `%s.sym_sizes\(\)`, `%s->sizes\(\)`, `%s->sym_sizes\(\)`,
	`%s.sym_blocksize\(\)`, `%s.options\(\)`, `zeros_like\(%s\)`,
	`%s.size\((\w+)\)`, `%s.sym_size\((-?\w+)\)`, `%s.numel\(\)`, `%s.sym_numel\(\)`,
	`to_args_sizes\(%s\)`, `to_args_sizes_symint\(%s\)`, `to_args_scalartypes\(%s\)`,
	`TensorGeometry\(%s\)`, `%s.scalar_type\(\)`, `%s.dim\(\)`, `%s.strides\(\)`,
	`%s.sym_strides\(\)`, `%s.layout\(\)`, `%s.is_conj\(\)`,
}

// splitTop splits s at commas outside brackets and quotes.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '(':
			depth++
		case c == ']' || c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if t := strings.TrimSpace(s[start:]); t != "" {
		out = append(out, t)
	}
	return out
}

// annot is a schema's alias annotation: Tensor(a!), Tensor(a -> *)
var annot = regexp.MustCompile(`\([^)]*\)`)

func tensorKind(typ string) int {
	typ = annot.ReplaceAllString(typ, "")
	switch {
	case typ == "Tensor":
		return 1
	case typ == "Tensor?":
		return 2
	case strings.HasPrefix(typ, "Tensor") && strings.Contains(typ, "[]"):
		return 3
	}
	return 0
}

// parseSig parses "name.overload(args) -> returns".
func parseSig(sig string) (*Entry, error) {
	open := strings.Index(sig, "(")
	arrow := strings.LastIndex(sig, "->")
	if open < 0 || arrow < open {
		return nil, fmt.Errorf("signature %q", sig)
	}
	close := strings.LastIndex(sig[:arrow], ")")
	e := &Entry{Op: strings.TrimSpace(sig[:open])}
	kw := false
	for _, a := range splitTop(sig[open+1 : close]) {
		if a == "*" {
			kw = true
			continue
		}
		if i := strings.Index(a, "="); i >= 0 {
			a = a[:i]
		}
		f := strings.Fields(annot.ReplaceAllString(a, ""))
		if len(f) != 2 {
			return nil, fmt.Errorf("argument %q of %q", a, sig)
		}
		e.Args = append(e.Args, Arg{Name: f[1], Tensor: tensorKind(f[0]), KwOnly: kw})
	}
	rs := strings.TrimSpace(sig[arrow+2:])
	if strings.HasPrefix(rs, "(") {
		rs = rs[1 : len(rs)-1]
	}
	rets := splitTop(rs)
	base := e.Op
	if i := strings.Index(base, "."); i >= 0 {
		base = base[:i]
	}
	// torchgen/api/cpp.py return_names: a named result keeps its name
	// (name_return where an argument has it); otherwise result, or
	// result0, result1, ... of several. An in-place op returns self, and
	// its own entry's formulas call that output result (leaky_relu_,
	// elu_: "leaky_relu_backward(grad, result, ...)"), while self there
	// is the input as it was, which the node keeps as a copy taken
	// before the kernel (measured on 2.5.1: LeakyReluBackward1's
	// _saved_result is the output's storage)
	inplace := strings.HasSuffix(base, "_") && !strings.HasSuffix(base, "__")
	for i, r := range rets {
		f := strings.Fields(annot.ReplaceAllString(r, ""))
		var name string
		switch {
		case inplace:
			name = "result"
		case len(f) == 2:
			name = f[1]
			if slices.ContainsFunc(e.Args, func(a Arg) bool { return a.Name == name }) {
				name += "_return"
			}
		case len(rets) == 1:
			name = "result"
		default:
			name = fmt.Sprintf("result%d", i)
		}
		e.Returns = append(e.Returns, name)
	}
	return e, nil
}

// Parse reads one derivatives.yaml.
func Parse(src []byte) ([]*Entry, error) {
	var raw []map[string]any
	if err := yaml.Unmarshal(src, &raw); err != nil {
		return nil, err
	}
	var out []*Entry
	for _, m := range raw {
		sig, _ := m["name"].(string)
		e, err := parseSig(sig)
		if err != nil {
			return nil, err
		}
		if od, ok := m["output_differentiability"].([]any); ok {
			for i, v := range od {
				if b, ok := v.(bool); ok && !b {
					e.NonDiff = append(e.NonDiff, i)
				}
			}
		}
		// an entry with per-dispatch-key formulas: the Default ones are
		// those of CPU and CUDA tensors
		if d, ok := m["dispatch"].(map[string]any); ok {
			if def, ok := d["Default"].(map[string]any); ok {
				m = def
			}
		}
		isArg := func(n string) bool {
			return slices.ContainsFunc(e.Args, func(a Arg) bool { return a.Name == n })
		}
		saved, sizes := map[string]bool{}, map[string]bool{}
		for key, v := range m {
			formula, ok := v.(string)
			if !ok || key == "name" {
				continue
			}
			names := strings.Split(key, ",")
			for i := range names {
				names[i] = strings.TrimSpace(names[i])
			}
			// a key of results is a forward-mode formula: it is not
			// what the backward node keeps
			if !slices.ContainsFunc(names, isArg) {
				continue
			}
			formula = strings.TrimSpace(formula)
			switch {
			case formula == "non_differentiable":
				continue
			case strings.HasPrefix(formula, "not_implemented"):
				e.NotImpl = append(e.NotImpl, names...)
				continue
			}
			e.Diff = append(e.Diff, names...)
			var cands []string
			for _, a := range e.Args {
				cands = append(cands, a.Name)
			}
			cands = append(cands, e.Returns...)
			for _, n := range cands {
				q := regexp.QuoteMeta(n)
				for _, r := range replacements {
					re := regexp.MustCompile(strings.Replace(r, "%s", q, 1))
					if re.MatchString(formula) {
						sizes[n] = true
						formula = re.ReplaceAllString(formula, n+"_property")
					}
				}
				if regexp.MustCompile(`(^|\W)` + q + `($|\W)`).MatchString(formula) {
					saved[n] = true
				}
			}
		}
		tensors := map[string]bool{}
		for _, a := range e.Args {
			tensors[a.Name] = a.Tensor != 0
		}
		for _, r := range e.Returns {
			tensors[r] = true
		}
		// only tensors take memory; a saved number or list of sizes does not
		for n := range saved {
			if tensors[n] {
				e.Saved = append(e.Saved, n)
			}
		}
		for n := range sizes {
			if tensors[n] && !saved[n] {
				e.SizesOnly = append(e.SizesOnly, n)
			}
		}
		sort.Strings(e.Saved)
		sort.Strings(e.SizesOnly)
		sort.Strings(e.Diff)
		e.Diff = slices.Compact(e.Diff)
		sort.Strings(e.NotImpl)
		e.NotImpl = slices.Compact(e.NotImpl)
		out = append(out, e)
	}
	return out, nil
}

// Table is one vendored file: its Go variable name and contents.
type Table struct {
	Var, File string
	Src       []byte
}

// Generate writes the Go source of capture/derivatives_gen.go.
func Generate(tables []Table) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by capture/internal/derivgen from testdata/derivatives/*.yaml; DO NOT EDIT.\n\npackage capture\n")
	q := func(ss []string) string {
		if len(ss) == 0 {
			return "nil"
		}
		return fmt.Sprintf("%#v", ss)
	}
	for _, t := range tables {
		es, err := Parse(t.Src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t.File, err)
		}
		sort.SliceStable(es, func(i, j int) bool { return es[i].Op < es[j].Op })
		fmt.Fprintf(&b, "\n// %s is %s: %d entries.\nvar %s = map[string]derivEntry{\n", t.Var, t.File, len(es), t.Var)
		for _, e := range es {
			fmt.Fprintf(&b, "%q: {Args: []derivArg{", e.Op)
			for _, a := range e.Args {
				fmt.Fprintf(&b, "{%q, %d, %v}, ", a.Name, a.Tensor, a.KwOnly)
			}
			fmt.Fprintf(&b, "}, Returns: %s, Saved: %s, SizesOnly: %s, Diff: %s, NotImpl: %s", q(e.Returns), q(e.Saved), q(e.SizesOnly), q(e.Diff), q(e.NotImpl))
			if len(e.NonDiff) > 0 {
				fmt.Fprintf(&b, ", NonDiff: %#v", e.NonDiff)
			}
			b.WriteString("},\n")
		}
		b.WriteString("}\n")
	}
	return format.Source(b.Bytes())
}

// Tables are the vendored files, relative to capture/, and the variable
// each becomes.
var Tables = []Table{
	{Var: "derivativesV113", File: "testdata/derivatives/v1.13.1.yaml"},
	{Var: "derivativesV251", File: "testdata/derivatives/v2.5.1.yaml"},
}
