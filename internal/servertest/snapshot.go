package servertest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	ogórek "github.com/kisielk/og-rek"
)

// SnapshotFixture is a recorded trace as torch.cuda.memory._dump_snapshot
// writes it (pickle protocol 4): an 11 MiB tensor allocated at
// train.py:10, then a 1.5 MiB one at line 11, both freed. By the
// allocator's rules the 11 MiB request takes a 12 MiB segment and is not
// split (the remainder is exactly 1 MiB), so it counts 12 MiB allocated;
// the 1.5 MiB request finds nothing cached and gets a 20 MiB segment:
// peak allocated 13.5 MiB, peak reserved 32 MiB. With expandable segments
// the large pool maps 20 MiB pages and every remainder splits: both fit in
// one 20 MiB page.
func SnapshotFixture(t testing.TB) []byte {
	t.Helper()
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

// WriteSnapshotFixture writes SnapshotFixture to snap.pickle in a
// temporary directory of the test and returns its path.
func WriteSnapshotFixture(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "snap.pickle")
	if err := os.WriteFile(path, SnapshotFixture(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
