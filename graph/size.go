package graph

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxBytes bounds every size batchfit computes with: a tensor, and all the
// tensors of a graph together. It is 64 PiB, hundreds of thousands of
// times the largest GPU's memory, so no answer is lost by it; and it
// leaves a factor of 128 below int64's limit, so the sums the simulator and
// the allocator make of a graph's tensors (the optimizer's states, a step's
// allocations, segments rounded up) cannot overflow.
const MaxBytes int64 = 1 << 56

// MaxOps bounds a graph's ops: a simulation's time and memory grow with
// them (about 60 µs and 8 KiB an op, measured on the zoo's MLP at 30,000
// layers: 3.6 s and 460 MB for 60,000 ops). The largest models of the zoo
// have a few thousand (Llama-3-70B: 80 layers); 65,536 is twenty times
// that and keeps every answer within seconds.
const MaxOps = 1 << 16

func opsError(name string) error {
	return Boundf("%s has more than %d ops, the most batchfit simulates (fewer layers)", name, MaxOps)
}

// Boundf is an error that matches ErrBound: a request beyond one of
// batchfit's bounds.
func Boundf(format string, args ...any) error { return boundErr(fmt.Sprintf(format, args...)) }

type boundErr string

func (e boundErr) Error() string        { return string(e) }
func (e boundErr) Is(target error) bool { return target == ErrBound }

// ErrBound is matched (errors.Is) by every refusal of a graph beyond
// batchfit's bounds (MaxBytes, MaxOps): a search over a size takes it as
// the end of what can be asked, not as a failure.
var ErrBound = errors.New("beyond batchfit's bounds")

// Is makes a SizeError match ErrBound.
func (e *SizeError) Is(target error) bool { return target == ErrBound }

// MulSize multiplies two non-negative sizes, reporting false when the
// product overflows int64 or an operand is negative.
func MulSize(a, b int64) (int64, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<63-1 {
		return 0, false
	}
	return int64(lo), true
}

// AddSize adds two non-negative sizes, reporting false when the sum
// overflows int64 or an operand is negative.
func AddSize(a, b int64) (int64, bool) {
	if a < 0 || b < 0 || a > 1<<63-1-b {
		return 0, false
	}
	return a + b, true
}

// SizeError is a size beyond MaxBytes, or one whose arithmetic overflows:
// a shape no device holds, refused before any figure is computed from it.
type SizeError struct {
	// What names the tensor (or the graph) and Shape its shape (nil for
	// a graph's total).
	What  string
	Shape Shape
	DType DType
}

func (e *SizeError) Error() string {
	if e.Shape == nil {
		return fmt.Sprintf("%s: its tensors come to more than the %s batchfit computes with (no device holds them)", e.What, pib(MaxBytes))
	}
	for _, d := range e.Shape {
		if d < 0 {
			return fmt.Sprintf("%s: shape %v has a negative dimension (a size that overflowed)", e.What, e.Shape)
		}
	}
	return fmt.Sprintf("%s: shape %v of %s is more than the %s batchfit computes with (no device holds it)", e.What, e.Shape, e.DType, pib(MaxBytes))
}

func pib(n int64) string { return fmt.Sprintf("%d PiB", n>>50) }

// CheckedBytes is the size of a tensor of shape s and dtype dt, or a
// SizeError naming what when a dimension is negative or the size exceeds
// MaxBytes (or overflows on the way there).
func CheckedBytes(what string, s Shape, dt DType) (int64, error) {
	n := max(dt.Size(), 1)
	for _, d := range s {
		var ok bool
		if n, ok = MulSize(n, d); !ok || n > MaxBytes {
			return 0, &SizeError{What: what, Shape: s, DType: dt}
		}
	}
	return n, nil
}

// checkTotal reports a SizeError when the tensors of g that own their
// storage come to more than MaxBytes.
func (g *Graph) checkTotal() error {
	var total int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		n, err := CheckedBytes(t.Name, t.Shape, t.DType)
		if err != nil {
			return err
		}
		if t.View != None {
			continue
		}
		var ok bool
		if total, ok = AddSize(total, n); !ok || total > MaxBytes {
			return &SizeError{What: g.Name}
		}
	}
	return nil
}
