package alloc

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/trace"
)

func alloc(id, size int64, c trace.Category) trace.Event {
	return trace.Event{Action: trace.Alloc, ID: id, Size: size, Category: c}
}

func free(id int64) trace.Event { return trace.Event{Action: trace.Free, ID: id} }

var (
	stepEnd    = trace.Event{Action: trace.StepEnd}
	emptyCache = trace.Event{Action: trace.EmptyCache}
)

// smallTrace: after each event, allocated / reserved in MiB:
//
//	0 param 30 MiB            30      / 30
//	1 activation 1.5 MiB-100  31.5    / 50   (20 MiB segment, split)
//	2 transient 100 B         31.5+512/ 52   (2 MiB small segment)
//	3 free transient          31.5    / 52
//	4 gradient 30 MiB         61.5    / 82   <- both peaks
//	5 free activation         60      / 82   (its 20 MiB segment is whole again)
//	6 step end                step 0: peaks 61.5 / 82, end 60 / 82
//	7 empty_cache             60      / 60   (20 + 2 MiB released; between
//	                                           steps, so step 0's: after it 60)
//	8 activation 1.5 MiB      61.5    / 80   (equals the peak, does not beat it)
//	9 free                    60      / 80   step 1 (partial)
func smallTrace() *trace.Trace {
	return &trace.Trace{Events: []trace.Event{
		alloc(1, 30*MiB, trace.Parameter),
		alloc(2, 3*MiB/2-100, trace.Activation),
		alloc(3, 100, trace.Transient),
		free(3),
		alloc(4, 30*MiB, trace.Gradient),
		free(2),
		stepEnd,
		emptyCache,
		alloc(5, 3*MiB/2, trace.Activation),
		free(5),
	}}
}

func TestReplay(t *testing.T) {
	tl, err := Replay(smallTrace(), Config{}, Device{}, ReplayOptions{Record: true, Segments: true})
	if err != nil {
		t.Fatal(err)
	}
	if tl.PeakAllocated != 61*MiB+MiB/2 || tl.PeakAllocatedEvent != 4 {
		t.Errorf("peak allocated %d at %d", tl.PeakAllocated, tl.PeakAllocatedEvent)
	}
	if tl.PeakReserved != 82*MiB || tl.PeakReservedEvent != 4 || tl.PeakActive != tl.PeakAllocated {
		t.Errorf("peak reserved %d at %d, active %d", tl.PeakReserved, tl.PeakReservedEvent, tl.PeakActive)
	}
	var at, req [trace.NumCategories]int64
	at[trace.Parameter], req[trace.Parameter] = 30*MiB, 30*MiB
	at[trace.Activation], req[trace.Activation] = 3*MiB/2, 3*MiB/2-100
	at[trace.Gradient], req[trace.Gradient] = 30*MiB, 30*MiB
	if tl.AtPeak != at || tl.RequestedAtPeak != req {
		t.Errorf("at peak %v / %v, want %v / %v", tl.AtPeak, tl.RequestedAtPeak, at, req)
	}
	want := []StepStats{
		{Step: 0, EndEvent: 6, PeakAllocated: 61*MiB + MiB/2, PeakReserved: 82 * MiB, EndAllocated: 60 * MiB, EndReserved: 82 * MiB,
			Released: 22 * MiB, EmptiedAfter: true, ReservedAfter: 60 * MiB},
		// step 1 starts from what empty_cache left (60 / 60): its peak
		// reserved is the 20 MiB segment of event 8, not step 0's 82
		{Step: 1, EndEvent: 9, Partial: true, PeakAllocated: 61*MiB + MiB/2, PeakReserved: 80 * MiB, EndAllocated: 60 * MiB, EndReserved: 80 * MiB},
	}
	if len(tl.Steps) != len(want) {
		t.Fatalf("steps %+v", tl.Steps)
	}
	for i := range want {
		if tl.Steps[i] != want[i] {
			t.Errorf("step %d = %+v\nwant     %+v", i, tl.Steps[i], want[i])
		}
	}
	if len(tl.Samples) != 10 || tl.Samples[7] != (Sample{Event: 7, Allocated: 60 * MiB, Reserved: 60 * MiB}) {
		t.Errorf("samples %+v", tl.Samples)
	}
	if tl.OOM != nil || tl.OOMEvent != -1 {
		t.Errorf("oom %v at %d", tl.OOM, tl.OOMEvent)
	}
	if tl.Final.Allocated != 60*MiB || tl.Final.Reserved != 80*MiB || len(tl.Segments) != 3 {
		t.Errorf("final %+v, %d segments", tl.Final, len(tl.Segments))
	}
}

