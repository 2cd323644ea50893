package hf

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// st is a tensor for a test checkpoint.
type st struct {
	name  string
	dtype string
	shape []int64
}

func (t st) bytes() int64 {
	n := DTypeSize(t.dtype)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// stHeader is the JSON header of a valid file holding ts back to back in
// the order given, and the data size.
func stHeader(t testing.TB, ts []st, metadata map[string]string) ([]byte, int64) {
	t.Helper()
	m := map[string]any{}
	if metadata != nil {
		m["__metadata__"] = metadata
	}
	var off int64
	for _, x := range ts {
		shape := x.shape
		if shape == nil {
			shape = []int64{}
		}
		m[x.name] = map[string]any{"dtype": x.dtype, "shape": shape, "data_offsets": []int64{off, off + x.bytes()}}
		off += x.bytes()
	}
	hdr, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// save_file pads the header with spaces to a multiple of 8.
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	return hdr, off
}

// stBytes is a file: the 8-byte length, the header, dataLen zero bytes.
func stBytes(header []byte, dataLen int64) []byte {
	b := make([]byte, 8, 8+len(header)+int(dataLen))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, dataLen)...)
}

// writeST writes a valid safetensors file holding ts (zeros) at path.
func writeST(t testing.TB, path string, ts ...st) {
	t.Helper()
	hdr, n := stHeader(t, ts, map[string]string{"format": "pt"})
	writeRaw(t, path, hdr, n)
}

// writeRaw writes the length, header and dataLen zero bytes (a sparse
// tail: the data is never read).
func writeRaw(t testing.TB, path string, header []byte, dataLen int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(stBytes(header, 0)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(8+len(header)) + dataLen); err != nil {
		t.Fatal(err)
	}
}

func TestReadHeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.safetensors")
	writeST(t, path,
		st{"b", "BF16", []int64{4, 8}},
		st{"a", "F32", []int64{3}},
		st{"scalar", "F64", nil},
		st{"empty", "I64", []int64{0, 5}},
		st{"mask", "BOOL", []int64{2, 2}},
		st{"q", "F8_E4M3", []int64{16}},
		st{"i16", "I16", []int64{3}},
	)
	h, err := ReadHeader(path)
	if err != nil {
		t.Fatal(err)
	}
	if h.Path != path || h.Metadata["format"] != "pt" || len(h.Tensors) != 7 {
		t.Fatalf("header %+v", h)
	}
	var names []string
	for _, x := range h.Tensors {
		names = append(names, x.Name)
	}
	// Sorted by offset: b [0, 64), a [64, 76), scalar [76, 84), empty at 84, ...
	if got := strings.Join(names, " "); got != "b a scalar empty mask q i16" {
		t.Errorf("tensor order %s", got)
	}
	if n := h.Numel(); n != 32+3+1+0+4+16+3 {
		t.Errorf("Numel %d", n)
	}
	if d := h.DataSize(); d != 64+12+8+0+4+16+6 {
		t.Errorf("DataSize %d", d)
	}
	if h.Size != 8+h.HeaderLen+h.DataSize() {
		t.Errorf("size %d, header %d, data %d", h.Size, h.HeaderLen, h.DataSize())
	}
	b := h.Tensors[0]
	if b.DType != "BF16" || fmt.Sprint(b.Shape) != "[4 8]" || b.Begin != 0 || b.End != 64 || b.Bytes() != 64 || b.Numel() != 32 {
		t.Errorf("tensor b %+v", b)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	valid := func(ts ...st) ([]byte, int64) { return stHeader(t, ts, nil) }
	f32, n := valid(st{"w", "F32", []int64{2, 2}})
	tests := []struct {
		name string
		file []byte
		msg  string
	}{
		{"empty file", nil, "shorter than the 8-byte"},
		{"short file", []byte{1, 0, 0}, "shorter than the 8-byte"},
		{"absurd length", stBytes(nil, 0)[:0:0], ""}, // replaced below
		{"length past the end", append(binary.LittleEndian.AppendUint64(nil, 1000), `{}`...), "truncated: header length 1000"},
		{"data truncated", stBytes(f32, n-1), "truncated: the tensors end at byte"},
		{"no header", stBytes(nil, 0), "not a JSON object"},
		{"not JSON", stBytes([]byte("hello, world"), 0), "not a JSON object"},
		{"array", stBytes([]byte("[1, 2]"), 0), "not a JSON object"},
		{"broken JSON", stBytes([]byte(`{"w": {"dtype": "F32"`), 0), "not JSON"},
		{"trailing bytes", stBytes([]byte(`{} {}`), 0), "after its JSON object"},
		{"tensor not object", stBytes([]byte(`{"w": 5}`), 0), `tensor "w"`},
		{"no dtype", stBytes([]byte(`{"w": {"shape": [1], "data_offsets": [0, 4]}}`), 4), "no dtype"},
		{"no shape", stBytes([]byte(`{"w": {"dtype": "F32", "data_offsets": [0, 4]}}`), 4), "no shape"},
		{"no offsets", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [1]}}`), 4), "no data_offsets"},
		{"unknown dtype", stBytes([]byte(`{"w": {"dtype": "U16", "shape": [1], "data_offsets": [0, 2]}}`), 2), `unsupported dtype "U16"`},
		{"dtype type", stBytes([]byte(`{"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}}`), 4), `tensor "w"`},
		{"negative size", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [-1, -4], "data_offsets": [0, 16]}}`), 16), "negative size"},
		{"fractional size", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 6]}}`), 6), `tensor "w"`},
		{"huge shape", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}}`), 4), "too many elements"},
		{"one offset", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [1], "data_offsets": [4]}}`), 4), "want [begin, end]"},
		{"backwards", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}}`), 8), "not an interval"},
		{"negative offset", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}`), 8), "not an interval"},
		{"wrong size", stBytes([]byte(`{"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 8]}}`), 8), "needs 16"},
		{"overlap", stBytes([]byte(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
			"b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}`), 24), `"a" [0, 16) and "b" [8, 24) overlap`},
		{"same place", stBytes([]byte(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
			"b": {"dtype": "I32", "shape": [4], "data_offsets": [0, 16]}}`), 16), "overlap"},
		{"duplicate", stBytes([]byte(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
			"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`), 8), `names "a" twice`},
		{"metadata type", stBytes([]byte(`{"__metadata__": {"format": 1}}`), 0), "__metadata__"},
	}
	tests[2].file = binary.LittleEndian.AppendUint64(nil, 1<<40)
	tests[2].msg = "exceeds the 100000000-byte limit"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHeader(bytes.NewReader(tt.file), int64(len(tt.file)))
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v (header %+v), want one mentioning %q", err, h, tt.msg)
			}
		})
	}
	// Valid edge cases: empty header object, empty tensors anywhere,
	// gaps and trailing bytes.
	for _, ok := range []struct {
		name string
		file []byte
	}{
		{"no tensors", stBytes([]byte(`{}`), 0)},
		{"metadata only", stBytes([]byte(`{"__metadata__": {"format": "pt"}}`), 0)},
		{"padded", stBytes([]byte(`{}      `), 0)},
		{"empty tensors", stBytes([]byte(`{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
			"e": {"dtype": "F32", "shape": [0], "data_offsets": [8, 8]}}`), 16)},
		{"gap and tail", stBytes([]byte(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}`), 12)},
	} {
		if _, err := ParseHeader(bytes.NewReader(ok.file), int64(len(ok.file))); err != nil {
			t.Errorf("%s: %v", ok.name, err)
		}
	}
}

// ReadHeader names the file and never reads the data: a header claiming
// a length the file lacks is refused from the file size.
func TestReadHeaderErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.safetensors")
	hdr, n := stHeader(t, []st{{"w", "F16", []int64{8}}}, nil)
	writeRaw(t, path, hdr, n-2)
	if _, err := ReadHeader(path); err == nil || !strings.HasPrefix(err.Error(), path+": truncated") {
		t.Errorf("error %v, want a truncation naming %s", err, path)
	}
	if _, err := ReadHeader(filepath.Join(dir, "missing.safetensors")); err == nil {
		t.Error("a missing file read")
	}
	if _, err := ReadHeader(dir); err == nil {
		t.Error("a directory read")
	}
}

func TestReadIndex(t *testing.T) {
	dir := t.TempDir()
	writeST(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), st{"a", "BF16", []int64{4, 4}}, st{"b", "BF16", []int64{4}})
	writeST(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), st{"c", "F32", []int64{2}})
	index := func(m map[string]string) string {
		p := filepath.Join(dir, WeightsIndexName)
		data := mustJSON(t, map[string]any{"metadata": map[string]any{"total_size": 48}, "weight_map": m})
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}
	ck, err := ReadCheckpoint(index(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.Files) != 2 || ck.Tensors() != 3 || ck.Files[0].Numel() != 20 || ck.Files[1].Numel() != 2 {
		t.Errorf("checkpoint %+v", ck)
	}

	bad := []struct {
		name string
		m    map[string]string
		msg  string
	}{
		{"missing tensor", map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"}, `does not hold ("d")`},
		{"unlisted tensor", map[string]string{"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}, `holds "b", which the weight_map does not list`},
		{"wrong shard", map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}, "does not hold"},
		{"missing shard", map[string]string{"a": "model-00003-of-00003.safetensors"}, "model-00003-of-00003.safetensors"},
		{"escaping shard", map[string]string{"a": "../model.safetensors"}, "not a file beside the index"},
		{"absolute shard", map[string]string{"a": "/etc/passwd"}, "not a file beside the index"},
		{"empty", map[string]string{}, "weight_map: missing or empty"},
	}
	for _, tt := range bad {
		p := index(tt.m)
		if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), tt.msg) || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming %s and mentioning %q", tt.name, err, p, tt.msg)
		}
	}
	p := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(p, []byte(`{"weight_map": ["a"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIndex(p); err == nil || !strings.Contains(err.Error(), "not a safetensors index") {
		t.Errorf("broken index: error %v", err)
	}
}
