package hf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"sort"
	"strings"
)

// MaxHeaderSize bounds the JSON header of a safetensors file, as the
// safetensors library does (100 MB).
const MaxHeaderSize = 100_000_000

// dtypeSizes are the safetensors dtypes accepted and their element sizes.
var dtypeSizes = map[string]int64{
	"F64": 8, "F32": 4, "F16": 2, "BF16": 2,
	"I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
	"F8_E4M3": 1, "F8_E5M2": 1,
}

var dtypeNames = []string{"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2"}

// DTypeSize is the element size of a safetensors dtype ("BF16"), 0 for an
// unknown one.
func DTypeSize(dtype string) int64 { return dtypeSizes[dtype] }

// Header is the header of a safetensors file: what it stores, without the
// data.
type Header struct {
	// Path is the file ReadHeader read ("" from ParseHeader).
	Path string
	// Size is the file size in bytes.
	Size int64
	// HeaderLen is the declared length of the JSON header (the first 8
	// bytes, little-endian); the data section starts at 8 + HeaderLen.
	HeaderLen int64
	// Metadata is "__metadata__" (nil when absent).
	Metadata map[string]string
	// Tensors are sorted by their offset in the data section.
	Tensors []Tensor
}

// Tensor is one entry of a safetensors header.
type Tensor struct {
	Name  string
	DType string // the safetensors name: "F32", "BF16", "I64", ...
	Shape []int64
	// Begin and End are data_offsets: the tensor's bytes are [Begin, End)
	// of the data section.
	Begin, End int64
}

