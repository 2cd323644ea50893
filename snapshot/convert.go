package snapshot

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"

	ogórek "github.com/kisielk/og-rek"
)

// converter turns og-rek's decoded values into a Snapshot. It follows the
// layout written by torch/csrc/cuda/memory_snapshot.cpp and checks every
// type, so hostile input yields an error naming the path of the bad value.
//
// og-rek's values can share structure and even contain cycles (a dict
// holding itself); the converter only walks the fixed schema, so it never
// recurses without bound, and it converts each shared frames list once.
// budget caps the number of segments, blocks, trace entries and frames it
// builds at the number of input bytes: every one of them needs at least a
// byte of pickle, so a small input cannot expand into a huge Snapshot
// through shared references.
type converter struct {
	opts   Options
	budget int64
	// entries counts segments, blocks, trace entries and distinct frames
	// against maxEntries (MaxEntries).
	entries, maxEntries int64
	strs                map[string]string
	frames              map[listKey]framesInfo
}

// listKey identifies a decoded list: og-rek decodes every reference to one
// memoized Python list to a slice with the same backing array.
type listKey struct {
	p *any
	n int
}

type framesInfo struct {
	frames []Frame
	site   string
}

func newConverter(opts Options, inputBytes int64) *converter {
	maxEntries := int64(MaxEntries)
	if opts.MaxEntries > 0 && opts.MaxEntries < maxEntries {
		maxEntries = opts.MaxEntries
	}
	return &converter{
		opts:       opts,
		maxEntries: maxEntries,
		budget:     inputBytes + 64,
		strs:       make(map[string]string),
		frames:     make(map[listKey]framesInfo),
	}
}

func (c *converter) spend(n int, path string) error {
	c.entries += int64(n)
	if c.entries > c.maxEntries {
		return fmt.Errorf("%s: the snapshot holds more than %d segments, blocks, trace entries and stacks (snapshot.MaxEntries)", path, c.maxEntries)
	}
	c.budget -= int64(n)
	if c.budget < 0 {
		return fmt.Errorf("%s: the snapshot holds more objects than its input has bytes (shared references?)", path)
	}
	return nil
}

func (c *converter) intern(s string) string {
	if t, ok := c.strs[s]; ok {
		return t
	}
	c.strs[s] = s
	return s
}

func (c *converter) snapshot(v any) (*Snapshot, error) {
	top, ok := v.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("top-level object is a %s, expected the dict written by torch.cuda.memory._dump_snapshot (keys \"segments\", \"device_traces\"); torch.cuda.memory_snapshot() returns only a list of segments, save torch.cuda.memory._snapshot() instead", pyType(v))
	}
	s := &Snapshot{}
	segs, err := list(top, "segments", "snapshot", true)
	if err != nil {
		return nil, err
	}
	if err := c.spend(len(segs), "segments"); err != nil {
		return nil, err
	}
	s.Segments = make([]Segment, len(segs))
	for i, sv := range segs {
		if err := c.segment(&s.Segments[i], sv, i); err != nil {
			return nil, err
		}
	}
	traces, err := list(top, "device_traces", "snapshot", true)
	if err != nil {
		return nil, err
	}
	s.Traces = make([][]TraceEntry, len(traces))
	for d, tv := range traces {
		path := fmt.Sprintf("device_traces[%d]", d)
		entries, ok := tv.([]any)
		if !ok {
			return nil, fmt.Errorf("%s is a %s, expected a list", path, pyType(tv))
		}
		if err := c.spend(len(entries), path); err != nil {
			return nil, err
		}
		s.Traces[d] = make([]TraceEntry, len(entries))
		for i, ev := range entries {
			if err := c.entry(&s.Traces[d][i], ev, d, i); err != nil {
				return nil, err
			}
		}
	}
	if sv, ok := top["allocator_settings"]; ok {
		if err := c.settings(&s.AllocatorSettings, sv); err != nil {
			return nil, err
		}
		s.HasAllocatorSettings = true
	}
	return s, nil
}

