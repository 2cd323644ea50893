package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/graph"
	yaml "go.yaml.in/yaml/v3"
)

// entry is one layer in a list, under the module name it gets there.
type entry struct {
	name string
	l    *layer
}

// layer is one parsed layer: its type and the fields written for it.
type layer struct {
	typ    *layerType
	line   int
	name   string // explicit name field, or ""
	fields map[string]*field
}

// field is one parsed field value. Which members are set depends on the
// field's kind.
type field struct {
	line   int
	vals   []*expr // kInt: one; kPair: one or two; kDims: one or more
	b      bool
	f      float64
	s      string // kEnum, kPadding given as a word
	layers []entry
}

type parser struct {
	file      string
	lists     map[*yaml.Node][]entry
	layerMemo map[*yaml.Node]*layer
	busy      map[*yaml.Node]bool
	symbols   map[string]bool
	usesSeq   bool
}

func newParser(file string) *parser {
	return &parser{
		file:      file,
		lists:     map[*yaml.Node][]entry{},
		layerMemo: map[*yaml.Node]*layer{},
		busy:      map[*yaml.Node]bool{},
		symbols:   map[string]bool{"seq": true},
	}
}

func (p *parser) errf(line int, format string, args ...any) error {
	return &Error{File: p.file, Line: line, Err: fmt.Errorf(format, args...)}
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the YAML parser's (not scanner's) errors, with the
// construct whose start they report. The library numbers those lines from
// 0 (scanner errors from 1), so they need one added.
var parserProblems = map[string]string{
	"did not find expected key":              "the mapping",
	"did not find expected '-' indicator":    "the list",
	"did not find expected ',' or ']'":       "the [...] list",
	"did not find expected ',' or '}'":       "the {...} mapping",
	"did not find expected node content":     "the value",
	"found undefined tag handle":             "the value",
	"did not find expected <document start>": "the document",
	"did not find expected <stream-start>":   "the document",
	"found duplicate %YAML directive":        "the document",
	"found incompatible YAML document":       "the document",
	"found duplicate %TAG directive":         "the document",
}

// yamlErr turns the YAML library's "yaml: line N: msg" into file:N: msg.
func (p *parser) yamlErr(err error) error {
	msg := err.Error()
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			if what, ok := parserProblems[m[2]]; ok {
				return p.errf(n+1, "invalid YAML in %s that starts here: %s", what, m[2])
			}
			return p.errf(n, "invalid YAML: %s", m[2])
		}
	}
	return &Error{File: p.file, Err: fmt.Errorf("invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))}
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && n.Alias != nil && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// describe names what a node is, for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "nothing"
		}
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return strconv.Quote(v)
	}
	return "an alias"
}

var topKeys = []string{"name", "description", "input", "loss", "params", "layers"}

