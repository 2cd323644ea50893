package snapshot

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/alloc"
)

// TestHostile feeds inputs built to make a decoder allocate from declared
// lengths, recurse, or loop, and checks that each fails fast with a clear
// error and little memory.
func TestHostile(t *testing.T) {
	rep := func(s string, n int) string { return strings.Repeat(s, n) }
	tests := []struct {
		name    string
		data    string
		want    string // in the error, with the input's size known
		wantLen string // in the error, with the size unknown (Read of a plain io.Reader)
	}{
		{"BINUNICODE 4 GiB", "\x80\x04X\xff\xff\xff\xffabc", "declares 4294967295 bytes of data but only 3 remain", "beyond the 872415232-byte limit"},
		{"BINBYTES 4 GiB", "\x80\x04B\xff\xff\xff\xffabc", "declares 4294967295 bytes", "beyond the"},
		{"BINSTRING 2 GiB", "\x80\x02T\xff\xff\xff\x7fabc", "declares 2147483647 bytes", "beyond the"},
		{"BYTEARRAY8 huge", "\x80\x05\x96\xff\xff\xff\xff\xff\xff\xff\x3fabc", "declares 4611686018427387903 bytes", "beyond the"},
		{"BYTEARRAY8 beyond 2^62", "\x80\x05\x96\xff\xff\xff\xff\xff\xff\xff\xffabc", "declares 18446744073709551615 bytes", "declares 18446744073709551615 bytes"},
		{"FRAME huge", "\x80\x04\x95\x00\x00\x00\x00\x00\x01\x00\x00}.", "frame of 1099511627776 bytes but only 2 remain", "beyond the"},
		{"LONG_BINPUT huge index", "\x80\x02]r\xff\xff\xff\xff.", "top-level object is a list", "top-level object is a list"},
		{"LONG_BINGET huge index", "\x80\x02j\xff\xff\xff\xff.", "memo: key error 4294967295", "memo: key error"},
		{"deep lists", "\x80\x02" + rep("]", 200000) + rep("a", 199999) + ".", "top-level object is a list", "top-level object is a list"},
		{"deep MARKs", "\x80\x02" + rep("(", maxStack+1) + ".", "stack deeper than", "stack deeper than"},
		{"deep dicts in segments", "\x80\x02}X\x08\x00\x00\x00segments" + rep("]", 100000) + rep("a", 99999) + "s.", "segments[0] is a list, expected a dict", "segments[0] is a list"},
		{"self-referencing dict", "\x80\x02}q\x00X\x08\x00\x00\x00segmentsh\x00s.", `"segments" is a dict, expected a list`, `"segments" is a dict`},
		{"long INT", "\x80\x02I" + rep("1", 1<<20) + "\n.", "text argument longer than 4096 bytes", "text argument longer"},
		{"long STRING", "\x80\x02S'" + rep("a", 2<<20) + "'\n.", "text argument longer than 1048576 bytes", "text argument longer"},
		{"unterminated line", "\x80\x02I12345", "truncated", "truncated"},
		{"many DUPs", "\x80\x02K\x01" + rep("2", 1<<20) + ".", "stack deeper than", "stack deeper than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, known := range []bool{true, false} {
				var r io.Reader = strings.NewReader(tt.data)
				want := tt.want
				if !known {
					r, want = onlyReader{r}, tt.wantLen
				}
				var before runtime.MemStats
				runtime.ReadMemStats(&before)
				start := time.Now()
				_, err := Read(r, Options{Frames: true})
				elapsed := time.Since(start)
				var after runtime.MemStats
				runtime.ReadMemStats(&after)
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("size known %v: error %v, want it to contain %q", known, err, want)
				}
				if elapsed > 10*time.Second {
					t.Errorf("size known %v: took %v", known, elapsed)
				}
				// Allocation stays proportional to the input (og-rek and the
				// guard each keep a slot per stack item).
				if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 200*uint64(len(tt.data))+16<<20 {
					t.Errorf("size known %v: allocated %d bytes for %d bytes of input", known, alloc, len(tt.data))
				}
			}
		})
	}
}

// TestSharedAmplification checks that references to one large object do
// not multiply into a huge Snapshot.
func TestSharedAmplification(t *testing.T) {
	blocks := lst()
	for i := 0; i < 20000; i++ {
		blocks.items = append(blocks.items, dict(kv{"size", 512}, kv{"state", "inactive"}))
	}
	seg := dict(kv{"device", 0}, kv{"address", 0}, kv{"total_size", 1}, kv{"blocks", blocks})
	segs := lst()
	for i := 0; i < 20000; i++ {
		segs.items = append(segs.items, seg) // 20000 BINGETs of one segment
	}
	data := pyPickle(dict(kv{"segments", segs}, kv{"device_traces", lst()}), 4)
	_, err := Read(bytes.NewReader(data), Options{})
	// Each BINGET costs the segment's size (about 6 opcodes a block: 20000
	// × 6 × 20000 = 2.4e9, beyond MaxOps) and is refused while decoding.
	if err == nil || !strings.Contains(err.Error(), "snapshot.MaxOps") {
		t.Errorf("Read of %d bytes sharing one segment 20000 times: %v", len(data), err)
	}
}

