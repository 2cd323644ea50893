package alloc

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Constants of c10/cuda/CUDACachingAllocator.cpp, under PyTorch's names
// without the k. They are exported so that code reading PyTorch's own
// figures (OOM messages, memory snapshots) applies the same rules as the
// simulator instead of keeping copies.
const (
	// MinBlockSize is kMinBlockSize: all sizes are rounded to at least 512
	// bytes, and up to a multiple of it (round_size).
	MinBlockSize = 512
	// SmallSize is kSmallSize: the largest "small" allocation, 1 MiB
	// (get_pool), and the remainder should_split must exceed to split a
	// large-pool block.
	SmallSize = 1 << 20
	// SmallBuffer is kSmallBuffer: "small" allocations are packed in 2 MiB
	// segments (get_allocation_size), and expandable segments map the small
	// pool in 2 MiB pages.
	SmallBuffer = 2 << 20
	// MinLargeAlloc is kMinLargeAlloc: allocations between 1 and 10 MiB may
	// use a LargeBuffer segment.
	MinLargeAlloc = 10 << 20
	// RoundLarge is kRoundLarge: larger allocations get a segment rounded up
	// to a multiple of 2 MiB.
	RoundLarge = 2 << 20
	// LargeBuffer is kLargeBuffer: "large" allocations may be packed in
	// 20 MiB segments; expandable segments map the large pool in 20 MiB
	// pages, and it is max_non_split_rounding's default.
	LargeBuffer = 20 << 20
)

// maxRequest is the 1 EB limit NativeCachingAllocator::allocate checks
// before the request reaches the device allocator.
const maxRequest = 1 << 60

// addrBase is where simulated device addresses start; any value works, this
// one looks like a CUDA device pointer.
const addrBase = 0x7f0000000000

// Pool is the block pool a segment belongs to.
type Pool uint8

const (
	// SmallPool holds requests of at most 1 MiB (after rounding), packed in
	// 2 MiB segments.
	SmallPool Pool = iota
	// LargePool holds everything larger.
	LargePool
)

func (p Pool) String() string {
	if p == SmallPool {
		return "small"
	}
	return "large"
}

// Device describes the memory the allocator may take.
type Device struct {
	// Index is the CUDA device ordinal, printed in the OOM message.
	Index int
	// Capacity is the number of bytes cudaMalloc can hand out in total:
	// device memory minus the CUDA context minus memory used outside this
	// allocator. Zero means unlimited, for measuring peaks without a device.
	Capacity int64
	// Total is the total capacity the device reports (cudaMemGetInfo), for
	// the OOM message and the memory fraction. Zero means Capacity.
	Total int64
	// MemoryFraction is torch.cuda.set_per_process_memory_fraction; 0 means
	// unset. Values above 1 are taken as 1. With it set, alloc_block fails
	// once reserved + segment size would exceed MemoryFraction*Total, and
	// garbage_collection_threshold becomes active.
	MemoryFraction float64
}

// Stats are the counters of torch.cuda.memory_stats() for the aggregate
// pool, in bytes where they are sizes.
type Stats struct {
	Allocated     int64 // allocated_bytes.all.current: sum of rounded sizes of allocated blocks
	Reserved      int64 // reserved_bytes.all.current: sum of segment sizes (mapped bytes for expandable segments)
	Active        int64 // active_bytes.all.current: allocated plus pending-free (equal to Allocated here: no record_stream)
	Requested     int64 // requested_bytes.all.current: sum of unrounded request sizes
	PeakAllocated int64
	PeakReserved  int64
	PeakActive    int64
	PeakRequested int64

	NumAllocations  int64 // allocation.all.current: live allocated blocks
	NumSegments     int64 // segments as memory_snapshot lists them (one per contiguous mapped range of an expandable segment)
	NumAllocRetries int64 // num_alloc_retries: mallocs that had to flush the cache
	NumOOMs         int64 // num_ooms
	NumDeviceAlloc  int64 // num_device_alloc: cudaMalloc and cuMemMap calls
	NumDeviceFree   int64 // num_device_free: cudaFree and cuMemUnmap calls
}

