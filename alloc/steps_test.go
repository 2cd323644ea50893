package alloc

import (
	"testing"

	"github.com/batchfit/batchfit/trace"
)

// However many events it sees, the recorder keeps at most 2·buckets
// stretches, covering every event, and the highest allocated and reserved
// figures survive the merging.
func TestStepRecorderBoundsAndPeaks(t *testing.T) {
	r := NewStepRecorder(4)
	const n = 1000
	for i := range n {
		e := &trace.Event{Phase: trace.Phase(i / 100 % 2), Step: int32(i / 200)}
		r.Observe(Observation{Event: i, E: e, Allocated: int64(i % 300), Reserved: int64(i % 450)})
	}
	bs := r.Buckets()
	if len(bs) > 8 || r.Events() != n {
		t.Fatalf("%d stretches over %d events, want at most 8 over %d", len(bs), r.Events(), n)
	}
	var alloc, res int64
	for k, b := range bs {
		if k == 0 && b.From != 0 || k > 0 && b.From != bs[k-1].To {
			t.Errorf("stretch %d starts at %d", k, b.From)
		}
		alloc, res = max(alloc, b.Allocated), max(res, b.Reserved)
	}
	if bs[len(bs)-1].To != n || alloc != 299 || res != 449 {
		t.Errorf("ends at %d, peaks %d and %d, want %d, 299 and 449", bs[len(bs)-1].To, alloc, res, n)
	}
	if len(r.Phases()) == 0 {
		t.Error("no phase runs kept")
	}
}
