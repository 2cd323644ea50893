package capture

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// Format and Version name the file format this package reads.
const (
	Format  = "batchfit-graph"
	Version = 1
)

// Limits on what a file may hold: a graph file is a few megabytes even
// for a 70B model (its layers repeat op for op), so these refuse a wrong
// or hostile file before it costs memory.
const (
	MaxFileBytes   = 256 << 20 // uncompressed
	MaxTensors     = 4 << 20
	MaxRank        = 16
	maxCapturedBat = 1 << 20
)

// file is the JSON document.
type file struct {
	Format   string          `json:"format"`
	Version  int             `json:"version"`
	Producer json.RawMessage `json:"producer"`
	Name     string          `json:"name"`
	Factory  string          `json:"factory"`
	Batch    struct {
		Captured []int64 `json:"captured"`
	} `json:"batch"`
	Modules  []module `json:"modules"`
	Tensors  []tensor `json:"tensors"`
	Ops      []op     `json:"ops"`
	Loss     *int     `json:"loss"`
	Outputs  []int    `json:"outputs"`
	Backward string   `json:"backward"`
	// CustomCalls are the applications of torch.autograd.Function
	// subclasses: their tensor arguments, results and what they saved.
	CustomCalls []customCall `json:"custom_calls"`
}

type customCall struct {
	Call    int    `json:"call"`
	Name    string `json:"name"`
	Inputs  []int  `json:"inputs"`
	Outputs []*int `json:"outputs"`
	Saved   []int  `json:"saved"`
}

type module struct {
	Path string `json:"path"`
	Type string `json:"type"`
}

type tensor struct {
	ID           int     `json:"id"`
	Shape        []int64 `json:"shape"`
	Batch        []int64 `json:"batch"`
	Stride       []int64 `json:"stride"`
	StrideBatch  []int64 `json:"stride_batch"`
	Offset       int64   `json:"offset"`
	DType        string  `json:"dtype"`
	Storage      int     `json:"storage"`
	StorageBytes int64   `json:"storage_nbytes"`
	StorageBatch int64   `json:"storage_nbytes_batch"`
	Role         string  `json:"role"`
	Name         string  `json:"name"`
	RequiresGrad bool    `json:"requires_grad"`
	SavedBy      []int   `json:"saved_by"`
	FreedAfter   *int    `json:"freed_after"`
	Device       string  `json:"device"`
}

type op struct {
	Aten       string         `json:"aten"`
	Overload   string         `json:"overload"`
	Args       []arg          `json:"args"`
	Kwargs     map[string]arg `json:"kwargs"`
	Out        []*int         `json:"out"`
	Module     string         `json:"module"`
	Fn         string         `json:"fn"`
	FnCall     int            `json:"fn_call"`
	FnArgs     []arg          `json:"fn_args"`
	FnKwargs   map[string]arg `json:"fn_kwargs"`
	FnOut      []*int         `json:"fn_out"`
	Custom     string         `json:"custom"`
	CustomCall int            `json:"custom_call"`
	Grad       bool           `json:"grad"`
	Alias      [][2]int       `json:"alias"`
	Mutates    []int          `json:"mutates"`
}

// arg is one argument: a tensor, a list of tensors, or a value.
type arg struct {
	T     *int            `json:"t"`
	Ts    []*int          `json:"ts"`
	V     json.RawMessage `json:"v"`
	Batch json.RawMessage `json:"batch"`
	DType string          `json:"dtype"`
	Other string          `json:"other"`
}

// Model is a captured model: a Source of package predict.
type Model struct {
	path string
	f    *file
	b0   int64
}

// Load reads a .bfgraph file (plain or gzip-compressed JSON).
func Load(path string) (*Model, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer fh.Close()
	return Read(path, fh)
}

// Read reads a graph file from r; name is how errors call it.
func Read(name string, r io.Reader) (*Model, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("capture: %s: %w", name, err)
		}
		defer z.Close()
		r = z
	} else {
		r = br
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("capture: reading %s: %w", name, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("capture: %s: larger than %d MiB uncompressed; not a graph file batchfit wrote", name, MaxFileBytes>>20)
	}
	var f file
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("capture: %s: %s", name, jsonError(data, err))
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("capture: %s: %w", name, err)
	}
	m := &Model{path: name, f: &f, b0: f.Batch.Captured[0]}
	// Build once at the captured batch: an op without a rule is an error
	// of the file, told when it is read, not at the first estimate.
	if _, err := m.Build(models.Config{Batch: m.b0}); err != nil {
		return nil, err
	}
	return m, nil
}

// jsonError names the place of a JSON error: line and column.
func jsonError(data []byte, err error) string {
	var off int64 = -1
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		off = se.Offset
	case errors.As(err, &te):
		off = te.Offset
		return fmt.Sprintf("%s (line %d): field %q: want %s, got JSON %s", "malformed", line(data, off), te.Field, te.Type, te.Value)
	}
	if off >= 0 {
		return fmt.Sprintf("malformed JSON at line %d: %v", line(data, off), err)
	}
	return fmt.Sprintf("malformed JSON: %v", err)
}

