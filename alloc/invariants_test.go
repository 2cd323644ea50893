package alloc

import (
	"fmt"
	"slices"
)

// checkInvariants walks the whole allocator state and recomputes every
// counter from it.
func checkInvariants(a *Allocator) error {
	var allocated, requested, reserved, numAllocs, numSegs int64
	freeMapped := map[*pool]int{}
	for i, s := range a.segs {
		if s.idx != i {
			return fmt.Errorf("segment %#x: idx %d at position %d", s.addr, s.idx, i)
		}
		if s.head == nil || s.head.prev != nil {
			return fmt.Errorf("segment %#x: bad head", s.addr)
		}
		addr := s.addr
		var sum, mapped int64
		var prev *block
		for b := s.head; b != nil; b = b.next {
			if b.prev != prev {
				return fmt.Errorf("segment %#x: block %#x: prev link broken", s.addr, b.addr)
			}
			if b.seg != s {
				return fmt.Errorf("segment %#x: block %#x: wrong segment", s.addr, b.addr)
			}
			if b.addr != addr {
				return fmt.Errorf("segment %#x: block at %#x, want %#x (gap or overlap)", s.addr, b.addr, addr)
			}
			if b.size <= 0 {
				return fmt.Errorf("segment %#x: block %#x: size %d", s.addr, b.addr, b.size)
			}
			if !s.expandable && !b.mapped {
				return fmt.Errorf("segment %#x: unmapped block in a cudaMalloc segment", s.addr)
			}
			if b.allocated && !b.mapped {
				return fmt.Errorf("segment %#x: allocated block %#x is unmapped", s.addr, b.addr)
			}
			if prev != nil && !prev.allocated && !b.allocated && prev.mapped == b.mapped {
				return fmt.Errorf("segment %#x: adjacent free blocks %#x and %#x were not merged", s.addr, prev.addr, b.addr)
			}
			if s.expandable && !b.mapped && ((b.addr-s.addr)%s.page != 0 || b.size%s.page != 0) {
				return fmt.Errorf("segment %#x: unmapped block %#x+%d not page aligned", s.addr, b.addr, b.size)
			}
			switch {
			case b.allocated:
				allocated += b.size
				requested += b.requested
				numAllocs++
				if a.live.get(b.id) != b {
					return fmt.Errorf("block %#x: id %d not live", b.addr, b.id)
				}
			case b.mapped:
				freeMapped[s.pool]++
				if it, ok := findItem(&s.pool.free, b); !ok || it.b != b {
					return fmt.Errorf("free block %#x+%d missing from its pool", b.addr, b.size)
				}
			default:
				if !slices.Contains(s.pool.unmapped, b) {
					return fmt.Errorf("unmapped block %#x missing from its pool", b.addr)
				}
			}
			if b.mapped {
				mapped += b.size
			}
			sum += b.size
			addr += b.size
			prev = b
		}
		if sum != s.size {
			return fmt.Errorf("segment %#x: blocks sum to %d, segment size %d", s.addr, sum, s.size)
		}
		if s.expandable {
			if mapped != s.mapped {
				return fmt.Errorf("segment %#x: mapped %d, recorded %d", s.addr, mapped, s.mapped)
			}
			reserved += mapped
		} else {
			reserved += s.size
			numSegs++
		}
	}
	for _, ps := range a.pools {
		for _, p := range ps {
			if err := checkTree(&p.free); err != nil {
				return err
			}
			if p.free.len() != freeMapped[p] {
				return fmt.Errorf("pool stream %d small %v: %d cached blocks, %d free blocks in segments", p.stream, p.small, p.free.len(), freeMapped[p])
			}
			for i := 1; i < len(p.unmapped); i++ {
				if p.unmapped[i-1].addr >= p.unmapped[i].addr {
					return fmt.Errorf("unmapped list out of order")
				}
			}
		}
	}
	live := int64(0)
	a.live.each(func(id int64, b *block) {
		if b != zeroBlock {
			live++
		}
		if got := a.live.get(id); got != b {
			panic(fmt.Sprintf("idMap: get(%d) = %p, want %p", id, got, b))
		}
	})
	if live != numAllocs {
		return fmt.Errorf("%d live ids, %d allocated blocks", live, numAllocs)
	}
	st := a.Stats()
	if st.Allocated != allocated || st.Requested != requested || st.Reserved != reserved ||
		st.NumAllocations != numAllocs || a.numSegs != numSegs || st.Active != allocated {
		return fmt.Errorf("stats %+v; recomputed allocated %d requested %d reserved %d allocs %d segs %d",
			st, allocated, requested, reserved, numAllocs, numSegs)
	}
	if st.Allocated > st.Reserved {
		return fmt.Errorf("allocated %d > reserved %d", st.Allocated, st.Reserved)
	}
	if st.PeakAllocated < st.Allocated || st.PeakReserved < st.Reserved {
		return fmt.Errorf("peaks below current: %+v", st)
	}
	if a.capacity > 0 && st.Reserved > a.capacity {
		return fmt.Errorf("reserved %d above capacity %d", st.Reserved, a.capacity)
	}
	// The exported view: segments sorted, not overlapping, blocks covering
	// each segment exactly.
	segs := a.Segments()
	var end int64
	var sumRes int64
	for _, s := range segs {
		if s.Address < end {
			return fmt.Errorf("segments overlap at %#x", s.Address)
		}
		var n int64
		at := s.Address
		for _, b := range s.Blocks {
			if b.Address != at {
				return fmt.Errorf("segment %#x: block at %#x, want %#x", s.Address, b.Address, at)
			}
			at += b.Size
			n += b.Size
		}
		if n != s.Size {
			return fmt.Errorf("segment %#x: blocks sum %d, size %d", s.Address, n, s.Size)
		}
		sumRes += s.Size
		end = s.Address + s.Size
	}
	if sumRes != st.Reserved || int64(len(segs)) != st.NumSegments {
		return fmt.Errorf("Segments: %d segments of %d bytes; stats %d segments %d reserved", len(segs), sumRes, st.NumSegments, st.Reserved)
	}
	return nil
}

