package snapshot

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"

	ogórek "github.com/kisielk/og-rek"
)

// Options control Read.
type Options struct {
	// Frames keeps the stack frames of segments, blocks and trace entries.
	// When false they are dropped while the pickle streams past (they are
	// most of a snapshot's size), and sites are unknown.
	Frames bool
	// MaxBytes caps the input read; 0 means DefaultMaxBytes. Decoded
	// memory is proportional to the input read.
	MaxBytes int64
	// MaxOps and MaxEntries lower the limits of the same names (limits.go)
	// when positive; they never raise them.
	MaxOps, MaxEntries int64
}

// Snapshot is the content of a torch.cuda.memory._dump_snapshot pickle:
// the dict built by torch.cuda.memory._snapshot()
// (torch/csrc/cuda/memory_snapshot.cpp, _memory_snapshot_pickled).
type Snapshot struct {
	// Path is the file it was read from, when read by ReadFile.
	Path string
	// Segments are the allocator's segments at the time of the snapshot,
	// on all devices, sorted by address as PyTorch writes them.
	Segments []Segment
	// Traces holds the recorded allocator events per device
	// ("device_traces"): Traces[d] is the trace of device d. It is empty
	// unless torch.cuda.memory._record_memory_history was enabled, and
	// holds only the most recent max_entries events.
	Traces [][]TraceEntry
	// AllocatorSettings are the allocator's settings (PyTorch 2.1+; zero
	// in older snapshots, see HasAllocatorSettings).
	AllocatorSettings    AllocatorSettings
	HasAllocatorSettings bool
}

// Segment is memory the caching allocator obtained with one cudaMalloc
// (or, with expandable segments, one contiguous mapped range).
type Segment struct {
	Device        int
	Address       int64
	TotalSize     int64 // bytes reserved
	AllocatedSize int64 // bytes in allocated blocks
	ActiveSize    int64 // allocated plus pending frees
	RequestedSize int64 // bytes requested by tensors (unrounded)
	// Stream is the cudaStream_t as an integer; 0 is the default stream.
	Stream int64
	// SegmentType is "large" or "small": the pool, not the size.
	SegmentType string
	// PoolID is segment_pool_id, the owner of a private pool (CUDA
	// graphs); (0, 0) for the default pools.
	PoolID       [2]int64
	IsExpandable bool
	Blocks       []Block
	// Frames is the stack that cudaMalloc'd the segment (Options.Frames).
	Frames []Frame
	Site   string
}

// Block is a piece of a segment.
type Block struct {
	Address       int64
	Size          int64 // rounded size
	RequestedSize int64 // size the tensor asked for
	// State is "active_allocated" (in use), "active_pending_free" (freed,
	// waiting for streams that used it) or "inactive" (free and cached).
	// PyTorch's docstring calls the second "active_awaiting_free"; both
	// are kept as found.
	State  string
	Frames []Frame // stack that allocated it (Options.Frames)
	Site   string  // see TraceEntry.Site
}

// Allocated reports whether the block holds a live tensor.
func (b *Block) Allocated() bool { return b.State == StateActiveAllocated }

// Block states, as written by memory_snapshot.cpp.
const (
	StateActiveAllocated   = "active_allocated"
	StateActivePendingFree = "active_pending_free"
	StateInactive          = "inactive"
)

// Trace entry actions (TraceEntry::Action in CUDACachingAllocator.h).
const (
	ActionAlloc         = "alloc"
	ActionFreeRequested = "free_requested"
	ActionFreeCompleted = "free_completed"
	ActionSegmentAlloc  = "segment_alloc"
	ActionSegmentFree   = "segment_free"
	ActionSegmentMap    = "segment_map"
	ActionSegmentUnmap  = "segment_unmap"
	ActionSnapshot      = "snapshot"
	ActionOOM           = "oom"
	// ActionUserDefined is an annotation (TraceEntry::USER_DEFINED) of
	// releases that record them; like snapshot and oom, not a memory event.
	ActionUserDefined = "user_defined"
)

// TraceEntry is one recorded allocator event.
type TraceEntry struct {
	Action string
	// Addr is the block or segment address; for "oom" it is 0 and
	// DeviceFree holds the free device memory instead.
	Addr       int64
	DeviceFree int64
	// Size: for alloc the requested (unrounded) size; for free_* the
	// block's requested size; for segment_* the segment or mapped bytes;
	// for oom the rounded request; for snapshot the active bytes.
	Size   int64
	Stream int64
	TimeUS int64 // microseconds since the epoch (0 in versions without it)
	Frames []Frame
	// Site names where the event happened: "file:line:function" of the
	// innermost frame outside torch, or "" when frames were not recorded
	// or were dropped (Options.Frames false).
	Site string
}

