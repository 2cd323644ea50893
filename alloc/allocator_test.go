package alloc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

const (
	KiB = int64(1) << 10
	MiB = int64(1) << 20
	GiB = int64(1) << 30
)

// op is one step of a scripted allocator run.
type op struct {
	kind   byte // 'm' malloc, 'f' free, 'e' empty_cache
	id     int64
	size   int64
	stream int32
}

func m(id, size int64) op                      { return op{kind: 'm', id: id, size: size} }
func ms(id, size int64, s int32) op            { return op{kind: 'm', id: id, size: size, stream: s} }
func f(id int64) op                            { return op{kind: 'f', id: id} }
func empty() op                                { return op{kind: 'e'} }
func seg(size int64, blocks ...string) segWant { return segWant{size, blocks} }

// segWant describes a segment: its size and its blocks in address order,
// written "a1.5M" (allocated) or "f18.5M" (free); sizes in K or M or bytes.
type segWant struct {
	size   int64
	blocks []string
}

func blockString(b Block) string {
	s := "f"
	if b.Allocated {
		s = "a"
	}
	switch {
	case b.Size%MiB == 0:
		return fmt.Sprintf("%s%dM", s, b.Size/MiB)
	case b.Size > MiB && b.Size*2%MiB == 0:
		return fmt.Sprintf("%s%d.5M", s, b.Size/MiB)
	case b.Size%KiB == 0:
		return fmt.Sprintf("%s%dK", s, b.Size/KiB)
	}
	return fmt.Sprintf("%s%d", s, b.Size)
}

func run(t *testing.T, a *Allocator, ops []op) (released int64, err error) {
	t.Helper()
	for i, o := range ops {
		switch o.kind {
		case 'm':
			err = a.Malloc(o.id, o.size, o.stream)
		case 'f':
			err = a.Free(o.id)
		case 'e':
			released += a.EmptyCache()
		}
		if ierr := checkInvariants(a); ierr != nil {
			t.Fatalf("after op %d (%c %d): %v", i, o.kind, o.id, ierr)
		}
		if err != nil && i != len(ops)-1 {
			t.Fatalf("op %d (%c %d %d): %v", i, o.kind, o.id, o.size, err)
		}
	}
	return released, err
}

