package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/hf"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/spec"
)

// resolveSource turns the model argument into a Source: a zoo name, a path
// to a YAML layer spec, a Hugging Face config.json or model directory, or
// an ONNX file.
func resolveSource(arg string) (predict.Source, error) {
	ext := strings.ToLower(filepath.Ext(arg))
	info, statErr := os.Stat(arg)
	switch {
	case ext == ".yaml" || ext == ".yml":
		s, err := spec.ParseFile(arg)
		if err != nil {
			return nil, err
		}
		return specSource{s: s, name: arg}, nil
	case ext == ".json", statErr == nil && info.IsDir():
		// A Hugging Face config.json or model directory (config plus
		// safetensors headers, sharded or not).
		m, err := hf.Open(arg)
		if err != nil {
			return nil, err
		}
		return m, nil
	case ext == ".onnx":
		m, err := onnx.Load(arg)
		if err != nil {
			return nil, err
		}
		return m, nil
	case statErr == nil:
		return nil, fmt.Errorf("%s: unknown model file type %q (want .yaml, .onnx, config.json or a model directory)", arg, ext)
	}
	m, err := models.Lookup(arg)
	if err != nil {
		return nil, usageError{err}
	}
	return predict.Zoo{M: m}, nil
}

type specSource struct {
	s    *spec.Spec
	name string
}

func (s specSource) Name() string { return s.name }

func (s specSource) Build(c models.Config) (*graph.Graph, error) {
	over, err := s.overrides(c)
	if err != nil {
		return nil, err
	}
	return s.s.BuildAdapted(c.Batch, c.Seq, over, c.Adapters)
}

// overrides are --layers and --hidden as the spec's parameters.
func (s specSource) overrides(c models.Config) (map[string]int64, error) {
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
// (spec.SeqLimit); the other dimensions take every positive value.
func (s specSource) Range(d models.Dim, c models.Config) models.Range {
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

func (s specSource) DefaultSeq() int64 {
	if v, ok := s.s.Params()["seq"]; ok {
		return v
	}
	if s.s.UsesSeq() {
		return 512
	}
	return 0
}

func (s specSource) Dims() []models.Dim {
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

// sourceQuant is the quantized format a source stores its weights in (a
// Hugging Face checkpoint's quantization_config), nil for the others.
func sourceQuant(src predict.Source) *graph.Quant {
	if m, ok := src.(*hf.Model); ok && m.Config.Quant != nil {
		return m.Config.Quant
	}
	return nil
}