// Segment is one device allocation as torch.cuda.memory_snapshot() lists it.
type Segment struct {
	Address    int64
	Size       int64
	Stream     int32
	Pool       Pool
	Expandable bool
	Blocks     []Block // in address order, covering the segment exactly
	// ReservedFrom is, for a range of an expandable segment given to
	// Restore, where the reservation it lies in is known to begin, when
	// that is below the lowest range of its stream and pool; 0 means at
	// that lowest range. Segments never sets it.
	ReservedFrom int64
}

// Block is one part of a segment.
type Block struct {
	Address   int64
	Size      int64
	Requested int64 // unrounded request size; 0 for free blocks
	Allocated bool
	ID        int64 // the Malloc id; meaningful only when Allocated
}

// AllocatedSize returns the sum of the sizes of the allocated blocks.
func (s Segment) AllocatedSize() int64 {
	var n int64
	for _, b := range s.Blocks {
		if b.Allocated {
			n += b.Size
		}
	}
	return n
}

// block is PyTorch's Block.
type block struct {
	addr, size int64
	requested  int64
	id         int64
	gcBase     int64 // gc_count_base: pool's get_free_block count when cached
	prev, next *block
	seg        *segment
	allocated  bool
	mapped     bool // false only for unmapped address space of an expandable segment
	tag        uint8
	idx        uint32 // index in the allocator's arena
}

// segment is one cudaMalloc, or one ExpandableSegment's reserved address
// space.
type segment struct {
	addr, size int64 // for expandable segments: the whole reserved range
	head       *block
	pool       *pool
	page       int64 // expandable: mapping granularity (2 or 20 MiB)
	mapped     int64 // expandable: bytes mapped
	idx        int   // position in Allocator.segs
	expandable bool
}

// pool is one (stream, BlockPool): the cached blocks a request on that
// stream may reuse.
type pool struct {
	free     btree
	unmapped []*block // expandable address space not backed by memory, by address
	stream   int32
	small    bool
}

func (p *pool) kind() Pool {
	if p.small {
		return SmallPool
	}
	return LargePool
}

// zeroBlock stands for a size-0 allocation: PyTorch hands out a null
// pointer without touching the allocator, but the caller still frees it.
var zeroBlock = &block{}

// Allocator simulates one device's DeviceCachingAllocator.
type Allocator struct {
	cfg         Config
	maxSplit    int64
	maxNonSplit int64
	dev         Device
	capacity    int64 // math.MaxInt64 when unlimited
	total       int64
	setFraction bool
	allowed     int64 // allowed_memory_maximum
	gcOn        bool
	divisions   bool // some roundup_power2_divisions entry is above 1

	pools      map[int32]*[2]*pool // [0] large, [1] small
	streams    []int32             // sorted keys of pools
	lastStream int32
	lastPools  *[2]*pool

	live     idMap
	segs     []*segment
	nextAddr int64

	allocated, reserved, active, requested int64
	peakAlloc, peakRes, peakAct, peakReq   int64
	numAllocs, numSegs                     int64
	retries, ooms, devAllocs, devFrees     int64

	gcCalls [2]int64 // get_free_blocks_call_count of the large [0] and small [1] pools

	arena   blockArena
	scratch []*block
	unmapQ  []*block
}

