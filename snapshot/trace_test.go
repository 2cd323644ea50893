package snapshot

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/trace"
)

func readFixture(t *testing.T, frames bool) *Snapshot {
	t.Helper()
	s, err := Read(bytes.NewReader(pyPickle(fixture(false), 4)), Options{Frames: frames})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConvertDevice0(t *testing.T) {
	s := readFixture(t, true)
	c, err := s.Convert(0)
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Trace
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	const (
		allocSite = "/work/model.py:88:forward"
		freeSite  = "/work/train.py:120:train_step"
		cppSite   = "??:0:c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"
	)
	type ev struct {
		action trace.Action
		id     int64
		size   int64
		site   string
	}
	want := []ev{
		// Allocated before the trace, in address order: the block at segA
		// (still allocated in the snapshot) and the one at segA+6 MiB
		// (freed in the trace).
		{trace.Alloc, 1, 2000000, allocSite},
		{trace.Alloc, 2, 1048576, freeSite},
		{trace.Free, 2, 0, freeSite},
		{trace.Alloc, 3, 100, cppSite},
		{trace.Alloc, 4, 4194304, allocSite},
		{trace.Alloc, 5, 300, freeSite},
		{trace.Free, 5, 0, freeSite},
		// The address is reused: a new ID.
		{trace.Alloc, 6, 400, unknownSite},
		{trace.Free, 6, 0, unknownSite},
	}
	var got []ev
	for _, e := range tr.Events {
		if e.Category != trace.Other || e.Phase != trace.Setup || e.Step != 0 || e.Stream != 0 {
			t.Errorf("event %+v: want Other, Setup, step 0, stream 0", e)
		}
		size := e.Size
		if e.Action == trace.Free {
			size = 0
		}
		got = append(got, ev{e.Action, e.ID, size, tr.SiteName(e.Site)})
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events:\n got %+v\nwant %+v", got, want)
	}
	if c.PreExisting != 2 {
		t.Errorf("PreExisting = %d, want 2", c.PreExisting)
	}
	wantSegs := []SegmentEvent{{Action: ActionSegmentAlloc, Addr: segB, Size: 2 << 20, TimeUS: 1714560000000002, EventIndex: 3, Entry: 2}}
	if !reflect.DeepEqual(c.Segments, wantSegs) {
		t.Errorf("Segments = %+v, want %+v", c.Segments, wantSegs)
	}
	if rs := s.RecordedSegments(0); !reflect.DeepEqual(rs, wantSegs) {
		t.Errorf("RecordedSegments = %+v", rs)
	}
	wantMarkers := []Marker{
		{Action: ActionOOM, Size: 20 << 20, DeviceFree: 1234, TimeUS: 1714560000000011, EventIndex: 9, Entry: 11},
		{Action: ActionSnapshot, Size: 6 << 20, TimeUS: 1714560000000012, EventIndex: 9, Entry: 12},
	}
	if !reflect.DeepEqual(c.Markers, wantMarkers) {
		t.Errorf("Markers = %+v, want %+v", c.Markers, wantMarkers)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("Warnings = %q", c.Warnings)
	}
	if !reflect.DeepEqual(c.Streams, []int64{0}) {
		t.Errorf("Streams = %v", c.Streams)
	}
	if tr.Label != "snapshot, device 0" {
		t.Errorf("Label = %q", tr.Label)
	}
	// Live at the end: what the snapshot shows allocated on device 0.
	live := map[int64]int64{}
	for _, e := range tr.Events {
		if e.Action == trace.Alloc {
			live[e.ID] = e.Size
		} else {
			delete(live, e.ID)
		}
	}
	var liveBytes, snapBytes int64
	for _, n := range live {
		liveBytes += n
	}
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if seg.Device == 0 && b.Allocated() {
				snapBytes += b.RequestedSize
			}
		}
	}
	if liveBytes != snapBytes {
		t.Errorf("live at the end of the trace: %d bytes requested, snapshot: %d", liveBytes, snapBytes)
	}
}

