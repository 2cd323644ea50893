package alloc

import (
	"cmp"
	"slices"
)

// Expandable segments (Note [Expandable Segments] in
// CUDACachingAllocator.cpp): each (stream, pool) reserves address space of
// 1.125 times the device's total memory and maps physical pages into it on
// demand, 2 MiB pages for the small pool and 20 MiB pages for the large
// pool. The address space is a chain of blocks like any segment; the parts
// without memory behind them are unmapped blocks, kept per pool in address
// order.

// vaDefaultTotal stands for the device size when neither Total nor Capacity
// is known, so that an unlimited device still gets a bounded reservation.
const vaDefaultTotal = 1 << 46

// vaMaxTotal bounds the reservation so address arithmetic cannot overflow.
const vaMaxTotal = 1 << 52

func (p *pool) insertUnmapped(b *block) {
	i, _ := slices.BinarySearchFunc(p.unmapped, b.addr, byAddr)
	p.unmapped = slices.Insert(p.unmapped, i, b)
}

func (p *pool) removeUnmapped(b *block) {
	i, ok := slices.BinarySearchFunc(p.unmapped, b.addr, byAddr)
	if ok {
		p.unmapped = slices.Delete(p.unmapped, i, i+1)
	}
}

func byAddr(x *block, addr int64) int { return cmp.Compare(x.addr, addr) }

// tryAllocateExpandable is try_allocate_expandable_block: map enough pages
// for size at the lowest address that has room, merging with free mapped
// space before it.
func (a *Allocator) tryAllocateExpandable(p *pool, size int64) *block {
	c := a.findExpandable(p, size)
	if c == nil {
		return nil
	}
	if !c.mapped && !a.mapBlock(p, c, min(c.size, size)) {
		return nil
	}
	for c.size < size {
		// c is free and mapped, followed by unmapped space.
		n := c.next
		if n == nil || n.mapped || n.allocated {
			return nil
		}
		if !a.mapBlock(p, n, min(size-c.size, n.size)) {
			// Pages mapped by earlier calls stay mapped, as in PyTorch;
			// release_cached_blocks unmaps them.
			return nil
		}
		c = n // n absorbed c
	}
	p.free.delete(itemOf(c))
	return c
}

// findExpandable is find_expandable_block: the lowest-addressed run of free
// and unmapped blocks with at least size bytes, or a new segment.
func (a *Allocator) findExpandable(p *pool, size int64) *block {
	for _, u := range p.unmapped {
		c := u
		if c.prev != nil && !c.prev.allocated {
			c = c.prev
		}
		var n int64
		for b := c; n < size && b != nil && !b.allocated; b = b.next {
			n += b.size
		}
		if n >= size {
			return c
		}
	}
	page := int64(LargeBuffer)
	if p.small {
		page = SmallBuffer
	}
	total := a.total
	if total <= 0 || total > vaMaxTotal {
		total = min(max(total, vaDefaultTotal), vaMaxTotal)
	}
	va := alignUp(total+total/8, page)
	if va < size {
		return nil // no reservation could hold it; mapping would fail anyway
	}
	s := &segment{addr: alignUp(a.nextAddr, page), size: va, pool: p, page: page, expandable: true}
	a.nextAddr = s.addr + va
	b := a.newBlock()
	b.addr, b.size, b.seg = s.addr, va, s
	s.head = b
	a.addSegment(s)
	p.insertUnmapped(b)
	return b
}

// mapBlock is map_block: map the pages covering the first size bytes of
// the unmapped block b. The pages are created one by one and all released
// again if one fails, so the call maps all or nothing.
func (a *Allocator) mapBlock(p *pool, b *block, size int64) bool {
	s := b.seg
	begin := (b.addr - s.addr) / s.page
	end := (b.addr + size - s.addr + s.page - 1) / s.page
	n := (end - begin) * s.page
	if n <= 0 || n > a.capacity-a.reserved {
		return false
	}
	p.removeUnmapped(b)
	b.mapped = true
	if n < b.size {
		r := a.newBlock()
		r.addr, r.size, r.seg = b.addr+n, b.size-n, s
		r.prev, r.next = b, b.next
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
		p.insertUnmapped(r)
		b.size = n
	}
	a.tryMerge(p, b, b.prev)
	a.tryMerge(p, b, b.next)
	a.insertFree(p, b)
	s.mapped += n
	a.devAllocs++
	a.growReserved(n)
	return true
}

// unmapBlock is unmap_block: unmap the whole pages inside the free block b;
// the partial pages at either end stay as free mapped blocks.
func (a *Allocator) unmapBlock(p *pool, b *block) {
	s := b.seg
	begin := (b.addr - s.addr + s.page - 1) / s.page
	end := (b.addr + b.size - s.addr) / s.page
	if begin >= end {
		return
	}
	p.free.delete(itemOf(b))
	uAddr := s.addr + begin*s.page
	uSize := (end - begin) * s.page
	if before := uAddr - b.addr; before > 0 {
		f := a.newBlock()
		f.addr, f.size, f.seg, f.mapped = b.addr, before, s, true
		f.prev, f.next = b.prev, b
		if b.prev != nil {
			b.prev.next = f
		} else {
			s.head = f
		}
		b.prev = f
		a.insertFree(p, f)
	}
	if after := b.addr + b.size - (uAddr + uSize); after > 0 {
		f := a.newBlock()
		f.addr, f.size, f.seg, f.mapped = uAddr+uSize, after, s, true
		f.prev, f.next = b, b.next
		if b.next != nil {
			b.next.prev = f
		}
		b.next = f
		a.insertFree(p, f)
	}
	b.addr, b.size, b.mapped = uAddr, uSize, false
	a.tryMerge(p, b, b.prev)
	a.tryMerge(p, b, b.next)
	p.insertUnmapped(b)
	s.mapped -= uSize
	a.reserved -= uSize
	a.devFrees++
}

// releaseExpandableSegment is release_expandable_segment: the whole
// reservation is unmapped, so the address space goes back too.
func (a *Allocator) releaseExpandableSegment(p *pool, b *block) {
	p.removeUnmapped(b)
	a.removeSegment(b.seg)
	a.recycle(b)
}