func line(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

func (f *file) check() error {
	if f.Format != Format {
		return fmt.Errorf("format %q: not a batchfit graph file (want %q)", f.Format, Format)
	}
	if f.Version != Version {
		return fmt.Errorf("version %d: this batchfit reads version %d; capture the model again with this batchfit", f.Version, Version)
	}
	if len(f.Batch.Captured) != 2 || f.Batch.Captured[0] < 1 || f.Batch.Captured[1] <= f.Batch.Captured[0] || f.Batch.Captured[1] > maxCapturedBat {
		return fmt.Errorf("batch.captured %v: want two increasing batch sizes", f.Batch.Captured)
	}
	if len(f.Tensors) > MaxTensors || len(f.Ops) > graph.MaxOps {
		return fmt.Errorf("%d tensors and %d ops: more than batchfit reads (%d, %d)", len(f.Tensors), len(f.Ops), MaxTensors, graph.MaxOps)
	}
	for i, t := range f.Tensors {
		at := fmt.Sprintf("tensors[%d]", i)
		if t.ID != i {
			return fmt.Errorf("%s: id %d, want %d (ids are positions)", at, t.ID, i)
		}
		if len(t.Shape) > MaxRank || (t.Batch != nil && len(t.Batch) != len(t.Shape)) {
			return fmt.Errorf("%s: shape %v with batch coefficients %v", at, t.Shape, t.Batch)
		}
		for j, d := range t.Shape {
			if d < 0 || (t.Batch != nil && t.Batch[j] < 0) {
				return fmt.Errorf("%s: negative size in shape %v (batch %v)", at, t.Shape, t.Batch)
			}
		}
		if _, err := graph.ParseDType(t.DType); err != nil && !strings.HasPrefix(t.DType, "complex") {
			return fmt.Errorf("%s: %w", at, err)
		}
		switch t.Role {
		case "parameter", "buffer", "input", "target", "activation", "constant":
		default:
			return fmt.Errorf("%s: role %q (want parameter, buffer, input, target, activation or constant)", at, t.Role)
		}
	}
	n := len(f.Tensors)
	ref := func(at string, p *int) error {
		if p != nil && (*p < 0 || *p >= n) {
			return fmt.Errorf("%s: tensor %d out of range (%d tensors)", at, *p, n)
		}
		return nil
	}
	checkArgs := func(at string, as []arg) error {
		for j, a := range as {
			if err := ref(fmt.Sprintf("%s[%d]", at, j), a.T); err != nil {
				return err
			}
			for _, t := range a.Ts {
				if err := ref(fmt.Sprintf("%s[%d]", at, j), t); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i, o := range f.Ops {
		at := fmt.Sprintf("ops[%d] (%s)", i, o.Aten)
		if o.Aten == "" {
			return fmt.Errorf("ops[%d]: no aten name", i)
		}
		if err := checkArgs(at+".args", o.Args); err != nil {
			return err
		}
		if err := checkArgs(at+".fn_args", o.FnArgs); err != nil {
			return err
		}
		for _, m := range []map[string]arg{o.Kwargs, o.FnKwargs} {
			for k, a := range m {
				if err := checkArgs(at+"."+k, []arg{a}); err != nil {
					return err
				}
			}
		}
		for _, p := range append(append([]*int(nil), o.Out...), o.FnOut...) {
			if err := ref(at+".out", p); err != nil {
				return err
			}
		}
	}
	for i, c := range f.CustomCalls {
		at := fmt.Sprintf("custom_calls[%d]", i)
		for _, t := range append(append([]int(nil), c.Inputs...), c.Saved...) {
			if err := ref(at, &t); err != nil {
				return err
			}
		}
		for _, p := range c.Outputs {
			if err := ref(at+".outputs", p); err != nil {
				return err
			}
		}
	}
	if f.Loss == nil {
		return errors.New("no loss")
	}
	return ref("loss", f.Loss)
}

// Name is the model's name: the factory's, or the file's.
func (m *Model) Name() string {
	if m.f.Name != "" {
		return m.f.Name
	}
	return strings.TrimSuffix(filepath.Base(m.path), filepath.Ext(m.path))
}

// Path is the file the model was read from.
func (m *Model) Path() string { return m.path }

// DefaultSeq is 0: a captured graph's sequence length is the one the
// factory used.
func (m *Model) DefaultSeq() int64 { return 0 }

// Dims is empty: only the batch varies (the capture found which sizes
// follow it).
func (m *Model) Dims() []models.Dim { return nil }

// Ops is how many aten ops the file holds.
func (m *Model) Ops() int { return len(m.f.Ops) }

// Backward says whether the capture ran backward on the meta device.
func (m *Model) Backward() string { return m.f.Backward }
