package snapshot

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sort"
)

// WriteStripped writes s as a snapshot pickle that keeps what the caching
// allocator did and nothing about the program or the machine that ran it:
// every segment (device, address, sizes, stream, pool, type, blocks with
// their addresses, sizes and states), every trace entry (action, address,
// size, stream, time, free device memory of an oom) and the allocator
// settings; stack frames are written as empty lists, so that file paths,
// function names and the user names inside paths are gone, and fields this
// package does not read (PyTorch's newer "compile_context" and
// "user_metadata" strings among them) are left out.
//
// The output is protocol 2, without memo, in a fixed key order, so the same
// snapshot always gives the same bytes; Read (and ReadFile, which also
// takes it gzip-compressed) reads it back to a Snapshot equal to s with its
// frames and sites dropped.
func WriteStripped(w io.Writer, s *Snapshot) error {
	p := &pickler{w: bufio.NewWriterSize(w, 64<<10)}
	p.op(0x80, 2) // PROTO 2
	p.op(opEmptyDict, opMark)
	p.str("segments")
	p.op(opEmptyList)
	p.list(len(s.Segments), func(i int) { p.segment(&s.Segments[i]) })
	p.str("device_traces")
	p.op(opEmptyList)
	p.list(len(s.Traces), func(d int) {
		p.op(opEmptyList)
		p.list(len(s.Traces[d]), func(i int) { p.entry(&s.Traces[d][i]) })
	})
	if s.HasAllocatorSettings {
		p.str("allocator_settings")
		p.value(settingsValue(&s.AllocatorSettings))
	}
	p.op(opSetItems, opStop)
	if p.err != nil {
		return fmt.Errorf("writing stripped snapshot: %w", p.err)
	}
	if err := p.w.Flush(); err != nil {
		return fmt.Errorf("writing stripped snapshot: %w", err)
	}
	return nil
}

// DropFrames removes the stack frames and sites of every segment, block
// and trace entry: what Options.Frames false gives, for a snapshot read
// with them.
func (s *Snapshot) DropFrames() {
	for i := range s.Segments {
		seg := &s.Segments[i]
		seg.Frames, seg.Site = nil, ""
		for j := range seg.Blocks {
			seg.Blocks[j].Frames, seg.Blocks[j].Site = nil, ""
		}
	}
	for d := range s.Traces {
		for i := range s.Traces[d] {
			s.Traces[d][i].Frames, s.Traces[d][i].Site = nil, ""
		}
	}
}

// WriteStrippedGzip is WriteStripped compressed with gzip (best
// compression): recordings are mostly repeated keys and small integers and
// shrink about tenfold.
func WriteStrippedGzip(w io.Writer, s *Snapshot) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestCompression)
	if err != nil {
		return fmt.Errorf("writing stripped snapshot: %w", err)
	}
	if err := WriteStripped(zw, s); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("writing stripped snapshot: %w", err)
	}
	return nil
}

// settingsValue rebuilds the allocator_settings dict from what was decoded:
// Raw as found, with max_split_size written as memory_snapshot.cpp writes
// an unlimited one (-1) when the decoder saw a Python long there.
func settingsValue(as *AllocatorSettings) map[string]any {
	out := make(map[string]any, len(as.Raw)+1)
	for k, v := range as.Raw {
		out[k] = v
	}
	if _, ok := out["max_split_size"]; ok && as.MaxSplitSize == 0 {
		out["max_split_size"] = int64(-1)
	}
	return out
}

// Pickle opcodes (CPython's Lib/pickle.py) used by the writer.
const (
	opMark       = '('
	opStop       = '.'
	opEmptyDict  = '}'
	opEmptyList  = ']'
	opAppends    = 'e'
	opSetItems   = 'u'
	opNone       = 'N'
	opNewTrue    = 0x88
	opNewFalse   = 0x89
	opBinInt     = 'J'
	opLong1      = 0x8a
	opBinFloat   = 'G'
	opBinUnicode = 'X'
	opTuple2     = 0x86
)

// appendsBatch is how many items one MARK ... APPENDS or SETITEMS holds,
// as CPython's pickler batches them.
const appendsBatch = 1000

type pickler struct {
	w   *bufio.Writer
	err error
}

func (p *pickler) op(b ...byte) {
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
}