// New returns an empty allocator. cfg is used as given: check hand-built
// configurations with Config.Validate first.
func New(cfg Config, dev Device) *Allocator {
	a := &Allocator{
		cfg:         cfg,
		maxSplit:    cfg.maxSplit(),
		maxNonSplit: cfg.maxNonSplitRounding(),
		dev:         dev,
		capacity:    dev.Capacity,
		total:       dev.Total,
		pools:       make(map[int32]*[2]*pool),
		nextAddr:    addrBase,
	}
	if a.capacity <= 0 {
		a.capacity = math.MaxInt64
	}
	if a.total <= 0 {
		a.total = max(dev.Capacity, 0)
	}
	if f := dev.MemoryFraction; f > 0 {
		// setMemoryFraction: allowed = fraction * device_total.
		a.setFraction = true
		a.allowed = int64(min(f, 1) * float64(a.total))
	}
	a.gcOn = a.setFraction && cfg.GarbageCollectionThreshold > 0
	for _, d := range cfg.RoundupPower2Divisions {
		a.divisions = a.divisions || d > 1
	}
	return a
}

// Config returns the configuration the allocator was built with.
func (a *Allocator) Config() Config { return a.cfg }

// Device returns the device the allocator was built with.
func (a *Allocator) Device() Device { return a.dev }

// Malloc allocates size bytes for block id on stream, as
// DeviceCachingAllocator::malloc. It returns an *OOMError when the device
// (or the memory fraction) cannot hold the request even after the cache
// was flushed, and another error for a bad request (negative size, id
// already allocated). A size of 0 allocates nothing, but id must still be
// freed.
func (a *Allocator) Malloc(id int64, size int64, stream int32) error {
	if _, err := a.malloc(id, size, stream, 0); err != nil {
		return err
	}
	return nil
}

// Free returns block id to the cache, as DeviceCachingAllocator::free; it
// never gives memory back to the device.
func (a *Allocator) Free(id int64) error {
	_, _, _, err := a.free(id)
	return err
}

// EmptyCache is torch.cuda.empty_cache(): every wholly free segment goes
// back to the device, and with expandable segments every wholly free page
// is unmapped. It returns the number of bytes released.
func (a *Allocator) EmptyCache() (released int64) {
	before := a.reserved
	a.releaseCached()
	return before - a.reserved
}

// ResetPeaks is torch.cuda.reset_peak_memory_stats().
func (a *Allocator) ResetPeaks() {
	a.peakAlloc, a.peakRes, a.peakAct, a.peakReq = a.allocated, a.reserved, a.active, a.requested
}

// Stats returns the current counters.
func (a *Allocator) Stats() Stats {
	n := a.numSegs
	for _, s := range a.segs {
		if s.expandable {
			for b := s.head; b != nil; b = b.next {
				if b.mapped && (b.prev == nil || !b.prev.mapped) {
					n++
				}
			}
		}
	}
	return Stats{
		Allocated:       a.allocated,
		Reserved:        a.reserved,
		Active:          a.active,
		Requested:       a.requested,
		PeakAllocated:   a.peakAlloc,
		PeakReserved:    a.peakRes,
		PeakActive:      a.peakAct,
		PeakRequested:   a.peakReq,
		NumAllocations:  a.numAllocs,
		NumSegments:     n,
		NumAllocRetries: a.retries,
		NumOOMs:         a.ooms,
		NumDeviceAlloc:  a.devAllocs,
		NumDeviceFree:   a.devFrees,
	}
}

// Segments returns the segments sorted by address, as memory_snapshot()
// does: an expandable segment appears once per contiguous mapped range.
func (a *Allocator) Segments() []Segment {
	var out []Segment
	for _, s := range a.segs {
		var cur *Segment
		for b := s.head; b != nil; b = b.next {
			if !b.mapped {
				cur = nil
				continue
			}
			if cur == nil {
				out = append(out, Segment{
					Address:    b.addr,
					Stream:     s.pool.stream,
					Pool:       s.pool.kind(),
					Expandable: s.expandable,
				})
				cur = &out[len(out)-1]
			}
			blk := Block{Address: b.addr, Size: b.size, Allocated: b.allocated}
			if b.allocated {
				blk.Requested = b.requested
				blk.ID = b.id
			}
			cur.Blocks = append(cur.Blocks, blk)
			cur.Size += b.size
		}
	}
	slices.SortFunc(out, func(x, y Segment) int { return cmp.Compare(x.Address, y.Address) })
	return out
}