func (c *converter) segment(seg *Segment, v any, i int) error {
	path := func() string { return fmt.Sprintf("segments[%d]", i) }
	d, ok := v.(map[any]any)
	if !ok {
		return fmt.Errorf("%s is a %s, expected a dict", path(), pyType(v))
	}
	var err error
	ints := []struct {
		key      string
		dst      *int64
		required bool
	}{
		{"address", &seg.Address, true},
		{"total_size", &seg.TotalSize, true},
		{"allocated_size", &seg.AllocatedSize, false},
		{"active_size", &seg.ActiveSize, false},
		{"requested_size", &seg.RequestedSize, false},
		{"stream", &seg.Stream, false},
	}
	for _, f := range ints {
		if *f.dst, err = intField(d, f.key, path, f.required); err != nil {
			return err
		}
	}
	dev, err := intField(d, "device", path, true)
	if err != nil {
		return err
	}
	if dev < 0 || dev > 1<<20 {
		return fmt.Errorf("%s: device %d out of range", path(), dev)
	}
	seg.Device = int(dev)
	if seg.SegmentType, err = strField(d, "segment_type", path, false); err != nil {
		return err
	}
	seg.SegmentType = c.intern(seg.SegmentType)
	if seg.IsExpandable, err = boolField(d, "is_expandable", path); err != nil {
		return err
	}
	if pv, ok := d["segment_pool_id"]; ok {
		t, ok := pv.(ogórek.Tuple)
		if !ok || len(t) != 2 {
			return fmt.Errorf("%s: \"segment_pool_id\" is a %s, expected a tuple of two ints", path(), pyType(pv))
		}
		for k := range t {
			n, ok := toInt(t[k])
			if !ok {
				return fmt.Errorf("%s: \"segment_pool_id\" holds a %s, expected an int", path(), pyType(t[k]))
			}
			seg.PoolID[k] = n
		}
	}
	if seg.Frames, seg.Site, err = c.framesField(d, path); err != nil {
		return err
	}
	blocks, err := list(d, "blocks", path(), true)
	if err != nil {
		return err
	}
	if err := c.spend(len(blocks), path()); err != nil {
		return err
	}
	seg.Blocks = make([]Block, len(blocks))
	// Older versions wrote no block address; blocks tile the segment in
	// order (_memory_viz.py computes addresses the same way).
	addr := seg.Address
	for j, bv := range blocks {
		b := &seg.Blocks[j]
		bpath := func() string { return fmt.Sprintf("segments[%d].blocks[%d]", i, j) }
		bd, ok := bv.(map[any]any)
		if !ok {
			return fmt.Errorf("%s is a %s, expected a dict", bpath(), pyType(bv))
		}
		if b.Size, err = intField(bd, "size", bpath, true); err != nil {
			return err
		}
		b.Address = addr
		if _, ok := bd["address"]; ok {
			if b.Address, err = intField(bd, "address", bpath, true); err != nil {
				return err
			}
		}
		addr = b.Address + b.Size
		b.RequestedSize = b.Size
		if _, ok := bd["requested_size"]; ok {
			if b.RequestedSize, err = intField(bd, "requested_size", bpath, true); err != nil {
				return err
			}
		}
		if b.State, err = strField(bd, "state", bpath, true); err != nil {
			return err
		}
		b.State = c.intern(b.State)
		if b.Frames, b.Site, err = c.framesField(bd, bpath); err != nil {
			return err
		}
	}
	return nil
}

func (c *converter) entry(e *TraceEntry, v any, dev, i int) error {
	path := func() string { return fmt.Sprintf("device_traces[%d][%d]", dev, i) }
	d, ok := v.(map[any]any)
	if !ok {
		return fmt.Errorf("%s is a %s, expected a dict", path(), pyType(v))
	}
	var err error
	if e.Action, err = strField(d, "action", path, true); err != nil {
		return err
	}
	e.Action = c.intern(e.Action)
	if e.Action == ActionOOM {
		if e.DeviceFree, err = intField(d, "device_free", path, false); err != nil {
			return err
		}
	} else if e.Addr, err = intField(d, "addr", path, needsAddr(e.Action)); err != nil {
		return err
	}
	if e.Size, err = intField(d, "size", path, needsAddr(e.Action)); err != nil {
		return err
	}
	if e.Stream, err = intField(d, "stream", path, false); err != nil {
		return err
	}
	if e.TimeUS, err = intField(d, "time_us", path, false); err != nil {
		return err
	}
	e.Frames, e.Site, err = c.framesField(d, path)
	return err
}

// needsAddr reports whether entries of action must have addr and size.
func needsAddr(action string) bool {
	switch action {
	case ActionAlloc, ActionFreeRequested, ActionFreeCompleted,
		ActionSegmentAlloc, ActionSegmentFree, ActionSegmentMap, ActionSegmentUnmap:
		return true
	}
	return false
}

