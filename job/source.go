package job

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

// Sources says where a job's model may come from.
type Sources int

const (
	// Paths: a zoo name or a path on this machine (the command line).
	Paths Sources = iota
	// ZooOnly: a zoo name, never a path of this machine's. A web request
	// names a zoo model or uploads one (given to Request as its source);
	// validate does not open a path a recording names.
	ZooOnly
)

// Open turns a model argument into a Source as sources allow: a zoo name,
// or with Paths a path to a YAML layer spec, a Hugging Face config.json
// or model directory, a captured .bfgraph, or an ONNX file.
func Open(arg string, sources Sources) (predict.Source, error) {
	if arg == "" {
		return nil, Usagef("no model given: name one from 'batchfit models' or give a path (.yaml, config.json, model directory)")
	}
	if sources == ZooOnly {
		m, err := models.Lookup(arg)
		if err != nil {
			return nil, UsageError{err}
		}
		return predict.Zoo{M: m}, nil
	}
	return openPath(arg)
}

// openPath turns the model argument into a Source: a zoo name, a path to
// a YAML layer spec, a Hugging Face config.json or model directory, or an
// ONNX file.
func openPath(arg string) (predict.Source, error) {
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
		return spec.NewSource(s, arg), nil
	case ext == ".json", statErr == nil && info.IsDir():
		// A Hugging Face config.json or model directory (config plus
		// safetensors headers, sharded or not).
		m, err := hf.Open(arg)
		if err != nil {
			return nil, err
		}
		if z, err := models.Lookup(arg); err == nil && !looksLikePath(arg, ext) {
			// a bare name is a path first: say so where the zoo has it too
			m.Config.Notes = append(m.Config.Notes, fmt.Sprintf("%s is the directory here, not the zoo's %s (run from elsewhere for the zoo model)", arg, z.Name))
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
		return nil, UsageError{err}
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

// sourceQuant is the quantized format a source stores its weights in (a
// Hugging Face checkpoint's quantization_config), nil for the others.
func sourceQuant(src predict.Source) *graph.Quant {
	if m, ok := src.(*hf.Model); ok && m.Config.Quant != nil {
		return m.Config.Quant
	}
	return nil
}
