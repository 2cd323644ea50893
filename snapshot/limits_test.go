package snapshot

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// seg and blk build segment and block dicts as memory_snapshot.cpp writes
// them (segmentInfoToDict).
func pseg(addr, total int64, blocks ...any) *pyDict {
	return dict(kv{"device", 0}, kv{"address", addr}, kv{"total_size", total},
		kv{"allocated_size", 0}, kv{"active_size", 0}, kv{"requested_size", 0},
		kv{"stream", 0}, kv{"segment_type", "large"}, kv{"blocks", lst(blocks...)})
}

func pblk(addr, size int64, state string) *pyDict {
	return dict(kv{"address", addr}, kv{"size", size}, kv{"requested_size", 0}, kv{"state", state})
}

func ev(action string, addr, size int64) *pyDict {
	return dict(kv{"action", action}, kv{"addr", addr}, kv{"size", size}, kv{"stream", 0})
}

func snap(segs *pyList, entries ...any) []byte {
	return pyPickle(dict(kv{"segments", segs}, kv{"device_traces", lst(lst(entries...))}), 4)
}

// rangeCases are snapshots whose figures no allocator writes, each with
// the place and field its refusal must name.
var rangeCases = []struct {
	name string
	data []byte
	want string
}{
	{"negative segment size", snap(lst(pseg(0x7f00_0000_0000, -5))),
		`segments[0]: "total_size" is -5: expected a positive size`},
	{"zero segment size", snap(lst(pseg(0x7f00_0000_0000, 0))),
		`segments[0]: "total_size" is 0`},
	{"int64 max segment size", snap(lst(pseg(0x7f00_0000_0000, 1<<63-1))),
		`segments[0]: "total_size" is 9223372036854775807`},
	{"negative address", snap(lst(pseg(-4096, 2*mib))),
		`segments[0]: "address" is -4096`},
	// 2 MiB at 0x7f0000000000 ends at 0x7f0000200000; the second starts
	// 1 MiB in.
	{"overlapping segments", snap(lst(pseg(0x7f00_0000_0000, 2*mib), pseg(0x7f00_0010_0000, 2*mib))),
		`segments[1]: "address" 0x7f0000100000 lies inside segments[0]`},
	{"allocated beyond total", snap(lst(dict(kv{"device", 0}, kv{"address", 0x7f00_0000_0000}, kv{"total_size", 2 * mib}, kv{"allocated_size", 3 * mib}, kv{"blocks", lst()}))),
		`segments[0]: "allocated_size" is 3145728, more than the segment's total_size 2097152`},
	{"block larger than its segment", snap(lst(pseg(0x7f00_0000_0000, 2*mib, pblk(0x7f00_0000_0000, 4*mib, "inactive")))),
		`segments[0].blocks[0]: 4194304 bytes at 0x7f0000000000 end beyond its segment`},
	{"block outside its segment", snap(lst(pseg(0x7f00_0000_0000, 2*mib, pblk(0x7f00_1000_0000, 512, "inactive")))),
		`segments[0].blocks[0]: 512 bytes at 0x7f0010000000 end beyond its segment`},
	{"negative block size", snap(lst(pseg(0x7f00_0000_0000, 2*mib, pblk(0x7f00_0000_0000, -512, "inactive")))),
		`segments[0].blocks[0]: "size" is -512`},
	{"overlapping blocks", snap(lst(pseg(0x7f00_0000_0000, 2*mib, pblk(0x7f00_0000_0000, mib, "inactive"), pblk(0x7f00_0000_0200, mib, "inactive")))),
		`segments[0].blocks[1]: "address" 0x7f0000000200 is before the end of the previous block`},
	{"negative allocation", snap(lst(), ev("alloc", 0x7f00_0000_0000, -1)),
		`device_traces[0][0]: "size" is -1`},
	{"huge allocation", snap(lst(), ev("alloc", 0x7f00_0000_0000, 1<<62)),
		`device_traces[0][0]: "size" is 4611686018427387904`},
	{"duplicate allocation", snap(lst(), ev("alloc", 0x7f00_0000_0000, 512), ev("alloc", 0x7f00_0000_0000, 512)),
		`device_traces[0][1]: "addr" 0x7f0000000000: alloc of a block already allocated by device_traces[0][0]`},
	{"unknown action", snap(lst(), ev("alloc", 0x7f00_0000_0000, 512), ev("teleport", 0x7f00_0000_0000, 512)),
		`device_traces[0][1]: "action" "teleport" is not an allocator action`},
}

