package hostile

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// The generators below write the hostile inputs into a test's temporary
// directory; none is committed. Sizes are those the probe used.

// linear is the hand-written capture every .bfgraph case edits: tensors
// 0–9, ops 0–4, op 2 aten::relu_ with one argument that it mutates.
func linear(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "capture", "testdata", "linear.bfgraph"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mutates edits relu_'s "mutates": [0] to name argument i of its one: 99
// indexed past the arguments (the parser panicked, outside the server's
// recovery, holding a reading slot), -1 before them.
func mutates(t testing.TB, i int) []byte {
	t.Helper()
	good := linear(t)
	old := []byte(`"mutates": [0]`)
	if !bytes.Contains(good, old) {
		t.Fatalf("linear.bfgraph has no %s", old)
	}
	return bytes.Replace(good, old, []byte(fmt.Sprintf(`"mutates": [%d]`, i)), 1)
}

// gz compresses what write writes, at the best ratio (a bomb's point).
func gz(t testing.TB, write func(w io.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	z, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	write(z)
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// opsBomb is a .bfgraph.gz of n empty ops: 19 bytes each, about 400 to
// one compressed (3 million: 57 MB of JSON in about 140 KB).
func opsBomb(t testing.TB, n int) []byte {
	return gz(t, func(w io.Writer) {
		io.WriteString(w, `{"format":"batchfit-graph","version":1,"batch":{"captured":[2,3]},"tensors":[],"ops":[`)
		one := bytes.Repeat([]byte(`{"aten":"aten::x"},`), 4096)
		for i := 0; i < n/4096; i++ {
			w.Write(one)
		}
		io.WriteString(w, `{"aten":"aten::x"}],"loss":0}`)
	})
}

// memoBomb is a snapshot pickle (protocol 2) whose one trace holds n
// references (BINGET, 2 bytes each) to one alloc event dict:
//
//	{"segments": [], "device_traces": [[ev, ev, ev, …]]}
//
// 20 million of them are 40 MB of pickle that compress to about 40 KB.
func memoBomb(n int) []byte {
	var b bytes.Buffer
	str := func(s string) { // BINUNICODE
		b.WriteByte('X')
		binary.Write(&b, binary.LittleEndian, uint32(len(s)))
		b.WriteString(s)
	}
	b.WriteString("\x80\x02}(")
	str("segments")
	b.WriteString("]")
	str("device_traces")
	b.WriteString("](](") // the traces list, a mark, one trace, a mark
	b.WriteString("}(")   // the event
	str("action")
	str("alloc")
	str("addr")
	b.WriteString("J\x00\x00\x00\x10") // BININT 2^28
	str("size")
	b.WriteString("M\x00\x02") // BININT2 512
	str("stream")
	b.WriteString("K\x00")
	b.WriteString("uq\x00") // SETITEMS, BINPUT 0
	b.Write(bytes.Repeat([]byte("h\x00"), n-1))
	b.WriteString("eeu.") // APPENDS to the trace, to the traces; SETITEMS; STOP
	return b.Bytes()
}

// hugeString is a gzip stream of prefix, n bytes of 'a', then suffix: one
// string of n bytes in a file of about n/1000.
func hugeString(t testing.TB, prefix string, n int, suffix string) []byte {
	return gz(t, func(w io.Writer) {
		io.WriteString(w, prefix)
		chunk := bytes.Repeat([]byte("a"), 1<<20)
		for i := 0; i < n>>20; i++ {
			w.Write(chunk)
		}
		io.WriteString(w, suffix)
	})
}

// pickleHugeString is a snapshot pickle whose top-level dict's key is one
// BINUNICODE of n bytes (the declared length matches the data: no
// early refusal on the header alone).
func pickleHugeString(t testing.TB, n int) []byte {
	var hdr bytes.Buffer
	hdr.WriteString("\x80\x02}X")
	binary.Write(&hdr, binary.LittleEndian, uint32(n))
	return hugeString(t, hdr.String(), n, "]s.")
}
