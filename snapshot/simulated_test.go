package snapshot

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/batchfit/batchfit/alloc"
)

// recorder runs the allocator simulator and writes what it does as
// PyTorch's allocator records it (TraceEntry in CUDACachingAllocator.h):
// segment_alloc or segment_map before the alloc that needed it, alloc at
// the block's address with the requested size, free_requested and
// free_completed with the block's requested size, segment_free or
// segment_unmap where the cache is emptied.
type recorder struct {
	a        *alloc.Allocator
	entries  []TraceEntry
	addr     map[int64]int64 // live id -> address
	req      map[int64]int64
	stream   map[int64]int64
	states   [][]alloc.Segment // the allocator's segments before entry i (len(entries)+1 of them)
	reserved []int64           // reserved before entry i
	allocs   []int64           // device allocations before entry i
	// starts are the entries that begin an operation: the simulator's
	// state is known there (inside an operation PyTorch is between two
	// of its steps, and the simulator frees at once where PyTorch waits
	// for free_completed).
	starts []int
}

func newRecorder(cfg alloc.Config) *recorder {
	return &recorder{a: alloc.New(cfg, alloc.Device{}), addr: map[int64]int64{}, req: map[int64]int64{}, stream: map[int64]int64{}}
}

// ranges lists the segments (mapped ranges) as address -> size.
func ranges(segs []alloc.Segment) map[int64]int64 {
	m := map[int64]int64{}
	for _, s := range segs {
		m[s.Address] = s.Size
	}
	return m
}

// diff emits segment entries for what changed from before to after, as
// interval differences of the mapped address space, each with the stream
// of the segment it belongs to.
func (r *recorder) diff(before, after []alloc.Segment, added bool) {
	type iv struct{ lo, hi, stream int64 }
	cover := func(segs []alloc.Segment) []iv {
		var out []iv
		for _, s := range segs {
			out = append(out, iv{s.Address, s.Address + s.Size, int64(s.Stream)})
		}
		return out
	}
	from, to := cover(before), cover(after)
	if !added {
		from, to = to, from
	}
	// pieces of to not covered by from
	for _, t := range to {
		cur := t.lo
		for _, f := range from {
			if f.hi <= cur || f.lo >= t.hi {
				continue
			}
			if f.lo > cur {
				r.segEntry(added, before, after, cur, f.lo, t.stream)
			}
			cur = max(cur, f.hi)
		}
		if cur < t.hi {
			r.segEntry(added, before, after, cur, t.hi, t.stream)
		}
	}
}

func (r *recorder) segEntry(added bool, before, after []alloc.Segment, lo, hi, stream int64) {
	exp := false
	for _, s := range append(slices.Clone(before), after...) {
		if s.Address <= lo && lo < s.Address+s.Size {
			exp = s.Expandable
		}
	}
	action := map[[2]bool]string{{true, false}: ActionSegmentAlloc, {false, false}: ActionSegmentFree, {true, true}: ActionSegmentMap, {false, true}: ActionSegmentUnmap}[[2]bool{added, exp}]
	r.add(TraceEntry{Action: action, Addr: lo, Size: hi - lo, Stream: stream})
}

func (r *recorder) add(e TraceEntry) {
	r.entries = append(r.entries, e)
}

// mark records the state before the next entry, which begins an
// operation.
func (r *recorder) mark() {
	if n := len(r.starts); n == 0 || r.starts[n-1] != len(r.entries) {
		r.starts = append(r.starts, len(r.entries))
	}
	for len(r.states) <= len(r.entries) {
		st := r.a.Stats()
		r.states = append(r.states, r.a.Segments())
		r.reserved = append(r.reserved, st.Reserved)
		r.allocs = append(r.allocs, st.NumDeviceAlloc)
	}
}

func (r *recorder) malloc(t *testing.T, id, size, stream int64) {
	r.mark()
	before := r.a.Segments()
	if err := r.a.Malloc(id, size, int32(stream)); err != nil {
		t.Fatal(err)
	}
	after := r.a.Segments()
	r.diff(before, after, true)
	for _, s := range after {
		for _, b := range s.Blocks {
			if b.Allocated && b.ID == id {
				r.addr[id] = b.Address
			}
		}
	}
	r.req[id], r.stream[id] = size, stream
	r.add(TraceEntry{Action: ActionAlloc, Addr: r.addr[id], Size: size, Stream: stream})
	r.mark()
}

func (r *recorder) free(t *testing.T, id int64) {
	r.mark()
	if err := r.a.Free(id); err != nil {
		t.Fatal(err)
	}
	r.add(TraceEntry{Action: ActionFreeRequested, Addr: r.addr[id], Size: r.req[id], Stream: r.stream[id]})
	r.add(TraceEntry{Action: ActionFreeCompleted, Addr: r.addr[id], Size: r.req[id], Stream: r.stream[id]})
	delete(r.addr, id)
	r.mark()
}

func (r *recorder) emptyCache() {
	r.mark()
	before := r.a.Segments()
	r.a.EmptyCache()
	r.diff(before, r.a.Segments(), false)
	r.mark()
}