func (p *pickler) str(s string) {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(s)))
	p.op(opBinUnicode)
	p.op(n[:]...)
	if p.err == nil {
		_, p.err = p.w.WriteString(s)
	}
}

func (p *pickler) int(v int64) {
	if v >= math.MinInt32 && v <= math.MaxInt32 {
		var n [4]byte
		binary.LittleEndian.PutUint32(n[:], uint32(int32(v)))
		p.op(opBinInt)
		p.op(n[:]...)
		return
	}
	// LONG1: little-endian two's complement, 8 bytes always suffice.
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(v))
	p.op(opLong1, 8)
	p.op(n[:]...)
}

func (p *pickler) bool(b bool) {
	if b {
		p.op(opNewTrue)
	} else {
		p.op(opNewFalse)
	}
}

// list writes the items of the list just opened (EMPTY_LIST written) in
// batches of MARK ... APPENDS.
func (p *pickler) list(n int, item func(int)) {
	for i := 0; i < n; i += appendsBatch {
		p.op(opMark)
		for j := i; j < min(n, i+appendsBatch); j++ {
			item(j)
		}
		p.op(opAppends)
	}
}

// dict writes a dict of string keys in the order given.
func (p *pickler) dict(keys []string, val func(string)) {
	p.op(opEmptyDict)
	if len(keys) == 0 {
		return
	}
	p.op(opMark)
	for _, k := range keys {
		p.str(k)
		val(k)
	}
	p.op(opSetItems)
}

func (p *pickler) value(v any) {
	switch x := v.(type) {
	case nil:
		p.op(opNone)
	case bool:
		p.bool(x)
	case int64:
		p.int(x)
	case float64:
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], math.Float64bits(x))
		p.op(opBinFloat)
		p.op(n[:]...)
	case string:
		p.str(x)
	case []any:
		p.op(opEmptyList)
		p.list(len(x), func(i int) { p.value(x[i]) })
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		p.dict(keys, func(k string) { p.value(x[k]) })
	default:
		if p.err == nil {
			p.err = fmt.Errorf("allocator_settings: cannot write a %T", v)
		}
	}
}

var (
	segmentKeys = []string{"device", "address", "total_size", "allocated_size", "active_size",
		"requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
	blockKeys = []string{"address", "size", "requested_size", "state", "frames"}
	entryKeys = []string{"action", "addr", "size", "stream", "time_us", "frames"}
	oomKeys   = []string{"action", "device_free", "size", "stream", "time_us", "frames"}
)

func (p *pickler) segment(s *Segment) {
	p.dict(segmentKeys, func(k string) {
		switch k {
		case "device":
			p.int(int64(s.Device))
		case "address":
			p.int(s.Address)
		case "total_size":
			p.int(s.TotalSize)
		case "allocated_size":
			p.int(s.AllocatedSize)
		case "active_size":
			p.int(s.ActiveSize)
		case "requested_size":
			p.int(s.RequestedSize)
		case "stream":
			p.int(s.Stream)
		case "segment_type":
			p.str(s.SegmentType)
		case "segment_pool_id":
			p.int(s.PoolID[0])
			p.int(s.PoolID[1])
			p.op(opTuple2)
		case "is_expandable":
			p.bool(s.IsExpandable)
		case "frames":
			p.op(opEmptyList)
		case "blocks":
			p.op(opEmptyList)
			p.list(len(s.Blocks), func(i int) { p.block(&s.Blocks[i]) })
		}
	})
}

func (p *pickler) block(b *Block) {
	p.dict(blockKeys, func(k string) {
		switch k {
		case "address":
			p.int(b.Address)
		case "size":
			p.int(b.Size)
		case "requested_size":
			p.int(b.RequestedSize)
		case "state":
			p.str(b.State)
		case "frames":
			p.op(opEmptyList)
		}
	})
}

func (p *pickler) entry(e *TraceEntry) {
	keys := entryKeys
	if e.Action == ActionOOM {
		keys = oomKeys
	}
	p.dict(keys, func(k string) {
		switch k {
		case "action":
			p.str(e.Action)
		case "addr":
			p.int(e.Addr)
		case "device_free":
			p.int(e.DeviceFree)
		case "size":
			p.int(e.Size)
		case "stream":
			p.int(e.Stream)
		case "time_us":
			p.int(e.TimeUS)
		case "frames":
			p.op(opEmptyList)
		}
	})
}