func TestAllocator(t *testing.T) {
	limited := func(c int64) Device { return Device{Capacity: c, Total: c} }
	split100 := Config{MaxSplitSize: 100 * MiB}
	tests := []struct {
		name     string
		cfg      Config
		dev      Device
		ops      []op
		want     Stats // only the fields checked below
		segs     []segWant
		released int64
		oom      bool
	}{
		{
			// 1.5 MiB = 1572864, a multiple of 512, > 1 MiB: large pool.
			// 1 MiB < 1.5 MiB < 10 MiB: segment of kLargeBuffer = 20 MiB.
			// Remainder 18.5 MiB > 1 MiB: split, 18.5 MiB stays cached.
			name: "1.5MiB takes a 20MiB segment",
			ops:  []op{m(1, 3*MiB/2)},
			want: Stats{Allocated: 3 * MiB / 2, Reserved: 20 * MiB, Requested: 3 * MiB / 2, NumSegments: 1},
			segs: []segWant{seg(20*MiB, "a1.5M", "f18.5M")},
		},
		{
			// 10.5 MiB >= 10 MiB: segment rounded up to 2 MiB = 12 MiB.
			// Remainder 1.5 MiB > 1 MiB: split.
			name: "10.5MiB splits a 12MiB segment",
			ops:  []op{m(1, 21*MiB/2)},
			want: Stats{Allocated: 21 * MiB / 2, Reserved: 12 * MiB, Requested: 21 * MiB / 2, NumSegments: 1},
			segs: []segWant{seg(12*MiB, "a10.5M", "f1.5M")},
		},
		{
			// 11 MiB: 12 MiB segment, remainder exactly 1 MiB is not > 1 MiB:
			// the whole 12 MiB block is handed out and counted as allocated.
			name: "11MiB takes a 12MiB segment unsplit",
			ops:  []op{m(1, 11*MiB)},
			want: Stats{Allocated: 12 * MiB, Reserved: 12 * MiB, Requested: 11 * MiB, NumSegments: 1},
			segs: []segWant{seg(12*MiB, "a12M")},
		},
		{
			// 100 < 512: rounded to 512; small pool; 2 MiB segment; the
			// remainder 2 MiB - 512 >= 512 is split off.
			name: "100 bytes",
			ops:  []op{m(1, 100)},
			want: Stats{Allocated: 512, Reserved: 2 * MiB, Requested: 100, NumSegments: 1},
			segs: []segWant{seg(2*MiB, "a512", "f2096640")},
		},
		{
			// 1 MiB exactly is still small (rounded <= kSmallSize): 2 MiB
			// segment, remainder 1 MiB >= 512 split.
			name: "1MiB is small",
			ops:  []op{m(1, MiB)},
			want: Stats{Allocated: MiB, Reserved: 2 * MiB, NumSegments: 1},
			segs: []segWant{seg(2*MiB, "a1M", "f1M")},
		},
		{
			// 1 MiB + 1 rounds to 1 MiB + 512: large pool, 20 MiB segment.
			name: "just over 1MiB is large",
			ops:  []op{m(1, MiB+1)},
			want: Stats{Allocated: MiB + 512, Reserved: 20 * MiB, NumSegments: 1},
		},
		{
			// Four 512 KiB requests fill one 2 MiB small segment: best fit
			// takes the 1.5 MiB, 1 MiB, then 512 KiB remainder (the last
			// without a split, remainder 0). The fifth needs a new segment.
			name: "small pool packing",
			ops:  []op{m(1, 512*KiB), m(2, 512*KiB), m(3, 512*KiB), m(4, 512*KiB), m(5, 512*KiB)},
			want: Stats{Allocated: 5 * 512 * KiB, Reserved: 4 * MiB, NumSegments: 2},
			segs: []segWant{
				seg(2*MiB, "a512K", "a512K", "a512K", "a512K"),
				seg(2*MiB, "a512K", "f1.5M"),
			},
		},
		{
			// A 1.5 MiB (20 MiB segment, split), B 30 MiB (30 MiB segment,
			// whole), C 100 B (2 MiB small segment). B and C freed:
			// empty_cache returns their wholly free segments, 30 + 2 =
			// 32 MiB; A's segment is split and stays.
			name:     "empty_cache returns only wholly free segments",
			ops:      []op{m(1, 3*MiB/2), m(2, 30*MiB), m(3, 100), f(2), f(3), empty()},
			want:     Stats{Allocated: 3 * MiB / 2, Reserved: 20 * MiB, NumSegments: 1},
			segs:     []segWant{seg(20*MiB, "a1.5M", "f18.5M")},
			released: 32 * MiB,
		},
		{
			// Freeing A merges it with the 18.5 MiB remainder: the segment
			// is wholly free again and empty_cache returns all 20 MiB.
			name:     "free merges, then empty_cache releases",
			ops:      []op{m(1, 3*MiB/2), f(1), empty()},
			want:     Stats{Allocated: 0, Reserved: 0, NumSegments: 0},
			released: 20 * MiB,
		},
		{
			// Cached 30, 40, 50 MiB segments; 35 MiB takes the smallest that
			// fits, 40 MiB, split (remainder 5 MiB > 1 MiB). Nothing new is
			// reserved: 30+40+50 = 120 MiB.
			name: "best fit reuses the smallest cached block",
			ops:  []op{m(1, 30*MiB), m(2, 40*MiB), m(3, 50*MiB), f(1), f(2), f(3), m(4, 35*MiB)},
			want: Stats{Allocated: 35 * MiB, Reserved: 120 * MiB, NumSegments: 3},
			segs: []segWant{seg(30*MiB, "f30M"), seg(40*MiB, "a35M", "f5M"), seg(50*MiB, "f50M")},
		},
		{
			// A cached block on stream 0 is not reused on stream 1: a new
			// 30 MiB segment, reserved 60 MiB.
			name: "blocks do not cross streams",
			ops:  []op{ms(1, 30*MiB, 0), f(1), ms(2, 30*MiB, 1)},
			want: Stats{Allocated: 30 * MiB, Reserved: 60 * MiB, NumSegments: 2},
		},
		{
			// Nor pools: a cached 20 MiB large segment does not serve 512 KiB.
			name: "blocks do not cross pools",
			ops:  []op{m(1, 20*MiB), f(1), m(2, 512*KiB)},
			want: Stats{Allocated: 512 * KiB, Reserved: 22 * MiB, NumSegments: 2},
		},
		{
			// max_split_size 100 MiB: a cached 200 MiB (oversize) block is
			// refused for a 50 MiB request (50 < 100 <= 200): new 50 MiB
			// segment, reserved 250 MiB.
			name: "max_split: no oversize block for a normal request",
			cfg:  split100,
			ops:  []op{m(1, 200*MiB), f(1), m(2, 50*MiB)},
			want: Stats{Allocated: 50 * MiB, Reserved: 250 * MiB, NumSegments: 2},
		},
		{
			// 150 MiB >= max_split: the cached 200 MiB block is refused
			// since 200 >= 150 + 20 (max_non_split_rounding): new segment.
			name: "max_split: oversize request beyond the rounding limit",
			cfg:  split100,
			ops:  []op{m(1, 200*MiB), f(1), m(2, 150*MiB)},
			want: Stats{Allocated: 150 * MiB, Reserved: 350 * MiB, NumSegments: 2},
		},
		{
			// 190 MiB: 200 < 190 + 20, so the 200 MiB block is taken, and not
			// split (190 >= max_split): allocated counts 200 MiB.
			name: "max_split: oversize request within the rounding limit",
			cfg:  split100,
			ops:  []op{m(1, 200*MiB), f(1), m(2, 190*MiB)},
			want: Stats{Allocated: 200 * MiB, Reserved: 200 * MiB, Requested: 190 * MiB, NumSegments: 1},
			segs: []segWant{seg(200*MiB, "a200M")},
		},
		{
			// max_non_split_rounding 64 MiB: 200 < 150 + 64, taken whole.
			name: "max_non_split_rounding widens the limit",
			cfg:  Config{MaxSplitSize: 100 * MiB, MaxNonSplitRounding: 64 * MiB},
			ops:  []op{m(1, 200*MiB), f(1), m(2, 150*MiB)},
			want: Stats{Allocated: 200 * MiB, Reserved: 200 * MiB, NumSegments: 1},
		},
		{
			// Below max_split a large block still splits: 50 MiB in a cached
			// 80 MiB block, remainder 30 MiB > 1 MiB.
			name: "max_split: normal requests still split",
			cfg:  split100,
			ops:  []op{m(1, 80*MiB), f(1), m(2, 50*MiB)},
			want: Stats{Allocated: 50 * MiB, Reserved: 80 * MiB, NumSegments: 1},
			segs: []segWant{seg(80*MiB, "a50M", "f30M")},
		},
		{
			// Capacity 300 MiB, max_split 100 MiB. Cached 200 MiB is refused
			// for 150 MiB (200 >= 170); cudaMalloc fails (200+150 > 300);
			// release_available_cached_blocks frees the 200 MiB block (the
			// smallest >= max(150, 100)) and alloc_block succeeds, without
			// the full flush: no retry counted.
			name: "release_available_cached_blocks",
			cfg:  split100,
			dev:  limited(300 * MiB),
			ops:  []op{m(1, 200*MiB), f(1), m(2, 150*MiB)},
			want: Stats{Allocated: 150 * MiB, Reserved: 150 * MiB, NumSegments: 1, NumAllocRetries: 0},
		},
		{
			// Capacity 100 MiB. 60 MiB cached, 80 MiB does not fit beside it
			// (60+80 > 100): release_cached_blocks frees it and the retry
			// succeeds: one retry, no OOM.
			name: "oom path flushes the cache and retries",
			dev:  limited(100 * MiB),
			ops:  []op{m(1, 60*MiB), f(1), m(2, 80*MiB)},
			want: Stats{Allocated: 80 * MiB, Reserved: 80 * MiB, NumSegments: 1, NumAllocRetries: 1},
		},
		{
			// Then 30 MiB: 80+30 > 100, nothing to flush, retry fails: OOM
			// (a second retry counted).
			name: "oom after the retry",
			dev:  limited(100 * MiB),
			ops:  []op{m(1, 60*MiB), f(1), m(2, 80*MiB), m(3, 30*MiB)},
			want: Stats{Allocated: 80 * MiB, Reserved: 80 * MiB, NumSegments: 1, NumAllocRetries: 2, NumOOMs: 1},
			oom:  true,
		},
		{
			// Split segments are never released: 1.5 MiB holds its 20 MiB
			// segment; capacity 30 MiB. 19 MiB does not fit the 18.5 MiB
			// remainder, its 20 MiB segment cannot fit beside (20+20 > 30)
			// and the flush frees nothing.
			name: "split segments are not flushed",
			dev:  limited(30 * MiB),
			ops:  []op{m(1, 3*MiB/2), m(2, 19*MiB)},
			want: Stats{Allocated: 3 * MiB / 2, Reserved: 20 * MiB, NumSegments: 1, NumAllocRetries: 1, NumOOMs: 1},
			oom:  true,
		},
		{
			// roundup_power2_divisions 4: 300 MiB lies in [256, 512) MiB,
			// steps of 64 MiB, so it rounds to 320 MiB; segment 320 MiB.
			name: "roundup_power2_divisions MiB scale",
			cfg:  Config{RoundupPower2Divisions: all(4)},
			ops:  []op{m(1, 300*MiB)},
			want: Stats{Allocated: 320 * MiB, Reserved: 320 * MiB, Requested: 300 * MiB, NumSegments: 1},
		},
		{
			// 5 MiB + 1 with 4 divisions: [4, 8) MiB in steps of 1 MiB, so
			// 6 MiB; 6 < 10 MiB takes a 20 MiB segment, split.
			name: "roundup_power2_divisions small MiB",
			cfg:  Config{RoundupPower2Divisions: all(4)},
			ops:  []op{m(1, 5*MiB+1)},
			want: Stats{Allocated: 6 * MiB, Reserved: 20 * MiB, NumSegments: 1},
			segs: []segWant{seg(20*MiB, "a6M", "f14M")},
		},
		{
			// Below 512*divisions the plain rule applies: 1200 with 4
			// divisions is not > 2048, so 512*ceil(1200/512) = 1536.
			name: "roundup_power2_divisions below 512*div",
			cfg:  Config{RoundupPower2Divisions: all(4)},
			ops:  []op{m(1, 1200)},
			want: Stats{Allocated: 1536, Reserved: 2 * MiB, NumSegments: 1},
		},
		{
			// Size 0 allocates nothing but must be freeable.
			name: "size 0",
			ops:  []op{m(1, 0), f(1)},
			want: Stats{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := New(tc.cfg, tc.dev)
			released, err := run(t, a, tc.ops)
			var oom *OOMError
			if tc.oom != errors.As(err, &oom) || (!tc.oom && err != nil) {
				t.Fatalf("last op error = %v, want oom %v", err, tc.oom)
			}
			st := a.Stats()
			got := Stats{Allocated: st.Allocated, Reserved: st.Reserved, NumSegments: st.NumSegments,
				NumAllocRetries: st.NumAllocRetries, NumOOMs: st.NumOOMs}
			want := tc.want
			want.Requested = 0
			if got != want {
				t.Errorf("stats = %+v\nwant    %+v", got, want)
			}
			if tc.want.Requested != 0 && st.Requested != tc.want.Requested {
				t.Errorf("requested = %d, want %d", st.Requested, tc.want.Requested)
			}
			if released != tc.released {
				t.Errorf("released = %d, want %d", released, tc.released)
			}
			if tc.segs != nil {
				segs := a.Segments()
				if len(segs) != len(tc.segs) {
					t.Fatalf("%d segments, want %d", len(segs), len(tc.segs))
				}
				for i, s := range segs {
					var bs []string
					for _, b := range s.Blocks {
						bs = append(bs, blockString(b))
					}
					if s.Size != tc.segs[i].size || strings.Join(bs, " ") != strings.Join(tc.segs[i].blocks, " ") {
						t.Errorf("segment %d = %d [%s], want %d [%s]", i, s.Size, strings.Join(bs, " "),
							tc.segs[i].size, strings.Join(tc.segs[i].blocks, " "))
					}
				}
			}
		})
	}
}

