package predict

import (
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/train"
)

func TestNeed(t *testing.T) {
	const mib = 1 << 20
	gpu16 := gpu.GPU{Capacity: 16 << 30}
	tests := []struct {
		name string
		r    Result
		want int64
	}{
		// Fits: the device total itself.
		{"fits", Result{GPU: gpu16, Timeline: &alloc.Timeline{}, DeviceTotal: 9000 * mib, Context: 500 * mib}, 9000 * mib},
		// Screened: requested peak 20 GiB + context 500 MiB.
		{"screened", Result{GPU: gpu16, Screened: true, Summary: train.Summary{PeakRequested: 20 << 30}, Context: 500 * mib},
			20<<30 + 500*mib},
		// Out of memory with 15 GiB reserved and a 2 GiB segment tried:
		// 500 MiB + 15 GiB + 2 GiB, above the 12 GiB requested peak +
		// context.
		{"oom, failing request larger", Result{GPU: gpu16, Context: 500 * mib, Summary: train.Summary{PeakRequested: 12 << 30},
			Timeline: &alloc.Timeline{OOM: &alloc.OOMError{Reserved: 15 << 30, AllocSize: 2 << 30}}}, 500*mib + 17<<30},
		// The same failure when the whole step requests 30 GiB: the step's
		// requested peak + context is the larger lower bound.
		{"oom, step larger", Result{GPU: gpu16, Context: 500 * mib, Summary: train.Summary{PeakRequested: 30 << 30},
			Timeline: &alloc.Timeline{OOM: &alloc.OOMError{Reserved: 15 << 30, AllocSize: 2 << 30}}}, 30<<30 + 500*mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Need(&tt.r); got != tt.want {
				t.Errorf("Need = %d, want %d", got, tt.want)
			}
		})
	}
}