func (p *parser) spec(data []byte) (*Spec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: p.file, Err: errors.New("empty spec")}
		}
		return nil, p.yamlErr(err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, p.errf(extra.Line, "a spec is one YAML document; found a second one")
	case !errors.Is(err, io.EOF):
		return nil, p.yamlErr(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) != 1 {
			return nil, &Error{File: p.file, Err: errors.New("empty spec")}
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if root.Kind != yaml.MappingNode {
		return nil, p.errf(root.Line, "a spec is a mapping with keys %s, got %s", strings.Join(topKeys, ", "), describe(root))
	}
	keys := map[string]*yaml.Node{}
	vals := map[string]*yaml.Node{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k := resolve(root.Content[i])
		if k.Kind != yaml.ScalarNode {
			return nil, p.errf(k.Line, "expected a key (one of %s), got %s", strings.Join(topKeys, ", "), describe(k))
		}
		name := strings.ToLower(k.Value)
		if !contains(topKeys, name) {
			return nil, p.errf(k.Line, "%s", unknownMsg("key", k.Value, topKeys))
		}
		if prev, dup := keys[name]; dup {
			return nil, p.errf(k.Line, "%s given twice (first on line %d)", name, prev.Line)
		}
		keys[name] = k
		vals[name] = root.Content[i+1]
	}
	s := &Spec{File: p.file}
	var err error
	if v := vals["name"]; v != nil {
		if s.Name, err = p.text(v, "name"); err != nil {
			return nil, err
		}
	}
	if v := vals["description"]; v != nil {
		if s.Description, err = p.text(v, "description"); err != nil {
			return nil, err
		}
	}
	if v := vals["params"]; v != nil {
		if s.params, err = p.params(v); err != nil {
			return nil, err
		}
	}
	for _, pr := range s.params {
		p.symbols[pr.name] = true
	}
	if v := vals["input"]; v != nil {
		if s.input, err = p.input(v); err != nil {
			return nil, err
		}
	} else {
		return nil, p.errf(root.Line, "missing input (for example input: {shape: [784], dtype: float32})")
	}
	v := vals["layers"]
	if v == nil {
		return nil, p.errf(root.Line, "missing layers (a list, for example layers: [flatten, {linear: 10}])")
	}
	if s.layers, err = p.layerList(v, 1); err != nil {
		return nil, err
	}
	if len(s.layers) == 0 {
		return nil, p.errf(resolve(v).Line, "layers is empty")
	}
	s.lossAt = s.layers[len(s.layers)-1].l.line
	if v := vals["loss"]; v != nil {
		if s.loss, err = p.loss(v); err != nil {
			return nil, err
		}
		s.lossAt = resolve(v).Line
	}
	s.usesSeq = p.usesSeq
	return s, nil
}

func (p *parser) text(n *yaml.Node, what string) (string, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return "", p.errf(n.Line, "%s must be text, got %s", what, describe(n))
	}
	if what == "name" && (len(n.Value) > 128 || strings.ContainsAny(n.Value, "\n\r\t")) {
		return "", p.errf(n.Line, "name must be one line of at most 128 characters")
	}
	return n.Value, nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (p *parser) params(n *yaml.Node) ([]param, error) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n.Line, "params must be a mapping of names to integers (params: {layers: 4, hidden: 1024}), got %s", describe(n))
	}
	var ps []param
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || !identRE.MatchString(k.Value) || len(k.Value) > 64 {
			return nil, p.errf(k.Line, "parameter name %s is not a name (letters, digits and _, not starting with a digit)", describe(k))
		}
		if k.Value == "batch" {
			return nil, p.errf(k.Line, "batch is not a parameter: the batch size is given when the spec is built and prepended to the input shape")
		}
		if prev, dup := seen[k.Value]; dup {
			return nil, p.errf(k.Line, "parameter %s declared twice (first on line %d)", k.Value, prev)
		}
		seen[k.Value] = k.Line
		var val int64
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&val) != nil {
			return nil, p.errf(v.Line, "parameter %s must be an integer, got %s", k.Value, describe(v))
		}
		ps = append(ps, param{name: k.Value, val: val})
	}
	return ps, nil
}

func (p *parser) input(n *yaml.Node) (inputSpec, error) {
	n = resolve(n)
	in := inputSpec{dtype: graph.F32, line: n.Line}
	var shape *yaml.Node
	switch n.Kind {
	case yaml.SequenceNode:
		shape = n
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
			switch strings.ToLower(k.Value) {
			case "shape":
				if shape != nil {
					return in, p.errf(k.Line, "input: shape given twice")
				}
				shape = v
			case "dtype":
				if v.Kind != yaml.ScalarNode || len(v.Value) > 32 {
					return in, p.errf(v.Line, "input: dtype must be a name such as float32 or int64, got %s", describe(v))
				}
				dt, err := graph.ParseDType(v.Value)
				if err != nil {
					return in, p.errf(v.Line, "input: %v", err)
				}
				in.dtype = dt
			default:
				return in, p.errf(k.Line, "input: %s", unknownMsg("key", k.Value, []string{"shape", "dtype"}))
			}
		}
	default:
		return in, p.errf(n.Line, "input must be a mapping such as {shape: [784], dtype: float32}, got %s", describe(n))
	}
	if shape == nil {
		return in, p.errf(n.Line, "input: missing shape (the shape of one sample, without the batch: [784], [3, 32, 32], [seq])")
	}
	if shape.Kind == yaml.ScalarNode {
		e, err := p.intExpr(shape, "input shape")
		if err != nil {
			return in, err
		}
		in.shape = []valueAt{{e, shape.Line}}
	} else {
		if shape.Kind != yaml.SequenceNode || len(shape.Content) == 0 || len(shape.Content) > 8 {
			return in, p.errf(shape.Line, "input: shape must be a list of 1 to 8 sizes for one sample, without the batch ([784], [3, 32, 32], [seq]), got %s", describe(shape))
		}
		for _, d := range shape.Content {
			e, err := p.intExpr(d, "input shape")
			if err != nil {
				return in, err
			}
			in.shape = append(in.shape, valueAt{e, resolve(d).Line})
		}
	}
	for _, d := range in.shape {
		if err := checkMin(d.e, 1, "input shape", "a positive integer", func(format string, args ...any) error {
			return p.errf(d.line, format, args...)
		}); err != nil {
			return in, err
		}
	}
	return in, nil
}

