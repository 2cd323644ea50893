package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

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
	const mib = 1 << 20
	path := writeSnapshotFixture(t)
	out, errs, code := run("snapshot", path, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got SnapshotJSON
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

// snapshotFixture is the recorded trace TestSnapshotCommand describes, as
// torch.cuda.memory._dump_snapshot writes it (pickle protocol 4).
func snapshotFixture(t testing.TB) []byte {
	const mib = 1 << 20
	frame := func(line int) []any {
		return []any{map[any]any{"filename": "train.py", "line": int64(line), "name": "forward"}}
	}
	entry := func(action string, addr, size int64, line int) map[any]any {
		return map[any]any{"action": action, "addr": addr, "size": size, "stream": int64(0), "time_us": int64(line), "frames": frame(line)}
	}
	snap := map[any]any{
		"segments": []any{},
		"device_traces": []any{[]any{
			entry("alloc", 2<<30, 11*mib, 10),
			entry("alloc", 1<<30, 3*mib/2, 11),
			entry("free_requested", 1<<30, 3*mib/2, 12),
			entry("free_completed", 1<<30, 3*mib/2, 12),
			entry("free_requested", 2<<30, 11*mib, 13),
			entry("free_completed", 2<<30, 11*mib, 13),
		}},
		"allocator_settings": map[any]any{"PYTORCH_CUDA_ALLOC_CONF": ""},
	}
	var b bytes.Buffer
	if err := ogórek.NewEncoderWithConfig(&b, &ogórek.EncoderConfig{Protocol: 4}).Encode(snap); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func writeSnapshotFixture(t testing.TB) string {
	path := filepath.Join(t.TempDir(), "snap.pickle")
	if err := os.WriteFile(path, snapshotFixture(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
