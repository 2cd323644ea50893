package oom

const (
	kiB = 1 << 10
	miB = 1 << 20
	giB = 1 << 30
)

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