// roundSize is round_size.
func (a *Allocator) roundSize(size int64) int64 {
	if size < MinBlockSize {
		return MinBlockSize
	}
	if a.divisions {
		div := int64(a.cfg.RoundupPower2Divisions[divisionIndex(size)])
		if div > 1 && size > MinBlockSize*div {
			return roundupPower2NextDivision(size, div)
		}
	}
	return MinBlockSize * ((size + MinBlockSize - 1) / MinBlockSize)
}

// divisionIndex is the interval index of CUDAAllocatorConfig::
// roundup_power2_divisions(size): log2(size) - 20, clamped to [0, 15].
func divisionIndex(size int64) int {
	i := log2(size) - 20
	return min(max(i, 0), 15)
}

// log2 is floor(log2(x)) for x > 0, and -1 for 0.
func log2(x int64) int { return bits.Len64(uint64(x)) - 1 }

// roundupPower2NextDivision is roundup_power2_next_division: the interval
// between two powers of two is cut into divisions equal steps and size is
// rounded up to the next step (1200 with 4 divisions: steps of 256 from
// 1024, so 1280).
func roundupPower2NextDivision(size, divisions int64) int64 {
	if size&(size-1) == 0 {
		return size
	}
	floor := int64(1) << log2(size)
	step := floor >> log2(divisions)
	if step == 0 {
		return floor << 1
	}
	r := size &^ (step - 1)
	if r == size {
		return size
	}
	return r + step
}

// allocationSize is get_allocation_size: the size of a new segment for a
// rounded request.
func allocationSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	}
	return RoundLarge * ((size + RoundLarge - 1) / RoundLarge)
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

// poolFor is get_pool: the (stream, small/large) pool for a rounded size.
func (a *Allocator) poolFor(stream int32, small bool) *pool {
	ps := a.lastPools
	if ps == nil || stream != a.lastStream {
		ps = a.pools[stream]
		if ps == nil {
			ps = &[2]*pool{{stream: stream}, {stream: stream, small: true}}
			ps[0].free.arena, ps[1].free.arena = &a.arena, &a.arena
			a.pools[stream] = ps
			i, _ := slices.BinarySearch(a.streams, stream)
			a.streams = slices.Insert(a.streams, i, stream)
		}
		a.lastStream, a.lastPools = stream, ps
	}
	if small {
		return ps[1]
	}
	return ps[0]
}

func poolIndex(small bool) int {
	if small {
		return 1
	}
	return 0
}

func (a *Allocator) newBlock() *block { return a.arena.alloc() }

func (a *Allocator) recycle(b *block) { a.arena.release(b) }

func itemOf(b *block) btItem { return btItem{size: b.size, addr: b.addr, b: b} }

// insertFree is BlockPool::insert_into_blocks: caching a block restarts its
// garbage-collection age.
func (a *Allocator) insertFree(p *pool, b *block) {
	b.gcBase = a.gcCalls[poolIndex(p.small)]
	p.free.insert(itemOf(b))
}

func (a *Allocator) addSegment(s *segment) {
	s.idx = len(a.segs)
	a.segs = append(a.segs, s)
}

func (a *Allocator) removeSegment(s *segment) {
	last := a.segs[len(a.segs)-1]
	a.segs[s.idx] = last
	last.idx = s.idx
	a.segs[len(a.segs)-1] = nil
	a.segs = a.segs[:len(a.segs)-1]
}

func (a *Allocator) growReserved(n int64) {
	a.reserved += n
	if a.reserved > a.peakRes {
		a.peakRes = a.reserved
	}
}

