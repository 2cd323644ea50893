package snapshot

import (
	"strconv"
	"testing"

	"github.com/batchfit/batchfit/alloc"
)

const mib = 1 << 20

func blk(addr, size, req int64, state string) Block {
	return Block{Address: addr, Size: size, RequestedSize: req, State: state}
}

func ent(action string, addr, size, stream int64) TraceEntry {
	return TraceEntry{Action: action, Addr: addr, Size: size, Stream: stream}
}

// Hand-made snapshots whose recording starts mid-run. Each comment tells
// what PyTorch's allocator did before and during the recording; the
// expected figures follow from it. want* are what the recording shows and
// the replay from the rebuilt state must give; old* what a replay from an
// empty allocator gives, to show the case would catch a replay that
// ignores the starting state.
func TestConvertFromState(t *testing.T) {
	const (
		a = int64(0x7f0000000000)
		b = a + 1<<30
		c = a + 2<<30
		d = a + 3<<30
	)
	for _, tc := range []struct {
		name string
		snap *Snapshot
		// the rebuilt state: segments as "address size" with their blocks
		initial    []alloc.Segment
		segAllocs  int
		peak, end  int64
		oldAllocs  int64
		ignoreRest bool
	}{{
		// Before the recording: a 20 MiB segment at a holds weights W (8
		// MiB, never touched again) and activation X (4 MiB at a+8 MiB),
		// 8 MiB free. Recorded: X freed; 6 MiB allocated at a+8 MiB
		// (split off the 12 MiB free block); a 40 MiB segment b is
		// cudaMalloc'd for a 40 MiB block, freed, and reused for 30 MiB
		// (split: 10 MiB remain). Reserved: 20 MiB at the start, 60 at
		// the end and at the peak; one segment allocated. The free of X
		// carries its request (4 MiB), which round_size keeps; the 8 MiB
		// after it is more than 1 MiB, so it was a free block of its own.
		name: "pre-existing segment and split block",
		snap: &Snapshot{
			Segments: []Segment{
				{Address: a, TotalSize: 20 * mib, SegmentType: "large", Blocks: []Block{
					blk(a, 8*mib, 8*mib, StateActiveAllocated),
					blk(a+8*mib, 6*mib, 6*mib, StateActiveAllocated),
					blk(a+14*mib, 6*mib, 0, StateInactive)}},
				{Address: b, TotalSize: 40 * mib, SegmentType: "large", Blocks: []Block{
					blk(b, 30*mib, 30*mib, StateActiveAllocated),
					blk(b+30*mib, 10*mib, 0, StateInactive)}},
			},
			Traces: [][]TraceEntry{{
				ent(ActionFreeRequested, a+8*mib, 4*mib, 0),
				ent(ActionFreeCompleted, a+8*mib, 4*mib, 0),
				ent(ActionAlloc, a+8*mib, 6*mib, 0),
				ent(ActionSegmentAlloc, b, 40*mib, 0),
				ent(ActionAlloc, b, 40*mib, 0),
				ent(ActionFreeRequested, b, 40*mib, 0),
				ent(ActionFreeCompleted, b, 40*mib, 0),
				ent(ActionAlloc, b, 30*mib, 0),
			}},
		},
		initial: []alloc.Segment{{Address: a, Size: 20 * mib, Pool: alloc.LargePool, Blocks: []alloc.Block{
			{Address: a, Size: 8 * mib, Requested: 8 * mib, Allocated: true, ID: 1},
			{Address: a + 8*mib, Size: 4 * mib, Requested: 4 * mib, Allocated: true, ID: 2}}}},
		segAllocs: 1, peak: 60 * mib, end: 60 * mib,
		// From empty: X (4 MiB) and W (8 MiB) share a new 20 MiB
		// segment, the 40 MiB one is new: 2.
		oldAllocs: 2,
	}, {
		// Two streams and a block pending at the start. Small segment c
		// (stream 0): a 100-byte block at c, and at c+512 a block whose
		// free was requested before the recording and completes in it.
		// Segment d (20 MiB, stream 7) and segment a (20 MiB, stream 0)
		// are wholly free at the start. Recorded: the free completes; 10
		// MiB-100 is allocated on stream 7 (best fit: d, split); 1000
		// bytes on stream 0 (small pool, at c+512). Nothing is
		// cudaMalloc'd; 42 MiB reserved throughout.
		name: "two streams, small pool, pending free",
		snap: &Snapshot{
			Segments: []Segment{
				{Address: a, TotalSize: 20 * mib, SegmentType: "large", Blocks: []Block{blk(a, 20*mib, 0, StateInactive)}},
				{Address: c, TotalSize: 2 * mib, SegmentType: "small", Blocks: []Block{
					blk(c, 512, 100, StateActiveAllocated),
					blk(c+512, 1024, 1000, StateActiveAllocated),
					blk(c+1536, 2*mib-1536, 0, StateInactive)}},
				{Address: d, TotalSize: 20 * mib, Stream: 7, SegmentType: "large", Blocks: []Block{
					blk(d, 10*mib, 10*mib-100, StateActiveAllocated),
					blk(d+10*mib, 10*mib, 0, StateInactive)}},
			},
			Traces: [][]TraceEntry{{
				ent(ActionFreeCompleted, c+512, 300, 0),
				ent(ActionAlloc, d, 10*mib-100, 7),
				ent(ActionAlloc, c+512, 1000, 0),
			}},
		},
		initial: []alloc.Segment{
			{Address: a, Size: 20 * mib, Pool: alloc.LargePool},
			{Address: c, Size: 2 * mib, Pool: alloc.SmallPool, Blocks: []alloc.Block{
				{Address: c, Size: 512, Requested: 100, Allocated: true, ID: 1},
				{Address: c + 512, Size: 512, Requested: 300, Allocated: true, ID: 2}}},
			{Address: d, Size: 20 * mib, Stream: 1, Pool: alloc.LargePool},
		},
		segAllocs: 0, peak: 42 * mib, end: 42 * mib,
		// From empty: the 100-byte block takes a small segment, the
		// stream-7 block a 20 MiB one.
		oldAllocs: 2,
	}, {
		// Expandable segments (20 MiB pages in the large pool). At the
		// start 60 MiB are mapped at a: W (30 MiB) and Y (10 MiB at a+30)
		// allocated, 20 MiB free. Recorded: Y freed; empty_cache unmaps
		// the whole free page [a+40, a+60) (the free space [a+30, a+40)
		// is part of a page in use); a 25 MiB request then maps one page
		// again at a+40 and takes [a+30, a+55). Reserved: 60 → 40 → 60.
		name: "expandable segments",
		snap: &Snapshot{
			AllocatorSettings: AllocatorSettings{AllocConf: "expandable_segments:True", ExpandableSegments: true},
			Segments: []Segment{
				{Address: a, TotalSize: 60 * mib, SegmentType: "large", IsExpandable: true, Blocks: []Block{
					blk(a, 30*mib, 30*mib, StateActiveAllocated),
					blk(a+30*mib, 25*mib, 25*mib, StateActiveAllocated),
					blk(a+55*mib, 5*mib, 0, StateInactive)}},
			},
			Traces: [][]TraceEntry{{
				ent(ActionFreeRequested, a+30*mib, 10*mib, 0),
				ent(ActionFreeCompleted, a+30*mib, 10*mib, 0),
				ent(ActionSegmentUnmap, a+40*mib, 20*mib, 0),
				ent(ActionSegmentMap, a+40*mib, 20*mib, 0),
				ent(ActionAlloc, a+30*mib, 25*mib, 0),
			}},
		},
		initial: []alloc.Segment{{Address: a, Size: 60 * mib, Pool: alloc.LargePool, Expandable: true, Blocks: []alloc.Block{
			{Address: a, Size: 30 * mib, Requested: 30 * mib, Allocated: true, ID: 1},
			{Address: a + 30*mib, Size: 10 * mib, Requested: 10 * mib, Allocated: true, ID: 2}}}},
		segAllocs: 1, peak: 60 * mib, end: 60 * mib,
		// From empty: W and Y are mapped as 40 MiB, the 25 MiB request
		// maps one more page; nothing is unmapped (the replay has no
		// empty_cache): 2 maps.
		oldAllocs: 2,
	}, {
		// A block freed while another stream still uses it
		// (record_stream): at the start a 20 MiB segment holds X (12 MiB,
		// stream 0). X's free is requested, then 12 MiB is allocated on
		// stream 0 before X's free completes, so PyTorch cannot reuse X
		// and cudaMallocs a 12 MiB segment at b (get_allocation_size: 10
		// MiB or more is rounded to 2 MiB); then X's free completes.
		// Replayed with X freed at free_requested, the 12 MiB would fit in
		// X's place and no segment would be allocated.
		name: "free completed after an allocation",
		snap: &Snapshot{
			Segments: []Segment{
				{Address: a, TotalSize: 20 * mib, SegmentType: "large", Blocks: []Block{blk(a, 20*mib, 0, StateInactive)}},
				{Address: b, TotalSize: 12 * mib, SegmentType: "large", Blocks: []Block{
					blk(b, 12*mib, 12*mib, StateActiveAllocated)}},
			},
			Traces: [][]TraceEntry{{
				ent(ActionFreeRequested, a, 12*mib, 0),
				ent(ActionSegmentAlloc, b, 12*mib, 0),
				ent(ActionAlloc, b, 12*mib, 0),
				ent(ActionFreeCompleted, a, 12*mib, 0),
			}},
		},
		initial: []alloc.Segment{{Address: a, Size: 20 * mib, Pool: alloc.LargePool, Blocks: []alloc.Block{
			{Address: a, Size: 12 * mib, Requested: 12 * mib, Allocated: true, ID: 1}}}},
		segAllocs: 1, peak: 32 * mib, end: 32 * mib,
		// From empty: X takes a new 20 MiB segment and is freed at once;
		// the 12 MiB request reuses it.
		oldAllocs: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			r := replayFromState(t, tc.snap, 0)
			if got, want := segString(r.conv.Initial), segString(tc.initial); got != want {
				t.Errorf("rebuilt state\n got %s\nwant %s", got, want)
			}
			if len(r.conv.Warnings) > 0 {
				t.Errorf("warnings: %v", r.conv.Warnings)
			}
			if r.recSegAllocs != tc.segAllocs || r.recPeak != tc.peak || r.recEnd != tc.end {
				t.Errorf("recorded: %d segments allocated, peak %d, end %d; want %d, %d, %d", r.recSegAllocs, r.recPeak, r.recEnd, tc.segAllocs, tc.peak, tc.end)
			}
			if r.tl.Final.NumDeviceAlloc != int64(tc.segAllocs) || r.tl.PeakReserved != tc.peak || r.tl.Final.Reserved != tc.end {
				t.Errorf("replayed: %v", r)
			}
			cfg, _ := alloc.ParseConfig(tc.snap.AllocatorSettings.AllocConf)
			old, err := tc.snap.Convert(0)
			if err != nil {
				t.Fatal(err)
			}
			tl, err := alloc.Replay(old.Trace, cfg, alloc.Device{}, alloc.ReplayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tl.Final.NumDeviceAlloc != tc.oldAllocs {
				t.Errorf("from an empty allocator: %d segments allocated, want %d", tl.Final.NumDeviceAlloc, tc.oldAllocs)
			}
		})
	}
}

