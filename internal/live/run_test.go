package live

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/record"
	ogórek "github.com/kisielk/og-rek"
)

// snapshotFixture is the recorded trace internal/cli's TestSnapshotCommand
// describes, as torch.cuda.memory._dump_snapshot writes it (pickle
// protocol 4): 11 MiB allocated at train.py:10, 1.5 MiB at line 11, both
// freed.
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

// When the recorder dumped a snapshot at the failure, the explanation
// replays it: the figures internal/cli's TestSnapshotCommand works out
// by hand.
func TestRunOOMSnapshot(t *testing.T) {
	snap := writeSnapshotFixture(t)
	msg := "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 74.10 GiB is allocated by PyTorch, and 3.12 GiB is reserved by PyTorch but unallocated."
	s := record.Summary{Started: true, OOM: &record.Record{Kind: record.KindOOM, Message: msg, Snapshot: snap}}
	var b strings.Builder
	writeRunOOM(&b, &jobFlags{}, map[string]bool{}, s, snap)
	for _, want := range []string{
		"replayed: peak allocated 13.50 MiB, peak reserved 32.00 MiB, at most 32.00 MiB reserved but unallocated; with expandable_segments:True 20.00 MiB reserved",
		"11.00 MiB\ttrain.py:10:forward",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in:\n%s", want, b.String())
		}
	}
	s.OOM.Snapshot, s.OOM.SnapshotError = "", "RuntimeError: snapshots need the allocator's history"
	b.Reset()
	writeRunOOM(&b, &jobFlags{}, map[string]bool{}, s, snap)
	if !strings.Contains(b.String(), "no snapshot: RuntimeError: snapshots need the allocator's history") {
		t.Errorf("snapshot error not shown:\n%s", b.String())
	}
}