// malloc is DeviceCachingAllocator::malloc. It returns zeroBlock for a size
// of 0.
func (a *Allocator) malloc(id, orig int64, stream int32, tag uint8) (*block, error) {
	if orig < 0 {
		return nil, fmt.Errorf("malloc of block %d: negative size %d", id, orig)
	}
	if orig == 0 {
		if !a.live.insert(id, zeroBlock) {
			return nil, errDoubleAlloc(id)
		}
		return zeroBlock, nil
	}
	if a.live.get(id) != nil {
		return nil, errDoubleAlloc(id)
	}
	if orig >= maxRequest {
		return nil, fmt.Errorf("malloc of block %d: %d bytes is more than the 1 EB PyTorch accepts", id, orig)
	}
	size := a.roundSize(orig)
	p := a.poolFor(stream, size <= SmallSize)
	allocSize := allocationSize(size)

	// get_free_block, then (no free-memory callbacks fire in one process)
	// a fresh segment, then release_available_cached_blocks and retry, then
	// release_cached_blocks and retry.
	b := a.getFreeBlock(p, size)
	if b == nil {
		if a.gcOn {
			a.garbageCollect()
		}
		b = a.allocBlock(p, size, allocSize, false)
		if b == nil && a.releaseAvailable(p, size) {
			b = a.allocBlock(p, size, allocSize, false)
		}
		if b == nil {
			a.releaseCached()
			b = a.allocBlock(p, size, allocSize, true)
		}
		if b == nil {
			a.ooms++
			return nil, a.oomError(orig, size, allocSize, stream)
		}
	}
	b = a.allocFound(p, b, size, orig, a.shouldSplit(p, b, size))
	b.id = id
	b.tag = tag
	a.live.insert(id, b)
	return b, nil
}

func errDoubleAlloc(id int64) error {
	return fmt.Errorf("malloc of block %d: block is already allocated", id)
}

// free is DeviceCachingAllocator::free followed at once by free_block
// (nothing is pending on other streams). It returns what the block held.
func (a *Allocator) free(id int64) (size, requested int64, tag uint8, err error) {
	b := a.live.remove(id)
	if b == nil {
		return 0, 0, 0, fmt.Errorf("free of block %d: block is not allocated", id)
	}
	if b == zeroBlock {
		return 0, 0, 0, nil
	}
	size, requested, tag = b.size, b.requested, b.tag
	b.allocated = false
	b.requested = 0
	b.id = 0
	a.allocated -= size
	a.numAllocs--
	p := b.seg.pool
	a.tryMerge(p, b, b.prev)
	a.tryMerge(p, b, b.next)
	a.insertFree(p, b)
	a.active -= size
	a.requested -= requested
	return size, requested, tag, nil
}

// getFreeBlock is get_free_block: the smallest cached block of the same
// stream and pool that fits, subject to the max_split_size rules.
func (a *Allocator) getFreeBlock(p *pool, size int64) *block {
	if a.gcOn {
		a.gcCalls[poolIndex(p.small)]++
	}
	it, pos, ok := p.free.lowerBound(size)
	if !ok {
		return nil
	}
	if it.b.seg.expandable {
		// A block bordering unmapped space counts as the size it could grow
		// to, so best fit moves on to later blocks that would grow less.
		cur, first := it, true
		p.free.ascendFrom(size, func(x btItem) bool {
			if first {
				first = false
				return true
			}
			if cur.b.seg.expandable && expandableSize(x.b) < expandableSize(cur.b) {
				cur = x
				return true
			}
			return false
		})
		if cur.b != it.b {
			it, pos = cur, btPos{}
		}
	}
	// Do not return an oversized block for a normal request.
	if size < a.maxSplit && it.size >= a.maxSplit {
		return nil
	}
	// An oversized request may take a larger unsplittable block, within
	// max_non_split_rounding.
	if size >= a.maxSplit && it.size-size >= a.maxNonSplit {
		return nil
	}
	p.free.removeAt(pos, it)
	return it.b
}

func expandableSize(b *block) int64 {
	if b.next != nil && !b.next.mapped {
		return b.size + b.next.size
	}
	return b.size
}

// shouldSplit is should_split.
func (a *Allocator) shouldSplit(p *pool, b *block, size int64) bool {
	rem := b.size - size
	if p.small || a.cfg.ExpandableSegments {
		return rem >= MinBlockSize
	}
	return size < a.maxSplit && rem > SmallSize
}

