package alloc

import (
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/trace"
)

const base = 0x7e0000000000

func allocOn(id, size int64, stream int32) trace.Event {
	return trace.Event{Action: trace.Alloc, ID: id, Size: size, Stream: stream}
}

// TestReplayFromState replays traces that start with segments already
// reserved; the expected figures follow from the caching allocator's rules
// (best fit per stream and pool, should_split, get_allocation_size), as
// worked out in each case's comment.
func TestReplayFromState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		initial []Segment
		events  []trace.Event
		// after the replay
		peakAlloc, peakRes, endAlloc, endRes int64
		devAllocs                            int64
		segs                                 []string // address offset from base and size in MiB of each listed segment
	}{{
		// One 20 MiB segment, its first 4 MiB allocated (block 1).
		// Alloc 8 MiB: best fit is the 16 MiB free block, split (16-8 >
		// 1 MiB) → 12 MiB allocated, no cudaMalloc. Free 1: its 4 MiB
		// cannot merge (block 2 follows). Alloc 10 MiB: free blocks are
		// 4 and 8 MiB, neither fits → a new 10 MiB segment (≥ 10 MiB:
		// rounded to 2 MiB). End: 8+10 allocated, 30 reserved.
		name: "pre-existing segment and block",
		initial: []Segment{{Address: base, Size: 20 * MiB, Pool: LargePool,
			Blocks: []Block{{Address: base, Size: 4 * MiB, Requested: 4 * MiB, Allocated: true, ID: 1}}}},
		events:    []trace.Event{allocOn(2, 8*MiB, 0), free(1), allocOn(3, 10*MiB, 0)},
		peakAlloc: 18 * MiB, peakRes: 30 * MiB, endAlloc: 18 * MiB, endRes: 30 * MiB, devAllocs: 1,
		segs: []string{"0:20", "new:10"},
	}, {
		// A 2 MiB small segment with 512-byte blocks at 0 and 1024: the
		// free blocks are 512 bytes at 512 and the rest after 1536. A
		// 100-byte request (512 rounded) takes the smallest that fits,
		// the one at 512, so the segment ends with three allocated
		// blocks and nothing new is reserved; freeing block 1 merges
		// nothing into the segment's head (block 3 follows it).
		name: "split small segment, best fit in a gap",
		initial: []Segment{{Address: base, Size: 2 * MiB, Pool: SmallPool, Blocks: []Block{
			{Address: base, Size: 512, Requested: 500, Allocated: true, ID: 1},
			{Address: base + 1024, Size: 512, Requested: 512, Allocated: true, ID: 2},
		}}},
		events:    []trace.Event{allocOn(3, 100, 0), free(1)},
		peakAlloc: 1536, peakRes: 2 * MiB, endAlloc: 1024, endRes: 2 * MiB,
		segs: []string{"0:2"},
	}, {
		// Blocks never cross streams: stream 1's free 16 MiB is of no use
		// to an 8 MiB request on stream 0, which cudaMallocs 20 MiB (8
		// MiB rounded is under 10 MiB: kLargeBuffer). A second 8 MiB
		// request on stream 1 fits in stream 1's free block.
		name: "two streams",
		initial: []Segment{{Address: base, Size: 20 * MiB, Stream: 1, Pool: LargePool,
			Blocks: []Block{{Address: base, Size: 4 * MiB, Requested: 4 * MiB, Allocated: true, ID: 1}}}},
		events:    []trace.Event{allocOn(2, 8*MiB, 0), allocOn(3, 8*MiB, 1)},
		peakAlloc: 20 * MiB, peakRes: 40 * MiB, endAlloc: 20 * MiB, endRes: 40 * MiB, devAllocs: 1,
		segs: []string{"0:20", "new:20"},
	}, {
		// Expandable, large pool (20 MiB pages): mapped ranges at 0 (40
		// MiB, first 30 allocated) and at 60 (20 MiB, allocated), so 20
		// MiB unmapped between. A 25 MiB request: the first unmapped
		// block, with the free 10 MiB before it, spans 30 MiB up to block
		// 2 → it maps what is missing, 15 MiB, as one whole 20 MiB page.
		// Reserved 60 → 80 MiB, one cuMemMap, and the mapped space is now
		// one contiguous 80 MiB range.
		name: "expandable ranges",
		cfg:  Config{ExpandableSegments: true},
		initial: []Segment{
			{Address: base, Size: 40 * MiB, Pool: LargePool, Expandable: true,
				Blocks: []Block{{Address: base, Size: 30 * MiB, Requested: 30 * MiB, Allocated: true, ID: 1}}},
			{Address: base + 60*MiB, Size: 20 * MiB, Pool: LargePool, Expandable: true,
				Blocks: []Block{{Address: base + 60*MiB, Size: 20 * MiB, Requested: 20 * MiB, Allocated: true, ID: 2}}},
		},
		events:    []trace.Event{allocOn(3, 25*MiB, 0)},
		peakAlloc: 75 * MiB, peakRes: 80 * MiB, endAlloc: 75 * MiB, endRes: 80 * MiB, devAllocs: 1,
		segs: []string{"0:80"},
	}, {
		// An expandable range at 40 MiB whose reservation is known to
		// begin at 0 (ReservedFrom): the unmapped space below it comes
		// first in address order, so a 20 MiB request maps the page at 0
		// (find_expandable_block) rather than the one after the range.
		name: "expandable reservation below the lowest range",
		cfg:  Config{ExpandableSegments: true},
		initial: []Segment{{Address: base + 40*MiB, Size: 20 * MiB, Pool: LargePool, Expandable: true, ReservedFrom: base,
			Blocks: []Block{{Address: base + 40*MiB, Size: 20 * MiB, Requested: 20 * MiB, Allocated: true, ID: 1}}}},
		events:    []trace.Event{allocOn(2, 20*MiB, 0)},
		peakAlloc: 40 * MiB, peakRes: 40 * MiB, endAlloc: 40 * MiB, endRes: 40 * MiB, devAllocs: 1,
		segs: []string{"0:20", "40:20"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tl, err := Replay(&trace.Trace{Events: tc.events}, tc.cfg, Device{}, ReplayOptions{Initial: tc.initial, Segments: true})
			if err != nil {
				t.Fatal(err)
			}
			if tl.PeakAllocated != tc.peakAlloc || tl.PeakReserved != tc.peakRes {
				t.Errorf("peaks %d / %d, want %d / %d", tl.PeakAllocated, tl.PeakReserved, tc.peakAlloc, tc.peakRes)
			}
			if tl.Final.Allocated != tc.endAlloc || tl.Final.Reserved != tc.endRes || tl.Final.NumDeviceAlloc != tc.devAllocs {
				t.Errorf("end %d / %d, %d device allocs; want %d / %d, %d", tl.Final.Allocated, tl.Final.Reserved, tl.Final.NumDeviceAlloc, tc.endAlloc, tc.endRes, tc.devAllocs)
			}
			var got []string
			for _, s := range tl.Segments {
				off := "new"
				if s.Address < base+(1<<40) {
					off = itoa((s.Address - base) / MiB)
				}
				got = append(got, off+":"+itoa(s.Size/MiB))
			}
			if strings.Join(got, " ") != strings.Join(tc.segs, " ") {
				t.Errorf("segments %v, want %v", got, tc.segs)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRestoreErrors(t *testing.T) {
	blk := func(off, size, id int64) Block {
		return Block{Address: base + off, Size: size, Allocated: true, ID: id}
	}
	for _, tc := range []struct {
		name string
		segs []Segment
		want string
	}{
		{"overlap", []Segment{{Address: base, Size: 20 * MiB}, {Address: base + 10*MiB, Size: 20 * MiB}}, "overlap"},
		{"block outside", []Segment{{Address: base, Size: 2 * MiB, Blocks: []Block{blk(MiB, 2*MiB, 1)}}}, "does not fit"},
		{"blocks overlap", []Segment{{Address: base, Size: 2 * MiB, Blocks: []Block{blk(0, 1024, 1), blk(512, 512, 2)}}}, "does not fit"},
		{"id 0", []Segment{{Address: base, Size: 2 * MiB, Blocks: []Block{blk(0, 512, 0)}}}, "ID 0"},
		{"id twice", []Segment{{Address: base, Size: 2 * MiB, Blocks: []Block{blk(0, 512, 7), blk(512, 512, 7)}}}, "already allocated"},
		{"zero size", []Segment{{Address: base, Size: 0}}, "size 0"},
		{"expandable off page", []Segment{
			{Address: base, Size: 20 * MiB, Pool: LargePool, Expandable: true},
			{Address: base + 30*MiB, Size: 20 * MiB, Pool: LargePool, Expandable: true}}, "pages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := New(Config{}, Device{}).Restore(tc.segs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
	a := New(Config{}, Device{})
	if err := a.Malloc(1, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Restore([]Segment{{Address: base, Size: 2 * MiB}}); err == nil {
		t.Error("restoring into a used allocator: no error")
	}
}
