package snapshot

import (
	"fmt"
	"sort"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/trace"
)

// SegmentEvent is a segment_alloc, segment_free, segment_map or
// segment_unmap entry of a recorded trace: a decision of PyTorch's
// allocator, kept to compare a replay of the trace with what really
// happened.
type SegmentEvent struct {
	Action string
	Addr   int64
	Size   int64
	// Stream is the stream number used in the converted trace (see
	// Conversion.Streams).
	Stream int32
	TimeUS int64
	// EventIndex is the number of trace events (Conversion.Trace.Events)
	// before this one: the segment event happened between Events[i-1] and
	// Events[i].
	EventIndex int
	// Entry is the index of the entry in Snapshot.Traces[device].
	Entry int
}

// Marker is a recorded entry that is not a memory event: "oom" (the
// allocator raised OutOfMemoryError; Size is the rounded request,
// DeviceFree the memory the driver reported free), "snapshot" (a snapshot
// was taken; Size is the active bytes), or an action this package does not
// know.
type Marker struct {
	Action     string
	Addr       int64
	Size       int64
	DeviceFree int64
	Stream     int32
	TimeUS     int64
	EventIndex int // as in SegmentEvent
	Entry      int
}

// Conversion is a device's recorded trace turned into a trace.Trace, with
// what was left out of it.
type Conversion struct {
	Trace *trace.Trace
	// Segments are the allocator's own segment events, in order.
	Segments []SegmentEvent
	// Markers are the oom, snapshot and unknown entries, in order.
	Markers []Marker
	// Streams maps the trace's stream numbers to cudaStream_t values:
	// Streams[0] is 0, the default stream; others are numbered in order of
	// appearance.
	Streams []int64
	// PreExisting is the number of Alloc events at the start of the trace
	// for blocks allocated before recording began: blocks freed in the
	// trace without an alloc in it, and blocks that the snapshot shows
	// allocated without an alloc in the trace.
	PreExisting int
	// Warnings describe inconsistencies found and how they were handled.
	Warnings []string

	// Initial is, from ConvertFromState, the allocator's state at the
	// first recorded entry (for alloc.ReplayOptions.Initial): its
	// segments, and its live blocks with the IDs the trace frees them by.
	// Streams are numbered as in Trace.
	Initial []alloc.Segment
	// EntryEvent[i] is the number of Trace events before the one entry i
	// of the device's recorded trace became (or would have become): the
	// events of entries[i:] start there.
	EntryEvent []int
	// InitialSites are the sites (Trace.Sites indexes) of Initial's live
	// blocks, by ID.
	InitialSites map[int64]int32
	// StartReserved is the bytes of Initial's segments: what PyTorch had
	// reserved at the first recorded entry.
	StartReserved int64
	// Deferred counts, from ConvertFromState, the blocks freed at their
	// free_completed rather than at free_requested: freed while another
	// stream still used them, and held by the allocator until then.
	Deferred int
	// Released counts the trace.EmptyCache events ConvertFromState put
	// where the recording shows segments given back (segment_free,
	// segment_unmap): empty_cache, or a cudaMalloc that failed and made
	// the allocator free its cache and retry (release_cached_blocks).
	Released int
}

// RecordedReserved returns the bytes PyTorch had reserved at the first
// recorded entry, at most during the trace, and at its end, from
// StartReserved and the recorded segment events.
func (c *Conversion) RecordedReserved() (start, peak, end int64) {
	start, peak, end = c.StartReserved, c.StartReserved, c.StartReserved
	for _, e := range c.Segments {
		switch e.Action {
		case ActionSegmentAlloc, ActionSegmentMap:
			end += e.Size
		case ActionSegmentFree, ActionSegmentUnmap:
			end -= e.Size
		}
		peak = max(peak, end)
	}
	return start, peak, end
}

// Trace converts the recorded trace of device to a trace.Trace; see
// Convert.
func (s *Snapshot) Trace(device int) (*trace.Trace, error) {
	c, err := s.Convert(device)
	if err != nil {
		return nil, err
	}
	return c.Trace, nil
}

// RecordedSegments returns the segment events recorded for device, or nil
// if the device has none.
func (s *Snapshot) RecordedSegments(device int) []SegmentEvent {
	c, err := s.Convert(device)
	if err != nil {
		return nil
	}
	return c.Segments
}

// unknownSite names events without frames.
const unknownSite = "unknown"