var lossNames = map[string]lossKind{
	"crossentropy": crossEntropy, "crossentropyloss": crossEntropy, "ce": crossEntropy,
	"mse": mseLoss, "mseloss": mseLoss,
}

func (p *parser) loss(n *yaml.Node) (lossKind, error) {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode {
		if k, ok := lossNames[normalize(n.Value)]; ok {
			return k, nil
		}
	}
	return 0, p.errf(n.Line, "loss must be cross_entropy or mse, got %s", describe(n))
}

// intExpr reads an integer or an integer expression.
func (p *parser) intExpr(n *yaml.Node, what string) (*expr, error) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		return nil, p.errf(n.Line, "%s must be an integer, got %s", what, describe(n))
	}
	switch n.ShortTag() {
	case "!!int":
		var v int64
		if err := n.Decode(&v); err != nil {
			return nil, p.errf(n.Line, "%s: integer %s out of range", what, n.Value)
		}
		return lit(v), nil
	case "!!str":
		e, err := parseExpr(n.Value)
		if err != nil {
			return nil, p.errf(n.Line, "%s must be an integer or an expression such as $hidden * 4: %v", what, err)
		}
		var bad error
		e.walk(func(sym string) {
			if bad != nil {
				return
			}
			if sym == "seq" {
				p.usesSeq = true
			}
			if !p.symbols[sym] {
				bad = p.errf(n.Line, "%s: %s", what, p.unknownSymbol(sym))
			}
		})
		return e, bad
	}
	return nil, p.errf(n.Line, "%s must be an integer, got %s", what, describe(n))
}

func (p *parser) unknownSymbol(sym string) string {
	if sym == "batch" {
		return "batch is not a symbol: the batch dimension is prepended to the input shape and is not written in the spec"
	}
	names := make([]string, 0, len(p.symbols))
	for s := range p.symbols {
		names = append(names, s)
	}
	sort.Strings(names)
	msg := fmt.Sprintf("unknown symbol %q", sym)
	if near := nearest(sym, names, 3); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", quoteList(near))
	}
	return msg + fmt.Sprintf(" (symbols: %s; declare new ones under params)", strings.Join(names, ", "))
}

// unknownMsg says that name is not one of valid, suggesting the nearest.
func unknownMsg(what, name string, valid []string) string {
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	msg := fmt.Sprintf("unknown %s %q", what, name)
	if near := nearest(name, valid, 3); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %s?", quoteList(near))
	}
	return msg + fmt.Sprintf(" (valid: %s)", strings.Join(valid, ", "))
}

// checkMin checks a constant expression against the smallest allowed
// value; expressions with symbols are checked when the spec is built.
func checkMin(e *expr, min int64, what, want string, errf func(string, ...any) error) error {
	if !e.constant() {
		return nil
	}
	v, err := e.eval(nil)
	if err != nil {
		return errf("%s: %v", what, err)
	}
	if v < min {
		return errf("%s must be %s, got %d", what, want, v)
	}
	return nil
}

