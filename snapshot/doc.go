// Package snapshot reads PyTorch CUDA memory snapshots and turns their
// recorded allocator events into a trace.Trace.
//
// A snapshot is the pickle that torch.cuda.memory._dump_snapshot writes:
// Python's pickle (protocol 4 by default, with FRAME and MEMOIZE opcodes) of
// the dict returned by torch.cuda.memory._snapshot(), built in
// torch/csrc/cuda/memory_snapshot.cpp (_memory_snapshot_pickled):
//
//	{"segments": [...], "device_traces": [[...] per device], "allocator_settings": {...}}
//
// [Read] and [ReadFile] decode it as a stream with og-rek
// (github.com/kisielk/og-rek) behind a guard that checks every opcode
// against the input: truncated or malformed input fails with the offset
// and opcode involved, declared lengths larger than the rest of the input
// are rejected before anything is allocated, the input is capped at
// Options.MaxBytes, and with Options.Frames false the stack frames — most
// of a snapshot — are dropped while they stream past. The guard also works
// around an og-rek bug that would empty every list referenced more than
// once (see guard.go), which real snapshots do for shared stack traces.
//
// Reading is bounded by the limits in limits.go: the guard counts the
// pickle's work (a memo reference costing the size of what it refers to,
// each time), string lengths and string bytes, and the converter the
// segments, blocks, entries and stacks it builds. The decoded snapshot is
// then range-checked (check.go): sizes, segments that do not overlap,
// blocks inside their segment, allocations of an address not already
// allocated, known actions.
//
// [Snapshot.Convert] (and its shorthands [Snapshot.Trace] and
// [Snapshot.RecordedSegments]) turns one device's recorded events into the
// alloc/free events the allocator simulator replays, keeping the
// allocator's own segment decisions apart for comparison.
//
// [WriteStripped] (and [WriteStrippedGzip]) write a snapshot with its
// allocator record only, stack frames and the paths and names in them
// removed: what the GPU corpus keeps, and what a user can share. ReadFile
// reads such files plain or gzip-compressed.
package snapshot
