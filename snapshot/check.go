package snapshot

import (
	"fmt"
	"sort"

	"github.com/batchfit/batchfit/graph"
)

// check refuses a decoded snapshot whose figures no allocator writes, so
// that nonsense is named where it is rather than replayed: each refusal
// names the segment, block or trace entry, and the field. The rules are
// those of PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp) as snapshot() and the trace report
// them (torch/csrc/cuda/memory_snapshot.cpp, _memory_snapshot_pickled).
func (s *Snapshot) check() error {
	for i := range s.Segments {
		if err := checkSegment(&s.Segments[i], i); err != nil {
			return err
		}
	}
	// Segments are distinct device allocations (cudaMalloc, or the mapped
	// range of an expandable segment): on one device they never overlap.
	order := make([]int, len(s.Segments))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := &s.Segments[order[a]], &s.Segments[order[b]]
		if x.Device != y.Device {
			return x.Device < y.Device
		}
		return x.Address < y.Address
	})
	for k := 1; k < len(order); k++ {
		p, q := &s.Segments[order[k-1]], &s.Segments[order[k]]
		if p.Device == q.Device && q.Address < p.Address+p.TotalSize {
			return fmt.Errorf("segments[%d]: \"address\" %#x lies inside segments[%d] (%#x, %d bytes) on device %d: segments do not overlap", order[k], q.Address, order[k-1], p.Address, p.TotalSize, p.Device)
		}
	}
	for d, entries := range s.Traces {
		if err := checkTrace(entries, d); err != nil {
			return err
		}
	}
	return nil
}

// checkSize refuses a size that is negative or beyond graph.MaxBytes (no
// device holds it, and sums of such sizes overflow int64).
func checkSize(path func() string, field string, n int64, positive bool) error {
	if n < 0 || positive && n == 0 || n > graph.MaxBytes {
		want := "non-negative"
		if positive {
			want = "positive"
		}
		return fmt.Errorf("%s: %q is %d: expected a %s size up to %d bytes", path(), field, n, want, int64(graph.MaxBytes))
	}
	return nil
}

func checkSegment(seg *Segment, i int) error {
	path := func() string { return fmt.Sprintf("segments[%d]", i) }
	// A segment is a cudaMalloc of at least one block (kMinBlockSize, 512
	// bytes), so its size is positive.
	if err := checkSize(path, "total_size", seg.TotalSize, true); err != nil {
		return err
	}
	if seg.Address < 0 || seg.Address > graph.MaxBytes {
		return fmt.Errorf("%s: \"address\" is %d: not a device address", path(), seg.Address)
	}
	end := seg.Address + seg.TotalSize // both at most 2^56: no overflow
	// allocated_size, active_size and requested_size sum blocks of the
	// segment (SegmentInfo in CUDACachingAllocator.cpp, snapshot()).
	for _, f := range []struct {
		name string
		n    int64
	}{{"allocated_size", seg.AllocatedSize}, {"active_size", seg.ActiveSize}, {"requested_size", seg.RequestedSize}} {
		if err := checkSize(path, f.name, f.n, false); err != nil {
			return err
		}
		if f.n > seg.TotalSize {
			return fmt.Errorf("%s: %q is %d, more than the segment's total_size %d", path(), f.name, f.n, seg.TotalSize)
		}
	}
	// Blocks tile the segment in address order (snapshot() walks
	// segment->next from the segment's head block).
	prevEnd := seg.Address
	for j := range seg.Blocks {
		b := &seg.Blocks[j]
		bpath := func() string { return fmt.Sprintf("segments[%d].blocks[%d]", i, j) }
		if err := checkSize(bpath, "size", b.Size, true); err != nil {
			return err
		}
		if b.Address < prevEnd {
			return fmt.Errorf("%s: \"address\" %#x is before the end of the previous block or the segment's start (%#x)", bpath(), b.Address, prevEnd)
		}
		if b.Address > end || b.Size > end-b.Address {
			return fmt.Errorf("%s: %d bytes at %#x end beyond its segment (%#x, %d bytes)", bpath(), b.Size, b.Address, seg.Address, seg.TotalSize)
		}
		prevEnd = b.Address + b.Size
		if err := checkSize(bpath, "requested_size", b.RequestedSize, false); err != nil {
			return err
		}
		// An allocated block was rounded up from its request
		// (round_size); a free block may keep a stale request, larger
		// than what a split left of it, so only allocated ones are held
		// to it.
		if b.Allocated() && b.RequestedSize > b.Size {
			return fmt.Errorf("%s: \"requested_size\" %d is more than the block's size %d", bpath(), b.RequestedSize, b.Size)
		}
	}
	return nil
}

// knownAction reports whether a is an action memory_snapshot.cpp writes
// (action_to_str; "user_defined", TraceEntry::USER_DEFINED, in releases
// with annotations).
func knownAction(a string) bool {
	switch a {
	case ActionAlloc, ActionFreeRequested, ActionFreeCompleted,
		ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap,
		ActionSnapshot, ActionOOM, ActionUserDefined:
		return true
	}
	return false
}

func checkTrace(entries []TraceEntry, d int) error {
	// live maps the address of a block allocated in the trace, and not yet
	// freed, to its entry: the allocator hands out an address again only
	// after the block is freed (free_requested, then free_completed once
	// its streams are done), so a second alloc there is not a trace the
	// allocator writes.
	live := make(map[int64]int)
	for i := range entries {
		e := &entries[i]
		path := func() string { return fmt.Sprintf("device_traces[%d][%d]", d, i) }
		if !knownAction(e.Action) {
			return fmt.Errorf("%s: \"action\" %q is not an allocator action (alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom, user_defined)", path(), e.Action)
		}
		if err := checkSize(path, "size", e.Size, false); err != nil {
			return err
		}
		if e.Addr < 0 || e.Addr > graph.MaxBytes {
			return fmt.Errorf("%s: \"addr\" is %d: not a device address", path(), e.Addr)
		}
		switch e.Action {
		case ActionAlloc:
			if k, ok := live[e.Addr]; ok {
				return fmt.Errorf("%s: \"addr\" %#x: alloc of a block already allocated by device_traces[%d][%d] and not freed", path(), e.Addr, d, k)
			}
			live[e.Addr] = i
		case ActionFreeRequested:
			delete(live, e.Addr)
		}
	}
	return nil
}