// layerList reads a list of layers at nesting depth depth.
func (p *parser) layerList(n *yaml.Node, depth int) ([]entry, error) {
	at := n.Line // an alias's own line, for a list that contains itself
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n.Line, "expected a list of layers, got %s", describe(n))
	}
	if es, ok := p.lists[n]; ok {
		return es, nil
	}
	if depth > MaxDepth {
		return nil, p.errf(n.Line, "layers nested more than %d deep", MaxDepth)
	}
	if p.busy[n] {
		return nil, p.errf(at, "a list of layers contains itself (through an alias)")
	}
	p.busy[n] = true
	defer delete(p.busy, n)
	var es []entry
	unnamedRepeats := 0
	for _, item := range n.Content {
		l, err := p.layer(item, depth)
		if err != nil {
			return nil, err
		}
		if l.typ.name == "repeat" && l.name == "" {
			unnamedRepeats++
		}
		es = append(es, entry{name: l.name, l: l})
	}
	explicit := map[string]bool{}
	for _, e := range es {
		explicit[e.name] = true
	}
	used := map[string]int{}
	for i := range es {
		e := &es[i]
		if e.name == "" {
			e.name = strconv.Itoa(i)
			if e.l.typ.name == "repeat" && unnamedRepeats == 1 && !explicit["layers"] {
				e.name = "layers"
			}
		}
		if prev, dup := used[e.name]; dup {
			return nil, p.errf(e.l.line, "layer name %q already used on line %d", e.name, prev)
		}
		used[e.name] = e.l.line
	}
	p.lists[n] = es
	return es, nil
}

// layer reads one layer: a type name (relu), or a mapping whose first key
// is the type, whose value is the type's fields (or its main field), and
// whose further keys are more fields.
func (p *parser) layer(n *yaml.Node, depth int) (*layer, error) {
	at := n.Line
	n = resolve(n)
	if l, ok := p.layerMemo[n]; ok {
		return l, nil
	}
	if p.busy[n] {
		return nil, p.errf(at, "a layer contains itself (through an alias)")
	}
	p.busy[n] = true
	defer delete(p.busy, n)
	var l *layer
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() != "!!str" {
			return nil, p.errf(n.Line, "expected a layer (a type such as relu, or a mapping such as linear: {out: 10}), got %s", describe(n))
		}
		t, err := p.layerType(n)
		if err != nil {
			return nil, err
		}
		l = &layer{typ: t, line: n.Line, fields: map[string]*field{}}
	case yaml.MappingNode:
		if len(n.Content) < 2 {
			return nil, p.errf(n.Line, "empty layer")
		}
		key := resolve(n.Content[0])
		if key.Kind != yaml.ScalarNode {
			return nil, p.errf(key.Line, "expected a layer type, got %s", describe(key))
		}
		t, err := p.layerType(key)
		if err != nil {
			return nil, err
		}
		l = &layer{typ: t, line: key.Line, fields: map[string]*field{}}
		if err := p.typeValue(l, n.Content[1], depth); err != nil {
			return nil, err
		}
		for i := 2; i+1 < len(n.Content); i += 2 {
			if err := p.setField(l, n.Content[i], n.Content[i+1], depth); err != nil {
				return nil, err
			}
		}
	default:
		return nil, p.errf(n.Line, "expected a layer (a type such as relu, or a mapping such as linear: {out: 10}), got %s", describe(n))
	}
	for i := range l.typ.fields {
		fd := &l.typ.fields[i]
		if fd.required && l.fields[fd.name] == nil {
			return nil, p.errf(l.line, "%s: missing %s (%s)", l.typ.name, fd.name, l.typ.usage)
		}
	}
	p.layerMemo[n] = l
	return l, nil
}

func (p *parser) layerType(n *yaml.Node) (*layerType, error) {
	if t := lookupType(n.Value); t != nil {
		return t, nil
	}
	return nil, p.errf(n.Line, "%s", unknownMsg("layer type", n.Value, typeNames()))
}

