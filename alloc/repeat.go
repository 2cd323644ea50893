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
// base (the last run's own, or the last Lag runs' under a
// trace.Repeat.Lag) take the ids of the last copy skipped.
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

// stateWindow is how many of the latest looked-at boundaries' states a
// replay keeps: a state seen again among them marks a period, and the rest
// of the runs are skipped. The batch of each micro-batch is allocated
// before the last one's is freed, so consecutive runs may use two places
// in turn, and small blocks can walk through a free block of the small
// pool a kilobyte a period before their places come back (ResNet-50 at
// batch 4 under gradient accumulation: a period of tens of runs). The
// first lookEvery boundaries are all looked at; after them every
// lookEvery-th, which finds a period P as a multiple of it (the least
// common multiple of P and lookEvery), at an eighth of the cost.
const (
	stateWindow = 128
	lookEvery   = 8
)

// looks reports whether the boundary before run k is looked at.
func looks(k int) bool { return k <= lookEvery || k%lookEvery == 0 }

// stateLog keeps the states at the latest looked-at boundaries of one
// repetition's runs.
type stateLog struct {
	states [stateWindow][]int64
	hashes [stateWindow]uint64
	counts [stateWindow]counters
	at     [stateWindow]int // the boundary of each state
	n      int              // states recorded since the reset
}

func (l *stateLog) reset() { l.n = 0 }

// add records the state at boundary k (counted from the reset, the
// template's start being 0), its ids relative to base, and reports the
// latest earlier boundary kept with the same state, if any. fellBack is
// the replay's count of allocations that fell back so far
// (Timeline.FellBack): a run in which one fell back changed a caller's
// cached choice, so the runs after it are not the runs before it even
// where the allocator's blocks look the same.
func (l *stateLog) add(a *Allocator, k int, base, fellBack int64) (p int, found bool) {
	slot := l.n % stateWindow
	cur := append(a.canonical(l.states[slot][:0], base), fellBack)
	h := hashState(cur)
	l.states[slot], l.hashes[slot], l.counts[slot], l.at[slot] = cur, h, a.counters(), k
	for i := l.n - 1; i >= 0 && i > l.n-stateWindow; i-- {
		if q := i % stateWindow; l.hashes[q] == h && slices.Equal(l.states[q], cur) {
			p, found = l.at[q], true
			break
		}
	}
	l.n++
	return p, found
}

// countsAt are the counters at boundary p, one add returned.
func (l *stateLog) countsAt(p int) counters {
	for i := range stateWindow {
		if l.at[i] == p {
			return l.counts[i]
		}
	}
	return counters{}
}

// hashState is FNV-1a over a state's numbers, to compare states cheaply.
func hashState(s []int64) uint64 {
	h := uint64(14695981039346656037)
	for _, v := range s {
		h ^= uint64(v)
		h *= 1099511628211
	}
	return h
}