// allocFound is alloc_found_block: the front of b is handed out and, when
// split, the remainder goes back to the pool.
func (a *Allocator) allocFound(p *pool, b *block, size, orig int64, split bool) *block {
	if split {
		rem := b
		b = a.newBlock()
		b.addr, b.size, b.seg, b.mapped = rem.addr, size, rem.seg, true
		b.prev = rem.prev
		if b.prev != nil {
			b.prev.next = b
		} else {
			rem.seg.head = b
		}
		b.next = rem
		rem.prev = b
		rem.addr += size
		rem.size -= size
		a.insertFree(p, rem)
	}
	b.allocated = true
	b.requested = orig
	a.numAllocs++
	a.allocated += b.size
	if a.allocated > a.peakAlloc {
		a.peakAlloc = a.allocated
	}
	a.active += b.size
	if a.active > a.peakAct {
		a.peakAct = a.active
	}
	a.requested += orig
	if a.requested > a.peakReq {
		a.peakReq = a.requested
	}
	return b
}

// tryMerge is try_merge_blocks: src is absorbed into dst when it is free and
// equally mapped. dst must not be in any set.
func (a *Allocator) tryMerge(p *pool, dst, src *block) {
	if src == nil || src.allocated || src.mapped != dst.mapped {
		return
	}
	if dst.prev == src {
		dst.addr = src.addr
		dst.prev = src.prev
		if dst.prev != nil {
			dst.prev.next = dst
		} else {
			dst.seg.head = dst
		}
	} else {
		dst.next = src.next
		if dst.next != nil {
			dst.next.prev = dst
		}
	}
	dst.size += src.size
	if src.mapped {
		p.free.delete(itemOf(src))
	} else {
		p.removeUnmapped(src)
	}
	a.recycle(src)
}

// allocBlock is alloc_block: a new segment from cudaMalloc (or new pages
// for an expandable segment).
func (a *Allocator) allocBlock(p *pool, size, allocSize int64, retry bool) *block {
	if retry {
		a.retries++
	}
	if a.setFraction && a.reserved+allocSize > a.allowed {
		return nil
	}
	if a.cfg.ExpandableSegments {
		return a.tryAllocateExpandable(p, size)
	}
	if allocSize > a.capacity-a.reserved {
		return nil // cudaErrorMemoryAllocation
	}
	s := &segment{addr: a.nextAddr, size: allocSize, pool: p}
	a.nextAddr += alignUp(allocSize, SmallBuffer)
	b := a.newBlock()
	b.addr, b.size, b.seg, b.mapped = s.addr, allocSize, s, true
	s.head = b
	a.addSegment(s)
	a.numSegs++
	a.devAllocs++
	a.growReserved(allocSize)
	return b
}

// releasable reports whether cudaFree may take b: a whole, non-expandable
// segment.
func releasable(b *block) bool {
	return !b.seg.expandable && b.prev == nil && b.next == nil
}

// releaseBlock is release_block: cudaFree of a wholly free segment that is
// in p's free set.
func (a *Allocator) releaseBlock(p *pool, b *block) {
	p.free.delete(itemOf(b))
	a.reserved -= b.size
	a.numSegs--
	a.devFrees++
	a.removeSegment(b.seg)
	a.recycle(b)
}

// releaseAvailable is release_available_cached_blocks, active only with a
// max_split_size: free the smallest oversize cached block that covers the
// request, or else oversize blocks from the largest down until enough is
// freed.
func (a *Allocator) releaseAvailable(p *pool, size int64) bool {
	if a.maxSplit == math.MaxInt64 {
		return false
	}
	key := max(size, a.maxSplit)
	if it, _, ok := p.free.lowerBound(key); ok {
		if !releasable(it.b) {
			// Oversize blocks are never split and expandable ones are
			// skipped; PyTorch would not reach here.
			return false
		}
		a.releaseBlock(p, it.b)
		return true
	}
	var total int64
	q := a.scratch[:0]
	p.free.descend(func(x btItem) bool {
		if total >= key || x.size < a.maxSplit {
			return false
		}
		if releasable(x.b) {
			total += x.size
			q = append(q, x.b)
		}
		return true
	})
	for i, b := range q {
		a.releaseBlock(p, b)
		q[i] = nil
	}
	a.scratch = q[:0]
	return total >= key
}

