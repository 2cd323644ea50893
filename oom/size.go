package oom

import "fmt"

const (
	kiB = 1 << 10
	miB = 1 << 20
	giB = 1 << 30
)

// FormatSize prints b the way PyTorch's format_size does
// (c10/cuda/CUDACachingAllocator.cpp): up to 1024 bytes as "N bytes", then
// with two decimals in KiB up to 1 MiB, in MiB up to 1 GiB and in GiB
// beyond. Exactly 1 MiB prints "1024.00 KiB". Negative values get a minus
// sign in front of the magnitude's format.
//
// This is a local copy of alloc.FormatSize so that oom does not depend on
// the allocator simulator; both must follow the same rule.
func FormatSize(b int64) string {
	if b < 0 {
		if b == -b { // math.MinInt64
			return fmt.Sprintf("%d bytes", b)
		}
		return "-" + FormatSize(-b)
	}
	switch {
	case b <= 1024:
		return fmt.Sprintf("%d bytes", b)
	case b <= miB:
		return fmt.Sprintf("%.2f KiB", float64(b)/kiB)
	case b <= giB:
		return fmt.Sprintf("%.2f MiB", float64(b)/miB)
	}
	return fmt.Sprintf("%.2f GiB", float64(b)/giB)
}

// Resolution is how far a size that PyTorch printed as b may be from the
// true byte count: half a unit in the last of the two decimals of the unit
// format_size chose, rounded up. It is 0 up to 1024 bytes, 6 bytes in the
// KiB range, 5243 bytes in the MiB range and 5368710 bytes in the GiB range.
func Resolution(b int64) int64 {
	if b < 0 {
		b = -b
	}
	switch {
	case b <= 1024:
		return 0
	case b <= miB:
		return (kiB + 199) / 200
	case b <= giB:
		return (miB + 199) / 200
	}
	return (giB + 199) / 200
}
