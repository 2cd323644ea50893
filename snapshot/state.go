package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/alloc"
)

// Sizes of CUDACachingAllocator.cpp that the rebuilt state relies on.
const (
	// maxReservation bounds how far apart two addresses of one
	// expandable segment's reservation can be: ExpandableSegment reserves
	// segment_size * max_handles, 1.125 times the device's memory
	// (CUDACachingAllocator.cpp), under 1.125 TiB for any GPU so far.
	maxReservation = 1152 << 30
)

// rseg is a segment (or an expandable segment's mapped range) in the
// backward walk.
type rseg struct {
	addr, size, stream int64
	small, expandable  bool
}

func (s *rseg) end() int64 { return s.addr + s.size }

// rblk is a block that is allocated, or freed but not yet reusable
// (active_pending_free), in the backward walk.
type rblk struct {
	addr, size, requested, stream int64
	site                          string
	// requestedBefore: at the start, the block's free was already
	// requested (its first recorded entry is free_completed), so the
	// replay frees it at free_completed.
	requestedBefore bool
	seenRequested   bool
	// estimated: the size is not recorded (see undoFree).
	estimated bool
}

// startState is the allocator's state at the first recorded entry,
// rebuilt by undoing the entries from the end of the trace, starting from
// the segments at the time of the snapshot.
type startState struct {
	segs     []rseg // by address
	blks     []rblk // by address
	cfg      alloc.Config
	warnings []string
	counts   map[string]int
	// known are addresses whose pool is known, by stream: the snapshot's
	// segments, and the blocks the trace allocates and frees (the pool
	// follows from the rounded size), for telling which expandable
	// segment an unmapped range belonged to.
	known map[int64][]poolPoint
}

type poolPoint struct {
	addr  int64
	small bool
}

func (st *startState) warn(kind string) { st.counts[kind]++ }

func (st *startState) segAt(x int64) int {
	i, _ := slices.BinarySearchFunc(st.segs, x, func(s rseg, x int64) int { return cmp.Compare(s.addr, x) })
	// st.segs[i].addr >= x; the one containing x starts at x or before.
	if i < len(st.segs) && st.segs[i].addr == x {
		return i
	}
	if i > 0 && st.segs[i-1].end() > x {
		return i - 1
	}
	return -1
}

func (st *startState) blkIndex(x int64) (int, bool) {
	return slices.BinarySearchFunc(st.blks, x, func(b rblk, x int64) int { return cmp.Compare(b.addr, x) })
}

