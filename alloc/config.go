package alloc

import (
	"github.com/batchfit/batchfit/suggest"

	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

const mib = 1 << 20

// Config is the part of PYTORCH_CUDA_ALLOC_CONF that changes how device
// memory is carved up. The zero value is PyTorch's default configuration,
// the same as DefaultConfig.
type Config struct {
	// MaxSplitSize is max_split_size_mb in bytes. Zero means unlimited,
	// PyTorch's SIZE_MAX default: any cached block may be split and
	// release_available_cached_blocks is off.
	MaxSplitSize int64
	// RoundupPower2Divisions holds roundup_power2_divisions per size
	// interval: index i covers request sizes in [2^i MiB, 2^(i+1) MiB),
	// index 0 also everything below 1 MiB and index 15 everything from
	// 32 GiB up (CUDAAllocatorConfig::roundup_power2_divisions). 0 or 1
	// means plain 512-byte rounding.
	RoundupPower2Divisions [16]int
	// GarbageCollectionThreshold is garbage_collection_threshold, in (0, 1);
	// 0 disables it. It only acts when a memory fraction is set
	// (Device.MemoryFraction), as in PyTorch.
	GarbageCollectionThreshold float64
	// ExpandableSegments is expandable_segments:True.
	ExpandableSegments bool
	// MaxNonSplitRounding is max_non_split_rounding_mb in bytes: how much
	// larger than an oversize request (>= MaxSplitSize) a cached unsplittable
	// block may be and still be handed out whole. Zero means the default,
	// 20 MiB (kLargeBuffer).
	MaxNonSplitRounding int64
}

// DefaultConfig returns PyTorch's defaults: no split limit, no power-of-two
// rounding, no garbage collection, no expandable segments, 20 MiB
// non-split rounding.
func DefaultConfig() Config {
	return Config{MaxNonSplitRounding: LargeBuffer}
}

// maxSplit returns the effective max_split_size in bytes.
func (c Config) maxSplit() int64 {
	if c.MaxSplitSize <= 0 {
		return math.MaxInt64
	}
	return c.MaxSplitSize
}

func (c Config) maxNonSplitRounding() int64 {
	if c.MaxNonSplitRounding <= 0 {
		return LargeBuffer
	}
	return c.MaxNonSplitRounding
}

// Validate reports a setting that PyTorch's parser would have refused.
// ParseConfig never returns an invalid Config; hand-built ones may be.
func (c Config) Validate() error {
	if c.MaxSplitSize != 0 && c.MaxSplitSize < LargeBuffer {
		return fmt.Errorf("max_split_size %d bytes is below the minimum of 20 MiB", c.MaxSplitSize)
	}
	if c.MaxNonSplitRounding != 0 && c.MaxNonSplitRounding < LargeBuffer {
		return fmt.Errorf("max_non_split_rounding %d bytes is below the minimum of 20 MiB", c.MaxNonSplitRounding)
	}
	for i, d := range c.RoundupPower2Divisions {
		if d < 0 || (d != 0 && bits.OnesCount(uint(d)) != 1) {
			return fmt.Errorf("roundup_power2_divisions[%d] = %d is not 0 or a power of two", i, d)
		}
	}
	g := c.GarbageCollectionThreshold
	if g != 0 && !(g > 0 && g < 1) {
		return fmt.Errorf("garbage_collection_threshold %v is outside (0, 1)", g)
	}
	return nil
}

// String renders c as a PYTORCH_CUDA_ALLOC_CONF value that ParseConfig reads
// back to c. Settings at their default are left out, so the default
// configuration renders as "". Sizes are written in whole MiB, as the
// variable has no finer unit.
func (c Config) String() string {
	var parts []string
	if c.MaxSplitSize > 0 {
		parts = append(parts, "max_split_size_mb:"+strconv.FormatInt(c.MaxSplitSize/mib, 10))
	}
	if r := c.MaxNonSplitRounding; r > 0 && r != LargeBuffer {
		parts = append(parts, "max_non_split_rounding_mb:"+strconv.FormatInt(r/mib, 10))
	}
	if s := divisionsString(c.RoundupPower2Divisions); s != "" {
		parts = append(parts, "roundup_power2_divisions:"+s)
	}
	if c.GarbageCollectionThreshold != 0 {
		parts = append(parts, "garbage_collection_threshold:"+strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if c.ExpandableSegments {
		parts = append(parts, "expandable_segments:True")
	}
	return strings.Join(parts, ",")
}

// divisionsString writes the divisions table in a form that the quirky
// list parser (see parseDivisions) maps back to exactly the same table.
func divisionsString(d [16]int) string {
	uniform := true
	for _, v := range d {
		if v != d[0] {
			uniform = false
		}
	}
	if uniform {
		if d[0] == 0 {
			return ""
		}
		return strconv.Itoa(d[0])
	}
	key := func(i int) string { return strconv.Itoa(1 << i) } // MB key of interval i
	var parts []string
	// The first key also fills every interval below it, so the leading run
	// is written as its last interval.
	a := 0
	for a+1 < len(d) && d[a+1] == d[0] {
		a++
	}
	parts = append(parts, key(a)+":"+strconv.Itoa(d[0]))
	// ">" fills from the last explicit interval (inclusive) to the end, so
	// the trailing run is written as its first interval then ">".
	z := len(d) - 1
	for z-1 > a && d[z-1] == d[len(d)-1] {
		z--
	}
	for i := a + 1; i < z; i++ {
		parts = append(parts, key(i)+":"+strconv.Itoa(d[i]))
	}
	if z > a {
		parts = append(parts, key(z)+":"+strconv.Itoa(d[z]))
		if z < len(d)-1 {
			parts = append(parts, ">:"+strconv.Itoa(d[z]))
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// validKeys are the options PyTorch's parser accepts (CUDAAllocatorConfig::
// parseArgs and c10/core/AllocatorConfig.cpp), used for "did you mean".
var validKeys = []string{
	"max_split_size_mb",
	"max_non_split_rounding_mb",
	"garbage_collection_threshold",
	"roundup_power2_divisions",
	"expandable_segments",
	"backend",
	"release_lock_on_cudamalloc",
	"pinned_use_cuda_host_register",
	"pinned_num_register_threads",
	"pinned_use_background_threads",
	"pinned_reserve_segment_size_mb",
	"graph_capture_record_stream_reuse",
}

// pinnedMaxRegisterThreads is CUDAAllocatorConfig::pinned_max_register_threads().
const pinnedMaxRegisterThreads = 128

// ParseConfig reads a PYTORCH_CUDA_ALLOC_CONF (or PYTORCH_ALLOC_CONF) value
// the way CUDAAllocatorConfig::parseArgs does: the string is split into
// tokens at ',', ':', '[' and ']' with spaces dropped, then read as
// comma-separated key:value options. The empty string gives the defaults.
//
// Options that only affect host (pinned) memory or locking —
// release_lock_on_cudamalloc, pinned_use_cuda_host_register,
// pinned_num_register_threads, pinned_use_background_threads,
// pinned_reserve_segment_size_mb, graph_capture_record_stream_reuse — are
// checked as PyTorch checks them and then dropped: none of them changes how
// device memory is carved up. backend:cudaMallocAsync is refused, since
// that allocator is the CUDA driver's and is not simulated here.
//
// Integers are read like C++ std::stoi (a leading integer, trailing
// characters ignored), except that negative values are refused where
// PyTorch would have wrapped them to huge unsigned numbers.
func ParseConfig(s string) (Config, error) {
	c := DefaultConfig()
	toks := lexConfig(s)
	p := &confParser{toks: toks}
	for p.i = 0; p.i < len(toks); p.i++ {
		key := toks[p.i]
		var err error
		switch key {
		case "max_split_size_mb":
			var v int64
			v, err = p.sizeMB(key)
			c.MaxSplitSize = v
		case "max_non_split_rounding_mb":
			var v int64
			v, err = p.sizeMB(key)
			c.MaxNonSplitRounding = v
		case "garbage_collection_threshold":
			c.GarbageCollectionThreshold, err = p.threshold(key)
		case "roundup_power2_divisions":
			err = p.divisions(key, &c.RoundupPower2Divisions)
		case "expandable_segments":
			c.ExpandableSegments, err = p.boolean(key)
		case "backend":
			err = p.backend(key)
		case "release_lock_on_cudamalloc", "release_lock_on_hipmalloc",
			"pinned_use_cuda_host_register", "pinned_use_hip_host_register",
			"pinned_use_background_threads", "graph_capture_record_stream_reuse":
			_, err = p.boolean(key)
		case "pinned_num_register_threads":
			err = p.registerThreads(key)
		case "pinned_reserve_segment_size_mb":
			err = p.positive(key)
		default:
			return Config{}, unknownKeyError(key)
		}
		if err != nil {
			return Config{}, err
		}
		if p.i+1 < len(toks) {
			if err := p.expect(",", key); err != nil {
				return Config{}, err
			}
		}
	}
	return c, nil
}

func unknownKeyError(key string) error {
	if key == "," || key == ":" || key == "[" || key == "]" {
		return fmt.Errorf("parsing allocator config: unexpected %q where an option name was expected", key)
	}
	if near := suggest.Nearest(key, validKeys, 1); len(near) > 0 {
		return fmt.Errorf("parsing allocator config: unrecognized CachingAllocator option %q (did you mean %q?)", key, near[0])
	}
	return fmt.Errorf("parsing allocator config: unrecognized CachingAllocator option %q (known: %s)", key, strings.Join(validKeys, ", "))
}

// lexConfig is CUDAAllocatorConfig::lexArgs.
func lexConfig(s string) []string {
	var toks []string
	var buf []byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch ch {
		case ',', ':', '[', ']':
			if len(buf) > 0 {
				toks = append(toks, string(buf))
				buf = buf[:0]
			}
			toks = append(toks, string(ch))
		case ' ':
		default:
			buf = append(buf, ch)
		}
	}
	if len(buf) > 0 {
		toks = append(toks, string(buf))
	}
	return toks
}

type confParser struct {
	toks []string
	i    int
}

// expect is consumeToken: the next token must be tok.
func (p *confParser) expect(tok, key string) error {
	p.i++
	if p.i >= len(p.toks) || p.toks[p.i] != tok {
		got := "end of string"
		if p.i < len(p.toks) {
			got = strconv.Quote(p.toks[p.i])
		}
		return fmt.Errorf("parsing allocator config: %s: expected %q, got %s", key, tok, got)
	}
	return nil
}

// value consumes ":" and returns the value token.
func (p *confParser) value(key string) (string, error) {
	if err := p.expect(":", key); err != nil {
		return "", err
	}
	p.i++
	if p.i >= len(p.toks) {
		return "", fmt.Errorf("parsing allocator config: %s: missing value", key)
	}
	return p.toks[p.i], nil
}

// stoi reads a leading decimal integer as std::stoi does: optional sign,
// at least one digit, anything after the digits ignored, int range only.
func stoi(s string) (int64, bool) {
	j := 0
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	k := j
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	if k == j {
		return 0, false
	}
	v, err := strconv.ParseInt(s[:k], 10, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}

// stod reads the longest leading floating-point number, as std::stod does.
func stod(s string) (float64, bool) {
	for k := len(s); k > 0; k-- {
		if v, err := strconv.ParseFloat(s[:k], 64); err == nil || errors.Is(err, strconv.ErrRange) {
			return v, true
		}
	}
	return 0, false
}

func (p *confParser) integer(key string) (int64, error) {
	v, err := p.value(key)
	if err != nil {
		return 0, err
	}
	n, ok := stoi(v)
	if !ok {
		return 0, fmt.Errorf("parsing allocator config: %s: %q is not an integer", key, v)
	}
	if n < 0 {
		return 0, fmt.Errorf("parsing allocator config: %s: %d is negative", key, n)
	}
	return n, nil
}

// sizeMB parses max_split_size_mb and max_non_split_rounding_mb. Both must
// be at least kLargeBuffer/1MiB = 20 (c10/core/AllocatorConfig.cpp; before
// 2.8 CUDAAllocatorConfig.cpp required strictly more than 20).
func (p *confParser) sizeMB(key string) (int64, error) {
	n, err := p.integer(key)
	if err != nil {
		return 0, err
	}
	if n < LargeBuffer/mib {
		return 0, fmt.Errorf("parsing allocator config: %s: %d is too small, must be >= %d", key, n, LargeBuffer/mib)
	}
	return n * mib, nil
}

func (p *confParser) threshold(key string) (float64, error) {
	v, err := p.value(key)
	if err != nil {
		return 0, err
	}
	f, ok := stod(v)
	if !ok {
		return 0, fmt.Errorf("parsing allocator config: %s: %q is not a number", key, v)
	}
	if !(f > 0 && f < 1) {
		return 0, fmt.Errorf("parsing allocator config: %s: %v is invalid, set it in (0.0, 1.0)", key, f)
	}
	return f, nil
}

func (p *confParser) boolean(key string) (bool, error) {
	v, err := p.value(key)
	if err != nil {
		return false, err
	}
	switch v {
	case "True":
		return true, nil
	case "False":
		return false, nil
	}
	return false, fmt.Errorf("parsing allocator config: %s: expected a single True/False argument, got %q", key, v)
}

func (p *confParser) backend(key string) error {
	v, err := p.value(key)
	if err != nil {
		return err
	}
	switch v {
	case "native":
		return nil
	case "cudaMallocAsync":
		return fmt.Errorf("parsing allocator config: %s:cudaMallocAsync is not simulated: that backend hands allocation to the CUDA driver's stream-ordered allocator, whose caching rules are not public; use backend:native", key)
	}
	return fmt.Errorf("parsing allocator config: %s: unknown allocator backend %q, options are native and cudaMallocAsync", key, v)
}

func (p *confParser) registerThreads(key string) error {
	n, err := p.integer(key)
	if err != nil {
		return err
	}
	if n == 0 || bits.OnesCount64(uint64(n)) != 1 {
		return fmt.Errorf("parsing allocator config: %s: number of register threads %d has to be a power of 2", key, n)
	}
	if n > pinnedMaxRegisterThreads {
		return fmt.Errorf("parsing allocator config: %s: number of register threads should be less than or equal to %d", key, pinnedMaxRegisterThreads)
	}
	return nil
}

func (p *confParser) positive(key string) error {
	n, err := p.integer(key)
	if err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("parsing allocator config: %s: has to be greater than 0", key)
	}
	return nil
}

// divisions is CUDAAllocatorConfig::parseRoundUpPower2Divisions. The list
// form keys are MB sizes that must be powers of two; key K names interval
// log2(K) (clamped to 15). The first key also fills every interval below
// it; ">" fills from the last explicit interval — inclusive, so it
// overwrites that interval's value — to the end.
func (p *confParser) divisions(key string, d *[16]int) error {
	v, err := p.value(key)
	if err != nil {
		return err
	}
	if v != "[" {
		n, ok := stoi(v)
		if !ok {
			return fmt.Errorf("parsing allocator config: %s: %q is not an integer", key, v)
		}
		if n <= 0 || bits.OnesCount64(uint64(n)) != 1 {
			return fmt.Errorf("parsing allocator config: %s: for roundups, the divisions has to be power of 2, got %d", key, n)
		}
		for i := range d {
			d[i] = int(n)
		}
		return nil
	}
	first := true
	last := 0
	for {
		p.i++
		if p.i >= len(p.toks) {
			return fmt.Errorf("parsing allocator config: %s: missing \"]\"", key)
		}
		k := p.toks[p.i]
		if k == "]" {
			return nil
		}
		vs, err := p.value(key)
		if err != nil {
			return err
		}
		n, ok := stoi(vs)
		if !ok {
			return fmt.Errorf("parsing allocator config: %s: division %q is not an integer", key, vs)
		}
		if n < 0 || (n != 0 && bits.OnesCount64(uint64(n)) != 1) {
			return fmt.Errorf("parsing allocator config: %s: for roundups, the divisions has to be power of 2 or 0 to disable roundup, got %d", key, n)
		}
		if k == ">" {
			for i := last; i < len(d); i++ {
				d[i] = int(n)
			}
		} else {
			mb, err := strconv.ParseUint(leadingDigits(k), 10, 64)
			if err != nil || mb == 0 || bits.OnesCount64(mb) != 1 {
				return fmt.Errorf("parsing allocator config: %s: interval %q is not a power of 2", key, k)
			}
			idx := min(bits.Len64(mb)-1, len(d)-1)
			if first {
				for i := 0; i < idx; i++ {
					d[i] = int(n)
				}
				first = false
			}
			d[idx] = int(n)
			last = idx
		}
		if p.i+1 < len(p.toks) && p.toks[p.i+1] != "]" {
			if err := p.expect(",", key); err != nil {
				return err
			}
		}
	}
}

// leadingDigits mimics std::stoul's acceptance of a numeric prefix.
func leadingDigits(s string) string {
	k := 0
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	return s[:k]
}
