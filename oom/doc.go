// Package oom parses and explains PyTorch CUDA out-of-memory messages.
//
// When PyTorch's CUDA caching allocator cannot satisfy a request it raises
// torch.OutOfMemoryError (torch.cuda.OutOfMemoryError, a RuntimeError in old
// versions) with a message built in c10/cuda/CUDACachingAllocator.cpp
// (DeviceCachingAllocator::malloc). Two layouts exist:
//
//	current (2.1+):  CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total
//	                 capacity of 79.10 GiB of which 3.44 MiB is free. Including non-PyTorch
//	                 memory, this process has 79.09 GiB memory in use. Of the allocated
//	                 memory 78.20 GiB is allocated by PyTorch, and 412.51 MiB is reserved by
//	                 PyTorch but unallocated. If reserved but unallocated memory is large ...
//	legacy (≤2.0):   CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total
//	                 capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved
//	                 in total by PyTorch) If reserved memory is >> allocated memory ...
//
// [Parse] finds such a message anywhere in a log or traceback, also when the
// terminal or a logger wrapped it over several lines, and returns its figures
// in bytes as a [Message]. [Explain] turns a Message into a diagnosis that
// follows only from those figures and from the allocator's rules: how much
// was requested and what that figure means, whether the cached but unused
// memory alone could have served it (fragmentation) or lies in pieces too
// small for any allocator setting to join while the live tensors fill the
// GPU (the job's size), how much memory is used outside PyTorch, the
// shortfall, and concrete next steps.
//
// # Precision
//
// PyTorch prints sizes with format_size: up to 1024 bytes exactly, then with
// two decimals in KiB, MiB or GiB. A parsed figure is therefore only known to
// within half a unit of the last printed digit: ±5 bytes for KiB, ±5243
// bytes for MiB and ±5.37 MB for GiB. [Resolution] returns that bound for a
// parsed value; [Explanation.Uncertainty] carries it through the
// arithmetic, and Explain says "about" when a comparison is within it.
//
// # What the figures mean
//
//   - "Tried to allocate" is the size of the segment the allocator asked
//     cudaMalloc for (alloc_size), not the tensor's size: 2.00 MiB for any
//     request up to 1 MiB, 20.00 MiB for requests between 1 and 10 MiB,
//     otherwise the request rounded up to a multiple of 2 MiB.
//   - "free" and "total" come from cudaMemGetInfo after the allocator had
//     already returned every wholly free cached segment to the driver
//     (release_cached_blocks), so the memory still "reserved but
//     unallocated" lies in segments that also hold live tensors.
//   - Memory in use outside PyTorch is total − free − reserved: the CUDA
//     context, libraries that allocate outside the caching allocator, and
//     other processes.
package oom
