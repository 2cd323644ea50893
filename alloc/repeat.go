package alloc

import "slices"

// A trace may mark runs of events as copies of a template (trace.Repeat):
// the same requests and frees, with ids moved on. When the allocator's
// state after the template is the one it had before it — the same segments,
// the same blocks at the same addresses, free or holding the same requests
// of the same categories, the ids of the template's allocations where the
// ids of the run before it were — each copy would leave it there again and
// reach the same figures on the way: the copies can be skipped, with the
// live ids moved on and the counters of cudaMalloc calls and retries
// advanced as many times. The state is compared, not assumed: when it did
// not come back (a segment was added, a block moved), the copies are
// replayed one by one.

// canonical appends a comparable picture of the state to buf: the next
// segment address, then per segment its range and per block its address,
// size, flags, request and category, and its id made relative to base when
// at or above it.
func (a *Allocator) canonical(buf []int64, base int64) []int64 {
	buf = append(buf, a.nextAddr, int64(len(a.segs)), a.allocated, a.reserved, a.requested, a.numAllocs, a.numSegs)
	for _, s := range a.segs {
		var exp int64
		if s.expandable {
			exp = 1
		}
		buf = append(buf, -1, s.addr, s.size, s.mapped, exp)
		for b := s.head; b != nil; b = b.next {
			var flags int64
			if b.allocated {
				flags |= 1
			}
			if b.mapped {
				flags |= 2
			}
			id := int64(0)
			if b.allocated {
				id = b.id
				if id >= base {
					id = id - base + 1<<62
				}
			}
			buf = append(buf, b.addr, b.size, flags, b.requested, int64(b.tag), id, int64(b.stream()))
		}
	}
	return buf
}

// stream is the stream of the pool the block's segment belongs to.
func (b *block) stream() int32 {
	if b.seg == nil || b.seg.pool == nil {
		return 0
	}
	return b.seg.pool.stream
}

// counters are the cumulative counts a skipped copy would have advanced.
type counters struct{ retries, ooms, devAllocs, devFrees int64 }

func (a *Allocator) counters() counters {
	return counters{a.retries, a.ooms, a.devAllocs, a.devFrees}
}

// skip advances the allocator past periods whole periods of copies that
// leave its state as they found it: the counts grow by periods times what
// one period added (since before), and the live allocations at or above
// base (the last run's own) take the ids of the last copy skipped.
func (a *Allocator) skip(before counters, times, base, shift int64) {
	now := a.counters()
	a.retries += times * (now.retries - before.retries)
	a.ooms += times * (now.ooms - before.ooms)
	a.devAllocs += times * (now.devAllocs - before.devAllocs)
	a.devFrees += times * (now.devFrees - before.devFrees)
	// The ids come from the table's slots: every size-0 allocation shares
	// one block (zeroBlock), whose own id means nothing and must not move.
	var moved []idSlot
	for _, s := range a.live.slots {
		if s.b != nil && s.id >= base {
			moved = append(moved, s)
		}
	}
	for _, s := range moved {
		a.live.remove(s.id)
	}
	for _, s := range moved {
		if s.b != zeroBlock {
			s.b.id = s.id + shift
		}
		a.live.insert(s.id+shift, s.b)
	}
}

// stateLog keeps the states at the boundaries of one repetition's runs.
type stateLog struct {
	states [][]int64
	counts []counters
	n      int
}

func (l *stateLog) reset() { l.n = 0 }

// add records the state at the next boundary, its ids relative to base,
// and reports the earlier boundary with the same state, if any. fellBack
// is the replay's count of allocations that fell back so far
// (Timeline.FellBack): a run in which one fell back changed a caller's
// cached choice, so the runs after it are not the runs before it even
// where the allocator's blocks look the same.
func (l *stateLog) add(a *Allocator, base, fellBack int64) (int, bool) {
	if l.n == len(l.states) {
		l.states = append(l.states, nil)
		l.counts = append(l.counts, counters{})
	}
	cur := append(a.canonical(l.states[l.n][:0], base), fellBack)
	l.states[l.n], l.counts[l.n] = cur, a.counters()
	for p := 0; p < l.n; p++ {
		if slices.Equal(l.states[p], cur) {
			l.n++
			return p, true
		}
	}
	l.n++
	return 0, false
}