// newStartState walks entries backwards from the segments of device at the
// time of the snapshot. The rules of the walk follow from what each entry
// records (TraceEntry in CUDACachingAllocator.h): an alloc at an address
// means no block was there before it, a free_requested or free_completed
// means one was; a segment_alloc means the segment did not exist before
// it, a segment_free that it did; segment_map and segment_unmap the same
// for the mapped pages of an expandable segment.
func newStartState(s *Snapshot, device int, entries []TraceEntry, cfg alloc.Config) *startState {
	st := &startState{cfg: cfg, counts: map[string]int{}}
	for i := range s.Segments {
		g := &s.Segments[i]
		if g.Device != device {
			continue
		}
		st.segs = append(st.segs, rseg{g.Address, g.TotalSize, g.Stream, g.SegmentType == "small", g.IsExpandable})
		for j := range g.Blocks {
			b := &g.Blocks[j]
			if b.State == StateInactive || b.Size <= 0 {
				continue
			}
			st.blks = append(st.blks, rblk{addr: b.Address, size: b.Size, requested: b.RequestedSize, stream: g.Stream, site: b.Site})
		}
	}
	slices.SortFunc(st.segs, func(x, y rseg) int { return cmp.Compare(x.addr, y.addr) })
	slices.SortFunc(st.blks, func(x, y rblk) int { return cmp.Compare(x.addr, y.addr) })
	st.mergeRanges()
	if cfg.ExpandableSegments || slices.ContainsFunc(st.segs, func(g rseg) bool { return g.expandable }) {
		st.known = map[int64][]poolPoint{}
		for _, g := range st.segs {
			st.known[g.stream] = append(st.known[g.stream], poolPoint{g.addr, g.small}, poolPoint{g.end() - 1, g.small})
		}
		for i := range entries {
			switch e := &entries[i]; e.Action {
			case ActionAlloc, ActionFreeRequested, ActionFreeCompleted:
				st.known[e.Stream] = append(st.known[e.Stream], poolPoint{e.Addr, cfg.RoundSize(max(e.Size, 1)) <= alloc.SmallSize})
			}
		}
		for k := range st.known {
			slices.SortFunc(st.known[k], func(x, y poolPoint) int { return cmp.Compare(x.addr, y.addr) })
		}
	}

	for i := len(entries) - 1; i >= 0; i-- {
		e := &entries[i]
		switch e.Action {
		case ActionAlloc:
			if j, ok := st.blkIndex(e.Addr); ok {
				st.blks = slices.Delete(st.blks, j, j+1)
			} else {
				st.warn("alloc")
			}
		case ActionFreeRequested, ActionFreeCompleted:
			j, ok := st.blkIndex(e.Addr)
			if !ok {
				st.undoFree(e)
				j, ok = st.blkIndex(e.Addr)
			}
			if ok {
				b := &st.blks[j]
				if e.Action == ActionFreeRequested {
					b.seenRequested, b.requestedBefore = true, false
				} else if !b.seenRequested {
					b.requestedBefore = true
				}
			}
		case ActionSegmentAlloc:
			j := st.segAt(e.Addr)
			if j < 0 || st.segs[j].addr != e.Addr || st.segs[j].expandable {
				st.warn("segment_alloc")
				continue
			}
			st.dropBlocks(st.segs[j].addr, st.segs[j].end())
			st.segs = slices.Delete(st.segs, j, j+1)
		case ActionSegmentFree:
			st.addSegment(rseg{e.Addr, e.Size, e.Stream, e.Size == alloc.SmallBuffer, false})
		case ActionSegmentMap:
			st.unmapRange(e.Addr, e.Size)
		case ActionSegmentUnmap:
			st.addSegment(rseg{e.Addr, e.Size, e.Stream, st.expandableSmall(e), true})
			st.mergeRanges()
		}
	}
	st.widenLarge()
	for _, w := range []struct{ kind, msg string }{
		{"alloc", "%d alloc entr(ies) whose block the later entries and the snapshot's segments do not show: the rebuilt state ignores them"},
		{"free", "%d free entr(ies) at an address inside a block or outside every segment: the rebuilt state ignores them"},
		{"segment_alloc", "%d segment_alloc entr(ies) for a segment the later entries and the snapshot do not show"},
		{"segment_free", "%d segment_free or segment_unmap entr(ies) overlapping a segment that existed then"},
		{"blocks", "%d block(s) inside a segment when the trace says it was created or mapped: dropped from the rebuilt state"},
	} {
		if n := st.counts[w.kind]; n > 0 {
			st.warnings = append(st.warnings, fmt.Sprintf(w.msg, n))
		}
	}
	return st
}

// undoFree puts back the block e freed. Its size is not recorded (free
// entries carry the requested size); it is round_size of the request,
// except that in the large pool without expandable segments a remainder
// of at most 1 MiB up to the next block is the block's own: should_split
// splits a large block only when more than kSmallSize would remain, so
// such a remainder was never a free block of its own.
func (st *startState) undoFree(e *TraceEntry) {
	k := st.segAt(e.Addr)
	j, _ := st.blkIndex(e.Addr)
	if k < 0 || j > 0 && st.blks[j-1].addr+st.blks[j-1].size > e.Addr {
		st.warn("free")
		return
	}
	g := &st.segs[k]
	gapEnd := g.end()
	if j < len(st.blks) {
		gapEnd = min(gapEnd, st.blks[j].addr)
	}
	size := st.cfg.RoundSize(max(e.Size, 1))
	if e.Addr+size > gapEnd || !g.small && !st.cfg.ExpandableSegments && gapEnd-e.Addr-size <= alloc.SmallSize {
		size = gapEnd - e.Addr
	}
	st.blks = slices.Insert(st.blks, j, rblk{addr: e.Addr, size: size, requested: e.Size, stream: g.stream, site: e.Site, estimated: true})
}

// widenLarge gives an estimated block of the large pool (without
// expandable segments) the free space after it when that space is 1 MiB
// or less: such a free block cannot exist there (should_split leaves more
// than kSmallSize, and every large-pool request is larger), so it was the
// block's own, not split off when it was allocated. undoFree does the same
// when the next block is already known; this catches blocks whose
// neighbour the walk put back after them.
func (st *startState) widenLarge() {
	if st.cfg.ExpandableSegments {
		return
	}
	for j := range st.blks {
		b := &st.blks[j]
		if !b.estimated {
			continue
		}
		k := st.segAt(b.addr)
		if k < 0 || st.segs[k].small || st.segs[k].expandable {
			continue
		}
		end := st.segs[k].end()
		if j+1 < len(st.blks) {
			end = min(end, st.blks[j+1].addr)
		}
		if rem := end - b.addr - b.size; rem > 0 && rem <= alloc.SmallSize {
			b.size += rem
		}
	}
}

