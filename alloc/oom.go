package alloc

import (
	"strconv"
	"strings"
)

// OOMError is the torch.OutOfMemoryError that DeviceCachingAllocator::malloc
// raises, with every figure its message prints. The figures are taken after
// the cache was flushed (release_cached_blocks), as in PyTorch.
type OOMError struct {
	Requested int64 // the tensor's size in bytes (orig_size)
	Size      int64 // Requested after round_size
	// AllocSize is the segment size that was tried (get_allocation_size):
	// "Tried to allocate" prints this, not the tensor size.
	AllocSize int64
	Stream    int32

	Device      int   // device ordinal
	DeviceTotal int64 // total capacity cudaMemGetInfo reports
	DeviceFree  int64 // free bytes cudaMemGetInfo reports
	// HeldBack is what of DeviceTotal a prediction's margin keeps free:
	// the allocator was replayed on a device that much smaller, and
	// DeviceFree counts none of it. PyTorch has no such figure; when it is
	// set the message says so after the total capacity, so that the
	// total quoted stays the GPU's own.
	HeldBack  int64
	Allocated int64 // allocated_bytes.all.current
	Reserved  int64 // reserved_bytes.all.current
	// AllocatedInPrivatePools is memory held by CUDA graph pools; the
	// simulator has none, so it is 0 unless set by hand.
	AllocatedInPrivatePools int64

	// FractionSet says set_per_process_memory_fraction was called; Allowed
	// is then the bytes it allows.
	FractionSet bool
	Allowed     int64

	// Processes is what NVML reported, one entry per compute process on the
	// device. When empty (NVML unavailable) the message has no process
	// part, which is what Error prints for simulated errors.
	Processes []ProcessMemory
}

// ProcessMemory is one NVML compute process in an OOM message.
type ProcessMemory struct {
	PID  int
	Used int64
	Self bool // this process: "Including non-PyTorch memory, this process has ..."
}

// Error returns the message of PyTorch 2.1 and later, word for word
// (c10/cuda/CUDACachingAllocator.cpp, TORCH_CHECK_WITH(OutOfMemoryError,...)),
// double spaces included; with HeldBack set it adds what the margin holds
// back, which no real message has.
func (e *OOMError) Error() string {
	var s strings.Builder
	s.WriteString("CUDA out of memory. Tried to allocate ")
	s.WriteString(FormatSize(e.AllocSize))
	s.WriteString(". GPU ")
	s.WriteString(strconv.Itoa(e.Device))
	s.WriteString(" has a total capacity of ")
	s.WriteString(FormatSize(e.DeviceTotal))
	if e.HeldBack > 0 {
		s.WriteString(", of which the margin holds back ")
		s.WriteString(FormatSize(e.HeldBack))
		s.WriteString(" and ")
	} else {
		s.WriteString(" of which ")
	}
	s.WriteString(FormatSize(e.DeviceFree))
	s.WriteString(" is free. ")
	for _, p := range e.Processes {
		if p.Self {
			s.WriteString("Including non-PyTorch memory, this process")
		} else {
			s.WriteString("Process ")
			s.WriteString(strconv.Itoa(p.PID))
		}
		s.WriteString(" has ")
		s.WriteString(FormatSize(p.Used))
		s.WriteString(" memory in use. ")
	}
	if e.FractionSet {
		s.WriteString(FormatSize(e.Allowed))
		s.WriteString(" allowed; ")
	}
	s.WriteString("Of the allocated memory ")
	s.WriteString(FormatSize(e.Allocated + e.AllocatedInPrivatePools))
	s.WriteString(" is allocated by PyTorch, ")
	if e.AllocatedInPrivatePools > 0 {
		s.WriteString("with ")
		s.WriteString(FormatSize(e.AllocatedInPrivatePools))
		s.WriteString(" allocated in private pools (e.g., CUDA Graphs), ")
	}
	s.WriteString("and ")
	s.WriteString(FormatSize(e.Reserved - e.Allocated - e.AllocatedInPrivatePools))
	s.WriteString(" is reserved by PyTorch but unallocated.")
	s.WriteString(" If reserved but unallocated memory is large try setting")
	s.WriteString(" PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid")
	s.WriteString(" fragmentation.  See documentation for Memory Management ")
	s.WriteString(" (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
	return s.String()
}

// LegacyMessage returns the message of PyTorch 2.0 and earlier.
func (e *OOMError) LegacyMessage() string {
	var s strings.Builder
	s.WriteString("CUDA out of memory. Tried to allocate ")
	s.WriteString(FormatSize(e.AllocSize))
	s.WriteString(" (GPU ")
	s.WriteString(strconv.Itoa(e.Device))
	s.WriteString("; ")
	s.WriteString(FormatSize(e.DeviceTotal))
	s.WriteString(" total capacity; ")
	if e.HeldBack > 0 {
		s.WriteString(FormatSize(e.HeldBack))
		s.WriteString(" held back by the margin; ")
	}
	s.WriteString(FormatSize(e.Allocated))
	s.WriteString(" already allocated; ")
	s.WriteString(FormatSize(e.DeviceFree))
	s.WriteString(" free; ")
	if e.FractionSet {
		s.WriteString(FormatSize(e.Allowed))
		s.WriteString(" allowed; ")
	}
	s.WriteString(FormatSize(e.Reserved))
	s.WriteString(" reserved in total by PyTorch)")
	s.WriteString(" If reserved memory is >> allocated memory try setting max_split_size_mb to avoid")
	s.WriteString(" fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
	return s.String()
}

// FormatSize is PyTorch's format_size: up to 1024 as "N bytes", up to 1 MiB
// in KiB, up to 1 GiB in MiB, then GiB, with two decimals (std::fixed,
// precision 2). The bounds are inclusive, so exactly 1 MiB prints
// "1024.00 KiB" and exactly 1 GiB "1024.00 MiB". A negative size, which
// PyTorch never formats, is written with a minus sign.
func FormatSize(n int64) string {
	if n < 0 {
		if n == -n { // math.MinInt64
			return "-8589934592.00 GiB"
		}
		return "-" + FormatSize(-n)
	}
	switch {
	case n <= 1024:
		return strconv.FormatInt(n, 10) + " bytes"
	case n <= 1<<20:
		return strconv.FormatFloat(float64(n)/1024, 'f', 2, 64) + " KiB"
	case n <= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 2, 64) + " MiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<30), 'f', 2, 64) + " GiB"
}
