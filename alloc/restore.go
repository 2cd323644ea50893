package alloc

import (
	"cmp"
	"fmt"
	"slices"
)

// RoundSize is round_size under cfg: the size of the block a request of n
// bytes is given when the block is split off a larger one (at least 512
// bytes, a multiple of 512, or the next roundup_power2_divisions step).
func (c Config) RoundSize(n int64) int64 {
	a := Allocator{cfg: c}
	for _, d := range c.RoundupPower2Divisions {
		a.divisions = a.divisions || d > 1
	}
	return a.roundSize(n)
}

// Restore puts segs into an empty allocator as the state a replay starts
// from: segments that were reserved before the first event, with their
// allocated blocks. It is how a replay continues a recording that began
// mid-run (a memory snapshot's ring buffer).
//
// Each segment lists its allocated blocks (Allocated true, with the ID
// later Free calls name); gaps between them, and blocks listed with
// Allocated false, are free, and adjacent free space is one free block,
// as free_block's merging always leaves it (try_merge_blocks). Segments
// of the small pool are 2 MiB, as get_allocation_size makes them.
//
// An expandable segment (Expandable true) is one contiguous mapped range
// of an expandable segment's reservation, as memory_snapshot lists it;
// the ranges of one (stream, pool) are placed in one reservation, with
// unmapped address space between them, mapped in pages of 2 MiB (small
// pool) or 20 MiB (large pool) from the lowest range. Their addresses
// must be a whole number of pages apart.
//
// Counters start from the state: allocated, reserved and their peaks are
// those of the segments, and the device allocation counts start at 0, so
// that Stats.NumDeviceAlloc after a replay counts the segments the replay
// itself created. Restore fails, leaving the allocator unusable, when the
// segments overlap, a block leaves its segment, blocks overlap, an ID is
// used twice or is 0, or the allocator is not empty.
func (a *Allocator) Restore(segs []Segment) error {
	if len(a.segs) != 0 || a.live.len() != 0 {
		return fmt.Errorf("restoring allocator state: the allocator is not empty")
	}
	sorted := slices.Clone(segs)
	slices.SortFunc(sorted, func(x, y Segment) int { return cmp.Compare(x.Address, y.Address) })
	end := int64(addrBase)
	for i, s := range sorted {
		if s.Size <= 0 {
			return fmt.Errorf("restoring allocator state: segment at %#x has size %d", s.Address, s.Size)
		}
		if s.Address < 0 || s.Address > maxRequest || s.Size > maxRequest {
			return fmt.Errorf("restoring allocator state: segment at %#x of %d bytes is out of range", s.Address, s.Size)
		}
		if i > 0 && sorted[i-1].Address+sorted[i-1].Size > s.Address {
			return fmt.Errorf("restoring allocator state: segments at %#x and %#x overlap", sorted[i-1].Address, s.Address)
		}
		end = max(end, s.Address+s.Size)
	}
	// Expandable ranges, grouped by (stream, pool).
	type key struct {
		stream int32
		pool   Pool
	}
	groups := map[key][]Segment{}
	var keys []key
	for _, s := range sorted {
		if !s.Expandable {
			if err := a.restoreSegment(s); err != nil {
				return err
			}
			continue
		}
		k := key{s.Stream, s.Pool}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	for _, k := range keys {
		rs := groups[k]
		// Another segment between this group's ranges would sit inside
		// its reservation, which cannot be.
		lo, hi := rs[0].Address, rs[len(rs)-1].Address
		from := lo
		for _, r := range rs {
			if r.ReservedFrom > 0 {
				from = min(from, r.ReservedFrom)
			}
		}
		var limit int64
		for _, s := range sorted {
			if s.Expandable && s.Stream == k.stream && s.Pool == k.pool {
				continue
			}
			if s.Address > lo && s.Address < hi {
				return fmt.Errorf("restoring allocator state: segment at %#x lies between the mapped ranges of the expandable segment of stream %d's %s pool", s.Address, k.stream, k.pool)
			}
			if s.Address > hi && (limit == 0 || s.Address < limit) {
				limit = s.Address
			}
			if end := s.Address + s.Size; end > from && end <= lo {
				from = end // the reservation cannot reach below it
			}
		}
		e, err := a.restoreExpandable(rs, from, limit)
		if err != nil {
			return err
		}
		end = max(end, e)
	}
	a.nextAddr = alignUp(end, LargeBuffer)
	a.peakAlloc, a.peakRes, a.peakAct, a.peakReq = a.allocated, a.reserved, a.active, a.requested
	return nil
}

// restoreSegment adds one cudaMalloc'd segment.
func (a *Allocator) restoreSegment(s Segment) error {
	p := a.poolFor(s.Stream, s.Pool == SmallPool)
	seg := &segment{addr: s.Address, size: s.Size, pool: p}
	if _, err := a.restoreBlocks(p, seg, s.Address, s.Size, s.Blocks, nil); err != nil {
		return err
	}
	a.addSegment(seg)
	a.numSegs++
	a.reserved += s.Size
	return nil
}

// restoreBlocks builds the chain of mapped blocks covering [addr,
// addr+size) of seg after prev (nil at the segment's start) and returns
// the last.
func (a *Allocator) restoreBlocks(p *pool, seg *segment, addr, size int64, blocks []Block, prev *block) (*block, error) {
	bs := slices.Clone(blocks)
	slices.SortFunc(bs, func(x, y Block) int { return cmp.Compare(x.Address, y.Address) })
	cur := addr
	link := func(b *block) {
		b.seg, b.mapped, b.prev = seg, true, prev
		if prev != nil {
			prev.next = b
		} else {
			seg.head = b
		}
		prev = b
	}
	addFree := func(lo, hi int64) {
		if hi <= lo {
			return
		}
		b := a.newBlock()
		b.addr, b.size = lo, hi-lo
		link(b)
		a.insertFree(p, b)
	}
	for _, blk := range bs {
		if !blk.Allocated {
			continue
		}
		if blk.Size <= 0 || blk.Address < cur || blk.Address+blk.Size > addr+size {
			return nil, fmt.Errorf("restoring allocator state: block at %#x of %d bytes does not fit its segment at %#x of %d bytes after the blocks before it", blk.Address, blk.Size, addr, size)
		}
		if blk.ID == 0 {
			return nil, fmt.Errorf("restoring allocator state: block at %#x has ID 0", blk.Address)
		}
		if a.live.get(blk.ID) != nil {
			return nil, fmt.Errorf("restoring allocator state: block at %#x: %w", blk.Address, errDoubleAlloc(blk.ID))
		}
		addFree(cur, blk.Address)
		b := a.newBlock()
		b.addr, b.size = blk.Address, blk.Size
		link(b)
		b.allocated, b.requested, b.id = true, max(blk.Requested, 0), blk.ID
		a.live.insert(blk.ID, b)
		a.numAllocs++
		a.allocated += b.size
		a.active += b.size
		a.requested += b.requested
		cur = blk.Address + blk.Size
	}
	addFree(cur, addr+size)
	return prev, nil
}

// restoreExpandable builds one reservation holding the mapped ranges rs of
// one (stream, pool), sorted by address, beginning at the first whole page
// at or above from; limit is the address of the next segment above them
// (or 0 for none), which the reservation must not reach. It returns the
// reservation's end.
func (a *Allocator) restoreExpandable(rs []Segment, from, limit int64) (int64, error) {
	p := a.poolFor(rs[0].Stream, rs[0].Pool == SmallPool)
	page := int64(LargeBuffer)
	if p.small {
		page = SmallBuffer
	}
	base := rs[0].Address - (rs[0].Address-min(from, rs[0].Address))/page*page
	last := rs[len(rs)-1]
	for _, r := range rs {
		if (r.Address-rs[0].Address)%page != 0 || r.Size%page != 0 {
			return 0, fmt.Errorf("restoring allocator state: expandable range at %#x of %d bytes is not whole %d-byte pages from %#x", r.Address, r.Size, page, base)
		}
	}
	// The reservation is as large as findExpandable makes it, and at
	// least as large as the ranges need; it stops short of the next
	// segment (growth past it then takes a new reservation, as in PyTorch
	// when one is full).
	total := a.total
	if total <= 0 || total > vaMaxTotal {
		total = min(max(total, vaDefaultTotal), vaMaxTotal)
	}
	need := last.Address + last.Size - base
	va := max(alignUp(total+total/8, page), need)
	if limit > 0 && base+va > limit {
		va = max(need, (limit-base)/page*page)
	}
	seg := &segment{addr: base, size: va, pool: p, page: page, expandable: true}
	var prev *block
	unmapped := func(lo, hi int64) {
		if hi <= lo {
			return
		}
		b := a.newBlock()
		b.addr, b.size, b.seg, b.prev = lo, hi-lo, seg, prev
		if prev != nil {
			prev.next = b
		} else {
			seg.head = b
		}
		prev = b
		p.insertUnmapped(b)
	}
	cur := base
	for _, r := range rs {
		unmapped(cur, r.Address)
		var err error
		if prev, err = a.restoreBlocks(p, seg, r.Address, r.Size, r.Blocks, prev); err != nil {
			return 0, err
		}
		seg.mapped += r.Size
		a.reserved += r.Size
		cur = r.Address + r.Size
	}
	unmapped(cur, base+va)
	a.addSegment(seg)
	return base + va, nil
}
