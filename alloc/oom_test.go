package alloc

import (
	"strings"
	"testing"
)

func TestFormatSize(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"},
		{512, "512 bytes"},
		{1024, "1024 bytes"},        // <= 1024 is still bytes
		{1025, "1.00 KiB"},          // 1025/1024 = 1.0009...
		{1152, "1.12 KiB"},          // 1.125: a tie, rounded to even as printf does
		{1536, "1.50 KiB"},          // 1.5 KiB
		{MiB, "1024.00 KiB"},        // exactly 1 MiB is still KiB
		{MiB + 1, "1.00 MiB"},       // just above
		{3 * MiB / 2, "1.50 MiB"},   // 1.5 MiB
		{20 * MiB, "20.00 MiB"},     // kLargeBuffer
		{GiB, "1024.00 MiB"},        // exactly 1 GiB is still MiB
		{GiB + GiB/2, "1.50 GiB"},   // 1.5 GiB
		{80 * GiB, "80.00 GiB"},     // an H100
		{85520809984, "79.65 GiB"},  // 85520809984/2^30 = 79.6474...
		{-3 * MiB / 2, "-1.50 MiB"}, // never printed by PyTorch
	} {
		if got := FormatSize(tc.n); got != tc.want {
			t.Errorf("FormatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestOOMMessage(t *testing.T) {
	// A hand-built case: 20 MiB segment tried on an 80 GiB GPU with 19 MiB
	// free, 78 GiB allocated and 79 GiB reserved (1 GiB = "1024.00 MiB"
	// reserved but unallocated).
	e := &OOMError{
		Requested:   3 * MiB / 2,
		Size:        3 * MiB / 2,
		AllocSize:   20 * MiB,
		Device:      0,
		DeviceTotal: 80 * GiB,
		DeviceFree:  19 * MiB,
		Allocated:   78 * GiB,
		Reserved:    79 * GiB,
	}
	const current = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 80.00 GiB of which 19.00 MiB is free. Of the allocated memory 78.00 GiB is allocated by PyTorch, and 1024.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
	if got := e.Error(); got != current {
		t.Errorf("Error() =\n%q\nwant\n%q", got, current)
	}
	const legacy = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 80.00 GiB total capacity; 78.00 GiB already allocated; 19.00 MiB free; 79.00 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
	if got := e.LegacyMessage(); got != legacy {
		t.Errorf("LegacyMessage() =\n%q\nwant\n%q", got, legacy)
	}

	// With NVML processes, a memory fraction and private pools.
	e.Device = 1
	e.Processes = []ProcessMemory{{PID: 4242, Used: 80*GiB - 19*MiB - 512*MiB, Self: true}, {PID: 17, Used: 512 * MiB}}
	e.FractionSet = true
	e.Allowed = 40 * GiB
	e.AllocatedInPrivatePools = 2 * GiB
	e.Allocated = 76 * GiB
	const full = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 80.00 GiB of which 19.00 MiB is free. Including non-PyTorch memory, this process has 79.48 GiB memory in use. Process 17 has 512.00 MiB memory in use. 40.00 GiB allowed; Of the allocated memory 78.00 GiB is allocated by PyTorch, with 2.00 GiB allocated in private pools (e.g., CUDA Graphs), and 1024.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
	if got := e.Error(); got != full {
		t.Errorf("Error() =\n%q\nwant\n%q", got, full)
	}
	const legacyFull = "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 80.00 GiB total capacity; 76.00 GiB already allocated; 19.00 MiB free; 40.00 GiB allowed; 79.00 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"
	if got := e.LegacyMessage(); got != legacyFull {
		t.Errorf("LegacyMessage() =\n%q\nwant\n%q", got, legacyFull)
	}
}

// A margin's replay runs on the device less the margin: the message
// quotes the GPU's own total and what the margin holds back, not the
// smaller device's total. An 80 GiB GPU with a 12 GiB margin, 19 MiB free
// beyond the margin.
func TestOOMMessageHeldBack(t *testing.T) {
	e := &OOMError{AllocSize: 20 * MiB, DeviceTotal: 80 * GiB, HeldBack: 12 * GiB, DeviceFree: 19 * MiB, Allocated: 67 * GiB, Reserved: 68 * GiB}
	for _, tc := range []struct {
		name, got, want string
	}{
		{"current", e.Error(), "GPU 0 has a total capacity of 80.00 GiB, of which the margin holds back 12.00 GiB and 19.00 MiB is free. Of the allocated memory 67.00 GiB"},
		{"legacy", e.LegacyMessage(), "(GPU 0; 80.00 GiB total capacity; 12.00 GiB held back by the margin; 67.00 GiB already allocated; 19.00 MiB free; 68.00 GiB reserved"},
	} {
		if !strings.Contains(tc.got, tc.want) {
			t.Errorf("%s: %q\nwant it to contain %q", tc.name, tc.got, tc.want)
		}
	}
}
