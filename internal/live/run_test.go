package live

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/servertest"
	"github.com/batchfit/batchfit/record"
)

// When the recorder dumped a snapshot at the failure, the explanation
// replays it: the figures internal/cli's TestSnapshotCommand works out
// by hand.
func TestRunOOMSnapshot(t *testing.T) {
	snap := servertest.WriteSnapshotFixture(t)
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