func all(d int) (a [16]int) {
	for i := range a {
		a[i] = d
	}
	return a
}

func TestBestFitAddress(t *testing.T) {
	// Two cached 40 MiB blocks: equal sizes tie-break on the lower address
	// (BlockComparatorSize), i.e. the first segment.
	a := New(Config{}, Device{})
	run(t, a, []op{m(1, 40*MiB), m(2, 40*MiB), f(2), f(1), m(3, 40*MiB)})
	segs := a.Segments()
	if !segs[0].Blocks[0].Allocated || segs[0].Blocks[0].ID != 3 || segs[1].Blocks[0].Allocated {
		t.Errorf("40 MiB went to %+v", segs)
	}
}

func TestRoundSize(t *testing.T) {
	tests := []struct {
		size, div, want int64
	}{
		{1200, 4, 1280},           // source comment: 1024, 1280, 1536, 1792 -> 1280
		{1024, 4, 1024},           // powers of two are unchanged
		{1280, 4, 1280},           // already on a step
		{300 * MiB, 4, 320 * MiB}, // steps of 64 MiB from 256 MiB
		{300 * MiB, 2, 384 * MiB}, // steps of 128 MiB
		{257 * MiB, 8, 288 * MiB}, // steps of 32 MiB
		{3, 4, 4},                 // step 2>>2 = 0: next power of two
		{5*MiB + 1, 4, 6 * MiB},   // steps of 1 MiB from 4 MiB
		{5*MiB + 1, 1024, 5*MiB + 4096},
	}
	for _, tc := range tests {
		if got := roundupPower2NextDivision(tc.size, tc.div); got != tc.want {
			t.Errorf("roundup_power2_next_division(%d, %d) = %d, want %d", tc.size, tc.div, got, tc.want)
		}
	}
	a := New(Config{RoundupPower2Divisions: all(4)}, Device{})
	for _, tc := range []struct{ size, want int64 }{
		{1, 512}, {512, 512}, {513, 1024},
		{1200, 1536}, // 1200 <= 512*4: plain rounding
		{2049, 2560}, // > 2048: steps of 512 from 2048 -> 2560
		{3000, 3072}, // steps of 512 from 2048
		{5000, 5120}, // steps of 1024 from 4096
	} {
		if got := a.roundSize(tc.size); got != tc.want {
			t.Errorf("round_size(%d) with 4 divisions = %d, want %d", tc.size, got, tc.want)
		}
	}
	// Per-interval divisions: 8 only for [256, 512) MiB (index 8).
	var d [16]int
	d[8] = 8
	a = New(Config{RoundupPower2Divisions: d}, Device{})
	if got := a.roundSize(270 * MiB); got != 288*MiB { // steps of 256/8 = 32 MiB: 256, 288
		t.Errorf("round_size(270 MiB) with 8 divisions at index 8 = %d MiB", got/MiB)
	}
	if got := a.roundSize(600*MiB + 1); got != 600*MiB+512 {
		t.Errorf("round_size(600 MiB + 1) outside the interval = %d", got)
	}
}

