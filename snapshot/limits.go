package snapshot

// Limits on what Read and ReadFile accept. A memory snapshot is plain data
// whose size follows the job: a segment and its blocks for each cudaMalloc,
// and one trace entry for each allocator event kept by
// torch.cuda.memory._record_memory_history(max_entries=...). The limits are
// far above what real snapshots hold and bound the work and memory of a
// hostile one (README.md, "Bounds", lists them).
const (
	// MaxOps is the most pickle work a snapshot may cost: every opcode
	// counts one, and a memo reference (GET, BINGET, LONG_BINGET, DUP)
	// counts the size of what it refers to — the objects decoded to build
	// it, recursively — each time. A reference is cheap for the pickle
	// decoder but not for what is built from it: 20 million references to
	// one trace-entry dict pickle into 40 MB (39 KB gzip-compressed) and
	// would become 20 million entries. References that are the value of a
	// "frames" key count one, because a shared stack is converted once
	// (converter.framesField). A real trace entry costs about 16 opcodes
	// (EMPTY_DICT, MARK, six keys by BINGET, six values, SETITEMS, memo),
	// so MaxOps admits MaxEntries entries twice over.
	MaxOps = 1 << 26
	// MaxString is the longest str or bytes value (its declared length, or
	// a text opcode's line): a snapshot's strings are file and function
	// names and PYTORCH_CUDA_ALLOC_CONF.
	MaxString = 1 << 20
	// MaxText is the most str, bytes and text-argument data of a snapshot
	// altogether (the pickler writes each distinct string once and refers
	// to it by memo afterwards).
	MaxText = 256 << 20
	// MaxEntries is the most segments, blocks, trace entries and distinct
	// stack frames a snapshot may hold altogether: twenty times the
	// max_entries=100000 of PyTorch's documented example of
	// _record_memory_history. A converted entry takes about 100 bytes.
	MaxEntries = 1 << 21

	// maxOpBytes is the most bytes of an opcode besides the data counted
	// by MaxText: BINFLOAT and FRAME (opcode and 8 bytes); length-prefixed
	// opcodes have at most 1 + 8 bytes before their data.
	maxOpBytes = 9

	// DefaultMaxBytes is the input size limit when Options.MaxBytes is 0,
	// and the decompression allowance of a gzip-compressed snapshot (whose
	// decompressed size is unknown until read). It is the largest pickle
	// the limits above admit: MaxOps opcodes of at most maxOpBytes bytes
	// each besides their data, and MaxText bytes of data:
	// 2^26 × 9 + 2^28 = 603,979,776 + 268,435,456 = 872,415,232 bytes
	// (832 MiB).
	DefaultMaxBytes = MaxOps*maxOpBytes + MaxText
)
