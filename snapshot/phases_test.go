package snapshot

import (
	"reflect"
	"testing"

	"github.com/batchfit/batchfit/alloc"
)

// TestRecordingPhasesFromFrames: with Python frames on the allocations,
// the model's frames are forward, none (autograd's engine thread) or a
// frame named backward are backward, torch/optim/ is the optimizer; a
// free keeps the phase of the allocation before it.
func TestRecordingPhasesFromFrames(t *testing.T) {
	const a = int64(0x7f0000000000)
	fwd := []Frame{{Filename: "model.py", Line: 3, Name: "forward"}}
	bwd := []Frame{{Filename: "torch/_tensor.py", Line: 500, Name: "backward"}, {Filename: "train.py", Line: 9, Name: "main"}}
	opt := []Frame{{Filename: "site-packages/torch/optim/adam.py", Line: 10, Name: "step"}}
	e := func(action string, addr int64, fr []Frame) TraceEntry {
		return TraceEntry{Action: action, Addr: addr, Size: 1024, Frames: fr}
	}
	snap := &Snapshot{
		Segments: []Segment{{Address: a, TotalSize: 2 << 20, SegmentType: "small", Blocks: []Block{
			{Address: a, Size: 1024, RequestedSize: 1024, State: StateActiveAllocated},
			{Address: a + 3072, Size: 1024, RequestedSize: 1024, State: StateActiveAllocated},
			{Address: a + 4096, Size: 1024, RequestedSize: 1024, State: StateActiveAllocated},
			{Address: a + 5120, Size: 2<<20 - 5120, State: StateInactive}}}},
		Traces: [][]TraceEntry{{
			e("alloc", a, fwd), e("alloc", a+1024, fwd), e("alloc", a+2048, nil),
			e("free_requested", a+1024, nil), e("free_completed", a+1024, nil), e("alloc", a+3072, bwd),
			e("free_requested", a+2048, nil), e("free_completed", a+2048, nil),
			e("alloc", a+4096, opt),
		}},
	}
	conv, err := snap.ConvertFromState(0, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	got, from, _ := RecordingPhases(snap, 0, conv)
	want := []PhaseRange{{PhaseForward, 0, 2}, {PhaseBackward, 2, 6}, {PhaseOptimizer, 6, 7}}
	if from != "stack frames" || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v from %s, want %v from stack frames", got, from, want)
	}
}

// SizeClasses cover every size once, and meet where the allocator's rules
// change: below kSmallSize the small pool, from kMinLargeAlloc (10 MiB)
// segments of the request rounded up to 2 MiB.
func TestSizeClasses(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "< 1 MiB (small pool)"},
		{1<<20 - 1, "< 1 MiB (small pool)"},
		{2 << 20, "1–10 MiB"},
		{10<<20 - 1, "1–10 MiB"},
		{10 << 20, "10–100 MiB"},
		{1 << 30, "≥ 1 GiB"},
		{1 << 50, "≥ 1 GiB"},
	}
	for _, tt := range tests {
		var in []string
		for _, c := range SizeClasses {
			if c.Contains(tt.n) {
				in = append(in, c.Name)
			}
		}
		if len(in) != 1 || in[0] != tt.want {
			t.Errorf("%d bytes: in %v, want only %q", tt.n, in, tt.want)
		}
	}
}