func findItem(t *btree, b *block) (btItem, bool) {
	var found btItem
	ok := false
	t.ascendFrom(b.size, func(x btItem) bool {
		if x.size != b.size {
			return false
		}
		if x.addr == b.addr {
			found, ok = x, true
			return false
		}
		return true
	})
	return found, ok
}

// checkTree verifies B-tree order, node fill and equal leaf depth.
func checkTree(t *btree) error {
	if t.root == nil {
		if t.count != 0 {
			return fmt.Errorf("btree: empty root, count %d", t.count)
		}
		return nil
	}
	var items []btItem
	leafDepth := -1
	var walk func(n *btNode, depth int, root bool) error
	walk = func(n *btNode, depth int, root bool) error {
		if n.n > btMaxItems || (!root && n.n < btMinItems) || n.n == 0 {
			return fmt.Errorf("btree: node with %d items", n.n)
		}
		if n.leaf {
			if leafDepth == -1 {
				leafDepth = depth
			} else if leafDepth != depth {
				return fmt.Errorf("btree: leaves at depths %d and %d", leafDepth, depth)
			}
			for i := 0; i < n.n; i++ {
				items = append(items, t.item(n, i))
			}
			return nil
		}
		for i := 0; i <= n.n; i++ {
			if n.children[i] == nil {
				return fmt.Errorf("btree: missing child")
			}
			if err := walk(n.children[i], depth+1, false); err != nil {
				return err
			}
			if i < n.n {
				items = append(items, t.item(n, i))
			}
		}
		return nil
	}
	if err := walk(t.root, 0, true); err != nil {
		return err
	}
	if len(items) != t.count {
		return fmt.Errorf("btree: %d items, count %d", len(items), t.count)
	}
	for i := 1; i < len(items); i++ {
		if !items[i-1].less(items[i]) {
			return fmt.Errorf("btree: items out of order at %d", i)
		}
	}
	for _, it := range items {
		if it.b != nil && (it.b.size != it.size || it.b.addr != it.addr) {
			return fmt.Errorf("btree: stale key for block %#x", it.addr)
		}
	}
	return nil
}