// snapshot is what _dump_snapshot would write at the end, keeping the
// entries from first on (the ring buffer lost the ones before).
func (r *recorder) snapshot(cfg alloc.Config, first int) *Snapshot {
	s := &Snapshot{Traces: [][]TraceEntry{r.entries[first:]}}
	if cfg.ExpandableSegments {
		s.AllocatorSettings.AllocConf = "expandable_segments:True"
	}
	for _, g := range r.a.Segments() {
		seg := Segment{Address: g.Address, TotalSize: g.Size, Stream: int64(g.Stream), SegmentType: g.Pool.String(), IsExpandable: g.Expandable}
		for _, b := range g.Blocks {
			st := StateInactive
			if b.Allocated {
				st = StateActiveAllocated
			}
			seg.Blocks = append(seg.Blocks, Block{Address: b.Address, Size: b.Size, RequestedSize: b.Requested, State: st})
		}
		s.Segments = append(s.Segments, seg)
	}
	return s
}

// TestConvertFromStateSimulated records random runs of the allocator
// simulator as PyTorch records them, drops the start of each recording as
// the ring buffer does, and checks that the state rebuilt at its first
// entry is the simulator's state there (segments, and the live blocks'
// addresses and sizes), and that a replay from it makes the same device
// allocations and reserves the same bytes: the simulator is the oracle of
// what the caching allocator did.
func TestConvertFromStateSimulated(t *testing.T) {
	for _, cfg := range []alloc.Config{{}, {ExpandableSegments: true}} {
		for seed := int64(1); seed <= 100; seed++ {
			t.Run(fmt.Sprintf("expandable=%v/seed=%d", cfg.ExpandableSegments, seed), func(t *testing.T) {
				checkSimulated(t, cfg, seed)
			})
		}
	}
}

func checkSimulated(t *testing.T, cfg alloc.Config, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	r := newRecorder(cfg)
	var live []int64
	next := int64(1)
	sizes := []int64{100, 4096, 300000, 1 << 20, 3 << 20, 7<<20 + 12345, 12 << 20, 30 << 20, 64<<20 + 1}
	for op := 0; op < 300; op++ {
		switch x := rng.Intn(20); {
		case x == 0:
			r.emptyCache()
		case x < 10 || len(live) == 0:
			size := sizes[rng.Intn(len(sizes))]
			if rng.Intn(3) == 0 {
				size = size/3 + int64(rng.Intn(1000))
			}
			stream := int64(0)
			if rng.Intn(4) == 0 {
				stream = 7
			}
			r.malloc(t, next, size, stream)
			live = append(live, next)
			next++
		default:
			i := rng.Intn(len(live))
			r.free(t, live[i])
			live = slices.Delete(live, i, i+1)
		}
	}
	r.mark()
	// Cut where an operation begins.
	first := r.starts[rng.Intn(len(r.starts)-1)]
	s := r.snapshot(cfg, first)
	c, err := s.ConvertFromState(0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) > 0 {
		t.Errorf("warnings: %v", c.Warnings)
	}
	// The rebuilt state against the simulator's at the cut. A block
	// allocated before the cut and freed after it has its size estimated
	// (free entries record the requested size only): it may be short of
	// the truth by what was not split off it, at most 1 MiB in the large
	// pool (should_split), so sizes are compared within that.
	want := r.states[first]
	raw := func(n int32) int64 { return c.Streams[n] }
	same := len(c.Initial) == len(want)
	for i := 0; same && i < len(want); i++ {
		g, w := c.Initial[i], want[i]
		same = g.Address == w.Address && g.Size == w.Size && raw(g.Stream) == int64(w.Stream) && g.Pool == w.Pool && g.Expandable == w.Expandable
		var wb []alloc.Block
		for _, b := range w.Blocks {
			if b.Allocated {
				wb = append(wb, b)
			}
		}
		same = same && len(g.Blocks) == len(wb)
		for j := 0; same && j < len(wb); j++ {
			gb, b := g.Blocks[j], wb[j]
			same = gb.Address == b.Address && gb.Requested == b.Requested && gb.Size <= b.Size && b.Size-gb.Size <= 1<<20
		}
	}
	if !same {
		t.Errorf("cut at entry %d of %d: rebuilt state\n got %s\nwant %s", first, len(r.entries), stateString(c.Initial, raw), stateString(want, func(n int32) int64 { return int64(n) }))
	}
	tl, err := alloc.Replay(c.Trace, cfg, alloc.Device{}, alloc.ReplayOptions{Initial: c.Initial})
	if err != nil {
		t.Fatal(err)
	}
	end := len(r.entries)
	peak := slices.Max(r.reserved[first:])
	if tl.Final.NumDeviceAlloc != r.allocs[end]-r.allocs[first] || tl.Final.Reserved != r.reserved[end] || tl.PeakReserved != peak {
		t.Errorf("cut at entry %d: replay %d device allocations, reserved %d at the end, %d at the peak; the simulator %d, %d, %d",
			first, tl.Final.NumDeviceAlloc, tl.Final.Reserved, tl.PeakReserved, r.allocs[end]-r.allocs[first], r.reserved[end], peak)
	}
}

// stateString lists segments and their allocated blocks (address, size,
// requested size) with raw stream numbers.
func stateString(segs []alloc.Segment, raw func(int32) int64) string {
	segs = slices.Clone(segs)
	slices.SortFunc(segs, func(x, y alloc.Segment) int { return int(x.Address>>20 - y.Address>>20) })
	s := ""
	for _, g := range segs {
		s += fmt.Sprintf("[%#x %d s%d %v %v", g.Address, g.Size, raw(g.Stream), g.Pool, g.Expandable)
		for _, b := range g.Blocks {
			if b.Allocated {
				s += fmt.Sprintf(" (%#x %d r%d)", b.Address, b.Size, b.Requested)
			}
		}
		s += "]\n"
	}
	return s
}