func TestReplayOOM(t *testing.T) {
	// Capacity 60 MiB: the gradient's 30 MiB segment would make 82 MiB;
	// the flush frees the 2 MiB small segment (50 + 30 > 60 still), so
	// event 4 runs out of memory. That is an answer, not an error.
	tl, err := Replay(smallTrace(), Config{}, Device{Capacity: 60 * MiB}, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tl.OOM == nil || tl.OOMEvent != 4 {
		t.Fatalf("oom %v at %d", tl.OOM, tl.OOMEvent)
	}
	if tl.OOM.AllocSize != 30*MiB || tl.OOM.Reserved != 50*MiB || tl.OOM.DeviceFree != 10*MiB {
		t.Errorf("oom %+v", tl.OOM)
	}
	if tl.Final.NumOOMs != 1 || tl.Final.NumAllocRetries != 1 || tl.Final.Reserved != 50*MiB {
		t.Errorf("final %+v", tl.Final)
	}
	if len(tl.Steps) != 1 || !tl.Steps[0].Partial || tl.Steps[0].EndEvent != 4 || tl.Steps[0].PeakReserved != 52*MiB {
		t.Errorf("steps %+v", tl.Steps)
	}
}

func TestReplayErrors(t *testing.T) {
	tests := []struct {
		events []trace.Event
		cfg    Config
		want   string
	}{
		{[]trace.Event{alloc(1, 10, 0), free(2)}, Config{}, "event 1: free of block 2"},
		{[]trace.Event{alloc(1, 10, 0), alloc(1, 10, 0)}, Config{}, "event 1: malloc of block 1: block is already allocated"},
		{[]trace.Event{alloc(1, -5, 0)}, Config{}, "event 0: malloc of block 1: negative size"},
		{[]trace.Event{{Action: 9}}, Config{}, "event 0: unknown action 9"},
		{[]trace.Event{alloc(1, 10, 200)}, Config{}, "event 0: unknown category 200"},
		{nil, Config{MaxSplitSize: MiB}, "below the minimum"},
	}
	for _, tc := range tests {
		_, err := Replay(&trace.Trace{Events: tc.events}, tc.cfg, Device{}, ReplayOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "replaying trace: ") {
			t.Errorf("Replay(%v) error = %v, want %q", tc.events, err, tc.want)
		}
	}
}

func TestReplayEmpty(t *testing.T) {
	tl, err := Replay(&trace.Trace{}, Config{}, Device{}, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tl.PeakAllocatedEvent != -1 || len(tl.Steps) != 0 || tl.OOM != nil {
		t.Errorf("%+v", tl)
	}
	// Only a StepEnd: one complete, empty step.
	tl, _ = Replay(&trace.Trace{Events: []trace.Event{stepEnd}}, Config{}, Device{}, ReplayOptions{})
	if len(tl.Steps) != 1 || tl.Steps[0].Partial {
		t.Errorf("steps %+v", tl.Steps)
	}
}

// An allocation whose caller catches the out-of-memory error
// (trace.Event.Fallback: cuDNN's algorithm loop) runs the allocator's whole
// out-of-memory path and then leaves the step running without the block.
// Capacity 100 MiB; every request is at least 10 MiB, so each is its own
// segment of exactly its size (rounded to 2 MiB):
//
//	0 A 30 MiB                 reserved 30
//	1 W 40 MiB, key 1          reserved 70: it fits
//	2 free W                   40 MiB cached
//	3 B 50 MiB                 the cached 40 is too small; 70+50 > 100, so
//	                           release_cached_blocks frees the 40 and the
//	                           retry takes a new 50: reserved 80
//	4 W 40 MiB, key 1          20 MiB free, nothing cached: out of memory,
//	                           caught; the block is size 0 (FellBack 1)
//	5 free W
//	6 free B                   50 MiB cached
//	7 W 40 MiB, key 1          key 1 cached the choice that needs none: 0
//	8 free W
//	9 S 40 MiB, key -1         no cache: served from the cached 50 (split)
//	10 free S
//	11 C 80 MiB, plain         30 live + 80 > 100 even with the cache
//	                           freed: the step runs out of memory
//
// Peaks: allocated 80 MiB (A+B), reserved 80 MiB; two out-of-memory
// raises (events 4 and 11), each counted in num_ooms.
func TestReplayFallback(t *testing.T) {
	ev := func(a trace.Action, id, mib int64, key int32) trace.Event {
		return trace.Event{Action: a, Category: trace.Workspace, ID: id, Size: mib * MiB, Fallback: key, Site: -1}
	}
	tr := &trace.Trace{Events: []trace.Event{
		ev(trace.Alloc, 1, 30, 0),
		ev(trace.Alloc, 2, 40, 1), ev(trace.Free, 2, 0, 0),
		ev(trace.Alloc, 3, 50, 0),
		ev(trace.Alloc, 4, 40, 1), ev(trace.Free, 4, 0, 0),
		ev(trace.Free, 3, 0, 0),
		ev(trace.Alloc, 5, 40, 1), ev(trace.Free, 5, 0, 0),
		ev(trace.Alloc, 6, 40, -1), ev(trace.Free, 6, 0, 0),
		ev(trace.Alloc, 7, 80, 0),
	}}
	tl, err := Replay(tr, Config{}, Device{Capacity: 100 * MiB}, ReplayOptions{Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if tl.FellBack != 1 {
		t.Errorf("fell back %d times, want 1", tl.FellBack)
	}
	if tl.PeakAllocated != 80*MiB || tl.PeakReserved != 80*MiB {
		t.Errorf("peaks allocated %d, reserved %d; want 80 MiB each", tl.PeakAllocated>>20, tl.PeakReserved>>20)
	}
	// allocated after each event, MiB
	want := []int64{30, 70, 30, 80, 80, 80, 30, 30, 30, 70, 30}
	for i, w := range want {
		if got := tl.Samples[i].Allocated; got != w*MiB {
			t.Errorf("event %d: allocated %d MiB, want %d", i, got>>20, w)
		}
	}
	if tl.OOM == nil || tl.OOMEvent != 11 {
		t.Fatalf("a plain allocation that cannot fit: oom %v at event %d, want event 11", tl.OOM, tl.OOMEvent)
	}
	if tl.Final.NumOOMs != 2 {
		t.Errorf("num_ooms %d, want 2 (the caught raise counts, as in PyTorch)", tl.Final.NumOOMs)
	}
}

// TestReplayResetPeaks: reset_peak_memory_stats after a transient keeps
// what is reserved then as the peak reserved, and the allocated peak
// starts from what is allocated then. After each event, allocated /
// reserved in MiB:
//
//	0 transient 30 MiB      30 / 30  (a 30 MiB segment)
//	1 parameter 50 MiB      80 / 80  (a 50 MiB segment)
//	2 free transient        50 / 80
//	3 reset_peaks           peaks: 50 / 80
//	4 activation 20 MiB     70 / 80  (the cached 30 MiB block, split: 10 MiB > 1 MiB stays free)
//	5 free                  50 / 80
//
// Without the reset the allocated peak would be the 80 MiB of event 1.
func TestReplayResetPeaks(t *testing.T) {
	tr := &trace.Trace{Events: []trace.Event{
		alloc(1, 30*MiB, trace.Transient),
		alloc(2, 50*MiB, trace.Parameter),
		free(1),
		{Action: trace.ResetPeaks},
		alloc(3, 20*MiB, trace.Activation),
		free(3),
	}}
	tl, err := Replay(tr, Config{}, Device{}, ReplayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tl.PeakAllocated != 70*MiB || tl.PeakAllocatedEvent != 4 {
		t.Errorf("peak allocated %d MiB at event %d, want 70 MiB at 4", tl.PeakAllocated/MiB, tl.PeakAllocatedEvent)
	}
	if tl.PeakReserved != 80*MiB || tl.PeakReservedEvent != 3 {
		t.Errorf("peak reserved %d MiB at event %d, want 80 MiB at 3 (the reset)", tl.PeakReserved/MiB, tl.PeakReservedEvent)
	}
	if tl.AtPeak[trace.Parameter] != 50*MiB || tl.AtPeak[trace.Activation] != 20*MiB || tl.AtPeak[trace.Transient] != 0 {
		t.Errorf("at the peak: %v", tl.AtPeak)
	}
	if tl.Final.PeakAllocated != 70*MiB || tl.Final.PeakReserved != 80*MiB {
		t.Errorf("allocator's own peaks %d / %d MiB, want 70 / 80", tl.Final.PeakAllocated/MiB, tl.Final.PeakReserved/MiB)
	}
	if len(tl.Steps) != 1 || tl.Steps[0].PeakAllocated != 70*MiB || tl.Steps[0].PeakReserved != 80*MiB {
		t.Errorf("steps %+v", tl.Steps)
	}
}