// Convert turns the recorded trace of device into a trace.Trace:
//
//   - alloc becomes trace.Alloc with the entry's (unrounded) size; its ID is
//     fresh for every allocation, since PyTorch reuses addresses;
//   - free_requested becomes trace.Free: PyTorch lowers allocated bytes
//     there; free_completed (the block becoming reusable once other streams
//     are done with it) is only checked;
//   - segment_* entries are the allocator's decisions, not requests; they
//     go to Segments for comparison with a replay;
//   - oom, snapshot and unknown entries go to Markers;
//   - blocks allocated before the ring buffer's first entry get an Alloc at
//     the start, in address order, so that the trace is valid and its
//     memory is right: those freed in the trace (size from the free entry)
//     and those the snapshot shows allocated that the trace never touched
//     (size from the block's requested size).
//
// Events have Category trace.Other (a snapshot does not know what a block
// holds), Phase trace.Setup and Step 0. Sites are the entries' Site, or
// "unknown". Streams are renumbered (see Conversion.Streams).
//
// A device with segments but no recorded entries yields the Allocs of its
// allocated blocks: the state at the time of the snapshot.
func (s *Snapshot) Convert(device int) (*Conversion, error) {
	return s.convert(device, nil)
}

// ConvertFromState is Convert for a replay that starts where the
// recording started: instead of Allocs at the start for blocks allocated
// before the first entry, Conversion.Initial holds the allocator's
// segments and live blocks at the first entry, rebuilt from the
// snapshot's segments by undoing every entry from the last to the first
// (see newStartState). cfg is the allocator configuration the recording
// ran with; it rounds the sizes of blocks the trace frees but never
// allocates. Where the recording shows segments given back, the trace
// gets a trace.EmptyCache event (Conversion.Released), so that a replay
// gives them back too.
//
// It fails when the rebuilt state is not one the caching allocator can
// be in (alloc.Allocator.Restore refuses it); Convert still works then.
func (s *Snapshot) ConvertFromState(device int, cfg alloc.Config) (*Conversion, error) {
	return s.convert(device, &cfg)
}