// dropBlocks removes the blocks in [lo, hi), counting them.
func (st *startState) dropBlocks(lo, hi int64) {
	j, _ := st.blkIndex(lo)
	k := j
	for k < len(st.blks) && st.blks[k].addr < hi {
		k++
	}
	if k > j {
		st.counts["blocks"] += k - j
		st.blks = slices.Delete(st.blks, j, k)
	}
}

func (st *startState) addSegment(g rseg) {
	i, _ := slices.BinarySearchFunc(st.segs, g.addr, func(s rseg, x int64) int { return cmp.Compare(s.addr, x) })
	if g.size <= 0 || i > 0 && st.segs[i-1].end() > g.addr || i < len(st.segs) && st.segs[i].addr < g.end() {
		st.warn("segment_free")
		return
	}
	st.segs = slices.Insert(st.segs, i, g)
}

// unmapRange removes [addr, addr+size) from the expandable ranges.
func (st *startState) unmapRange(addr, size int64) {
	lo, hi := addr, addr+size
	var out []rseg
	for _, g := range st.segs {
		if !g.expandable || g.end() <= lo || g.addr >= hi {
			out = append(out, g)
			continue
		}
		if g.addr < lo {
			out = append(out, rseg{g.addr, lo - g.addr, g.stream, g.small, true})
		}
		if g.end() > hi {
			out = append(out, rseg{hi, g.end() - hi, g.stream, g.small, true})
		}
	}
	st.segs = out
	st.dropBlocks(lo, hi)
}

// mergeRanges joins abutting mapped ranges of one expandable segment (same
// stream and pool), as memory_snapshot reports one segment per contiguous
// mapped range.
func (st *startState) mergeRanges() {
	out := st.segs[:0]
	for _, g := range st.segs {
		if n := len(out); n > 0 && g.expandable && out[n-1].expandable && out[n-1].end() == g.addr &&
			out[n-1].stream == g.stream && out[n-1].small == g.small {
			out[n-1].size += g.size
			continue
		}
		out = append(out, g)
	}
	st.segs = out
}

// expandableSmall tells which pool an unmapped range belonged to. Small
// pool pages are 2 MiB and large pool pages 20 MiB, so a range that is
// not whole 20 MiB is the small pool's. Otherwise each pool of a stream
// maps into a reservation of its own, far larger than what is mapped in
// it and filled from its lowest address up (find_expandable_block), so the
// range belongs with the nearest address of known pool within a
// reservation's reach; with none, the large pool, whose pages a whole
// number of 20 MiB is.
func (st *startState) expandableSmall(e *TraceEntry) bool {
	if e.Size%alloc.LargeBuffer != 0 {
		return true
	}
	pts := st.known[e.Stream]
	i, _ := slices.BinarySearchFunc(pts, e.Addr, func(p poolPoint, x int64) int { return cmp.Compare(p.addr, x) })
	below := i > 0 && e.Addr-pts[i-1].addr <= maxReservation
	above := i < len(pts) && pts[i].addr-e.Addr <= maxReservation
	switch {
	case below && above:
		if e.Addr-pts[i-1].addr < pts[i].addr-e.Addr {
			return pts[i-1].small
		}
		return pts[i].small
	case below:
		return pts[i-1].small
	case above:
		return pts[i].small
	}
	return false
}

// reserved is the bytes of the segments.
func (st *startState) reserved() int64 {
	var n int64
	for _, g := range st.segs {
		n += g.size
	}
	return n
}

// reservedFrom returns where the reservation of the expandable range at
// lowest (the lowest of its stream and pool at the first entry) is known
// to begin: the page holding the lowest address the trace shows in that
// reservation, or 0 when none is below lowest. find_expandable_block maps
// from a reservation's lowest free address up, so pages unmapped below
// the lowest range at the start are the first a replay may map again.
func (st *startState) reservedFrom(entries []TraceEntry, stream int64, small bool, lowest int64) int64 {
	page := int64(alloc.LargeBuffer)
	if small {
		page = alloc.SmallBuffer
	}
	var from int64
	for i := range entries {
		e := &entries[i]
		if e.Stream != stream || e.Addr >= lowest || lowest-e.Addr > maxReservation {
			continue
		}
		var sm bool
		switch e.Action {
		case ActionAlloc, ActionFreeRequested, ActionFreeCompleted:
			sm = st.cfg.RoundSize(max(e.Size, 1)) <= alloc.SmallSize
		case ActionSegmentMap, ActionSegmentUnmap:
			sm = st.expandableSmall(e)
		default:
			continue
		}
		if sm != small {
			continue
		}
		p := lowest - (lowest-e.Addr+page-1)/page*page
		if from == 0 || p < from {
			from = p
		}
	}
	return from
}
