// Package alloc simulates PyTorch's CUDA caching allocator
// (c10/cuda/CUDACachingAllocator.cpp, the "native" backend) closely enough
// that replaying the alloc/free events of a training step yields the
// numbers PyTorch reports: torch.cuda.memory_allocated, memory_reserved,
// their peaks, the segments of torch.cuda.memory_snapshot(), and the
// OutOfMemoryError PyTorch would raise on a given device.
//
// Everything below names the PyTorch function each rule comes from; the
// constants are those at the top of CUDACachingAllocator.cpp (kMinBlockSize
// 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kMinLargeAlloc 10 MiB,
// kRoundLarge 2 MiB, kLargeBuffer 20 MiB).
//
// # Sizes
//
// A request of n bytes is first rounded (round_size): below 512 bytes to
// 512, otherwise up to a multiple of 512. With roundup_power2_divisions set
// for the request's size interval (CUDAAllocatorConfig::
// roundup_power2_divisions: interval log2(n)-20, clamped to 0..15) to d > 1,
// and n > 512*d, n is instead rounded up to the next of d equal steps
// between two powers of two (roundup_power2_next_division).
//
// The rounded size picks the pool (get_pool): at most 1 MiB goes to the
// small pool, the rest to the large pool. When no cached block fits, a new
// segment is cudaMalloc'd of get_allocation_size: 2 MiB for the small pool,
// 20 MiB for rounded sizes under 10 MiB, and the size rounded up to 2 MiB
// otherwise. So a 1.5 MiB tensor reserves 20 MiB and a 100-byte one 2 MiB.
//
// # Best fit and splitting
//
// Cached free blocks are kept per (stream, pool), ordered by (size, address)
// (BlockComparatorSize orders by stream first; one set per stream is the
// same thing). get_free_block takes the smallest cached block of the same
// stream and pool that is at least the rounded size: blocks never cross
// streams or pools. With max_split_size_mb set, two rules refuse the found
// block: a request below max_split_size never takes a block of at least
// max_split_size, and a request of at least max_split_size takes a block
// only if it is less than max_non_split_rounding_mb (default 20 MiB)
// larger.
//
// The block taken is split (should_split) when the remainder is at least
// 512 bytes in the small pool or with expandable segments, and in the large
// pool when the request is below max_split_size and the remainder is more
// than 1 MiB (strictly). The front part is handed out and the remainder
// returns to the pool; an unsplit block is handed out whole, so allocated
// bytes count the whole block (an 11 MiB request in a 12 MiB segment counts
// 12 MiB). Free (free, free_block) merges the block with free neighbours
// of the same segment and caches it; memory is never returned to the device
// by a free.
//
// # The out-of-memory path
//
// When no cached block fits, malloc tries, in source order: garbage
// collection (only with a memory fraction and garbage_collection_threshold
// set), alloc_block (a new segment), release_available_cached_blocks (only
// with max_split_size set: cudaFree the smallest oversize cached block that
// covers the request, or oversize blocks from the largest down) followed by
// alloc_block, then release_cached_blocks (cudaFree every wholly free
// segment, in both pools on all streams) followed by a last alloc_block,
// which counts in num_alloc_retries. If that fails too the allocator counts
// num_ooms and raises OutOfMemoryError (OOMError here) with the figures
// after the flush. Split segments are never released: that is
// fragmentation.
//
// alloc_block fails when cudaMalloc would: when reserved bytes plus the new
// segment exceed Device.Capacity (the memory the driver can hand out:
// device total minus the CUDA context minus memory used outside the
// allocator). With a memory fraction set (set_per_process_memory_fraction)
// it also fails, without calling cudaMalloc, when reserved plus the new
// segment exceed fraction*Device.Total.
//
// garbage_collection_threshold (garbage_collect_cached_blocks) runs only
// when a memory fraction is set: when reserved memory exceeds
// threshold*allowed, it frees wholly free large-pool segments whose age —
// the number of large-pool get_free_block calls since the block was cached
// — is at least the average age, repeating until enough is reclaimed.
//
// empty_cache is release_cached_blocks: it returns only wholly free
// segments.
//
// # Expandable segments
//
// With expandable_segments:True (Note [Expandable Segments]), each
// (stream, pool) reserves virtual address space of 1.125 times the device's
// total memory and maps physical memory into it in pages of 2 MiB (small
// pool) or 20 MiB (large pool), at the lowest address where the request
// fits (find_expandable_block, map_block). Reserved memory is the mapped
// bytes, so it grows in 2 or 20 MiB steps instead of whole segments; every
// split keeps a remainder of 512 bytes or more; best fit treats a free
// block that borders unmapped space as the size it could grow to.
// release_cached_blocks (and so empty_cache and the OOM path) unmaps every
// wholly free page (unmap_block) and drops a reservation with nothing
// mapped. Segments lists one segment per contiguous mapped range, as the
// snapshot does. Garbage collection and release_available_cached_blocks
// skip expandable blocks.
//
// # What is not simulated
//
// There are no CUDA graph private pools, no record_stream (so no blocks
// pending a free on another stream, and active equals allocated), no
// free-memory callbacks (they free IPC-shared memory of other processes),
// and no cudaMallocAsync backend. Device addresses are simulated: every
// cudaMalloc gets a fresh address, increasing and 2 MiB aligned, so replays
// are deterministic; PyTorch's placement never depends on the value of an
// address except to break ties between equal-sized blocks.
//
// # Use
//
// New builds an Allocator for a Config (from ParseConfig of a
// PYTORCH_CUDA_ALLOC_CONF string, or DefaultConfig) and a Device; Malloc,
// Free and EmptyCache drive it; Stats and Segments read it. Replay runs a
// whole trace.Trace and returns a Timeline with the peaks, the breakdown by
// category at the allocated peak, per-step figures and the OOM, if any.
package alloc