func (s *Snapshot) convert(device int, cfg *alloc.Config) (*Conversion, error) {
	if device < 0 {
		return nil, fmt.Errorf("device %d: no such device", device)
	}
	var entries []TraceEntry
	if device < len(s.Traces) {
		entries = s.Traces[device]
	}
	hasSegments := false
	for i := range s.Segments {
		if s.Segments[i].Device == device {
			hasSegments = true
			break
		}
	}
	if len(entries) == 0 && !hasSegments {
		if device >= len(s.Traces) {
			return nil, fmt.Errorf("device %d: the snapshot has neither segments nor a trace for it (it has traces for %d device(s))", device, len(s.Traces))
		}
	}

	label := "snapshot"
	if s.Path != "" {
		label += " " + s.Path
	}
	c := &Conversion{
		Trace:   &trace.Trace{Label: fmt.Sprintf("%s, device %d", label, device)},
		Streams: []int64{0},
	}
	streams := map[int64]int32{0: 0}
	stream := func(raw int64) int32 {
		if n, ok := streams[raw]; ok {
			return n
		}
		n := int32(len(c.Streams))
		streams[raw] = n
		c.Streams = append(c.Streams, raw)
		return n
	}
	site := func(name string) int32 {
		if name == "" {
			name = unknownSite
		}
		return c.Trace.Site(name)
	}

	// Pass 1: find blocks allocated before the first entry, and check
	// frees.
	type pre struct {
		addr, size int64
		stream     int64
		site       string
		entry      int // free_requested entry index, -1 for live blocks
	}
	var pres []pre
	live := make(map[int64]bool)    // allocated in the trace, not yet freed
	touched := make(map[int64]bool) // address seen in alloc or free_requested
	pending := make(map[int64]int)  // free_requested without free_completed
	var dupAllocs, dupFrees, unmatchedCompleted int
	for i := range entries {
		e := &entries[i]
		switch e.Action {
		case ActionAlloc:
			if live[e.Addr] {
				dupAllocs++
			}
			live[e.Addr] = true
			touched[e.Addr] = true
		case ActionFreeRequested:
			switch {
			case live[e.Addr]:
				delete(live, e.Addr)
			case !touched[e.Addr]:
				pres = append(pres, pre{e.Addr, e.Size, e.Stream, e.Site, i})
			default:
				dupFrees++
			}
			touched[e.Addr] = true
			pending[e.Addr]++
		case ActionFreeCompleted:
			if pending[e.Addr] > 0 {
				pending[e.Addr]--
				if pending[e.Addr] == 0 {
					delete(pending, e.Addr)
				}
			} else {
				// Its free_requested came before the first entry.
				unmatchedCompleted++
			}
		}
	}
	var skippedLive int
	for i := range s.Segments {
		seg := &s.Segments[i]
		if seg.Device != device {
			continue
		}
		for j := range seg.Blocks {
			b := &seg.Blocks[j]
			if !b.Allocated() || live[b.Address] {
				continue
			}
			if touched[b.Address] {
				skippedLive++
				continue
			}
			pres = append(pres, pre{b.Address, b.RequestedSize, seg.Stream, b.Site, -1})
		}
	}
	sort.SliceStable(pres, func(i, j int) bool { return pres[i].addr < pres[j].addr })

	nextID := int64(1)
	ids := make(map[int64]int64) // live address -> block ID
	preByEntry := make(map[int]int64)
	pendingAtStart := make(map[int64]bool)
	if cfg != nil {
		st := newStartState(s, device, entries, *cfg)
		c.Warnings = append(c.Warnings, st.warnings...)
		c.StartReserved = st.reserved()
		bi := 0
		type group struct {
			stream int64
			small  bool
		}
		lowest := map[group]bool{}
		for _, g := range st.segs {
			seg := alloc.Segment{Address: g.addr, Size: g.size, Stream: stream(g.stream), Pool: alloc.LargePool, Expandable: g.expandable}
			if g.small {
				seg.Pool = alloc.SmallPool
			}
			if k := (group{g.stream, g.small}); g.expandable && !lowest[k] {
				// st.segs is by address: this is the group's lowest range.
				lowest[k] = true
				seg.ReservedFrom = st.reservedFrom(entries, g.stream, g.small, g.addr)
			}
			for bi < len(st.blks) && st.blks[bi].addr < g.end() {
				b := st.blks[bi]
				bi++
				if b.addr < g.addr {
					continue // cannot be: undoFree places blocks in segments
				}
				seg.Blocks = append(seg.Blocks, alloc.Block{Address: b.addr, Size: b.size, Requested: b.requested, Allocated: true, ID: nextID})
				ids[b.addr] = nextID
				if c.InitialSites == nil {
					c.InitialSites = make(map[int64]int32)
				}
				c.InitialSites[nextID] = site(b.site)
				if b.requestedBefore {
					pendingAtStart[b.addr] = true
				}
				nextID++
			}
			c.Initial = append(c.Initial, seg)
		}
		if err := alloc.New(*cfg, alloc.Device{}).Restore(c.Initial); err != nil {
			return nil, fmt.Errorf("device %d: the state rebuilt at the first recorded entry: %w", device, err)
		}
		pres = nil
	}
	// With the state rebuilt, a block whose free was requested while
	// another stream still used it (record_stream) is held until its
	// free_completed, as the caching allocator holds it (free puts it
	// aside until the streams' events complete, process_events then
	// frees it): allocations in between cannot reuse it. Frees completed
	// at once are freed at free_requested, where PyTorch lowers its
	// allocated bytes.
	deferred := map[int]bool{}
	if cfg != nil {
		open := map[int64]int{}
		allocsBefore := make([]int, len(entries)+1)
		for i := range entries {
			allocsBefore[i+1] = allocsBefore[i]
			switch e := &entries[i]; e.Action {
			case ActionAlloc:
				allocsBefore[i+1]++
			case ActionFreeRequested:
				open[e.Addr] = i
			case ActionFreeCompleted:
				if r, ok := open[e.Addr]; ok {
					delete(open, e.Addr)
					if allocsBefore[i] > allocsBefore[r+1] {
						deferred[r] = true
					}
				}
			}
		}
		for _, r := range open {
			deferred[r] = true // still pending when the snapshot was taken
		}
	}
	held := map[int64]int64{} // address -> block ID freed at free_completed
	lastEmpty := false
	add := func(e trace.Event) {
		c.Trace.Add(e)
		lastEmpty = e.Action == trace.EmptyCache
	}
	for _, p := range pres {
		id := nextID
		nextID++
		add(trace.Event{
			Action: trace.Alloc, Category: trace.Other, Phase: trace.Setup,
			Stream: stream(p.stream), Site: site(p.site), ID: id, Size: max(p.size, 0),
		})
		if p.entry >= 0 {
			preByEntry[p.entry] = id
		}
	}
	c.PreExisting = len(pres)

	// Pass 2: the events.
	c.EntryEvent = make([]int, len(entries))
	for i := range entries {
		e := &entries[i]
		c.EntryEvent[i] = len(c.Trace.Events)
		switch e.Action {
		case ActionAlloc:
			if old, ok := ids[e.Addr]; ok {
				// An alloc at a live address: its free was lost. Free the
				// old block so the trace stays valid.
				add(trace.Event{
					Action: trace.Free, Category: trace.Other, Phase: trace.Setup,
					Stream: stream(e.Stream), Site: site(e.Site), ID: old,
				})
			}
			id := nextID
			nextID++
			ids[e.Addr] = id
			add(trace.Event{
				Action: trace.Alloc, Category: trace.Other, Phase: trace.Setup,
				Stream: stream(e.Stream), Site: site(e.Site), ID: id, Size: max(e.Size, 0),
			})
		case ActionFreeRequested:
			id, ok := ids[e.Addr]
			if ok {
				delete(ids, e.Addr)
			} else if id, ok = preByEntry[i]; !ok {
				continue // a second free of the same block; counted above
			}
			if deferred[i] {
				held[e.Addr] = id
				c.Deferred++
				continue
			}
			add(trace.Event{
				Action: trace.Free, Category: trace.Other, Phase: trace.Setup,
				Stream: stream(e.Stream), Site: site(e.Site), ID: id,
			})
		case ActionFreeCompleted:
			if id, ok := held[e.Addr]; ok {
				delete(held, e.Addr)
				add(trace.Event{
					Action: trace.Free, Category: trace.Other, Phase: trace.Setup,
					Stream: stream(e.Stream), Site: site(e.Site), ID: id,
				})
				break
			}
			// A block whose free was requested before the first entry
			// becomes reusable here.
			if id, ok := ids[e.Addr]; ok && pendingAtStart[e.Addr] {
				delete(ids, e.Addr)
				delete(pendingAtStart, e.Addr)
				add(trace.Event{
					Action: trace.Free, Category: trace.Other, Phase: trace.Setup,
					Stream: stream(e.Stream), Site: site(e.Site), ID: id,
				})
			}
		case ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap:
			if cfg != nil && (e.Action == ActionSegmentFree || e.Action == ActionSegmentUnmap) && !lastEmpty {
				// PyTorch gives segments back only in
				// release_cached_blocks (empty_cache, or a failed
				// cudaMalloc's retry), release_available_cached_blocks
				// and the garbage collector; the replay's device has
				// no limit, so it releases where the recording did.
				add(trace.Event{Action: trace.EmptyCache, Category: trace.Other, Phase: trace.Setup})
				c.Released++
			}
			c.Segments = append(c.Segments, SegmentEvent{
				Action: e.Action, Addr: e.Addr, Size: e.Size, Stream: stream(e.Stream),
				TimeUS: e.TimeUS, EventIndex: len(c.Trace.Events), Entry: i,
			})
		default:
			c.Markers = append(c.Markers, Marker{
				Action: e.Action, Addr: e.Addr, Size: e.Size, DeviceFree: e.DeviceFree,
				Stream: stream(e.Stream), TimeUS: e.TimeUS, EventIndex: len(c.Trace.Events), Entry: i,
			})
		}
	}

	warn := func(n int, format string) {
		if n > 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf(format, n))
		}
	}
	warn(dupAllocs, "%d alloc(s) at an address that was already allocated: a free is missing; the earlier block is freed there")
	warn(dupFrees, "%d free_requested entr(ies) for a block already freed: ignored")
	if cfg != nil {
		// The rebuilt state holds those blocks until free_completed.
		unmatchedCompleted = 0
	}
	warn(unmatchedCompleted, "%d free_completed entr(ies) without free_requested: their free was requested before the first recorded entry")
	warn(len(pending), "%d block(s) freed but not completed at the end (active_pending_free: still in use by another stream)")
	warn(skippedLive, "%d block(s) allocated in the snapshot but freed at the end of the trace: left out")
	if err := validate(c); err != nil {
		return nil, fmt.Errorf("device %d: converted trace is invalid: %w", device, err)
	}
	return c, nil
}

// validate is trace.Validate with the blocks of c.Initial live at the
// start.
func validate(c *Conversion) error {
	if len(c.Initial) == 0 {
		return c.Trace.Validate()
	}
	live := make(map[int64]bool)
	for _, g := range c.Initial {
		for _, b := range g.Blocks {
			live[b.ID] = true
		}
	}
	for i, e := range c.Trace.Events {
		switch e.Action {
		case trace.Alloc:
			if live[e.ID] {
				return fmt.Errorf("event %d: block %d allocated twice", i, e.ID)
			}
			live[e.ID] = true
		case trace.Free:
			if !live[e.ID] {
				return fmt.Errorf("event %d: free of block %d that is not allocated", i, e.ID)
			}
			delete(live, e.ID)
		}
	}
	return nil
}
