package models

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/suggest"
)

// Config, Decode and Dim are owned by package graph, which every builder
// of a graph imports; the names stay here so that the zoo's callers keep
// reading models.Config.
type (
	Config = graph.Config
	Decode = graph.Decode
	Dim    = graph.Dim
)

// The dimensions a model may let a solver vary, as graph names them.
const (
	DimBatch  = graph.DimBatch
	DimSeq    = graph.DimSeq
	DimLayers = graph.DimLayers
	DimHidden = graph.DimHidden
)

// Model is one zoo entry.
type Model struct {
	Name        string
	Family      string // "torchvision", "transformers", "seed"
	Description string
	// DefaultSeq is the sequence length used when Config.Seq is 0; 0 for
	// models without one.
	DefaultSeq int64
	// Dims lists the dimensions besides batch that Build honours.
	Dims  []Dim
	Build func(Config) (*graph.Graph, error)
	// Note is printed with every prediction for the model: what its
	// graph leaves out, when that is known ("" for none).
	Note string
	// Range gives the valid values of a dimension at the other sizes of
	// a Config (nil: every positive value).
	Range func(Dim, Config) Range
}

// Small is a small configuration of m for tests that run every model: the
// given batch, the given sequence length for models with one, and two
// layers where the model's depth can vary (seed networks keep theirs).
func (m Model) Small(batch, seq int64) Config {
	c := Config{Batch: batch}
	if m.DefaultSeq > 0 {
		c.Seq = seq
	}
	if m.Family != "seed" {
		for _, d := range m.Dims {
			if d == DimLayers {
				c.Layers = 2
			}
		}
	}
	return c
}

var registry = map[string]Model{}

// Register adds m to the zoo. Registering a name twice is a programming
// error reported by Check.
func Register(m Model) {
	if _, dup := registry[strings.ToLower(m.Name)]; dup {
		duplicate = append(duplicate, m.Name)
	}
	registry[strings.ToLower(m.Name)] = m
}

var duplicate []string

// Check reports registration mistakes (duplicate names).
func Check() error {
	if len(duplicate) > 0 {
		return fmt.Errorf("models registered twice: %s", strings.Join(duplicate, ", "))
	}
	return nil
}

// All lists the zoo sorted by family then name.
func All() []Model {
	ms := make([]Model, 0, len(registry))
	for _, m := range registry {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].Family != ms[j].Family {
			return ms[i].Family < ms[j].Family
		}
		return ms[i].Name < ms[j].Name
	})
	return ms
}

// Lookup finds a model by its name (case-insensitive; "-" and "_" and "."
// are interchangeable). Only the whole name names a model: a prefix is
// answered with an error listing the names it begins (see unknownModel),
// so that "Llama-3-7" is never taken for Llama-3-70B without a word.
func Lookup(name string) (Model, error) {
	key := strings.ToLower(name)
	if m, ok := registry[key]; ok {
		return m, nil
	}
	norm := normalize(key)
	for k, m := range registry {
		if normalize(k) == norm {
			return m, nil
		}
	}
	return Model{}, unknownModel(name)
}

// maxSuggest bounds the names an unknown model's error lists.
const maxSuggest = 6

