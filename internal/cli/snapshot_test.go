package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/internal/servertest"
	ogórek "github.com/kisielk/og-rek"
)

// A recorded trace of an 11 MiB tensor then a 1.5 MiB one, written as
// torch.cuda.memory._dump_snapshot would. By the allocator's rules the
// 11 MiB request takes a 12 MiB segment and is not split (the remainder is
// exactly 1 MiB), so it counts 12 MiB allocated; the 1.5 MiB request finds
// nothing cached and gets a 20 MiB segment: peak allocated 13.5 MiB, peak
// reserved 32 MiB. With expandable segments the large pool maps 20 MiB
// pages and every remainder splits: both fit in one 20 MiB page.
func TestSnapshotCommand(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	path := servertest.WriteSnapshotFixture(t)
	out, errs, code := run("snapshot", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got report.SnapshotJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.PeakAllocatedBytes != 27*mib/2 || got.PeakReservedBytes != 32*mib || got.WhatIfReservedBytes != 20*mib {
		t.Errorf("peak allocated %d (want %d), reserved %d (want %d), expandable %d (want %d)",
			got.PeakAllocatedBytes, 27*mib/2, got.PeakReservedBytes, 32*mib, got.WhatIfReservedBytes, 20*mib)
	}
	if len(got.Fragmentation) != 4 || got.MaxFragmentationBytes != 32*mib {
		// Four events; after both frees nothing is allocated and both
		// segments stay cached: 32 MiB reserved but unallocated.
		t.Errorf("fragmentation: max %d, series %v", got.MaxFragmentationBytes, got.Fragmentation)
	}
	if len(got.TopSites) == 0 || got.TopSites[0].Site != "train.py:10:forward" {
		t.Errorf("top sites %+v, want train.py:10:forward first", got.TopSites)
	}
}

// writeMidRunFixture writes a recording that starts mid-run: before it, a 20 MiB segment held
// weights (8 MiB at its start, never touched in the trace) and a 4 MiB
// activation after them. The trace frees the activation, allocates 6 MiB
// in its place (split off the 12 MiB free block), cudaMallocs a 40 MiB
// segment for a 40 MiB tensor, frees it and reuses the segment for 30
// MiB. PyTorch reserved 20 MiB at the first entry and 60 MiB at the peak
// and the end, with one segment allocated; a replay from the rebuilt
// state must say the same. Allocated peaks at 8+6+40 = 54 MiB.
func writeMidRunFixture(t *testing.T) string {
	const mib = int64(1) << 20
	const a, b = int64(0x7f0000000000), int64(0x7f0040000000)
	blk := func(addr, size, req int64, state string) map[any]any {
		return map[any]any{"address": addr, "size": size, "requested_size": req, "state": state, "frames": []any{}}
	}
	seg := func(addr, size int64, blocks ...any) map[any]any {
		return map[any]any{"device": int64(0), "address": addr, "total_size": size, "allocated_size": int64(0), "active_size": int64(0),
			"requested_size": int64(0), "stream": int64(0), "segment_type": "large", "segment_pool_id": ogórek.Tuple{int64(0), int64(0)},
			"is_expandable": false, "frames": []any{}, "blocks": blocks}
	}
	entry := func(action string, addr, size int64) map[any]any {
		return map[any]any{"action": action, "addr": addr, "size": size, "stream": int64(0), "time_us": int64(0), "frames": []any{}}
	}
	snap := map[any]any{
		"segments": []any{
			seg(a, 20*mib, blk(a, 8*mib, 8*mib, "active_allocated"), blk(a+8*mib, 6*mib, 6*mib, "active_allocated"), blk(a+14*mib, 6*mib, 0, "inactive")),
			seg(b, 40*mib, blk(b, 30*mib, 30*mib, "active_allocated"), blk(b+30*mib, 10*mib, 0, "inactive")),
		},
		"device_traces": []any{[]any{
			entry("free_requested", a+8*mib, 4*mib), entry("free_completed", a+8*mib, 4*mib),
			entry("alloc", a+8*mib, 6*mib),
			entry("segment_alloc", b, 40*mib), entry("alloc", b, 40*mib),
			entry("free_requested", b, 40*mib), entry("free_completed", b, 40*mib),
			entry("alloc", b, 30*mib),
		}},
		"allocator_settings": map[any]any{"PYTORCH_CUDA_ALLOC_CONF": ""},
	}
	var buf bytes.Buffer
	if err := ogórek.NewEncoderWithConfig(&buf, &ogórek.EncoderConfig{Protocol: 4}).Encode(snap); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "midrun.pickle")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSnapshotCommandMidRun replays the recording writeMidRunFixture
// describes.
func TestSnapshotCommandMidRun(t *testing.T) {
	t.Parallel()
	const mib = int64(1) << 20
	path := writeMidRunFixture(t)
	out, errs, code := run("snapshot", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got report.SnapshotJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.ReplayFrom != "recorded state" || got.StartReservedBytes != 20*mib || got.StartLiveBlocks != 2 {
		t.Errorf("replay from %q, start reserved %d, %d live blocks; want recorded state, %d, 2", got.ReplayFrom, got.StartReservedBytes, got.StartLiveBlocks, 20*mib)
	}
	if got.RecordedSegmentAllocs != 1 || got.ReplaySegmentAllocs != 1 || got.RecordedPeakReservedBytes != 60*mib ||
		got.PeakReservedBytes != 60*mib || got.ReplayReservedBytes != 60*mib || !got.ReplayAgrees {
		t.Errorf("segments %d/%d, peak reserved %d/%d, end %d, agrees %v", got.RecordedSegmentAllocs, got.ReplaySegmentAllocs,
			got.RecordedPeakReservedBytes, got.PeakReservedBytes, got.ReplayReservedBytes, got.ReplayAgrees)
	}
	if got.PeakAllocatedBytes != 54*mib {
		t.Errorf("peak allocated %d, want %d", got.PeakAllocatedBytes, 54*mib)
	}
	out, _, _ = run("snapshot", path)
	if !bytes.Contains([]byte(out), []byte("they agree")) {
		t.Errorf("text output does not say the replay agrees:\n%s", out)
	}
}

// TestSnapshotPrediction sets a prediction beside the mid-run recording.
// The recorded side follows from the fixture (see writeMidRunFixture):
// its events are free X, alloc 6 MiB, alloc 40 MiB, free 40 MiB, alloc 30
// MiB, with allocated 8, 14, 54, 14, 44 MiB and reserved 20, 20, 60, 60,
// 60 MiB after each. The only block both allocated and freed in the
// recording is the 40 MiB one, so forward ends where it is allocated
// (event 2), backward once it is freed (event 3), and the optimizer step
// is event 4. At the allocated peak the live requests are 8 MiB (from
// before the recording), 6 MiB and 40 MiB: two blocks, 14 MiB, in 1–10
// MiB and one, 40 MiB, in 10–100 MiB. The predicted side must be
// estimate's prediction of the same job (which fits its GPU, so its
// bounded device changes nothing).
func TestSnapshotPrediction(t *testing.T) {
	t.Parallel()
	const mib = int64(1) << 20
	path := writeMidRunFixture(t)
	job := []string{"--model", "../../examples/mlp.yaml", "--batch", "4"}
	out, errs, code := run(append([]string{"snapshot", path, "--json"}, job...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got report.SnapshotJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	p := got.Prediction
	if p == nil {
		t.Fatal("no prediction in the output")
	}
	eout, errs, code := run(append([]string{"estimate", "--json", "--alloc-conf", ""}, job...)...)
	if code != 0 {
		t.Fatalf("estimate: exit %d: %s", code, errs)
	}
	var est struct {
		PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
		PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	}
	if err := json.Unmarshal([]byte(eout), &est); err != nil {
		t.Fatal(err)
	}
	o := p.Overall
	if o.RecordedPeakAllocatedBytes != 54*mib || o.RecordedPeakReservedBytes != 60*mib ||
		o.PredictedPeakAllocatedBytes != est.PeakAllocatedBytes || o.PredictedPeakReservedBytes != est.PeakReservedBytes ||
		o.AllocatedDiffBytes != est.PeakAllocatedBytes-54*mib {
		t.Errorf("overall %+v; estimate says %d / %d", o, est.PeakAllocatedBytes, est.PeakReservedBytes)
	}
	if p.PhasesFrom != "allocation pattern" {
		t.Errorf("phases from %q", p.PhasesFrom)
	}
	type ph struct {
		in          bool
		events      int
		alloc, resv int64
	}
	want := map[string]ph{"forward": {true, 3, 54 * mib, 60 * mib}, "backward": {true, 1, 14 * mib, 60 * mib}, "optimizer": {true, 1, 44 * mib, 60 * mib}}
	if len(p.Phases) != 3 {
		t.Fatalf("phases %+v", p.Phases)
	}
	for _, c := range p.Phases {
		w := want[c.Phase]
		if c.InRecording != w.in || c.RecordedEvents != w.events || c.RecordedPeakAllocatedBytes != w.alloc || c.RecordedPeakReservedBytes != w.resv {
			t.Errorf("phase %s: %+v, want %+v", c.Phase, c, w)
		}
		if c.PredictedPeakAllocatedBytes <= 0 {
			t.Errorf("phase %s: no predicted figure", c.Phase)
		}
	}
	classes := map[string][2]int64{"1–10 MiB": {2, 14 * mib}, "10–100 MiB": {1, 40 * mib}}
	var predicted int64
	for _, c := range p.SizeClasses {
		w := classes[c.Class]
		if int64(c.RecordedBlocks) != w[0] || c.RecordedBytes != w[1] || c.DiffBytes != c.PredictedBytes-c.RecordedBytes {
			t.Errorf("size class %s: %+v, want %d blocks, %d bytes", c.Class, c, w[0], w[1])
		}
		predicted += c.PredictedBytes
	}
	var cats int64
	for _, c := range p.PredictedCategories {
		cats += c.Bytes
	}
	if predicted != cats || predicted == 0 {
		t.Errorf("the size classes hold %d predicted bytes, the categories %d", predicted, cats)
	}
	text, _, _ := run(append([]string{"snapshot", path}, job...)...)
	for _, s := range []string{"prediction beside the recording", "optimizer  44.00 MiB", "10–100 MiB"} {
		if !bytes.Contains([]byte(text), []byte(s)) {
			t.Errorf("text output lacks %q:\n%s", s, text)
		}
	}
	// The comparison's heading names the job once: the setup line
	// already starts with the model.
	if n := strings.Count(text, p.Model); n != 1 {
		t.Errorf("the model %q is named %d times, want once:\n%s", p.Model, n, text)
	}
}