// framesField converts d["frames"] (absent, None or a list of frame dicts).
func (c *converter) framesField(d map[any]any, path func() string) ([]Frame, string, error) {
	if !c.opts.Frames {
		return nil, "", nil
	}
	v, ok := d["frames"]
	if !ok || v == (ogórek.None{}) {
		return nil, "", nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, "", fmt.Errorf("%s: \"frames\" is a %s, expected a list", path(), pyType(v))
	}
	if len(l) == 0 {
		return nil, "", nil
	}
	key := listKey{&l[0], len(l)}
	if fi, ok := c.frames[key]; ok {
		return fi.frames, fi.site, nil
	}
	if err := c.spend(len(l), path()); err != nil {
		return nil, "", err
	}
	frames := make([]Frame, len(l))
	for k, fv := range l {
		fd, ok := fv.(map[any]any)
		if !ok {
			return nil, "", fmt.Errorf("%s: frames[%d] is a %s, expected a dict", path(), k, pyType(fv))
		}
		f := &frames[k]
		fpath := func() string { return fmt.Sprintf("%s.frames[%d]", path(), k) }
		var err error
		if f.Filename, err = strField(fd, "filename", fpath, false); err != nil {
			return nil, "", err
		}
		if f.Name, err = strField(fd, "name", fpath, false); err != nil {
			return nil, "", err
		}
		line, err := intField(fd, "line", fpath, false)
		if err != nil {
			return nil, "", err
		}
		f.Filename, f.Name, f.Line = c.intern(f.Filename), c.intern(f.Name), int(line)
	}
	fi := framesInfo{frames: frames, site: c.intern(site(frames))}
	c.frames[key] = fi
	return fi.frames, fi.site, nil
}