// unknownModel is the error for a name that is no zoo model. It suggests,
// in this order, the names that begin with it, the names that contain it,
// and the nearest names of its family (the name's leading letters:
// "resnet" for resnet5O, "mixtral" for mixtral-8x7b); a family the zoo
// lacks is said to be missing rather than answered with a look-alike of
// another family (mixtral is not the dense mistral). A family counts as
// the same when it is spelt with one letter transposed, dropped or added
// ("lalma", "lama"), not one changed letter, which makes another name.
func unknownModel(name string) error {
	norm := normalize(name)
	var names []string
	for _, m := range registry {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	var prefixed, containing []string
	for _, n := range names {
		switch nn := normalize(n); {
		case norm == "":
		case strings.HasPrefix(nn, norm):
			prefixed = append(prefixed, n)
		case strings.Contains(nn, norm):
			containing = append(containing, n)
		}
	}
	near := prefixed
	if len(near) == 0 {
		near = containing
	}
	fam := family(name)
	if len(near) == 0 && fam != "" {
		var same []string
		for _, n := range names {
			if sameFamily(fam, family(n)) {
				same = append(same, n)
			}
		}
		sort.SliceStable(same, func(i, j int) bool {
			return suggest.Distance(norm, normalize(same[i])) < suggest.Distance(norm, normalize(same[j]))
		})
		near = same
		if len(near) == 0 && len(fam) <= 32 {
			return fmt.Errorf("unknown model %q: the zoo has no %s models (see 'batchfit models'; a Hugging Face config.json or model directory builds others)", name, fam)
		}
	}
	if len(near) == 0 {
		return fmt.Errorf("unknown model %q (see 'batchfit models')", name)
	}
	list := quote(near)
	if len(list) > maxSuggest {
		list = append(list[:maxSuggest:maxSuggest], fmt.Sprintf("and %d more", len(near)-maxSuggest))
	}
	return fmt.Errorf("unknown model %q; did you mean %s? (see 'batchfit models')", name, strings.Join(list, ", "))
}

// family is a model name's leading letters, lower-cased: "llama" for
// Llama-3-8B, "resnet" for resnet50, "convnext" for convnext_tiny.
func family(name string) string {
	i := strings.IndexFunc(name, func(r rune) bool { return !unicode.IsLetter(r) })
	if i < 0 {
		i = len(name)
	}
	return strings.ToLower(name[:i])
}

// sameFamily reports whether families a and b are one word, b perhaps
// misspelt by one transposition, insertion or deletion.
func sameFamily(a, b string) bool {
	if a == b {
		return true
	}
	if len(a) < 3 || len(b) < 3 || suggest.Distance(a, b) != 1 {
		return false
	}
	if len(a) != len(b) {
		return true // one letter added or dropped
	}
	// equal lengths one edit apart: a transposition keeps the letters, a
	// substitution (mixtral, mistral) changes them
	ra, rb := []byte(a), []byte(b)
	sort.Slice(ra, func(i, j int) bool { return ra[i] < ra[j] })
	sort.Slice(rb, func(i, j int) bool { return rb[i] < rb[j] })
	return string(ra) == string(rb)
}

func normalize(s string) string { return suggest.Normalize(s) }

func quote(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// Nearest returns up to n zoo-style names nearest to s (see package
// suggest).
func Nearest(s string, candidates []string, n int) []string {
	return suggest.Nearest(s, candidates, n)
}

// Build looks up name and builds it for c, filling the model's defaults.
func Build(name string, c Config) (*graph.Graph, Model, error) {
	m, err := Lookup(name)
	if err != nil {
		return nil, Model{}, err
	}
	if c.Batch <= 0 {
		return nil, m, fmt.Errorf("batch size must be positive, got %d", c.Batch)
	}
	if c.Seq == 0 {
		c.Seq = m.DefaultSeq
	}
	for _, v := range []int64{c.Seq, c.Layers, c.Hidden, c.Image} {
		if v < 0 {
			return nil, m, fmt.Errorf("%s: dimensions must be positive", m.Name)
		}
	}
	g, err := m.Build(c)
	if err != nil {
		return nil, m, fmt.Errorf("%s: %w", m.Name, err)
	}
	return g, m, nil
}

func orDefault(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// Range is the values a solver may give a dimension: Min, Min+Step,
// Min+2·Step, … up to Max. A transformer's width must be a multiple of its
// head size (the heads keep their size and the hidden size is heads × head
// size); a learned position table serves no longer sequence than it has
// rows; a pipeline needs a layer a stage.
type Range struct {
	Min, Step int64
	// StepWhy says what makes the values multiples of Step ("" for 1).
	StepWhy string
	// Max is the largest valid value, 0 when only the search's limit
	// bounds it; MaxWhy says what sets it.
	Max    int64
	MaxWhy string
}

// AnyPositive is the range of a dimension that takes every positive value.
var AnyPositive = Range{Min: 1, Step: 1}

// Value is the k-th valid value (k from 1).
func (r Range) Value(k int64) int64 { return r.Min + (k-1)*r.Step }

// Count is the number of valid values no larger than limit (and Max).
func (r Range) Count(limit int64) int64 {
	if r.Max > 0 && (limit <= 0 || r.Max < limit) {
		limit = r.Max
	}
	if limit < r.Min {
		return 0
	}
	return (limit-r.Min)/r.Step + 1
}

// Valid reports whether v is one of the range's values.
func (r Range) Valid(v int64) bool {
	return v >= r.Min && (v-r.Min)%r.Step == 0 && (r.Max == 0 || v <= r.Max)
}
