package capture

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/graph"
)

// hostileCases are edits of testdata/linear.bfgraph that PyTorch could not
// have recorded, each refused with the file, the record and the field
// named. The file: tensors 0–9 (0 fc.weight [3,4] float32 in a 48-byte
// storage, 2 the input, 7 the loss), ops 0–4 (2 is relu_ with one
// argument, 4 nll_loss_forward with five).
var hostileCases = []struct{ name, old, new, want string }{
	{"mutates past the arguments", `"mutates": [0]`, `"mutates": [99]`, "op 2 (aten::relu_): mutates[0] = 99: the op has 1 arguments"},
	{"mutates negative", `"mutates": [0]`, `"mutates": [-1]`, "mutates[0] = -1"},
	{"softmax without its dim", `"args": [{"t": 6}, {"v": 1}, {"v": false}]`, `"args": [{"t": 6}]`, "op 3 (aten::_log_softmax): 1 arguments: the op takes at least 2"},
	{"loss is a parameter", `"loss": 7`, `"loss": 0`, "loss: tensor 0 is a parameter"},
	{"storage bytes negative", `"storage_nbytes": 48, "role": "parameter"`, `"storage_nbytes": -48, "role": "parameter"`, "tensors[0]: storage_nbytes -48"},
	{"storage bytes huge", `"storage_nbytes": 48, "role": "parameter"`, `"storage_nbytes": 9000000000000000000, "role": "parameter"`, "tensors[0]: storage_nbytes 9000000000000000000"},
	// [3,4] float32 with strides [4,1]: 4 × (1 + 2×4 + 3×1) = 48 bytes, so
	// a 47-byte storage is too small
	{"storage too small", `"storage_nbytes": 48, "role": "parameter"`, `"storage_nbytes": 47, "role": "parameter"`, "reach byte 48 of a storage of 47 bytes"},
	{"storage index negative", `"storage": 0, "storage_nbytes": 48, "role": "parameter"`, `"storage": -1, "storage_nbytes": 48, "role": "parameter"`, "tensors[0]: storage -1"},
	{"storage index huge", `"storage": 0, "storage_nbytes": 48, "role": "parameter"`, `"storage": 1000000000, "storage_nbytes": 48, "role": "parameter"`, "tensors[0]: storage 1000000000"},
	{"stride negative", `"shape": [3, 4], "stride": [4, 1]`, `"shape": [3, 4], "stride": [-4, 1]`, "tensors[0]: stride[0] = -4"},
	{"stride missing", `"shape": [3, 4], "stride": [4, 1]`, `"shape": [3, 4], "stride": [4]`, "want one stride a dimension"},
	{"offset 2^62", `"stride": [4, 1], "offset": 0`, `"stride": [4, 1], "offset": 4611686018427387904`, "tensors[0]: offset 4611686018427387904"},
	// offset 1 of [3,4] strides [4,1]: 4 × (1 + 1 + 11) = 52 > 48
	{"offset past the storage", `"stride": [4, 1], "offset": 0`, `"stride": [4, 1], "offset": 1`, "reach byte 52 of a storage of 48 bytes"},
	{"freed_after negative", `"storage_nbytes": 4, "role": "activation", "requires_grad": false`, `"storage_nbytes": 4, "role": "activation", "requires_grad": false, "freed_after": -5`, "tensors[9]: freed_after -5"},
	{"saved_by past the ops", `"storage_nbytes": 4, "role": "activation", "requires_grad": false`, `"storage_nbytes": 4, "role": "activation", "requires_grad": false, "saved_by": [5]`, "tensors[9]: saved_by[0] = 5"},
	{"alias argument out of range", `"alias": [[0, 0]], "mutates"`, `"alias": [[0, 7]], "mutates"`, "op 2 (aten::relu_): alias[0] = [0 7]: argument 7"},
	{"alias result out of range", `"alias": [[0, 0]], "mutates"`, `"alias": [[-1, 0]], "mutates"`, "alias[0] = [-1 0]: result -1"},
	{"aten name malformed", `"aten": "aten::t"`, `"aten": "aten::t; rm -rf"`, `op 0: aten "aten::t; rm -rf": not an operator's name`},
	{"aten name without namespace", `"aten": "aten::t"`, `"aten": "t"`, `op 0: aten "t": not an operator's name`},
	{"aten overload empty", `"aten": "aten::addmm"`, `"aten": "aten::addmm."`, `op 1: aten "aten::addmm.": not an operator's name`},
	{"aten two overloads", `"aten": "aten::addmm"`, `"aten": "aten::addmm.out.out"`, `op 1: aten "aten::addmm.out.out": not an operator's name`},
	{"aten namespace dotted", `"aten": "aten::addmm"`, `"aten": "aten.x::addmm"`, `op 1: aten "aten.x::addmm": not an operator's name`},
	{"aten overloads disagree", `"aten": "aten::addmm", "overload": "default"`, `"aten": "aten::addmm.out", "overload": "default"`, `op 1: aten "aten::addmm.out": overload "out" in the name, "default" in the overload field`},
	{"trailing garbage", `"custom_calls": []}`, `"custom_calls": []} garbage`, "data after the graph's JSON document"},
	{"second document", `"custom_calls": []}`, `"custom_calls": []} {"format": "batchfit-graph"}`, "data after the graph's JSON document"},
	{"field twice", `"loss": 7,`, `"loss": 7, "loss": 7,`, `field "loss" given twice`},
}

