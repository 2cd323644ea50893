package spec

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// defaultSeq is the sequence length of a spec whose input uses seq but
// which declares no seq parameter: a starting point only, since the spec
// states none; --seq sets the length the job really uses.
const defaultSeq = 512

// Source is a parsed spec as a model source (predict.Source): it builds the
// spec's graph for a configuration, with --layers and --hidden as overrides
// of its parameters of those names.
type Source struct {
	s    *Spec
	name string
}

// NewSource is s as a model source named name (its file's name).
func NewSource(s *Spec, name string) Source { return Source{s: s, name: name} }

// Name is the spec's name: its name field, or else the file's base name
// (Spec.Name), as a zoo model's or a config's is its own; the path stays in
// name for the messages about the file.
func (s Source) Name() string { return s.s.Name }

// Build builds the spec's graph for c: its batch and sequence, its layers
// and hidden as the spec's parameters, and its adapters.
func (s Source) Build(c models.Config) (*graph.Graph, error) {
	over, err := s.overrides(c)
	if err != nil {
		return nil, err
	}
	return s.s.BuildAdapted(c.Batch, c.Seq, over, c.Adapters)
}

// overrides are c's layers and hidden as the spec's parameters; a spec
// that declares no such parameter cannot vary that dimension.
func (s Source) overrides(c models.Config) (map[string]int64, error) {
	over := map[string]int64{}
	declared := s.s.Params()
	for name, v := range map[string]int64{"layers": c.Layers, "hidden": c.Hidden} {
		if v == 0 {
			continue
		}
		if _, ok := declared[name]; !ok {
			return nil, fmt.Errorf("%s declares no %q parameter to override", s.name, name)
		}
		over[name] = v
	}
	return over, nil
}

// Range bounds the sequence by the spec's learned position tables
// (SeqLimit); the other dimensions take every positive value.
func (s Source) Range(d models.Dim, c models.Config) models.Range {
	if d != models.DimSeq {
		return models.AnyPositive
	}
	over, err := s.overrides(c)
	if err != nil {
		return models.AnyPositive
	}
	n, err := s.s.SeqLimit(over)
	if err != nil || n <= 0 {
		return models.AnyPositive
	}
	return models.Range{Min: 1, Step: 1, Max: n, MaxWhy: fmt.Sprintf("the %d learned positions of its position_embedding", n)}
}

// DefaultSeq is the spec's seq parameter, defaultSeq for a spec that uses
// seq without declaring it, and 0 for one without a sequence.
func (s Source) DefaultSeq() int64 {
	if v, ok := s.s.Params()["seq"]; ok {
		return v
	}
	if s.s.UsesSeq() {
		return defaultSeq
	}
	return 0
}

// Dims are the dimensions besides the batch that the spec can vary: layers
// and hidden where it declares them, seq where its input uses it.
func (s Source) Dims() []models.Dim {
	var ds []models.Dim
	p := s.s.Params()
	if _, ok := p["layers"]; ok {
		ds = append(ds, models.DimLayers)
	}
	if _, ok := p["hidden"]; ok {
		ds = append(ds, models.DimHidden)
	}
	if s.s.UsesSeq() {
		ds = append(ds, models.DimSeq)
	}
	return ds
}