// releaseCached is release_cached_blocks: cudaFree every wholly free
// segment and unmap every wholly free page, in both pools of every stream.
func (a *Allocator) releaseCached() {
	for _, s := range a.streams {
		ps := a.pools[s]
		a.releaseBlocks(ps[0])
		a.releaseBlocks(ps[1])
	}
}

// releaseBlocks is release_blocks.
func (a *Allocator) releaseBlocks(p *pool) {
	if p.free.len() == 0 {
		return
	}
	all := p.free.appendAll(a.scratch[:0])
	unmap := a.unmapQ[:0]
	for _, b := range all {
		if b.seg.expandable {
			unmap = append(unmap, b)
		} else if b.prev == nil && b.next == nil {
			a.releaseBlock(p, b)
		}
	}
	for _, b := range unmap {
		a.unmapBlock(p, b)
		if !b.mapped && b.prev == nil && b.next == nil {
			a.releaseExpandableSegment(p, b)
		}
	}
	clear(all)
	clear(unmap)
	a.scratch, a.unmapQ = all[:0], unmap[:0]
}

// garbageCollect is garbage_collect_cached_blocks: when reserved memory is
// above threshold*allowed, free whole cached large-pool segments whose age
// (get_free_block calls on the large pool since they were cached) is at
// least the average, until enough is reclaimed.
func (a *Allocator) garbageCollect() {
	threshold := int64(a.cfg.GarbageCollectionThreshold * float64(a.allowed))
	if a.reserved <= threshold {
		return
	}
	target := a.reserved - threshold
	cands := a.scratch[:0]
	for _, s := range a.streams {
		p := a.pools[s][0]
		n := len(cands)
		cands = p.free.appendAll(cands)
		// keep only unsplit blocks; expandable blocks are skipped, as in
		// newer PyTorch (release_block cannot free them).
		k := n
		for _, b := range cands[n:] {
			if releasable(b) {
				cands[k] = b
				k++
			}
		}
		clear(cands[k:])
		cands = cands[:k]
	}
	var totalAge int64
	count := len(cands)
	for _, b := range cands {
		totalAge += a.gcCalls[0] - b.gcBase
	}
	var reclaimed int64
	freed := true
	for reclaimed < target && freed && count > 0 {
		threshold := float64(totalAge) / float64(count)
		freed = false
		for i, b := range cands {
			if b == nil {
				continue
			}
			age := a.gcCalls[0] - b.gcBase
			if float64(age) >= threshold {
				freed = true
				reclaimed += b.size
				totalAge -= age
				count--
				a.releaseBlock(b.seg.pool, b)
				cands[i] = nil
			}
		}
	}
	clear(cands)
	a.scratch = cands[:0]
}

// oomError builds the OutOfMemoryError of malloc after the cache flush.
func (a *Allocator) oomError(orig, size, allocSize int64, stream int32) *OOMError {
	var free int64
	if a.capacity != math.MaxInt64 {
		free = a.capacity - a.reserved
	} else {
		free = a.total - a.reserved
	}
	return &OOMError{
		Requested:   orig,
		Size:        size,
		AllocSize:   allocSize,
		Stream:      stream,
		Device:      a.dev.Index,
		DeviceTotal: a.total,
		DeviceFree:  max(free, 0),
		Allocated:   a.allocated,
		Reserved:    a.reserved,
		FractionSet: a.setFraction,
		Allowed:     a.allowed,
	}
}
