package spec

import (
	"github.com/batchfit/batchfit/suggest"

	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// Limits that keep a hostile or mistaken file from making Parse or Build
// allocate without bound.
const (
	// MaxFileSize is the largest spec accepted, in bytes.
	MaxFileSize = 1 << 20
	// MaxDepth is how deeply residual and repeat may nest.
	MaxDepth = 32
	// MaxOps is the largest graph Build makes, in ops.
	MaxOps = 1_000_000
	// MaxElements is the largest tensor Build accepts, in elements.
	MaxElements = 1 << 48
)

// limits are the bounds one Build runs under (tests and the fuzzer use
// smaller ones).
type limits struct {
	ops   int64
	elems int64
}

var defaultLimits = limits{ops: MaxOps, elems: MaxElements}

// Error is an error at a place in a spec file. Line is 0 for errors about
// the file as a whole.
type Error struct {
	File string
	Line int
	Err  error
}

func (e *Error) Error() string {
	if e.Line <= 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Spec is a parsed model spec, not yet built: its layers may refer to
// symbols whose values are only known when Build is called.
type Spec struct {
	// Name names the model: the file's name field, or else the file's base
	// name without its extension.
	Name string
	// Description is the file's free-text description field.
	Description string
	// File is the file name errors are reported against.
	File string

	input   inputSpec
	loss    lossKind
	lossAt  int
	params  []param
	layers  []entry
	usesSeq bool
}

type param struct {
	name string
	val  int64
}

type inputSpec struct {
	shape []valueAt
	dtype graph.DType
	line  int
}

// valueAt is an integer expression and the line it was written on.
type valueAt struct {
	e    *expr
	line int
}

type lossKind uint8

const (
	crossEntropy lossKind = iota
	mseLoss
)

// Parse reads a spec from data; filename names it in errors and, when the
// spec has no name field, gives the model its name.
func Parse(data []byte, filename string) (*Spec, error) {
	if filename == "" {
		filename = "<spec>"
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: filename, Err: fmt.Errorf("spec is %d bytes, larger than the %d-byte limit", len(data), MaxFileSize)}
	}
	s, err := newParser(filename).spec(data)
	if err != nil {
		return nil, err
	}
	if s.Name == "" {
		base := filepath.Base(filename)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
		if s.Name == "" || s.Name == "." || strings.HasPrefix(filename, "<") {
			s.Name = "spec"
		}
	}
	return s, nil
}

// ParseFile reads and parses the spec at path.
func ParseFile(path string) (*Spec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading spec %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, &Error{File: path, Err: fmt.Errorf("spec is larger than the %d-byte limit", MaxFileSize)}
	}
	return Parse(data, path)
}

// Params returns the symbols the spec declares under params, with their
// default values. A declared seq is the default sequence length.
func (s *Spec) Params() map[string]int64 {
	m := make(map[string]int64, len(s.params))
	for _, p := range s.params {
		m[p.name] = p.val
	}
	return m
}

// UsesSeq reports whether the spec refers to the sequence length (the seq
// symbol), so that Build needs one: given to it, or declared under params.
func (s *Spec) UsesSeq() bool { return s.usesSeq }

// Build makes the graph for one setup. batch is prepended to the input
// shape; seq, when positive, is the value of the seq symbol; overrides
// replace the defaults of declared symbols.
func (s *Spec) Build(batch, seq int64, overrides map[string]int64) (*graph.Graph, error) {
	return s.build(batch, seq, overrides, defaultLimits, nil)
}

// BuildAdapted is Build with parameters frozen and LoRA adapters added as
// a describes (see graph.Adapters); layer names are the spec's.
func (s *Spec) BuildAdapted(batch, seq int64, overrides map[string]int64, a *graph.Adapters) (*graph.Graph, error) {
	return s.build(batch, seq, overrides, defaultLimits, a)
}

// SeqLimit is the longest sequence the spec's learned position tables
// serve — the smallest num of its position_embedding layers, which has no
// row for a later position — with the overrides given; 0 when it has none.
func (s *Spec) SeqLimit(overrides map[string]int64) (int64, error) {
	if !s.usesSeq {
		return 0, nil
	}
	env, err := s.env(1, overrides)
	if err != nil {
		return 0, err
	}
	c := &buildCtx{s: s, env: env, lim: defaultLimits, counts: map[*layer]countMemo{}}
	if _, err := c.build(1); err != nil {
		return 0, err
	}
	return c.positions, nil
}

func (s *Spec) build(batch, seq int64, overrides map[string]int64, lim limits, a *graph.Adapters) (*graph.Graph, error) {
	if batch <= 0 {
		return nil, fmt.Errorf("%s: batch size must be positive, got %d", s.File, batch)
	}
	if seq < 0 {
		return nil, fmt.Errorf("%s: sequence length must be positive, got %d", s.File, seq)
	}
	env, err := s.env(seq, overrides)
	if err != nil {
		return nil, err
	}
	c := &buildCtx{s: s, env: env, lim: lim, counts: map[*layer]countMemo{}, adapters: a}
	return c.build(batch)
}

// env is the value of every symbol for one Build.
func (s *Spec) env(seq int64, overrides map[string]int64) (map[string]int64, error) {
	env := s.Params()
	known := s.symbolNames()
	names := make([]string, 0, len(overrides))
	for name := range overrides {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !contains(known, name) {
			msg := fmt.Sprintf("unknown parameter %q", name)
			if near := nearest(name, known, 3); len(near) > 0 {
				msg += fmt.Sprintf("; did you mean %s?", quoteList(near))
			}
			if len(known) == 0 {
				msg += " (the spec declares no parameters)"
			} else {
				msg += fmt.Sprintf(" (declared: %s)", strings.Join(known, ", "))
			}
			return nil, &Error{File: s.File, Err: errors.New(msg)}
		}
		env[name] = overrides[name]
	}
	if seq > 0 {
		if v, ok := overrides["seq"]; ok && v != seq {
			return nil, &Error{File: s.File, Err: fmt.Errorf("sequence length given twice: %d and seq=%d", seq, v)}
		}
		env["seq"] = seq
	}
	if _, ok := env["seq"]; !ok && s.usesSeq {
		return nil, &Error{File: s.File, Err: errors.New("the spec uses seq: give a sequence length, or declare a default under params (seq: 512)")}
	}
	return env, nil
}

// symbolNames lists the symbols a Build may override, sorted.
func (s *Spec) symbolNames() []string {
	var names []string
	for _, p := range s.params {
		names = append(names, p.name)
	}
	if s.usesSeq && !contains(names, "seq") {
		names = append(names, "seq")
	}
	sort.Strings(names)
	return names
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// normalize folds case and drops '_', '-' and ' ', so that BatchNorm2d,
// batch_norm2d and batchnorm2d are one name.
func normalize(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '_' || c == '-' || c == ' ':
		case 'A' <= c && c <= 'Z':
			b = append(b, c+'a'-'A')
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// nearest returns up to n candidates within a plausible misspelling of s.
func nearest(s string, candidates []string, n int) []string {
	return suggest.Nearest(s, candidates, n)
}
