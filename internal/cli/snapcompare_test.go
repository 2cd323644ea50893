package cli

import (
	"reflect"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/snapshot"
)

// TestRecordingPhasesFromFrames: with Python frames on the allocations,
// the model's frames are forward, none (autograd's engine thread) or a
// frame named backward are backward, torch/optim/ is the optimizer; a
// free keeps the phase of the allocation before it.
func TestRecordingPhasesFromFrames(t *testing.T) {
	const a = int64(0x7f0000000000)
	fwd := []snapshot.Frame{{Filename: "model.py", Line: 3, Name: "forward"}}
	bwd := []snapshot.Frame{{Filename: "torch/_tensor.py", Line: 500, Name: "backward"}, {Filename: "train.py", Line: 9, Name: "main"}}
	opt := []snapshot.Frame{{Filename: "site-packages/torch/optim/adam.py", Line: 10, Name: "step"}}
	e := func(action string, addr int64, fr []snapshot.Frame) snapshot.TraceEntry {
		return snapshot.TraceEntry{Action: action, Addr: addr, Size: 1024, Frames: fr}
	}
	snap := &snapshot.Snapshot{
		Segments: []snapshot.Segment{{Address: a, TotalSize: 2 << 20, SegmentType: "small", Blocks: []snapshot.Block{
			{Address: a, Size: 1024, RequestedSize: 1024, State: snapshot.StateActiveAllocated},
			{Address: a + 3072, Size: 1024, RequestedSize: 1024, State: snapshot.StateActiveAllocated},
			{Address: a + 4096, Size: 1024, RequestedSize: 1024, State: snapshot.StateActiveAllocated},
			{Address: a + 5120, Size: 2<<20 - 5120, State: snapshot.StateInactive}}}},
		Traces: [][]snapshot.TraceEntry{{
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
	got, from, _ := recordingPhases(snap, 0, conv)
	want := []phaseRange{{0, 0, 2}, {1, 2, 6}, {2, 6, 7}}
	if from != "stack frames" || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v from %s, want %v from stack frames", got, from, want)
	}
}
