package alloc_test

import (
	"errors"
	"fmt"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/trace"
)

// A 1.5 MiB tensor is a "large" request (over 1 MiB) below 10 MiB, so the
// allocator cudaMallocs a 20 MiB segment, hands out the first 1.5 MiB and
// keeps the other 18.5 MiB cached.
func Example() {
	a := alloc.New(alloc.DefaultConfig(), alloc.Device{Capacity: 80 << 30})
	if err := a.Malloc(1, 1536*1024, 0); err != nil {
		fmt.Println(err)
		return
	}
	st := a.Stats()
	fmt.Println("allocated:", alloc.FormatSize(st.Allocated))
	fmt.Println("reserved: ", alloc.FormatSize(st.Reserved))
	for _, s := range a.Segments() {
		for _, b := range s.Blocks {
			state := "free"
			if b.Allocated {
				state = "allocated"
			}
			fmt.Printf("%s block of %s\n", state, alloc.FormatSize(b.Size))
		}
	}
	// Output:
	// allocated: 1.50 MiB
	// reserved:  20.00 MiB
	// allocated block of 1.50 MiB
	// free block of 18.50 MiB
}

// Replaying a trace on a device that is too small yields the error PyTorch
// would raise. It names the segment size it tried, 20 MiB, not the 1.5 MiB
// tensor.
func ExampleReplay() {
	t := &trace.Trace{Events: []trace.Event{
		{Action: trace.Alloc, ID: 1, Size: 60 << 20, Category: trace.Parameter},
		{Action: trace.Alloc, ID: 2, Size: 1536 << 10, Category: trace.Activation},
	}}
	tl, err := alloc.Replay(t, alloc.DefaultConfig(), alloc.Device{Capacity: 72 << 20, Total: 80 << 20}, alloc.ReplayOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("out of memory at event", tl.OOMEvent)
	fmt.Println(tl.OOM)
	// Output:
	// out of memory at event 1
	// CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 80.00 MiB of which 12.00 MiB is free. Of the allocated memory 60.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
}

func ExampleParseConfig() {
	c, err := alloc.ParseConfig("max_split_size_mb:128,expandable_segments:True")
	fmt.Println(c.MaxSplitSize>>20, c.ExpandableSegments, err)
	_, err = alloc.ParseConfig("max_split_size:128")
	fmt.Println(err)
	// Output:
	// 128 true <nil>
	// parsing allocator config: unrecognized CachingAllocator option "max_split_size" (did you mean "max_split_size_mb"?)
}

func ExampleOOMError_LegacyMessage() {
	a := alloc.New(alloc.DefaultConfig(), alloc.Device{Capacity: 10 << 20})
	err := a.Malloc(1, 12<<20, 0)
	var oom *alloc.OOMError
	if errors.As(err, &oom) {
		fmt.Println(oom.LegacyMessage())
	}
	// Output:
	// CUDA out of memory. Tried to allocate 12.00 MiB (GPU 0; 10.00 MiB total capacity; 0 bytes already allocated; 10.00 MiB free; 0 bytes reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF
}