// TestRangeChecks reads each nonsense snapshot from a file and checks that
// the refusal names the file, the place and the field.
func TestRangeChecks(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range rangeCases {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".pickle")
			if err := os.WriteFile(path, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadFile(path, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("error %v, want it to name %s and contain %q", err, path, tt.want)
			}
		})
	}
}

// TestRangeChecksAccept checks what the range checks must let through:
// the address handed out again after its free (free_requested, then
// free_completed), an inactive block whose stale requested_size exceeds
// what a split left of it, segments that touch, and the markers.
func TestRangeChecksAccept(t *testing.T) {
	stale := dict(kv{"address", int64(0x7f00_0010_0000)}, kv{"size", int64(mib)}, kv{"requested_size", int64(2 * mib)}, kv{"state", "inactive"})
	data := snap(lst(pseg(0x7f00_0000_0000, 2*mib, pblk(0x7f00_0000_0000, mib, "active_allocated"), stale), pseg(0x7f00_0020_0000, 2*mib)),
		ev("alloc", 0x7f00_0000_0000, 512), ev("free_requested", 0x7f00_0000_0000, 512), ev("free_completed", 0x7f00_0000_0000, 512),
		ev("alloc", 0x7f00_0000_0000, 512), ev("snapshot", 0, 512), ev("user_defined", 0, 0))
	s, err := Read(bytes.NewReader(data), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Segments) != 2 || len(s.Traces[0]) != 6 {
		t.Errorf("%d segments and %d entries, want 2 and 6", len(s.Segments), len(s.Traces[0]))
	}
}

// bombReader streams the memo bomb: a snapshot whose one trace is a trace
// entry dict followed by n-1 BINGETs of it, in batches of 1000 as Python
// writes APPENDS. 20 million references are 40 MB of pickle (39 KB
// gzip-compressed); streamed, the test never holds them.
type bombReader struct {
	head, tail []byte
	n          int // references still to write
	buf        []byte
}

func newBomb(n int) *bombReader {
	var h bytes.Buffer
	h.WriteString("\x80\x04}\x94(")                                   // top dict (memo 0), MARK
	h.WriteString("\x8c\x08segments\x94]\x94")                        // memo 1, 2
	h.WriteString("\x8c\x0ddevice_traces\x94]\x94]\x94")              // memo 3, 4 (traces), 5 (device 0)
	h.WriteString("(}\x94(")                                          // MARK, the entry dict (memo 6), MARK
	h.WriteString("\x8c\x06action\x94\x8c\x05alloc\x94")              // memo 7, 8
	h.WriteString("\x8c\x04addr\x94\x8a\x06\x00\x00\x00\x00\x00\x7f") // memo 9; 0x7f0000000000
	h.WriteString("\x8c\x04size\x94M\x00\x02u")                       // memo 10; 512; SETITEMS
	return &bombReader{head: h.Bytes(), tail: []byte("ea" + "u."), n: n - 1}
}

func (b *bombReader) Read(p []byte) (int, error) {
	for len(b.buf) == 0 {
		switch {
		case b.head != nil:
			b.buf, b.head = b.head, nil
		case b.n > 0:
			k := min(b.n, 999) // the first batch holds the dict itself
			b.buf = append(b.buf[:0], strings.Repeat("h\x06", k)...)
			b.buf = append(b.buf, "e("...)
			b.n -= k
		case b.tail != nil:
			b.buf, b.tail = b.tail, nil
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, b.buf)
	b.buf = b.buf[n:]
	return n, nil
}

// TestMemoBomb reads 20 million references to one trace entry, which the
// reader used to accept as 20 million entries (5.6 GB, 26 s). Each
// reference costs the dict's 7 opcodes (EMPTY_DICT and six items), so
// MaxOps (2^26) refuses it after about 2^26 / 7 ≈ 9.6 million references,
// when og-rek's list holds 9.6 million interface values of 16 bytes: 153
// MB. og-rek appends one item at a time, and Go grows a large slice by a
// quarter (runtime.growslice), so the copies made on the way sum to about
// 1 / (1 - 1/1.25) = 5 times the final size: 770 MB (826 MiB measured,
// against 5.6 GB accepted before). Bound: 1 GiB and 30 s (it takes a few
// seconds).
func TestMemoBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 20 MB of pickle before the refusal")
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := Read(onlyReader{newBomb(20_000_000)}, Options{})
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "snapshot.MaxOps") {
		t.Errorf("error %v, want the MaxOps refusal", err)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("refused in %v, %d MiB allocated", elapsed, allocated>>20)
	if allocated > 1<<30 {
		t.Errorf("allocated %d MiB, want at most 1024", allocated>>20)
	}
	if elapsed > 30*time.Second {
		t.Errorf("took %v", elapsed)
	}
}

