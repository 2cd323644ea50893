package capture

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

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
// or hostile file before it costs memory. MaxTensors: the capture
// records a tensor when an op makes or reads it (parameters, buffers and
// inputs are read; activations made), so at the op bound four per op is
// twice the most the shipped captures use (densenet201: 2,327 tensors for
// 1,116 ops); it also bounds what the records cost decoded (a tensor
// record is about 300 bytes in memory: 4 × 65,536 × 300 B ≈ 80 MB).
const (
	MaxTensors     = 4 * graph.MaxOps
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
	// Calls are the calls of the numbered children of containers (the
	// candidate blocks) with the tensors each was handed (producer
	// "capture" 3).
	Calls []blockCall `json:"calls"`
}

// blockCall is one call of a module: Op is the index of the first op it
// ran, Args the tensors it was handed, in tuples, lists and dicts too.
type blockCall struct {
	Module string `json:"module"`
	Op     int    `json:"op"`
	Args   []int  `json:"args"`
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
	// unknown counts, per operator name, the ops a build mapped by the
	// default for ops without a rule (UnknownOps); builds may run at once.
	mu      sync.Mutex
	unknown map[string]int
}

// Load reads a .bfgraph file (plain or gzip-compressed JSON). A path
// that is not a regular file (a device such as /dev/zero, a FIFO) is
// refused before anything is read from it.
func Load(path string) (*Model, error) {
	fh, err := OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer fh.Close()
	return Read(path, fh)
}

// OpenRegular opens path for reading if it is a regular file (after
// symbolic links): a device or a FIFO has no end, or one that costs
// gigabytes before a reader's allowance refuses it, so it is refused from
// its mode, before the first byte is read.
func OpenRegular(path string) (*os.File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	// Stat of the open file, not of the path: the file read is the one
	// checked
	info, err := fh.Stat()
	if err == nil {
		err = NotRegular(path, info.Mode())
	}
	if err != nil {
		fh.Close()
		return nil, err
	}
	return fh, nil
}

// NotRegular is the refusal of a model path whose mode m is not a
// regular file's (nil for a regular file).
func NotRegular(path string, m os.FileMode) error {
	if m.IsRegular() {
		return nil
	}
	return fmt.Errorf("%s: not a regular file (%s)", path, kind(m))
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.String()
}

// Read reads a graph file from r; name is how errors call it. The JSON is
// checked as it is decoded (readFile) and then field by field (check), so
// that a file Read accepts can be built without an index out of range.
func Read(name string, r io.Reader) (*Model, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("capture: %s: %w", name, err)
		}
		defer z.Close()
		// one gzip member: a second one concatenated is data after the
		// document
		z.Multistream(false)
		r = z
	} else {
		r = br
	}
	f, err := readFile(name, r)
	if err != nil {
		return nil, err
	}
	if r != io.Reader(br) {
		if _, err := br.ReadByte(); err != io.EOF {
			return nil, fmt.Errorf("capture: %s: data after the gzip stream (a graph file is one JSON object)", name)
		}
	}
	if err := f.check(); err != nil {
		return nil, fmt.Errorf("capture: %s: %w", name, err)
	}
	m := &Model{path: name, f: f, b0: f.Batch.Captured[0]}
	// Build once at the captured batch: an op without a rule is an error
	// of the file, told when it is read, not at the first estimate.
	if _, err := m.Build(models.Config{Batch: m.b0}); err != nil {
		return nil, err
	}
	return m, nil
}