func segString(segs []alloc.Segment) string {
	s := ""
	for _, g := range segs {
		s += "[" + hexs(g.Address) + " " + itoa(g.Size) + " s" + itoa(int64(g.Stream)) + " " + g.Pool.String()
		if g.Expandable {
			s += " exp"
		}
		for _, b := range g.Blocks {
			s += " (" + hexs(b.Address) + " " + itoa(b.Size) + " r" + itoa(b.Requested) + " #" + itoa(b.ID) + ")"
		}
		s += "]"
	}
	return s
}

func hexs(n int64) string { return "0x" + itoaBase(n, 16) }
func itoa(n int64) string { return itoaBase(n, 10) }

func itoaBase(n int64, base int) string { return strconv.FormatInt(n, base) }

// FuzzConvertFromState builds snapshots from arbitrary bytes (segments
// with blocks, then entries over a few addresses) and checks that
// ConvertFromState never panics and that what it returns replays.
func FuzzConvertFromState(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 1, 1, 2, 0})
	f.Add([]byte{0xff, 6, 2, 2, 0, 5, 2, 2, 0, 0, 2, 4, 0, 1, 3, 4})
	actions := []string{ActionAlloc, ActionFreeRequested, ActionFreeCompleted, ActionSegmentAlloc,
		ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap, ActionOOM}
	const base = int64(0x7f0000000000)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 || len(data) > 4096 {
			return
		}
		expandable := data[0]&0x80 != 0
		s := &Snapshot{AllocatorSettings: AllocatorSettings{ExpandableSegments: expandable}}
		if expandable {
			s.AllocatorSettings.AllocConf = "expandable_segments:True"
		}
		nseg := int(data[0] & 3)
		data = data[1:]
		for i := 0; i < nseg && len(data) >= 2; i++ {
			addr := base + int64(i)*40*mib
			g := Segment{Address: addr, TotalSize: 20 * mib, SegmentType: "large", IsExpandable: expandable}
			if data[0]&1 != 0 {
				g.TotalSize, g.SegmentType = 2*mib, "small"
			}
			if n := int64(data[1] & 15); n > 0 {
				size := n * g.TotalSize / 16 / 512 * 512
				g.Blocks = append(g.Blocks, blk(addr, size, size-int64(data[0]>>1), StateActiveAllocated))
			}
			s.Segments = append(s.Segments, g)
			data = data[2:]
		}
		var entries []TraceEntry
		for len(data) >= 3 {
			e := TraceEntry{Action: actions[data[0]&7], Addr: base + int64(data[1]&31)*mib, Size: int64(data[2]) * 256 * 1024, Stream: int64(data[0] >> 7)}
			entries = append(entries, e)
			data = data[3:]
		}
		s.Traces = [][]TraceEntry{entries}
		cfg, err := alloc.ParseConfig(s.AllocatorSettings.AllocConf)
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.ConvertFromState(0, cfg)
		if err != nil {
			return
		}
		if _, err := alloc.Replay(c.Trace, cfg, alloc.Device{}, alloc.ReplayOptions{Initial: c.Initial}); err != nil {
			t.Fatalf("the converted trace does not replay from its state: %v", err)
		}
	})
}