func TestAllocationSize(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{
		{512, 2 * MiB}, {MiB, 2 * MiB}, {MiB + 512, 20 * MiB}, {10*MiB - 512, 20 * MiB},
		{10 * MiB, 10 * MiB}, {10*MiB + 512, 12 * MiB}, {11 * MiB, 12 * MiB}, {100*MiB + 1, 102 * MiB},
	} {
		if got := allocationSize(tc.size); got != tc.want {
			t.Errorf("get_allocation_size(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

func TestExpandableSegments(t *testing.T) {
	a := New(Config{ExpandableSegments: true}, Device{Capacity: 80 * GiB, Total: 80 * GiB})
	step := func(o op, wantAlloc, wantRes int64, wantSegs int64) {
		t.Helper()
		if _, err := run(t, a, []op{o}); err != nil {
			t.Fatal(err)
		}
		st := a.Stats()
		if st.Allocated != wantAlloc || st.Reserved != wantRes || st.NumSegments != wantSegs {
			t.Fatalf("after %c %d: allocated %d MiB+%d, reserved %d MiB, segments %d; want %d, %d MiB, %d",
				o.kind, o.id, st.Allocated/MiB, st.Allocated%MiB, st.Reserved/MiB, st.NumSegments,
				wantAlloc, wantRes/MiB, wantSegs)
		}
	}
	// 1.5 MiB: one 20 MiB page of the large pool's reservation is mapped;
	// the 18.5 MiB rest of the page is a free block (split: rem >= 512).
	step(m(1, 3*MiB/2), 3*MiB/2, 20*MiB, 1)
	// 30 MiB: the free 18.5 MiB block borders unmapped space, so 11.5 MiB
	// more are needed: one more 20 MiB page; the block grows to 38.5 MiB
	// and 30 MiB of it are handed out. Still one contiguous range.
	step(m(2, 30*MiB), 3*MiB/2+30*MiB, 40*MiB, 1)
	// 100 bytes: the small pool maps one 2 MiB page of its own reservation.
	step(m(3, 100), 3*MiB/2+30*MiB+512, 42*MiB, 2)
	// 11 MiB does not fit the 8.5 MiB left at the end of the mapped range,
	// which borders unmapped space: one more 20 MiB page makes it 28.5 MiB,
	// of which 11 MiB are handed out and 17.5 MiB split off (expandable
	// segments split whenever rem >= 512). Reserved 60 + 2 MiB.
	step(m(4, 11*MiB), 3*MiB/2+41*MiB+512, 62*MiB, 2)
	segs := a.Segments()
	if got := blockList(segs[0]); got != "a1.5M a30M a11M f17.5M" {
		t.Errorf("large range = %s", got)
	}
	// Free 30 and 11 MiB: they merge into 58.5 MiB free from 1.5 MiB to
	// 60 MiB. empty_cache unmaps the whole pages inside it, [20, 60) MiB:
	// 40 MiB released; [1.5, 20) stays mapped. The small pool's free
	// [512, 2 MiB) holds no whole page.
	step(f(2), 3*MiB/2+11*MiB+512, 62*MiB, 2)
	step(f(4), 3*MiB/2+512, 62*MiB, 2)
	if rel := a.EmptyCache(); rel != 40*MiB {
		t.Errorf("empty_cache released %d MiB, want 40", rel/MiB)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
	if got := blockList(a.Segments()[0]); got != "a1.5M f18.5M" {
		t.Errorf("large range after empty_cache = %s", got)
	}
	// Freeing everything leaves whole free pages; empty_cache unmaps them
	// and drops both reservations.
	step(f(1), 512, 20*MiB+2*MiB, 2)
	step(f(3), 0, 22*MiB, 2)
	if rel := a.EmptyCache(); rel != 22*MiB {
		t.Errorf("empty_cache released %d MiB, want 22", rel/MiB)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
	if len(a.segs) != 0 {
		t.Errorf("%d reservations left", len(a.segs))
	}
}

func blockList(s Segment) string {
	var bs []string
	for _, b := range s.Blocks {
		bs = append(bs, blockString(b))
	}
	return strings.Join(bs, " ")
}

func TestExpandableOOMUnmaps(t *testing.T) {
	// Capacity 100 MiB = five 20 MiB pages. A 60 MiB block is freed (three
	// pages cached); then 41 MiB on stream 1 needs three pages of its own
	// reservation, 60+60 > 100: the flush unmaps stream 0's pages and the
	// retry maps them for stream 1.
	a := New(Config{ExpandableSegments: true}, Device{Capacity: 100 * MiB})
	if _, err := run(t, a, []op{m(1, 60*MiB), f(1), ms(2, 41*MiB, 1)}); err != nil {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.Reserved != 60*MiB || st.NumAllocRetries != 1 || st.Allocated != 41*MiB {
		t.Errorf("stats %+v", st)
	}
	// 60 MiB more cannot fit: 60 + 60 > 100 and nothing is free. The OOM
	// reports device free 40 MiB.
	err := a.Malloc(3, 60*MiB, 1)
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("err = %v", err)
	}
	if oom.DeviceFree != 40*MiB || oom.AllocSize != 60*MiB || oom.Reserved != 60*MiB {
		t.Errorf("oom %+v", oom)
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
}

func TestGarbageCollection(t *testing.T) {
	// Total 1000 MiB, fraction 0.5: allowed 500 MiB; threshold 0.5 of that
	// is 250 MiB. Each malloc's get_free_block on the large pool ticks the
	// age counter: A (tick 1), B (tick 2), free A (A cached at 2), C 120 MiB
	// (tick 3; 100 < 120 fits nothing; reserved 200 <= 250, no GC), free B
	// (cached at 3), D 150 MiB (tick 4, nothing fits): reserved 320 > 250,
	// target 70. Ages: A 4-2 = 2, B 4-3 = 1, average 1.5: only A is freed
	// (100 >= 70, done). Then D gets a new segment: 220 + 150 = 370 MiB.
	ops := []op{m(1, 100*MiB), m(2, 100*MiB), f(1), m(3, 120*MiB), f(2), m(4, 150*MiB)}
	dev := Device{Capacity: 1000 * MiB, Total: 1000 * MiB, MemoryFraction: 0.5}
	a := New(Config{GarbageCollectionThreshold: 0.5}, dev)
	if _, err := run(t, a, ops); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Reserved != 370*MiB || st.NumAllocRetries != 0 {
		t.Errorf("with gc: reserved %d MiB, retries %d; want 370, 0", st.Reserved/MiB, st.NumAllocRetries)
	}
	segs := a.Segments()
	var free []string
	for _, s := range segs {
		if !s.Blocks[0].Allocated {
			free = append(free, fmt.Sprint(s.Size/MiB))
		}
	}
	if strings.Join(free, ",") != "100" || len(segs) != 3 {
		t.Errorf("segments after gc: %d, free %v; want B's 100 MiB cached", len(segs), free)
	}
	// Without a memory fraction the threshold does nothing: 470 MiB.
	dev.MemoryFraction = 0
	a = New(Config{GarbageCollectionThreshold: 0.5}, dev)
	run(t, a, ops)
	if st := a.Stats(); st.Reserved != 470*MiB {
		t.Errorf("gc without fraction: reserved %d MiB, want 470", st.Reserved/MiB)
	}
}

func TestMemoryFraction(t *testing.T) {
	// Fraction 0.25 of 1000 MiB allows 250 MiB: 200 MiB fits, 60 MiB more
	// would make 260 > 250, even though the device has room.
	a := New(Config{}, Device{Capacity: 1000 * MiB, Total: 1000 * MiB, MemoryFraction: 0.25})
	_, err := run(t, a, []op{m(1, 200*MiB), m(2, 60*MiB)})
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("err = %v, want OOM", err)
	}
	if !oom.FractionSet || oom.Allowed != 250*MiB || oom.DeviceFree != 800*MiB {
		t.Errorf("oom %+v", oom)
	}
	if !strings.Contains(oom.Error(), "is free. 250.00 MiB allowed; Of the allocated memory 200.00 MiB") {
		t.Errorf("message: %s", oom.Error())
	}
	// 50 MiB fits exactly: 200 + 50 = 250, not > 250.
	if err := a.Malloc(3, 50*MiB, 0); err != nil {
		t.Errorf("50 MiB at the limit: %v", err)
	}
}

func TestOOMFigures(t *testing.T) {
	// Capacity 100 MiB: 80 MiB allocated, a 1.5 MiB tensor needs a 20 MiB
	// segment (80 + 20 = 100 fits); then 100 bytes needs a 2 MiB small
	// segment, 100 + 2 > 100: OOM printing "Tried to allocate 2.00 MiB".
	a := New(Config{}, Device{Index: 3, Capacity: 100 * MiB, Total: 120 * MiB})
	_, err := run(t, a, []op{m(1, 80*MiB), m(2, 3*MiB/2), m(3, 100)})
	var oom *OOMError
	if !errors.As(err, &oom) {
		t.Fatalf("err = %v", err)
	}
	want := OOMError{Requested: 100, Size: 512, AllocSize: 2 * MiB, Device: 3, DeviceTotal: 120 * MiB,
		DeviceFree: 0, Allocated: 80*MiB + 3*MiB/2, Reserved: 100 * MiB}
	if fmt.Sprint(*oom) != fmt.Sprint(want) {
		t.Errorf("oom = %+v\nwant  %+v", *oom, want)
	}
	if !strings.HasPrefix(oom.Error(), "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 3 has a total capacity of 120.00 MiB of which 0 bytes is free. Of the allocated memory 81.50 MiB is allocated by PyTorch, and 18.50 MiB is reserved") {
		t.Errorf("message: %s", oom.Error())
	}
}

func TestMallocErrors(t *testing.T) {
	a := New(Config{}, Device{})
	if err := a.Malloc(1, -1, 0); err == nil {
		t.Error("negative size accepted")
	}
	if err := a.Malloc(1, 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Malloc(1, 10, 0); err == nil || !strings.Contains(err.Error(), "already allocated") {
		t.Errorf("double malloc: %v", err)
	}
	if err := a.Free(2); err == nil || !strings.Contains(err.Error(), "block 2") {
		t.Errorf("free of unknown id: %v", err)
	}
	if err := a.Free(1); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(1); err == nil {
		t.Error("double free accepted")
	}
	if err := a.Malloc(5, 1<<61, 0); err == nil {
		t.Error("2 EiB accepted")
	}
	if err := checkInvariants(a); err != nil {
		t.Fatal(err)
	}
}

func TestResetPeaks(t *testing.T) {
	a := New(Config{}, Device{})
	run(t, a, []op{m(1, 30*MiB), m(2, 30*MiB), f(2)})
	st := a.Stats()
	if st.PeakAllocated != 60*MiB || st.PeakReserved != 60*MiB || st.Allocated != 30*MiB {
		t.Errorf("peaks %+v", st)
	}
	a.ResetPeaks()
	st = a.Stats()
	if st.PeakAllocated != 30*MiB || st.PeakReserved != 60*MiB {
		t.Errorf("after reset %+v", st)
	}
}