// TestReadHostile: each record a capture cannot write is refused in one
// line naming the file (and, where the edit says, the op and field).
func TestReadHostile(t *testing.T) {
	good, err := os.ReadFile("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Read("x.bfgraph", bytes.NewReader(good)); err != nil {
		t.Fatalf("the clean file: %v", err)
	}
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			if !bytes.Contains(good, []byte(c.old)) {
				t.Fatalf("the test file has no %q", c.old)
			}
			data := bytes.Replace(good, []byte(c.old), []byte(c.new), 1)
			_, err := Read("x.bfgraph", bytes.NewReader(data))
			if err == nil {
				t.Fatalf("read with no error, want one containing %q", c.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "capture: x.bfgraph: ") || strings.Contains(msg, "internal") {
				t.Errorf("error %q: want one line naming x.bfgraph and containing %q", msg, c.want)
			}
		})
	}
}

// TestReadTrailingGzip: a gzip stream followed by a second one (or any
// data) is refused, as the plain file's second document is.
func TestReadTrailingGzip(t *testing.T) {
	good, _ := os.ReadFile("testdata/linear.bfgraph")
	var buf bytes.Buffer
	for i := 0; i < 2; i++ {
		z := gzip.NewWriter(&buf)
		z.Write(good)
		z.Close()
	}
	if _, err := Read("x.bfgraph.gz", &buf); err == nil || !strings.Contains(err.Error(), "data after the gzip stream") {
		t.Errorf("two gzip members: %v, want data after the gzip stream", err)
	}
}

// bomb is a gzip'd file of n ops of the least bytes the reader takes one
// for: {"aten":"aten::x"}, 19 bytes each with the comma.
func bomb(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	fmt.Fprint(z, `{"format":"batchfit-graph","version":1,"batch":{"captured":[2,3]},"tensors":[],"ops":[`)
	one := []byte(`{"aten":"aten::x"},`)
	for i := 0; i < n; i++ {
		z.Write(one)
	}
	fmt.Fprint(z, `{"aten":"aten::x"}],"loss":0}`)
	z.Close()
	return buf.Bytes()
}

// TestReadBomb: a small gzip file of more ops than graph.MaxOps is refused
// at the op past the bound, soon and in little memory. The input admitted
// before the refusal is 65,537 ops × 19 bytes ≈ 1.2 MB of JSON; decoded,
// an op record is its struct (about 264 bytes: five strings, six slices,
// two maps, two ints and a bool) in chunks that are only copied once the
// array ends, so 65,536 × 264 B ≈ 17 MB; the bound is 64 MiB allocated,
// under 60 times the admitted input. (The former reader decompressed up
// to 256 MiB and decoded all of it before counting.)
func TestReadBomb(t *testing.T) {
	data := bomb(t, 4*graph.MaxOps)
	if len(data) > 64<<10 {
		t.Fatalf("the bomb is %d bytes gzip'd; the test wants a small one", len(data))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := Read("bomb.bfgraph.gz", bytes.NewReader(data))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "more than 65536 ops") {
		t.Fatalf("error %v, want more than 65536 ops", err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d bytes gzip, refused in %v, %d MiB allocated", len(data), took, alloc>>20)
	if alloc > 64<<20 {
		t.Errorf("allocated %d MiB reading a %d-byte bomb, want at most 64 MiB", alloc>>20, len(data))
	}
	if took > 10*time.Second {
		t.Errorf("took %v to refuse the bomb", took)
	}
}

// TestReadAllowance: JSON past the decompression allowance is refused as
// it is read, even where no count is passed (one long string).
func TestReadAllowance(t *testing.T) {
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	fmt.Fprint(z, `{"name":"`)
	z.Write(bytes.Repeat([]byte("a"), maxInputBytes))
	fmt.Fprint(z, `"}`)
	z.Close()
	_, err := Read("big.bfgraph.gz", &buf)
	if err == nil || !strings.Contains(err.Error(), "more than 64 MiB of JSON") {
		t.Errorf("error %v, want more than 64 MiB of JSON", err)
	}
}

// TestLoadNotRegular: a path to a device or a named pipe is refused from
// its mode, before a byte is read (reading /dev/zero would never end).
func TestLoadNotRegular(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "z.bfgraph")
	if err := os.Symlink(os.DevNull, link); err != nil {
		t.Skip(err)
	}
	for _, p := range []string{link, dir} {
		_, err := Load(p)
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want not a regular file", filepath.Base(p), err)
		}
	}
}

// TestReadShippedCaptures: every capture batchfit ships passes the
// checks (the in-bounds rule and the arities hold of what torch records).
func TestReadShippedCaptures(t *testing.T) {
	paths, _ := filepath.Glob("../testdata/capture/*.bfgraph.gz")
	if len(paths) == 0 {
		t.Skip("no captures")
	}
	for _, p := range paths {
		if _, err := Load(p); err != nil {
			t.Errorf("%v", err)
		}
	}
}
