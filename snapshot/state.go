package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/batchfit/batchfit/alloc"
)

// Sizes of CUDACachingAllocator.cpp that the rebuilt state relies on.
const (
	smallSegment = 2 << 20 // kSmallBuffer: every small-pool segment
	smallSize    = 1 << 20 // kSmallSize: should_split's large-pool remainder
	largePage    = 20 << 20
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
			st.addSegment(rseg{e.Addr, e.Size, e.Stream, e.Size == smallSegment, false})
		case ActionSegmentMap:
			st.unmapRange(e.Addr, e.Size)
		case ActionSegmentUnmap:
			st.addSegment(rseg{e.Addr, e.Size, e.Stream, st.expandableSmall(e), true})
			st.mergeRanges()
		}
	}
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
	if e.Addr+size > gapEnd || !g.small && !st.cfg.ExpandableSegments && gapEnd-e.Addr-size <= smallSize {
		size = gapEnd - e.Addr
	}
	st.blks = slices.Insert(st.blks, j, rblk{addr: e.Addr, size: size, requested: e.Size, stream: g.stream, site: e.Site})
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

// expandableSmall tells which pool an unmapped range belonged to: that of
// the nearest mapped range of the same stream (each pool's ranges lie in
// its own reservation), else by size: large-pool pages are 20 MiB.
func (st *startState) expandableSmall(e *TraceEntry) bool {
	best, found := int64(0), false
	small := false
	for _, g := range st.segs {
		if !g.expandable || g.stream != e.Stream {
			continue
		}
		d := g.addr - e.Addr
		if d < 0 {
			d = -d
		}
		if !found || d < best {
			best, found, small = d, true, g.small
		}
	}
	if found {
		return small
	}
	return e.Size%largePage != 0
}

// reserved is the bytes of the segments.
func (st *startState) reserved() int64 {
	var n int64
	for _, g := range st.segs {
		n += g.size
	}
	return n
}