// typeValue reads the value of a layer's type key: nothing, a mapping of
// fields, or the value of the type's main field.
func (p *parser) typeValue(l *layer, orig *yaml.Node, depth int) error {
	v := resolve(orig)
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null":
		return nil
	case v.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			if err := p.setField(l, v.Content[i], v.Content[i+1], depth); err != nil {
				return err
			}
		}
		return nil
	}
	if l.typ.main == "" {
		return p.errf(v.Line, "%s: unexpected value %s; give its fields as a mapping (%s)", l.typ.name, describe(v), l.typ.usage)
	}
	return p.setValue(l, l.typ.field(l.typ.main), v.Line, orig, depth)
}

func (p *parser) setField(l *layer, k, v *yaml.Node, depth int) error {
	k = resolve(k)
	if k.Kind != yaml.ScalarNode {
		return p.errf(k.Line, "%s: expected a field name, got %s", l.typ.name, describe(k))
	}
	fd := l.typ.field(k.Value)
	if fd == nil {
		return p.errf(k.Line, "%s: %s", l.typ.name, unknownMsg("field", k.Value, l.typ.fieldNames()))
	}
	return p.setValue(l, fd, k.Line, v, depth)
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (p *parser) setValue(l *layer, fd *fieldDef, keyLine int, orig *yaml.Node, depth int) error {
	v := resolve(orig)
	what := l.typ.name + ": " + fd.name
	if fd.kind == kName {
		if l.name != "" {
			return p.errf(keyLine, "%s given twice", what)
		}
		if v.Kind != yaml.ScalarNode || !nameRE.MatchString(v.Value) {
			return p.errf(v.Line, "%s must be a module name of letters, digits, _ and - (no dots), got %s", what, describe(v))
		}
		l.name = v.Value
		return nil
	}
	if l.fields[fd.name] != nil {
		return p.errf(keyLine, "%s given twice (first on line %d)", what, l.fields[fd.name].line)
	}
	f := &field{line: v.Line}
	errf := func(format string, args ...any) error { return p.errf(v.Line, format, args...) }
	switch fd.kind {
	case kInt:
		e, err := p.intExpr(v, what)
		if err != nil {
			return err
		}
		if err := checkMin(e, fd.min, what, fd.want(), errf); err != nil {
			return err
		}
		f.vals = []*expr{e}
	case kPair, kPadding, kDims:
		if fd.kind == kPadding && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
			if w := strings.ToLower(v.Value); w == "same" || w == "valid" {
				f.s = w
				break
			}
		}
		items := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			items = v.Content
			if fd.kind != kDims && len(items) != 2 || len(items) == 0 || len(items) > 8 {
				return errf("%s must be %s, got a list of %d", what, fd.want(), len(items))
			}
		}
		for _, it := range items {
			e, err := p.intExpr(it, what)
			if err != nil {
				return err
			}
			if err := checkMin(e, fd.min, what, fd.want(), errf); err != nil {
				return err
			}
			f.vals = append(f.vals, e)
		}
	case kBool:
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
			return errf("%s must be true or false, got %s", what, describe(v))
		}
		if err := v.Decode(&f.b); err != nil {
			return errf("%s must be true or false, got %s", what, describe(v))
		}
	case kFloat:
		t := v.ShortTag()
		if v.Kind != yaml.ScalarNode || t != "!!float" && t != "!!int" {
			return errf("%s must be %s, got %s", what, fd.want(), describe(v))
		}
		x, err := strconv.ParseFloat(strings.ReplaceAll(v.Value, "_", ""), 64)
		if err != nil && v.Decode(&x) != nil {
			return errf("%s must be %s, got %s", what, fd.want(), describe(v))
		}
		if math.IsNaN(x) || x < fd.fmin || x > fd.fmax {
			return errf("%s must be %s, got %s", what, fd.want(), describe(v))
		}
		f.f = x
	case kEnum:
		w := strings.ToLower(v.Value)
		if v.Kind != yaml.ScalarNode || !contains(fd.enum, w) {
			return errf("%s must be one of %s, got %s", what, strings.Join(fd.enum, ", "), describe(v))
		}
		f.s = w
	case kLayers:
		es, err := p.layerList(orig, depth+1)
		if err != nil {
			return err
		}
		if len(es) == 0 {
			return errf("%s needs at least one layer", what)
		}
		f.layers = es
	}
	l.fields[fd.name] = f
	return nil
}
