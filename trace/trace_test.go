package trace

import (
	"slices"
	"testing"
)

// A template of three events (allocate 10, free 9 — the run before's —,
// allocate 11 which stays) repeated twice with Base 10, Delta 2: copy 1
// allocates 12, frees 11, allocates 13; copy 2 allocates 14, frees 13,
// allocates 15. Id 3, below Base-Delta, never moves.
func TestRepeat(t *testing.T) {
	tr := &Trace{Events: []Event{
		{Action: Alloc, ID: 3, Size: 1},
		{Action: Alloc, ID: 10, Size: 5}, {Action: Free, ID: 9}, {Action: Free, ID: 3},
		{Action: StepEnd},
	}, Repeats: []Repeat{{Start: 1, End: 4, Times: 2, Base: 10, Delta: 2}}}
	want := []Event{
		{Action: Alloc, ID: 3, Size: 1},
		{Action: Alloc, ID: 10, Size: 5}, {Action: Free, ID: 9}, {Action: Free, ID: 3},
		{Action: Alloc, ID: 12, Size: 5}, {Action: Free, ID: 11}, {Action: Free, ID: 3},
		{Action: Alloc, ID: 14, Size: 5}, {Action: Free, ID: 13}, {Action: Free, ID: 3},
		{Action: StepEnd},
	}
	if tr.Len() != len(want) {
		t.Fatalf("Len %d, want %d", tr.Len(), len(want))
	}
	for i, w := range want {
		if got := tr.At(i); got != w {
			t.Errorf("At(%d) = %+v, want %+v", i, got, w)
		}
	}
	tr.Expand()
	if !slices.Equal(tr.Events, want) || len(tr.Repeats) != 0 {
		t.Errorf("Expand: %+v, repeats %v", tr.Events, tr.Repeats)
	}
}