// site names the innermost frame that is the user's code: the first
// Python file outside torch ("torch/" in its path; frames are innermost
// first), else the first other frame outside torch with a known file (C++
// frames of stacks="all"), else the first frame.
func site(frames []Frame) string {
	other := -1
	for i := range frames {
		fn := strings.ReplaceAll(frames[i].Filename, `\`, "/")
		if strings.Contains(fn, "torch/") {
			continue
		}
		if strings.HasSuffix(fn, ".py") {
			return frameName(&frames[i])
		}
		if other < 0 && fn != "" && fn != "??" {
			other = i
		}
	}
	if other >= 0 {
		return frameName(&frames[other])
	}
	if len(frames) > 0 {
		return frameName(&frames[0])
	}
	return ""
}

func frameName(f *Frame) string {
	return f.Filename + ":" + strconv.Itoa(f.Line) + ":" + f.Name
}

func (c *converter) settings(as *AllocatorSettings, v any) error {
	d, ok := v.(map[any]any)
	if !ok {
		return fmt.Errorf("allocator_settings is a %s, expected a dict", pyType(v))
	}
	nodes := 0
	raw, err := plain(v, 0, &nodes)
	if err != nil {
		return fmt.Errorf("allocator_settings: %w", err)
	}
	as.Raw = raw.(map[string]any)
	path := func() string { return "allocator_settings" }
	if as.AllocConf, err = strField(d, "PYTORCH_CUDA_ALLOC_CONF", path, false); err != nil {
		return err
	}
	if mv, ok := d["max_split_size"]; ok {
		switch n := mv.(type) {
		case int64:
			if n > 0 {
				as.MaxSplitSize = n
			}
		case *big.Int: // SIZE_MAX written as an unsigned Python int
		default:
			return fmt.Errorf("allocator_settings: \"max_split_size\" is a %s, expected an int", pyType(mv))
		}
	}
	if gv, ok := d["garbage_collection_threshold"]; ok {
		switch x := gv.(type) {
		case float64:
			as.GarbageCollectionThreshold = x
		case int64:
			as.GarbageCollectionThreshold = float64(x)
		default:
			return fmt.Errorf("allocator_settings: \"garbage_collection_threshold\" is a %s, expected a float", pyType(gv))
		}
	}
	if as.ExpandableSegments, err = boolField(d, "expandable_segments", path); err != nil {
		return err
	}
	if as.ReleaseLockOnCudaMalloc, err = boolField(d, "release_lock_on_cudamalloc", path); err != nil {
		return err
	}
	if as.PinnedUseCudaHostRegister, err = boolField(d, "pinned_use_cuda_host_register", path); err != nil {
		return err
	}
	if as.PinnedNumRegisterThreads, err = intField(d, "pinned_num_register_threads", path, false); err != nil {
		return err
	}
	if rv, ok := d["roundup_power2_divisions"].(map[any]any); ok {
		as.RoundupPower2Divisions = make(map[int64]int64, len(rv))
		for k, v := range rv {
			ks, _ := k.(string)
			mib, err := strconv.ParseInt(ks, 10, 64)
			n, ok := toInt(v)
			if err != nil || !ok {
				return fmt.Errorf("allocator_settings: roundup_power2_divisions entry %s: %s, expected \"<MiB>\": int", pyRepr(k), pyType(v))
			}
			as.RoundupPower2Divisions[mib] = n
		}
	}
	return nil
}

const (
	maxPlainDepth = 16
	maxPlainNodes = 1 << 16
)

// plain converts a decoded value to plain Go values (see
// AllocatorSettings.Raw), bounding depth and size because decoded values
// may share structure or be cyclic.
func plain(v any, depth int, nodes *int) (any, error) {
	*nodes++
	if depth > maxPlainDepth || *nodes > maxPlainNodes {
		return nil, fmt.Errorf("nested deeper than %d or larger than %d values", maxPlainDepth, maxPlainNodes)
	}
	switch x := v.(type) {
	case string, int64, float64, bool:
		return x, nil
	case ogórek.None:
		return nil, nil
	case *big.Int:
		return x.String(), nil
	case ogórek.Bytes:
		return string(x), nil
	case []any:
		out := make([]any, len(x))
		for i := range x {
			var err error
			if out[i], err = plain(x[i], depth+1, nodes); err != nil {
				return nil, err
			}
		}
		return out, nil
	case ogórek.Tuple:
		return plain([]any(x), depth, nodes)
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			pv, err := plain(e, depth+1, nodes)
			if err != nil {
				return nil, err
			}
			out[pyRepr(k)] = pv
		}
		return out, nil
	}
	return pyRepr(v), nil
}

func list(d map[any]any, key, where string, required bool) ([]any, error) {
	v, ok := d[key]
	if !ok {
		if required {
			return nil, fmt.Errorf("%s has no %q key", where, key)
		}
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: %q is a %s, expected a list", where, key, pyType(v))
	}
	return l, nil
}

func intField(d map[any]any, key string, path func() string, required bool) (int64, error) {
	v, ok := d[key]
	if !ok {
		if required {
			return 0, fmt.Errorf("%s has no %q key", path(), key)
		}
		return 0, nil
	}
	n, ok := toInt(v)
	if !ok {
		if b, isBig := v.(*big.Int); isBig {
			return 0, fmt.Errorf("%s: %q is %s, outside the int64 range", path(), key, b)
		}
		return 0, fmt.Errorf("%s: %q is a %s, expected an int", path(), key, pyType(v))
	}
	return n, nil
}

func strField(d map[any]any, key string, path func() string, required bool) (string, error) {
	v, ok := d[key]
	if !ok {
		if required {
			return "", fmt.Errorf("%s has no %q key", path(), key)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %q is a %s, expected a str", path(), key, pyType(v))
	}
	return s, nil
}

// boolField reads an optional bool; Python's 0 and 1 are accepted too.
func boolField(d map[any]any, key string, path func() string) (bool, error) {
	v, ok := d[key]
	if !ok {
		return false, nil
	}
	switch x := v.(type) {
	case bool:
		return x, nil
	case int64:
		if x == 0 || x == 1 {
			return x == 1, nil
		}
	}
	return false, fmt.Errorf("%s: %q is a %s, expected a bool", path(), key, pyType(v))
}

// toInt converts a decoded Python int: og-rek gives int64, or *big.Int
// for LONG opcodes (Python writes ints beyond 32 bits, such as addresses,
// with LONG1).
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	}
	return 0, false
}

// pyType names the Python type of a decoded value, for error messages.
func pyType(v any) string {
	switch v.(type) {
	case nil, ogórek.None:
		return "None"
	case int64, *big.Int:
		return "int"
	case bool:
		return "bool"
	case float64:
		return "float"
	case string, ogórek.ByteString:
		return "str"
	case ogórek.Bytes, []byte:
		return "bytes"
	case []any:
		return "list"
	case ogórek.Tuple:
		return "tuple"
	case map[any]any:
		return "dict"
	case ogórek.Class:
		return "global"
	case ogórek.Call:
		return "object"
	case ogórek.Ref:
		return "persistent reference"
	}
	return fmt.Sprintf("%T", v)
}

// pyRepr renders a scalar for messages and map keys.
func pyRepr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return x.String()
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case nil, ogórek.None:
		return "None"
	}
	return "<" + pyType(v) + ">"
}
