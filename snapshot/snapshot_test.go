package snapshot

import (
	"bytes"
	"errors"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	ogórek "github.com/kisielk/og-rek"
)

// TestPyPickleMatchesCPython pins the test pickler to CPython's output.
func TestPyPickleMatchesCPython(t *testing.T) {
	if got, want := pyPickle(goldenValue(), 4), golden(t); !bytes.Equal(got, want) {
		t.Fatalf("pyPickle differs from CPython:\n got %x\nwant %x", got, want)
	}
}

// TestSharedLists checks that lists referenced twice (BINGET after
// MEMOIZE) decode whole. og-rek alone returns the list as it was when
// memoized, before APPENDS filled it.
func TestSharedLists(t *testing.T) {
	raw, err := ogórek.NewDecoder(bytes.NewReader(golden(t))).Decode()
	if err != nil {
		t.Fatal(err)
	}
	rawFrames := raw.(map[any]any)["segments"].([]any)[0].(map[any]any)["blocks"].([]any)[0].(map[any]any)["frames"].([]any)
	t.Logf("og-rek alone decodes the shared frames list of blocks[0] with %d of 2 frames", len(rawFrames))

	s, err := Read(bytes.NewReader(golden(t)), Options{Frames: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []Frame{frTorch, frUser}
	seg := s.Segments[0]
	for name, got := range map[string][]Frame{
		"segment":   seg.Frames,
		"blocks[0]": seg.Blocks[0].Frames,
		"blocks[1]": seg.Blocks[1].Frames,
		"trace[0]":  s.Traces[0][0].Frames,
		"trace[1]":  s.Traces[0][1].Frames,
	} {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s frames = %v, want %v", name, got, want)
		}
	}
	if seg.Blocks[2].Frames != nil || s.Traces[0][2].Frames != nil {
		t.Errorf("empty frames decoded as %v, %v", seg.Blocks[2].Frames, s.Traces[0][2].Frames)
	}
	if site := seg.Blocks[1].Site; site != "/work/train.py:42:step" {
		t.Errorf("site = %q", site)
	}
	// Shared lists stay shared after conversion.
	if &seg.Blocks[0].Frames[0] != &seg.Blocks[1].Frames[0] {
		t.Error("a shared frames list was converted twice")
	}
}

func TestReadGolden(t *testing.T) {
	s, err := Read(bytes.NewReader(golden(t)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := &Snapshot{
		Segments: []Segment{{
			Device: 0, Address: addrA, TotalSize: 2097152, AllocatedSize: 1536, ActiveSize: 1536, RequestedSize: 1200,
			SegmentType: "small",
			Blocks: []Block{
				{Address: addrA, Size: 1024, RequestedSize: 1000, State: StateActiveAllocated},
				{Address: addrA + 1024, Size: 512, RequestedSize: 200, State: StateActiveAllocated},
				{Address: addrA + 1536, Size: 2095616, RequestedSize: 0, State: StateInactive},
			},
		}},
		Traces: [][]TraceEntry{{
			{Action: ActionSegmentAlloc, Addr: addrA, Size: 2097152, TimeUS: 1714560000000000},
			{Action: ActionAlloc, Addr: addrA, Size: 1000, TimeUS: 1714560000000001},
			{Action: ActionAlloc, Addr: addrA + 1024, Size: 200, TimeUS: 1714560000000002},
		}},
		AllocatorSettings: AllocatorSettings{
			PinnedNumRegisterThreads: 1,
			RoundupPower2Divisions:   map[int64]int64{1: 0, 2: 0, 4: 0},
			Raw: map[string]any{
				"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": int64(-1), "garbage_collection_threshold": 0.0,
				"expandable_segments": false, "pinned_num_register_threads": int64(1),
				"release_lock_on_cudamalloc": false, "pinned_use_cuda_host_register": false,
				"roundup_power2_divisions": map[string]any{"1": int64(0), "2": int64(0), "4": int64(0)},
			},
		},
		HasAllocatorSettings: true,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Read:\n got %+v\nwant %+v", s, want)
	}
}

// wantFixture is what fixture decodes to.
func wantFixture(frames, manyFrames bool) *Snapshot {
	fr := func(f ...Frame) []Frame {
		if !frames {
			return nil
		}
		return f
	}
	site := func(s string) string {
		if !frames {
			return ""
		}
		return s
	}
	torchFrames := fr(frCpp, frCpp2, frTorch, frAlloc)
	userFrames := fr(frFree)
	cppOnly := fr(frCpp, frCpp2)
	const (
		allocSite = "/work/model.py:88:forward"
		freeSite  = "/work/train.py:120:train_step"
		cppSite   = "??:0:c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
	)
	entryFrames, entrySite := torchFrames, site(allocSite)
	if manyFrames && frames {
		entryFrames = make([]Frame, 1500)
		for i := range entryFrames {
			entryFrames[i] = Frame{"/work/deep.py", i, "recurse"}
		}
		entrySite = "/work/deep.py:0:recurse"
	}
	const t0 = 1714560000000000
	e := func(action string, addr int64, size int64, stream int64, dt int64, frames []Frame, site string) TraceEntry {
		return TraceEntry{Action: action, Addr: addr, Size: size, Stream: stream, TimeUS: t0 + dt, Frames: frames, Site: site}
	}
	return &Snapshot{
		Segments: []Segment{
			{Device: 0, Address: segA, TotalSize: 20 << 20, AllocatedSize: 6 << 20, ActiveSize: 6 << 20, RequestedSize: 2000000 + 4194304,
				SegmentType: "large", Frames: torchFrames, Site: site(allocSite),
				Blocks: []Block{
					{Address: segA, Size: 2 << 20, RequestedSize: 2000000, State: StateActiveAllocated, Frames: torchFrames, Site: site(allocSite)},
					{Address: segA + 2<<20, Size: 4 << 20, RequestedSize: 4194304, State: StateActiveAllocated, Frames: userFrames, Site: site(freeSite)},
					{Address: segA + 6<<20, Size: 14 << 20, State: StateInactive},
				}},
			{Device: 0, Address: segB, TotalSize: 2 << 20, AllocatedSize: 512, ActiveSize: 512, RequestedSize: 100, SegmentType: "small",
				Blocks: []Block{
					{Address: segB, Size: 512, RequestedSize: 100, State: StateActiveAllocated, Frames: cppOnly, Site: site(cppSite)},
					{Address: segB + 512, Size: 2<<20 - 512, State: StateInactive},
				}},
			{Device: 1, Address: segC, TotalSize: 2 << 20, AllocatedSize: 1024, ActiveSize: 1024, RequestedSize: 1000, Stream: stream1, SegmentType: "small",
				Blocks: []Block{
					{Address: segC, Size: 1024, RequestedSize: 1000, State: StateActiveAllocated},
					{Address: segC + 1024, Size: 2<<20 - 1024, State: StateInactive},
				}},
		},
		Traces: [][]TraceEntry{
			{
				e(ActionFreeRequested, segA+6<<20, 1048576, 0, 0, userFrames, site(freeSite)),
				e(ActionFreeCompleted, segA+6<<20, 1048576, 0, 1, userFrames, site(freeSite)),
				e(ActionSegmentAlloc, segB, 2<<20, 0, 2, cppOnly, site(cppSite)),
				e(ActionAlloc, segB, 100, 0, 3, cppOnly, site(cppSite)),
				e(ActionAlloc, segA+2<<20, 4194304, 0, 4, entryFrames, entrySite),
				e(ActionAlloc, segB+512, 300, 0, 5, userFrames, site(freeSite)),
				e(ActionFreeRequested, segB+512, 300, 0, 6, userFrames, site(freeSite)),
				e(ActionFreeCompleted, segB+512, 300, 0, 7, userFrames, site(freeSite)),
				e(ActionAlloc, segB+512, 400, 0, 8, nil, ""),
				e(ActionFreeRequested, segB+512, 400, 0, 9, nil, ""),
				e(ActionFreeCompleted, segB+512, 400, 0, 10, nil, ""),
				{Action: ActionOOM, DeviceFree: 1234, Size: 20 << 20, TimeUS: t0 + 11, Frames: torchFrames, Site: site(allocSite)},
				e(ActionSnapshot, 0, 6<<20, 0, 12, nil, ""),
			},
			{
				e(ActionSegmentAlloc, segC, 2<<20, stream1, 20, nil, ""),
				e(ActionAlloc, segC, 1000, stream1, 21, nil, ""),
			},
		},
		AllocatorSettings: AllocatorSettings{
			AllocConf:                  "expandable_segments:False,max_split_size_mb:128",
			MaxSplitSize:               128 << 20,
			GarbageCollectionThreshold: 0.8,
			PinnedNumRegisterThreads:   1,
			RoundupPower2Divisions:     map[int64]int64{1: 0, 2: 4, 4: 0},
			Raw: map[string]any{
				"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False,max_split_size_mb:128",
				"max_split_size":          int64(128 << 20), "garbage_collection_threshold": 0.8,
				"expandable_segments": false, "pinned_num_register_threads": int64(1),
				"release_lock_on_cudamalloc": false, "pinned_use_cuda_host_register": false,
				"roundup_power2_divisions": map[string]any{"1": int64(0), "2": int64(4), "4": int64(0)},
			},
		},
		HasAllocatorSettings: true,
	}
}

func TestReadFixture(t *testing.T) {
	for _, many := range []bool{false, true} {
		for _, enc := range encodings(t, fixture(many)) {
			for _, frames := range []bool{true, false} {
				name := enc.name
				if many {
					name += "/many-frames"
				}
				if !frames {
					name += "/no-frames"
				}
				t.Run(name, func(t *testing.T) {
					s, err := Read(bytes.NewReader(enc.data), Options{Frames: frames})
					if err != nil {
						t.Fatal(err)
					}
					want := wantFixture(frames, many)
					if !reflect.DeepEqual(s, want) {
						diffSnapshots(t, s, want)
					}
				})
			}
		}
	}
}

// diffSnapshots reports the first differing parts of two snapshots.
func diffSnapshots(t *testing.T, got, want *Snapshot) {
	t.Helper()
	for i := range want.Segments {
		if i >= len(got.Segments) {
			t.Errorf("segment %d missing", i)
			continue
		}
		if !reflect.DeepEqual(got.Segments[i], want.Segments[i]) {
			t.Errorf("segment %d:\n got %+v\nwant %+v", i, got.Segments[i], want.Segments[i])
		}
	}
	for d := range want.Traces {
		for i := range want.Traces[d] {
			if d >= len(got.Traces) || i >= len(got.Traces[d]) {
				t.Errorf("trace %d entry %d missing", d, i)
				continue
			}
			if !reflect.DeepEqual(got.Traces[d][i], want.Traces[d][i]) {
				t.Errorf("trace %d entry %d:\n got %+v\nwant %+v", d, i, got.Traces[d][i], want.Traces[d][i])
			}
		}
	}
	if !reflect.DeepEqual(got.AllocatorSettings, want.AllocatorSettings) {
		t.Errorf("settings:\n got %+v\nwant %+v", got.AllocatorSettings, want.AllocatorSettings)
	}
	if t.Failed() {
		return
	}
	t.Errorf("snapshots differ:\n got %+v\nwant %+v", got, want)
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "snap.pickle")
	data := pyPickle(fixture(false), 4)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadFile(path, Options{Frames: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Path != path || len(s.Segments) != 3 {
		t.Errorf("ReadFile: Path %q, %d segments", s.Path, len(s.Segments))
	}
	tr, err := s.Trace(0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tr.Label, path) {
		t.Errorf("Label = %q", tr.Label)
	}

	// Errors name the file.
	if err := os.WriteFile(path, data[:len(data)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = ReadFile(path, Options{})
	if err == nil || !strings.Contains(err.Error(), "reading snapshot "+path+": ") || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("truncated file: %v", err)
	}
	_, err = ReadFile(filepath.Join(dir, "missing.pickle"), Options{})
	if err == nil || !strings.Contains(err.Error(), "missing.pickle") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	_, err = ReadFile(path, Options{MaxBytes: 100})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("MaxBytes: %v", err)
	}
	// An *os.File passed to Read gets its size checked too.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Read(f, Options{MaxBytes: 100}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read(*os.File) with MaxBytes: %v", err)
	}
}

// onlyReader hides Len, so Read cannot know the input's size.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestMaxBytesStreaming(t *testing.T) {
	data := pyPickle(fixture(false), 4)
	_, err := Read(onlyReader{bytes.NewReader(data)}, Options{MaxBytes: int64(len(data) / 2)})
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read beyond MaxBytes: %v", err)
	}
	if _, err := Read(onlyReader{bytes.NewReader(data)}, Options{MaxBytes: int64(len(data))}); err != nil {
		t.Errorf("Read within MaxBytes: %v", err)
	}
}

func TestTruncated(t *testing.T) {
	for _, enc := range []encoding{
		{"cpython-p4", pyPickle(fixture(false), 4)},
		{"cpython-p2", pyPickle(goldenValue(), 2)},
		{"ogrek-p2", ogrekPickle(t, goldenValue(), 2)},
		{"ogrek-p5", ogrekPickle(t, goldenValue(), 5)},
	} {
		for _, frames := range []bool{true, false} {
			for n := 0; n < len(enc.data); n++ {
				for _, r := range []io.Reader{bytes.NewReader(enc.data[:n]), onlyReader{bytes.NewReader(enc.data[:n])}} {
					s, err := Read(r, Options{Frames: frames})
					if err == nil {
						t.Fatalf("%s: prefix of %d bytes decoded: %+v", enc.name, n, s)
					}
					var pe *PickleError
					if !errors.As(err, &pe) || !strings.Contains(err.Error(), "truncated") && !strings.Contains(err.Error(), "empty input") {
						t.Fatalf("%s: prefix of %d bytes: %v", enc.name, n, err)
					}
				}
			}
		}
	}
}

func TestReadErrors(t *testing.T) {
	p := func(v any) []byte { return pyPickle(v, 4) }
	seg := func(extra ...kv) *pyDict {
		items := []kv{{"device", 0}, {"address", 4096}, {"total_size", 2 << 20}}
		return dict(append(items, extra...)...)
	}
	snap := func(segs, traces any) []byte {
		return p(dict(kv{"segments", segs}, kv{"device_traces", traces}))
	}
	okBlocks := kv{"blocks", lst(dict(kv{"size", 512}, kv{"state", "inactive"}))}
	long := "\x80\x02I" + strings.Repeat("9", 5000) + "\n."
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty input"},
		{"text", []byte("hello, world"), `expected PROTO opcode 0x80 at offset 0, found 0x68 ('h')`},
		{"json", []byte(`{"segments": []}`), "not a pickle"},
		{"protocol 0", []byte("(dp0\n."), "not a pickle of protocol 2 or later"},
		{"protocol 9", []byte("\x80\x09}."), "protocol 9"},
		{"top-level list", p(lst(seg(okBlocks))), "top-level object is a list, expected the dict written by torch.cuda.memory._dump_snapshot"},
		{"top-level int", p(7), "top-level object is a int"},
		{"no segments", p(dict(kv{"device_traces", lst()})), `snapshot has no "segments" key`},
		{"no device_traces", p(dict(kv{"segments", lst()})), `snapshot has no "device_traces" key`},
		{"segments not a list", snap(dict(), lst()), `"segments" is a dict, expected a list`},
		{"segment not a dict", snap(lst(lst()), lst()), "segments[0] is a list, expected a dict"},
		{"segment without blocks", snap(lst(seg()), lst()), `segments[0] has no "blocks" key`},
		{"segment without address", snap(lst(dict(kv{"device", 0}, okBlocks)), lst()), `segments[0] has no "address" key`},
		{"block without size", snap(lst(seg(kv{"blocks", lst(dict(kv{"state", "inactive"}))})), lst()), `segments[0].blocks[0] has no "size" key`},
		{"size is a str", snap(lst(seg(kv{"blocks", lst(dict(kv{"size", "512"}, kv{"state", "inactive"}))})), lst()), `segments[0].blocks[0]: "size" is a str, expected an int`},
		{"size out of range", snap(lst(seg(kv{"blocks", lst(dict(kv{"size", new(big.Int).Lsh(big.NewInt(1), 70)}, kv{"state", "inactive"}))})), lst()), `"size" is 1180591620717411303424, outside the int64 range`},
		{"state is None", snap(lst(seg(kv{"blocks", lst(dict(kv{"size", 512}, kv{"state", nil}))})), lst()), `"state" is a None, expected a str`},
		{"trace not a list", snap(lst(), lst(7)), "device_traces[0] is a int, expected a list"},
		{"entry without action", snap(lst(), lst(lst(dict(kv{"addr", 1})))), `device_traces[0][0] has no "action" key`},
		{"alloc without addr", snap(lst(), lst(lst(dict(kv{"action", "alloc"}, kv{"size", 1})))), `device_traces[0][0] has no "addr" key`},
		{"frames not a list", snap(lst(), lst(lst(dict(kv{"action", "oom"}, kv{"frames", 3})))), `"frames" is a int, expected a list`},
		{"frame not a dict", snap(lst(), lst(lst(dict(kv{"action", "oom"}, kv{"frames", lst("x")})))), `frames[0] is a str, expected a dict`},
		{"frame not a dict, dropped", snap(lst(), lst(lst(dict(kv{"action", "oom"}, kv{"frames", lst("x")})))), `(APPEND): a "frames" list holds an item that is not a frame dict`},
		{"bad pool id", snap(lst(seg(okBlocks, kv{"segment_pool_id", lst()})), lst()), `"segment_pool_id" is a list, expected a tuple of two ints`},
		{"settings not a dict", p(dict(kv{"segments", lst()}, kv{"device_traces", lst()}, kv{"allocator_settings", 1})), "allocator_settings is a int"},
		{"long INT", []byte(long), "text argument longer than 4096 bytes"},
		{"BINUNICODE8", []byte("\x80\x04\x8d\x01\x00\x00\x00\x00\x00\x00\x00a."), "(BINUNICODE8): unsupported opcode"},
		{"BUILD", []byte("\x80\x02}}b."), "(BUILD): unsupported opcode"},
		{"unknown opcode", []byte("\x80\x02\xff."), "unknown opcode 0xff"},
		{"STOP on empty stack", []byte("\x80\x02."), "STOP with an empty stack"},
		{"APPEND underflow", []byte("\x80\x02]a."), "(APPEND): stack underflow"},
		{"APPENDS without MARK", []byte("\x80\x02]K\x01e."), "(APPENDS): no MARK on the stack"},
		{"SETITEMS without dict", []byte("\x80\x02(K\x01K\x02u."), "no dict below the MARK"},
		{"memo styles mixed", []byte("\x80\x04]\x94q\x05."), "mixes MEMOIZE with PUT opcodes"},
		{"memo miss", []byte("\x80\x02h\x07."), "(BINGET): decoding: pickle: memo: key error 7"},
		{"MARK as item", []byte("\x80\x02](a."), "(APPEND): MARK as the item to append"},
		{"negative BINSTRING", []byte("\x80\x02T\xff\xff\xff\xff."), "negative length -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, frames := range []bool{true, false} {
				// Frames are not looked at when they are dropped.
				switch {
				case strings.Contains(tt.name, "dropped"):
					if frames {
						continue
					}
				case strings.HasPrefix(tt.name, "frame"):
					if !frames {
						continue
					}
				}
				s, err := Read(bytes.NewReader(tt.data), Options{Frames: frames})
				if err == nil {
					t.Fatalf("Read = %+v, want an error", s)
				}
				if !strings.Contains(err.Error(), tt.want) {
					t.Errorf("error %q does not contain %q", err, tt.want)
				}
				if !strings.HasPrefix(err.Error(), "reading snapshot: ") {
					t.Errorf("error %q lacks context", err)
				}
			}
		})
	}
}