// check refuses what a file batchfit wrote never holds: every index
// within what it indexes, every size, stride and offset one PyTorch
// could have made, each error naming the record and the field.
func (f *file) check() error {
	if f.Format != Format {
		return fmt.Errorf("format %q: not a batchfit graph file (want %q)", clip(f.Format), Format)
	}
	if f.Version != Version {
		return fmt.Errorf("version %d: this batchfit reads version %d; capture the model again with this batchfit", f.Version, Version)
	}
	if len(f.Batch.Captured) != 2 || f.Batch.Captured[0] < 1 || f.Batch.Captured[1] <= f.Batch.Captured[0] || f.Batch.Captured[1] > maxCapturedBat {
		return fmt.Errorf("batch.captured %v: want two increasing batch sizes", f.Batch.Captured)
	}
	n, nops := len(f.Tensors), len(f.Ops)
	for i := range f.Tensors {
		if err := f.Tensors[i].check(n, nops, f.Batch.Captured[0]); err != nil {
			return fmt.Errorf("tensors[%d]: %w", i, err)
		}
	}
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
			for k, t := range a.Ts {
				if err := ref(fmt.Sprintf("%s[%d].ts[%d]", at, j, k), t); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range f.Ops {
		o := &f.Ops[i]
		at := fmt.Sprintf("op %d (%s)", i, o.Aten)
		if err := checkAten(o.Aten); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
		if err := checkArgs(at+": args", o.Args); err != nil {
			return err
		}
		if err := checkArgs(at+": fn_args", o.FnArgs); err != nil {
			return err
		}
		for _, m := range []map[string]arg{o.Kwargs, o.FnKwargs} {
			for k, a := range m {
				if err := checkArgs(at+": "+clip(k), []arg{a}); err != nil {
					return err
				}
			}
		}
		for j, p := range o.Out {
			if err := ref(fmt.Sprintf("%s: out[%d]", at, j), p); err != nil {
				return err
			}
		}
		for j, p := range o.FnOut {
			if err := ref(fmt.Sprintf("%s: fn_out[%d]", at, j), p); err != nil {
				return err
			}
		}
		// mutates and alias come from the op's schema (alias_info of its
		// arguments and returns): positions among its arguments and
		// results; a position past the positional arguments is a
		// keyword-only one's (an out= variant's out, as F.normalize(...,
		// out=u) in spectral_norm's power iteration calls div.out)
		nargs := len(o.Args) + len(o.Kwargs)
		for j, a := range o.Mutates {
			if a < 0 || a >= nargs {
				return fmt.Errorf("%s: mutates[%d] = %d: the op has %d arguments", at, j, a, nargs)
			}
		}
		for j, pr := range o.Alias {
			if pr[0] < 0 || pr[0] >= len(o.Out) {
				return fmt.Errorf("%s: alias[%d] = %v: result %d of the op's %d", at, j, pr, pr[0], len(o.Out))
			}
			if pr[1] < 0 || pr[1] >= nargs {
				return fmt.Errorf("%s: alias[%d] = %v: argument %d of the op's %d", at, j, pr, pr[1], nargs)
			}
		}
		if o.FnCall < 0 || o.CustomCall < 0 {
			return fmt.Errorf("%s: fn_call %d, custom_call %d: want a call's number (0 for none)", at, o.FnCall, o.CustomCall)
		}
		if err := checkArity(o); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	for i, c := range f.CustomCalls {
		at := fmt.Sprintf("custom_calls[%d]", i)
		for j := range c.Inputs {
			if err := ref(fmt.Sprintf("%s: inputs[%d]", at, j), &c.Inputs[j]); err != nil {
				return err
			}
		}
		for j := range c.Saved {
			if err := ref(fmt.Sprintf("%s: saved[%d]", at, j), &c.Saved[j]); err != nil {
				return err
			}
		}
		for j, p := range c.Outputs {
			if err := ref(fmt.Sprintf("%s: outputs[%d]", at, j), p); err != nil {
				return err
			}
		}
	}
	for i, c := range f.Calls {
		at := fmt.Sprintf("calls[%d]", i)
		if c.Op < 0 || c.Op > nops {
			return fmt.Errorf("%s: op %d out of range (%d ops)", at, c.Op, nops)
		}
		for j := range c.Args {
			if err := ref(fmt.Sprintf("%s: args[%d]", at, j), &c.Args[j]); err != nil {
				return err
			}
		}
	}
	for j := range f.Outputs {
		if err := ref(fmt.Sprintf("outputs[%d]", j), &f.Outputs[j]); err != nil {
			return err
		}
	}
	if f.Loss == nil {
		return errors.New("no loss")
	}
	if err := ref("loss", f.Loss); err != nil {
		return err
	}
	// the loss is a result of the forward pass (the capture records the
	// tensor loss.backward() is called on), never a parameter, buffer or
	// input, whose storage the step does not own
	if r := f.Tensors[*f.Loss].Role; r != "activation" {
		return fmt.Errorf("loss: tensor %d is a %s, not a result of the forward pass", *f.Loss, r)
	}
	return nil
}

// check refuses a tensor record PyTorch could not have made: n tensors
// and nops ops in the file, b0 the captured batch its sizes are at.
func (t *tensor) check(n, nops int, b0 int64) error {
	if len(t.Shape) > MaxRank {
		return fmt.Errorf("shape of rank %d: at most %d", len(t.Shape), MaxRank)
	}
	if t.Batch != nil && len(t.Batch) != len(t.Shape) {
		return fmt.Errorf("shape %v with batch coefficients %v", t.Shape, t.Batch)
	}
	if len(t.Stride) != len(t.Shape) || (t.StrideBatch != nil && len(t.StrideBatch) != len(t.Shape)) {
		return fmt.Errorf("shape %v with strides %v (batch %v): want one stride a dimension", t.Shape, t.Stride, t.StrideBatch)
	}
	for j, d := range t.Shape {
		if d < 0 || d > graph.MaxBytes || (t.Batch != nil && (t.Batch[j] < 0 || t.Batch[j] > graph.MaxBytes)) {
			return fmt.Errorf("shape[%d] = %d (batch %v): want a size from 0 to %d", j, d, t.Batch, graph.MaxBytes)
		}
		// torch refuses negative strides (as_strided: "negative strides
		// are not supported")
		if st := t.Stride[j]; st < 0 || st > graph.MaxBytes {
			return fmt.Errorf("stride[%d] = %d: want a stride from 0 to %d", j, st, graph.MaxBytes)
		}
		if t.StrideBatch != nil && (t.StrideBatch[j] < -graph.MaxBytes || t.StrideBatch[j] > graph.MaxBytes) {
			return fmt.Errorf("stride_batch[%d] = %d: out of range", j, t.StrideBatch[j])
		}
	}
	item := int64(0)
	if dt, err := graph.ParseDType(t.DType); err == nil {
		item = dt.Size()
	} else if c, ok := complexSize[strings.TrimPrefix(t.DType, "torch.")]; ok {
		item = c
	} else {
		return err
	}
	switch t.Role {
	case "parameter", "buffer", "input", "target", "activation", "constant":
	default:
		return fmt.Errorf("role %q (want parameter, buffer, input, target, activation or constant)", clip(t.Role))
	}
	// storages are numbered as the capture meets them, one number per new
	// storage, so fewer than the tensors
	if t.Storage < 0 || t.Storage >= n {
		return fmt.Errorf("storage %d: want a storage number from 0 to %d (%d tensors)", t.Storage, n-1, n)
	}
	if t.StorageBytes < 0 || t.StorageBytes > graph.MaxBytes || t.StorageBatch < 0 || t.StorageBatch > graph.MaxBytes {
		return fmt.Errorf("storage_nbytes %d (batch %d): want a size from 0 to %d", t.StorageBytes, t.StorageBatch, graph.MaxBytes)
	}
	if t.Offset < 0 || t.Offset > graph.MaxBytes {
		return fmt.Errorf("offset %d: want an offset from 0 to %d", t.Offset, graph.MaxBytes)
	}
	// A view lies within its storage, as torch checks of every view it
	// makes (checkInBoundsForStorage, aten/src/ATen/native/TensorShape.cpp,
	// with computeStorageNbytes of aten/src/ATen/EmptyTensor.cpp): unless a
	// size is 0, itemsize × (offset + 1 + Σ (size−1) × stride) bytes are
	// within storage_nbytes. Every term is at most 2^56 here and at most 17
	// of them are added after a product, so the sum is taken saturating.
	if item > 0 && !t.empty() {
		end := satAdd(t.Offset, 1)
		for j, d := range t.Shape {
			end = satAdd(end, satMul(d-1, t.Stride[j]))
		}
		if need := satMul(end, item); need > t.StorageBytes {
			return fmt.Errorf("shape %v, strides %v and offset %d reach byte %d of a storage of %d bytes", t.Shape, t.Stride, t.Offset, need, t.StorageBytes)
		}
	}
	for j, k := range t.SavedBy {
		if k < 0 || k >= nops {
			return fmt.Errorf("saved_by[%d] = %d: want an op index from 0 to %d", j, k, nops-1)
		}
	}
	if p := t.FreedAfter; p != nil && (*p < 0 || *p >= nops) {
		return fmt.Errorf("freed_after %d: want an op index from 0 to %d", *p, nops-1)
	}
	return nil
}

// complexSize are the complex dtypes' element sizes (torch's
// element_size()), which graph.ParseDType does not take.
var complexSize = map[string]int64{"complex32": 4, "chalf": 4, "complex64": 8, "cfloat": 8, "complex128": 16, "cdouble": 16}

func (t *tensor) empty() bool {
	for _, d := range t.Shape {
		if d == 0 {
			return true
		}
	}
	return false
}

const satMax = math.MaxInt64

func satAdd(a, b int64) int64 {
	if a > satMax-b {
		return satMax
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > satMax/a {
		return satMax
	}
	return a * b
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