// Numel is the number of elements.
func (t Tensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Bytes is the size of the tensor's data.
func (t Tensor) Bytes() int64 { return t.End - t.Begin }

// Numel sums the elements of all tensors.
func (h *Header) Numel() int64 {
	var n int64
	for _, t := range h.Tensors {
		n += t.Numel()
	}
	return n
}

// DataSize is the extent of the data section the tensors use: the largest
// end offset.
func (h *Header) DataSize() int64 {
	var end int64
	for _, t := range h.Tensors {
		end = max(end, t.End)
	}
	return end
}

// ReadHeader reads the header of the safetensors file at path: the 8-byte
// length and the JSON it announces, never the tensors' data. The file's
// size is checked against the data the header describes.
func ReadHeader(path string) (*Header, error) { return readHeader(osFiles{}, path) }

func readHeader(fsys fs.FS, path string) (*Header, error) {
	f, err := fsys.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	ra, ok := f.(io.ReaderAt)
	if !ok {
		return nil, fmt.Errorf("%s: cannot be read at an offset", path)
	}
	h, err := ParseHeader(ra, st.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	h.Path = path
	return h, nil
}

// ParseHeader parses a safetensors header from r, a file of size bytes. It
// reads the first 8 + length bytes only, and checks:
//   - the length is at most MaxHeaderSize and the file holds it;
//   - the header is one JSON object: tensor name → {"dtype", "shape",
//     "data_offsets"}, plus an optional "__metadata__" object of strings;
//     no name twice;
//   - dtype is one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3
//     F8_E5M2; shape sizes are not negative; data_offsets is [begin, end)
//     with end − begin = numel × the dtype's size;
//   - no two tensors overlap (tensors are sorted by begin; empty tensors
//     occupy nothing);
//   - the file is at least 8 + length + the largest end long.
//
// Gaps between tensors and bytes after the last are tolerated, though the
// safetensors library itself refuses both.
func ParseHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, fmt.Errorf("not a safetensors file: %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if err := readFull(r, lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("not a safetensors file: header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, fmt.Errorf("truncated: header length %d but only %d bytes follow the length", n, size-8)
	}
	buf := make([]byte, n)
	if err := readFull(r, buf, 8); err != nil {
		return nil, fmt.Errorf("reading the %d-byte header: %w", n, err)
	}
	h := &Header{Size: size, HeaderLen: int64(n)}
	if err := h.parseJSON(buf); err != nil {
		return nil, err
	}
	if end := 8 + h.HeaderLen + h.DataSize(); end > size {
		return nil, fmt.Errorf("truncated: the tensors end at byte %d but the file has %d", end, size)
	}
	return h, nil
}

// readFull fills p from r at off; io.EOF with every byte read (ReaderAt
// may say so at the end of the input) is success.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// tensorInfo is a header entry as JSON.
type tensorInfo struct {
	DType   *string  `json:"dtype"`
	Shape   *[]int64 `json:"shape"`
	Offsets *[]int64 `json:"data_offsets"`
}

func (h *Header) parseJSON(buf []byte) error {
	if i := bytes.IndexFunc(buf, func(r rune) bool { return r != ' ' && r != '\t' && r != '\n' && r != '\r' }); i < 0 || buf[i] != '{' {
		return fmt.Errorf("header is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	if _, err := dec.Token(); err != nil { // '{'
		return fmt.Errorf("header is not JSON: %v", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("header is not JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return fmt.Errorf("header is not JSON: unexpected %v", tok)
		}
		if seen[name] {
			return fmt.Errorf("header names %q twice", name)
		}
		seen[name] = true
		if name == "__metadata__" {
			var md map[string]string
			if err := dec.Decode(&md); err != nil {
				return fmt.Errorf("__metadata__: want an object of strings: %v", err)
			}
			h.Metadata = md
			continue
		}
		var info tensorInfo
		if err := dec.Decode(&info); err != nil {
			var syntax *json.SyntaxError
			if errors.As(err, &syntax) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("header is not JSON: %v", err)
			}
			return fmt.Errorf("tensor %q: %v", name, err)
		}
		t, err := info.tensor(name)
		if err != nil {
			return fmt.Errorf("tensor %q: %w", name, err)
		}
		h.Tensors = append(h.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // '}'
		return fmt.Errorf("header is not JSON: %v", err)
	}
	if rest := buf[dec.InputOffset():]; len(bytes.TrimSpace(rest)) > 0 {
		return fmt.Errorf("header has %d bytes after its JSON object", len(bytes.TrimSpace(rest)))
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		if a.End != b.End {
			return a.End < b.End
		}
		return a.Name < b.Name
	})
	var prev *Tensor
	for i := range h.Tensors {
		t := &h.Tensors[i]
		if t.Begin == t.End {
			continue
		}
		if prev != nil && t.Begin < prev.End {
			return fmt.Errorf("tensors %q [%d, %d) and %q [%d, %d) overlap", prev.Name, prev.Begin, prev.End, t.Name, t.Begin, t.End)
		}
		prev = t
	}
	return nil
}

// maxNumel keeps numel × 8 inside int64.
const maxNumel = 1 << 59

func (info tensorInfo) tensor(name string) (Tensor, error) {
	t := Tensor{Name: name}
	if info.DType == nil {
		return t, fmt.Errorf("no dtype")
	}
	if info.Shape == nil {
		return t, fmt.Errorf("no shape")
	}
	if info.Offsets == nil {
		return t, fmt.Errorf("no data_offsets")
	}
	t.DType = *info.DType
	size, ok := dtypeSizes[t.DType]
	if !ok {
		return t, fmt.Errorf("unsupported dtype %q (supported: %s)", t.DType, strings.Join(dtypeNames, ", "))
	}
	t.Shape = *info.Shape
	numel := uint64(1)
	for _, d := range t.Shape {
		if d < 0 {
			return t, fmt.Errorf("negative size in shape %v", t.Shape)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > maxNumel {
			return t, fmt.Errorf("shape %v has too many elements", t.Shape)
		}
		numel = lo
	}
	off := *info.Offsets
	if len(off) != 2 {
		return t, fmt.Errorf("data_offsets %v: want [begin, end]", off)
	}
	t.Begin, t.End = off[0], off[1]
	if t.Begin < 0 || t.End < t.Begin {
		return t, fmt.Errorf("data_offsets [%d, %d] are not an interval", t.Begin, t.End)
	}
	if want := int64(numel) * size; t.End-t.Begin != want {
		return t, fmt.Errorf("data_offsets [%d, %d] hold %d bytes, but %s %v needs %d", t.Begin, t.End, t.End-t.Begin, t.DType, t.Shape, want)
	}
	return t, nil
}