// TestLargeSnapshot reads a snapshot of a few hundred thousand entries as
// real ones are laid out, with and without frames.
func TestLargeSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("large input")
	}
	const n = 300000
	stacks := make([]*pyList, 64)
	for i := range stacks {
		fr := lst()
		for j := 0; j < 20; j++ {
			fr.items = append(fr.items, dict(kv{"name", "f"}, kv{"filename", "/work/model_" + string(rune('a'+i%26)) + ".py"}, kv{"line", i*100 + j}))
		}
		stacks[i] = fr
	}
	entries := lst()
	for i := 0; i < n; i++ {
		addr := int64(0x7f0000000000 + (i/2)*4096)
		action := "alloc"
		if i%2 == 1 {
			action = "free_requested"
		}
		entries.items = append(entries.items, dict(kv{"action", action}, kv{"addr", addr}, kv{"size", 4096},
			kv{"stream", 0}, kv{"time_us", int64(1714560000000000 + i)}, kv{"frames", stacks[i%len(stacks)]}))
	}
	data := pyPickle(dict(kv{"segments", lst()}, kv{"device_traces", lst(entries)}), 4)
	for _, frames := range []bool{false, true} {
		runtime.GC()
		start := time.Now()
		s, err := Read(onlyReader{bytes.NewReader(data)}, Options{Frames: frames})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := s.Trace(0)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.Events) != n {
			t.Errorf("%d events, want %d", len(tr.Events), n)
		}
		wantSites := 1 // "unknown"
		if frames {
			wantSites = len(stacks)
		}
		if len(tr.Sites) != wantSites {
			t.Errorf("%d sites, want %d", len(tr.Sites), wantSites)
		}
		elapsed := time.Since(start)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("frames=%v: %d-byte pickle read and converted in %v; heap in use with the result: %d MiB", frames, len(data), elapsed, ms.HeapInuse>>20)
		runtime.KeepAlive(s)
	}
}

func FuzzRead(f *testing.F) {
	f.Add(pyPickle(fixture(false), 4))
	f.Add(pyPickle(fixture(false), 2))
	f.Add(pyPickle(goldenValue(), 5))
	f.Add(ogrekPickle(f, goldenValue(), 2))
	f.Add(ogrekPickle(f, goldenValue(), 4))
	f.Add([]byte("\x80\x04X\xff\xff\xff\xffabc"))
	f.Add([]byte("\x80\x02}q\x00X\x08\x00\x00\x00segmentsh\x00s."))
	f.Add([]byte("\x80\x04]\x94(K\x01K\x02eh\x00a."))
	// The shapes of the budgets and range checks (limits_test.go): a memo
	// bomb of 3000 references, nested references, a string past
	// MaxString, and each nonsense snapshot.
	bomb, _ := io.ReadAll(newBomb(3000))
	f.Add(bomb)
	f.Add(laughs())
	f.Add([]byte("\x80\x04X\x01\x00\x10\x00"))
	for _, c := range rangeCases {
		f.Add(c.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		for _, frames := range []bool{true, false} {
			s, err := Read(bytes.NewReader(data), Options{Frames: frames, MaxBytes: 1 << 20})
			if err != nil {
				var pe *PickleError
				if strings.Contains(err.Error(), "internal error") && errors.As(err, &pe) {
					t.Fatalf("decoder panicked: %v", err)
				}
				continue
			}
			for d := -1; d <= len(s.Traces); d++ {
				c, err := s.Convert(d)
				if err != nil {
					continue
				}
				if err := c.Trace.Validate(); err != nil {
					t.Fatalf("device %d: %v", d, err)
				}
				cfg, err := alloc.ParseConfig(s.AllocatorSettings.AllocConf)
				if err != nil {
					continue
				}
				if c, err := s.ConvertFromState(d, cfg); err == nil {
					if _, err := alloc.Replay(c.Trace, cfg, alloc.Device{}, alloc.ReplayOptions{Initial: c.Initial}); err != nil {
						t.Fatalf("device %d: replaying from the rebuilt state: %v", d, err)
					}
				}
			}
		}
	})
}
