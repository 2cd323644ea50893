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

// A repetition whose sizes grow, a step of its own each copy: a template
// (step 1) allocating 100 bytes growing by 8 a copy (id 20), freeing the
// run before's (19), allocating 4 bytes that do not grow (id 21), and
// ending its step. Copy k allocates 100+8k and is step 1+k.
func TestRepeatGrow(t *testing.T) {
	tr := &Trace{Events: []Event{
		{Action: Alloc, Step: 0, ID: 19, Size: 92}, {Action: StepEnd, Step: 0},
		{Action: Alloc, Step: 1, ID: 20, Size: 100}, {Action: Free, Step: 1, ID: 19}, {Action: Alloc, Step: 1, ID: 21, Size: 4}, {Action: StepEnd, Step: 1},
	}, Repeats: []Repeat{{Start: 2, End: 6, Times: 2, Base: 20, Delta: 2, Steps: 1, Grow: []int64{8, 0, 0, 0}}}}
	want := []Event{
		{Action: Alloc, Step: 0, ID: 19, Size: 92}, {Action: StepEnd, Step: 0},
		{Action: Alloc, Step: 1, ID: 20, Size: 100}, {Action: Free, Step: 1, ID: 19}, {Action: Alloc, Step: 1, ID: 21, Size: 4}, {Action: StepEnd, Step: 1},
		{Action: Alloc, Step: 2, ID: 22, Size: 108}, {Action: Free, Step: 2, ID: 21}, {Action: Alloc, Step: 2, ID: 23, Size: 4}, {Action: StepEnd, Step: 2},
		{Action: Alloc, Step: 3, ID: 24, Size: 116}, {Action: Free, Step: 3, ID: 23}, {Action: Alloc, Step: 3, ID: 25, Size: 4}, {Action: StepEnd, Step: 3},
	}
	for i, w := range want {
		if got := tr.At(i); got != w {
			t.Errorf("At(%d) = %+v, want %+v", i, got, w)
		}
	}
	tr.Expand()
	if !slices.Equal(tr.Events, want) {
		t.Errorf("Expand: %+v", tr.Events)
	}
}

// A lagged repetition, a pipeline stage's steady pairs with two
// micro-batches in flight: each run allocates one activation and frees
// the one allocated two runs before. With Base 7, Delta 1 and Lag 2 the
// ids from Base-2 = 5 on move (Moved): copy 1 allocates 8 and frees 6,
// copy 2 allocates 9 and frees 7 (the template's own), copy 3 allocates
// 10 and frees 8. Id 4, below 5, never moves.
func TestRepeatLag(t *testing.T) {
	r := Repeat{Start: 2, End: 5, Times: 3, Base: 7, Delta: 1, Lag: 2}
	if got := r.Moved(); got != 5 {
		t.Errorf("Moved = %d, want 5", got)
	}
	tr := &Trace{Events: []Event{
		{Action: Alloc, ID: 5, Size: 8}, {Action: Alloc, ID: 6, Size: 8},
		{Action: Alloc, ID: 7, Size: 8}, {Action: Free, ID: 5}, {Action: Free, ID: 4},
	}, Repeats: []Repeat{r}}
	want := []Event{
		{Action: Alloc, ID: 5, Size: 8}, {Action: Alloc, ID: 6, Size: 8},
		{Action: Alloc, ID: 7, Size: 8}, {Action: Free, ID: 5}, {Action: Free, ID: 4},
		{Action: Alloc, ID: 8, Size: 8}, {Action: Free, ID: 6}, {Action: Free, ID: 4},
		{Action: Alloc, ID: 9, Size: 8}, {Action: Free, ID: 7}, {Action: Free, ID: 4},
		{Action: Alloc, ID: 10, Size: 8}, {Action: Free, ID: 8}, {Action: Free, ID: 4},
	}
	for i, w := range want {
		if got := tr.At(i); got != w {
			t.Errorf("At(%d) = %+v, want %+v", i, got, w)
		}
	}
	tr.Expand()
	if !slices.Equal(tr.Events, want) {
		t.Errorf("Expand: %+v", tr.Events)
	}
}

// LiveByStep follows requested bytes per phase; with skip, the blocks of
// those categories are left out. A parameter of 100 bytes allocated in
// setup, then in step 0 a forward activation of 10 and a backward
// gradient of 5 that frees the activation: with everything, forward peak
// and end 110, backward peak 115 and end 105; without the parameter 10,
// 10, 15 and 5.
func TestLiveByStepSkip(t *testing.T) {
	var tr Trace
	tr.Add(Event{Action: Alloc, Category: Parameter, Phase: Setup, ID: 1, Size: 100})
	tr.Add(Event{Action: Alloc, Category: Activation, Phase: Forward, ID: 2, Size: 10})
	tr.Add(Event{Action: Alloc, Category: Gradient, Phase: Backward, ID: 3, Size: 5})
	tr.Add(Event{Action: Free, Category: Activation, Phase: Backward, ID: 2})
	for _, c := range []struct {
		skip                             []Category
		fwdPeak, fwdEnd, bwdPeak, bwdEnd int64
	}{
		{nil, 110, 110, 115, 105},
		{[]Category{Parameter}, 10, 10, 15, 5},
	} {
		live, err := LiveByStep(&tr, c.skip...)
		if err != nil {
			t.Fatal(err)
		}
		fw, bw := live[0].Phases[Forward], live[0].Phases[Backward]
		if fw.Peak != c.fwdPeak || fw.End != c.fwdEnd || bw.Peak != c.bwdPeak || bw.End != c.bwdEnd {
			t.Errorf("skip %v: forward %d/%d, backward %d/%d; want %d/%d, %d/%d", c.skip, fw.Peak, fw.End, bw.Peak, bw.End, c.fwdPeak, c.fwdEnd, c.bwdPeak, c.bwdEnd)
		}
	}
}