// Frame is one stack frame (Python or, with stacks="all", C++).
type Frame struct {
	Filename string
	Line     int
	Name     string
}

// AllocatorSettings are the "allocator_settings" of a snapshot.
type AllocatorSettings struct {
	// AllocConf is PYTORCH_CUDA_ALLOC_CONF as last applied.
	AllocConf string
	// MaxSplitSize in bytes; 0 means unlimited (PyTorch stores SIZE_MAX,
	// which memory_snapshot.cpp writes as -1).
	MaxSplitSize               int64
	GarbageCollectionThreshold float64
	ExpandableSegments         bool
	// RoundupPower2Divisions maps the start of each size interval in MiB
	// (the keys "1", "2", "4", ... of the pickle) to its divisions.
	RoundupPower2Divisions    map[int64]int64
	ReleaseLockOnCudaMalloc   bool
	PinnedNumRegisterThreads  int64
	PinnedUseCudaHostRegister bool
	// Raw holds every setting as decoded: string, int64, float64, bool,
	// nil, []any and map[string]any.
	Raw map[string]any
}

// ReadFile reads the snapshot pickle at path, plain or gzip-compressed.
func ReadFile(path string, opts Options) (*Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot: %w", err)
	}
	defer f.Close()
	size := int64(-1)
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		size = st.Size()
	}
	var r io.Reader = f
	br := bufio.NewReaderSize(f, 64<<10)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		// A gzip-compressed snapshot (WriteStrippedGzip writes them). Its
		// decompressed size is unknown: MaxBytes caps what is read.
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("reading snapshot %s: %w", path, err)
		}
		defer zr.Close()
		r, size = zr, -1
	} else {
		r = br
	}
	s, err := read(r, size, opts)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	s.Path = path
	return s, nil
}

// Read reads a snapshot pickle from r, as a stream: the input is never held
// in memory as a whole. When r has a Len method (bytes.Reader,
// strings.Reader) or is a regular file, declared lengths are checked
// against the input's size.
func Read(r io.Reader, opts Options) (*Snapshot, error) {
	size := int64(-1)
	switch v := r.(type) {
	case interface{ Len() int }:
		size = int64(v.Len())
	case *os.File:
		if st, err := v.Stat(); err == nil && st.Mode().IsRegular() {
			if pos, err := v.Seek(0, io.SeekCurrent); err == nil {
				size = st.Size() - pos
			}
		}
	}
	s, err := read(r, size, opts)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot: %w", err)
	}
	return s, nil
}

func read(r io.Reader, size int64, opts Options) (*Snapshot, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	if size > limit {
		return nil, fmt.Errorf("input is %d bytes: %w (%d bytes)", size, ErrTooLarge, limit)
	}
	g := newGuard(bufio.NewReaderSize(r, 64<<10), size, limit, !opts.Frames)
	g.maxOps = MaxOps
	if opts.MaxOps > 0 && opts.MaxOps < MaxOps {
		g.maxOps = opts.MaxOps
	}
	v, err := decode(g)
	if err != nil {
		return nil, err
	}
	c := newConverter(opts, g.off)
	s, err := c.snapshot(v)
	if err != nil {
		return nil, err
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return s, nil
}

// decode runs og-rek over the guarded stream.
func decode(g *guard) (v any, err error) {
	defer func() {
		// og-rek is not expected to panic on any input (FuzzRead checks),
		// but it is third-party code decoding hostile data.
		if p := recover(); p != nil {
			v, err = nil, &PickleError{Offset: g.opOff, Opcode: g.opName, Msg: fmt.Sprintf("internal error in the pickle decoder: %v", p)}
		}
	}()
	dec := ogórek.NewDecoderWithConfig(g, &ogórek.DecoderConfig{})
	v, err = dec.Decode()
	if err != nil {
		var pe *PickleError
		if errors.As(err, &pe) {
			return nil, pe
		}
		if g.err != nil {
			return nil, g.err
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, &PickleError{Offset: g.off, Msg: "truncated: input ends without the STOP opcode"}
		}
		return nil, &PickleError{Offset: g.opOff, Opcode: g.opName, Msg: "decoding", Err: err}
	}
	return v, nil
}
