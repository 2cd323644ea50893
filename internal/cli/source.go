package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/batchfit/batchfit/capture"
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
	if errors.Is(statErr, fs.ErrNotExist) && looksLikePath(arg, ext) {
		// a path that is not there: say so, not "unknown model" (unless
		// it is a zoo name after all, such as a Hugging Face id org/name)
		if m, err := models.Lookup(arg); err == nil && !strings.ContainsAny(arg[:1], `./\~`) {
			return predict.Zoo{M: m}, nil
		}
		msg := fmt.Sprintf("%s: not found (no such file or directory; a model is a zoo name from 'batchfit models' or a .yaml, .onnx, .bfgraph, config.json or model directory)", arg)
		if m, err := models.Lookup(filepath.Base(strings.TrimRight(arg, `/\`))); err == nil && ext == "" {
			msg += fmt.Sprintf("; did you mean the zoo's %s?", m.Name)
		}
		return nil, errors.New(msg)
	}
	if statErr == nil && !info.IsDir() && !info.Mode().IsRegular() {
		// a device (/dev/zero), a FIFO or a socket has no end, or one
		// that costs gigabytes before a reader's allowance refuses it:
		// refused from its mode (after symbolic links), before any reader
		// reads from it, whatever the extension
		return nil, fmt.Errorf("%w; a model is a zoo name or a .yaml, .onnx, .bfgraph, config.json or model directory", capture.NotRegular(arg, info.Mode()))
	}
	switch {
	case ext == ".bfgraph" || strings.HasSuffix(strings.ToLower(arg), ".bfgraph.gz"):
		m, err := capture.Load(arg)
		if err != nil {
			return nil, err
		}
		return m, nil
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
		return nil, fmt.Errorf("%s: unknown model file type %q (want .yaml, .onnx, .bfgraph, config.json or a model directory)", arg, ext)
	}
	m, err := models.Lookup(arg)
	if err != nil {
		return nil, usageError{err}
	}
	return predict.Zoo{M: m}, nil
}

// looksLikePath tells a path from a zoo name: a directory separator, a
// leading . or ~, or a model file's extension.
func looksLikePath(arg, ext string) bool {
	switch ext {
	case ".yaml", ".yml", ".json", ".onnx", ".bfgraph":
		return true
	}
	return strings.ContainsAny(arg, `/\`) || strings.HasPrefix(arg, ".") || strings.HasPrefix(arg, "~")
}

type specSource struct {
	s    *spec.Spec
	name string
}

// Name is the spec's name: its name field, or else the file's base name
// (spec.Spec.Name), as a zoo model's or a config's is its own; the path
// stays in name for the messages about the file.
func (s specSource) Name() string { return s.s.Name }

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