// TestMemoBombSmall checks the bomb's pickle itself: with three
// references it decodes, and is refused as what it is, three allocations
// of one address without a free between them.
func TestMemoBombSmall(t *testing.T) {
	_, err := Read(onlyReader{newBomb(3)}, Options{})
	if err == nil || !strings.Contains(err.Error(), `device_traces[0][1]: "addr" 0x7f0000000000: alloc of a block already allocated`) {
		t.Errorf("error %v", err)
	}
}

// laughs is a list of 1000 ints, referenced 1000 times by a second list,
// itself referenced 1000 times: a few KB of pickle, 10^9 objects by
// reference. Protocol 2 style (BINPUT, BINGET).
func laughs() []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02}q\x00X\x08\x00\x00\x00segments")
	b.WriteString("](") // the 10^9 list
	b.WriteString("](") // B, memo 1 after its items
	b.WriteString("](") // A
	b.WriteString(strings.Repeat("K\x01", 1000))
	b.WriteString("eq\x01")
	b.WriteString(strings.Repeat("h\x01", 999))
	b.WriteString("eq\x02")
	b.WriteString(strings.Repeat("h\x02", 999))
	b.WriteString("es.")
	return b.Bytes()
}

// TestBudgets checks each budget against an input built to exceed it.
func TestBudgets(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	// One str declaring 1 GiB, followed by 2 MiB of its data: the reader
	// used to read on (4.1 GB before refusing).
	zw.Write([]byte("\x80\x04X\x00\x00\x00\x40"))
	zw.Write(make([]byte, 2<<20))
	zw.Close()
	four := snap(lst(), ev("alloc", 0x7f00_0000_0000, 512), ev("snapshot", 0, 0), ev("snapshot", 0, 0), ev("snapshot", 0, 0))
	tests := []struct {
		name string
		data []byte
		gzip bool
		opts Options
		want string
	}{
		// Lists A (1000 ints), B (A 1000 times) and C (B 1000 times):
		// C costs 10^9 opcodes, beyond MaxOps (2^26 ≈ 6.7e7).
		{"nested references", laughs(), false, Options{}, "snapshot.MaxOps"},
		{"1 GiB string, gzip", gz.Bytes(), true, Options{}, "declares 1073741824 bytes of data, beyond the 872415232-byte limit"},
		{"512 MiB string, gzip", []byte("\x80\x04X\x00\x00\x00\x20"), true, Options{}, "a string or text argument of 536870912 bytes, beyond the 1048576-byte limit (snapshot.MaxString)"},
		{"string just past MaxString", []byte("\x80\x04X\x01\x00\x10\x00"), true, Options{}, "of 1048577 bytes"},
		// Four entries against a limit of three.
		{"entries", four, false, Options{MaxEntries: 3}, "device_traces[0]: the snapshot holds more than 3 segments, blocks, trace entries and stacks (snapshot.MaxEntries)"},
		// The first entry's dict costs 1 (EMPTY_DICT) + 8 items + memo
		// opcodes; 40 opcodes do not reach the end of a four-entry pickle.
		{"ops", four, false, Options{MaxOps: 40}, "more than 40 opcodes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.gzip {
				path := filepath.Join(t.TempDir(), "s.pickle.gz")
				if !bytes.HasPrefix(tt.data, []byte{0x1f, 0x8b}) {
					var b bytes.Buffer
					w := gzip.NewWriter(&b)
					w.Write(tt.data)
					w.Close()
					tt.data = b.Bytes()
				}
				if err := os.WriteFile(path, tt.data, 0o644); err != nil {
					t.Fatal(err)
				}
				_, err = ReadFile(path, tt.opts)
			} else {
				_, err = Read(bytes.NewReader(tt.data), tt.opts)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestDefaultMaxBytes pins the decompression allowance to its arithmetic
// (limits.go): 2^26 opcodes × 9 bytes + 2^28 bytes of strings.
func TestDefaultMaxBytes(t *testing.T) {
	if DefaultMaxBytes != 603_979_776+268_435_456 {
		t.Errorf("DefaultMaxBytes = %d, want 872415232", DefaultMaxBytes)
	}
}