func TestConvertDevice1Streams(t *testing.T) {
	s := readFixture(t, false)
	c, err := s.Convert(1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Streams, []int64{0, stream1}) {
		t.Errorf("Streams = %v", c.Streams)
	}
	want := []trace.Event{{Action: trace.Alloc, Stream: 1, Site: 0, ID: 1, Size: 1000}}
	if !reflect.DeepEqual(c.Trace.Events, want) {
		t.Errorf("events = %+v, want %+v", c.Trace.Events, want)
	}
	if !reflect.DeepEqual(c.Trace.Sites, []string{unknownSite}) {
		t.Errorf("Sites = %q", c.Trace.Sites)
	}
	if len(c.Segments) != 1 || c.Segments[0].Stream != 1 || c.Segments[0].EventIndex != 0 {
		t.Errorf("Segments = %+v", c.Segments)
	}
}

func TestConvertStateOnly(t *testing.T) {
	// No recorded history: the allocated blocks become the trace.
	s := readFixture(t, true)
	s.Traces = nil
	c, err := s.Convert(0)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	for _, e := range c.Trace.Events {
		sizes = append(sizes, e.Size)
	}
	if want := []int64{2000000, 4194304, 100}; !reflect.DeepEqual(sizes, want) {
		t.Errorf("sizes = %v, want %v", sizes, want)
	}
	if c.PreExisting != 3 {
		t.Errorf("PreExisting = %d", c.PreExisting)
	}
}

func TestConvertErrors(t *testing.T) {
	s := readFixture(t, false)
	for _, d := range []int{-1, 2, 99} {
		if _, err := s.Trace(d); err == nil {
			t.Errorf("Trace(%d) succeeded", d)
		}
		if rs := s.RecordedSegments(d); rs != nil {
			t.Errorf("RecordedSegments(%d) = %v", d, rs)
		}
	}
}

func TestConvertRepairs(t *testing.T) {
	// A ring buffer that starts mid-way and entries that contradict each
	// other still give a valid trace, with warnings.
	s := &Snapshot{Traces: [][]TraceEntry{{
		{Action: ActionFreeCompleted, Addr: 100, Size: 10}, // its free_requested is lost
		{Action: ActionAlloc, Addr: 200, Size: 20},         //
		{Action: ActionAlloc, Addr: 200, Size: 30},         // a free is missing
		{Action: ActionFreeRequested, Addr: 300, Size: 40}, // allocated before the trace
		{Action: ActionFreeRequested, Addr: 300, Size: 40}, // freed twice
		{Action: ActionFreeRequested, Addr: 200, Size: 30}, // pending at the end
		{Action: "user_defined", Size: 0},                  // unknown actions are markers
		{Action: ActionSegmentUnmap, Addr: 4096, Size: 1 << 21},
	}}}
	c, err := s.Convert(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Trace.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 4 {
		t.Errorf("Warnings = %q", c.Warnings)
	}
	for _, w := range []string{"already allocated", "already freed", "without free_requested", "freed but not completed"} {
		if !strings.Contains(strings.Join(c.Warnings, "\n"), w) {
			t.Errorf("no warning about %q in %q", w, c.Warnings)
		}
	}
	if len(c.Markers) != 1 || c.Markers[0].Action != "user_defined" {
		t.Errorf("Markers = %+v", c.Markers)
	}
	if len(c.Segments) != 1 || c.Segments[0].Action != ActionSegmentUnmap {
		t.Errorf("Segments = %+v", c.Segments)
	}
}

func TestSite(t *testing.T) {
	tests := []struct {
		frames []Frame
		want   string
	}{
		{nil, ""},
		{[]Frame{frTorch, frUser}, "/work/train.py:42:step"},
		{[]Frame{frCpp, frCpp2, frTorch}, "??:0:c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"},
		{[]Frame{frCpp, {"/usr/lib/libc.so.6", 0, "start"}, frUser}, "/work/train.py:42:step"},
		{[]Frame{frCpp, {"/usr/lib/libc.so.6", 0, "start"}}, "/usr/lib/libc.so.6:0:start"},
		{[]Frame{{`C:\envs\torch\nn\functional.py`, 1, "f"}, {`C:\work\run.py`, 7, "main"}}, `C:\work\run.py:7:main`},
	}
	for _, tt := range tests {
		if got := site(tt.frames); got != tt.want {
			t.Errorf("site(%v) = %q, want %q", tt.frames, got, tt.want)
		}
	}
}
