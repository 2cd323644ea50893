package oom

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/alloc"
)

// Format is the layout of an out-of-memory message.
type Format uint8

const (
	// Current is the layout of PyTorch 2.1 and later ("GPU 0 has a total
	// capacity of ... of which ... is free. ... Of the allocated memory ...").
	Current Format = iota + 1
	// Legacy is the layout of PyTorch 2.0 and earlier ("(GPU 0; ... total
	// capacity; ... already allocated; ... free; ... reserved in total by
	// PyTorch)").
	Legacy
)

func (f Format) String() string {
	switch f {
	case Current:
		return "current"
	case Legacy:
		return "legacy"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// MarshalText makes Format appear as its name in JSON.
func (f Format) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// Hint is the advice about fragmentation the message itself carried.
type Hint uint8

const (
	// NoHint: the message ended without advice (the oldest versions).
	NoHint Hint = iota
	// HintMaxSplitSize: "try setting max_split_size_mb to avoid
	// fragmentation" (≤2.0 and early 2.1 texts).
	HintMaxSplitSize
	// HintExpandableSegments: "try setting
	// PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" (later texts).
	HintExpandableSegments
)

func (h Hint) String() string {
	switch h {
	case NoHint:
		return "none"
	case HintMaxSplitSize:
		return "max_split_size_mb"
	case HintExpandableSegments:
		return "expandable_segments"
	}
	return fmt.Sprintf("hint(%d)", uint8(h))
}

// MarshalText makes Hint appear as its name in JSON.
func (h Hint) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// Process is another process using the same GPU, as NVML reported it.
type Process struct {
	PID   int   `json:"pid"`
	Bytes int64 `json:"bytes"`
}

// Message is a parsed CUDA out-of-memory message. Sizes are in bytes and,
// except for values up to 1024 bytes, only approximate: see [Resolution].
// Figures the message did not contain are zero.
type Message struct {
	Format Format `json:"format"`
	// Text is the message as found, with line breaks and runs of spaces
	// collapsed.
	Text string `json:"text"`

	// Requested is the "Tried to allocate" figure: the segment size the
	// allocator tried to cudaMalloc (alloc_size), not the tensor's size.
	Requested   int64 `json:"requested_bytes"`
	DeviceIndex int   `json:"device"`
	// Total and Free are cudaMemGetInfo's figures, taken after the
	// allocator released its wholly free cached segments.
	Total int64 `json:"total_bytes"`
	Free  int64 `json:"free_bytes"`
	// Allocated is memory handed out to tensors ("already allocated";
	// "allocated by PyTorch", which includes PrivatePools).
	Allocated int64 `json:"allocated_bytes"`
	// Reserved is all memory the caching allocator holds from the driver;
	// ReservedUnallocated = Reserved − Allocated is cached but not in use.
	// The legacy layout prints Reserved, the current one
	// ReservedUnallocated; the other is derived.
	Reserved            int64 `json:"reserved_bytes"`
	ReservedUnallocated int64 `json:"reserved_unallocated_bytes"`
	// PrivatePools is the part of Allocated in private pools such as CUDA
	// Graphs (current layout only, when non-zero).
	PrivatePools int64 `json:"private_pools_bytes,omitempty"`
	// ProcessInUse is NVML's "this process has X memory in use": PyTorch's
	// reserved memory plus the CUDA context and other non-PyTorch memory of
	// this process. Zero when NVML was unavailable.
	ProcessInUse int64 `json:"process_in_use_bytes,omitempty"`
	// OtherProcesses lists the other processes NVML saw on the device.
	OtherProcesses []Process `json:"other_processes,omitempty"`
	// Allowed is the limit set with torch.cuda.set_per_process_memory_fraction
	// ("X allowed;"), zero when none was set.
	Allowed int64 `json:"allowed_bytes,omitempty"`
	Hint    Hint  `json:"hint"`
}

// MaxInput is the most text Parse examines; longer input is cut to its last
// MaxInput bytes, where a fatal error is printed.
const MaxInput = 16 << 20

// maxWindow bounds how much text after "CUDA out of memory" belongs to one
// message. The message is a few hundred bytes plus ~45 per NVML process.
const maxWindow = 16 << 10

var (
	// The message begins with "CUDA out of memory" in every version; a line
	// break may fall between the words or, in a hard-wrapped log, inside
	// one.
	startRE = regexp.MustCompile(wrappable("CUDA out of memory"))
	// Raised by the CUDA runtime itself (cudaErrorMemoryAllocation), e.g.
	// while creating the context or inside a library; not by the caching
	// allocator, so it has no figures.
	runtimeOOMRE = regexp.MustCompile(`CUDA\s+error:\s+out\s+of\s+memory`)
	// Per-line prefixes that launchers add (torchrun, accelerate).
	prefixRE = regexp.MustCompile(`(?m)^[ \t]*\[(?:rank|default)\d+\]:[ \t]?`)
)

// wrappable returns a pattern for phrase that also matches it broken over
// lines: whitespace between words, an optional line break inside them.
func wrappable(phrase string) string {
	var b strings.Builder
	for i, w := range strings.Fields(phrase) {
		if i > 0 {
			b.WriteString(`\s+`)
		}
		for j, r := range w {
			if j > 0 {
				b.WriteString(`\n?`)
			}
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	return b.String()
}

// size matches a format_size figure; "B", "KB", "MB", "GB" and "TB" are
// accepted as the binary units too.
const size = `(\d+(?:\.\d+)?) ?(bytes|byte|[KMGT]iB|[KMGT]B|B)`

var (
	triedRE    = regexp.MustCompile(`Tried to allocate ` + size)
	capacityRE = regexp.MustCompile(`GPU (\d+) has a total capac(?:i)?ty of ` + size + ` of which ` + size + ` is free`)
	thisProcRE = regexp.MustCompile(`this process has ` + size + ` memory in use`)
	otherRE    = regexp.MustCompile(`Process (\d+) has ` + size + ` memory in use`)
	allowedRE  = regexp.MustCompile(`\. ` + size + ` allowed;`)
	ofAllocRE  = regexp.MustCompile(`Of the allocated memory ` + size + ` is allocated by PyTorch`)
	privateRE  = regexp.MustCompile(`with ` + size + ` allocated in private pools`)
	unallocRE  = regexp.MustCompile(`and ` + size + ` is reserved by PyTorch but unallocated`)
	// Legacy: everything between "(GPU n;" and ")".
	legacyRE       = regexp.MustCompile(`^ ?\(GPU (\d+); ([^)]*)\)`)
	legacyPartRE   = regexp.MustCompile(`^` + size + ` (total capacity|already allocated|free|allowed|reserved in total by PyTorch|cached)$`)
	expandableRE   = regexp.MustCompile(`expandable_segments`)
	maxSplitHintRE = regexp.MustCompile(`max_split_size_mb`)
)

// ErrNotFound is wrapped by the errors of Parse and ParseAll when the text
// holds no out-of-memory message at all (as opposed to a truncated one).
var ErrNotFound = errors.New(`no CUDA out-of-memory message found: expected "CUDA out of memory. Tried to allocate ..."`)

// Parse finds the first CUDA out-of-memory message in text (a traceback, a
// log, or the message alone) and returns its figures. Messages wrapped over
// several lines, either at spaces or in the middle of words, are joined
// first. When the text holds no such message, the error says what was
// expected; when a message is found but cut short, the error names the part
// that is missing.
func Parse(text string) (*Message, error) {
	ms, err := parse(text, 1)
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// ParseAll returns every complete out-of-memory message in text, in order
// (a log of a multi-process job holds one per rank). It fails only when
// there is none.
func ParseAll(text string) ([]*Message, error) {
	return parse(text, -1)
}

func parse(text string, limit int) ([]*Message, error) {
	if len(text) > MaxInput {
		text = text[len(text)-MaxInput:]
	}
	text = strings.ReplaceAll(text, "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	starts := startRE.FindAllStringIndex(text, -1)
	var firstErr error
	var out []*Message
	for i, loc := range starts {
		end := len(text)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		if end-loc[0] > maxWindow {
			end = loc[0] + maxWindow
		}
		m, err := parseWindow(text[loc[0]:end])
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		out = append(out, m)
		if limit > 0 && len(out) >= limit {
			break
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if firstErr != nil {
		return nil, firstErr
	}
	if loc := runtimeOOMRE.FindStringIndex(text); loc != nil {
		return nil, fmt.Errorf(`found "CUDA error: out of memory", which the CUDA runtime raises outside PyTorch's caching allocator (while creating the context or inside a library) and which carries no sizes: %w`, ErrNotFound)
	}
	return nil, ErrNotFound
}

// parseWindow parses the text from "CUDA out of memory" up to the next
// message. It reads the text joined at line breaks with a space (wrapping
// at word boundaries) and without one (hard wrapping at a fixed column)
// and keeps the reading that recognises more of the message. Every figure
// sits between fixed words, so a break inside a word or number joined the
// wrong way loses that figure, and the other reading wins.
func parseWindow(raw string) (*Message, error) {
	raw = prefixRE.ReplaceAllString(raw, "")
	var best *Message
	var bestErr error
	bestScore := -1
	for _, join := range []string{" ", ""} {
		m, score, err := parseNormalized(normalize(raw, join))
		if err == nil {
			score += 100 // a complete message beats any incomplete one
		}
		if score > bestScore {
			best, bestErr, bestScore = m, err, score
		}
		if !strings.Contains(raw, "\n") {
			break
		}
	}
	return best, bestErr
}

// normalize joins lines with join and collapses runs of blanks to one space.
func normalize(s, join string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' {
			if join == "" {
				continue
			}
			c = ' '
		}
		if c == ' ' || c == '\t' {
			if !space {
				b.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		b.WriteByte(c)
	}
	return b.String()
}

// parseNormalized reads one message from s, which starts at "CUDA out of
// memory". The score counts the parts recognised, to choose between two
// ways of joining wrapped lines.
func parseNormalized(s string) (*Message, int, error) {
	m := &Message{}
	score := 0
	loc := triedRE.FindStringSubmatchIndex(s)
	// "Tried to allocate" directly follows "CUDA out of memory. "; looking
	// further would take it from some other text.
	if loc == nil || loc[0] > 32 {
		return nil, score, fmt.Errorf(`found "CUDA out of memory" without "Tried to allocate <size>" after it: %w`, ErrNotFound)
	}
	score++
	var err error
	if m.Requested, err = sizeAt(s, loc, 2); err != nil {
		return nil, score, err
	}
	rest := s[loc[1]:]
	var end int
	if strings.HasPrefix(rest, ".") {
		m.Format = Current
		score, end, err = parseCurrent(m, rest, score)
	} else {
		m.Format = Legacy
		score, end, err = parseLegacy(m, rest, score)
	}
	if err != nil {
		return nil, score, err
	}
	m.Text = strings.TrimSpace(s[:loc[1]+end])
	return m, score, nil
}

// parseCurrent reads the rest of a current-layout message and returns the
// updated score and where the message ends in rest.
func parseCurrent(m *Message, rest string, score int) (int, int, error) {
	// The message ends after "reserved by PyTorch but unallocated." and
	// its hint; cut there so later log lines cannot contribute figures.
	body := rest
	u := unallocRE.FindStringSubmatchIndex(body)
	if u != nil {
		end := u[1]
		// The advice ends either with "... Memory Management and
		// PYTORCH_CUDA_ALLOC_CONF" or, in later texts, with
		// "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True ... (https://...)".
		if i := strings.Index(body[end:], "PYTORCH_CUDA_ALLOC_CONF"); i >= 0 && i < 400 {
			end += i + len("PYTORCH_CUDA_ALLOC_CONF")
			if strings.HasPrefix(body[end:], "=") {
				if j := strings.Index(body[end:], ")"); j >= 0 && j < 300 {
					end += j + 1
				}
			}
		}
		body = body[:end]
	}
	c := capacityRE.FindStringSubmatchIndex(body)
	if c == nil {
		return score, 0, incomplete(m, `"GPU <n> has a total capacity of <size> of which <size> is free"`)
	}
	score++
	var err error
	if m.DeviceIndex, err = intAt(body, c, 2, "GPU device index"); err != nil {
		return score, 0, err
	}
	if m.Total, err = sizeAt(body, c, 4); err != nil {
		return score, 0, err
	}
	if m.Free, err = sizeAt(body, c, 8); err != nil {
		return score, 0, err
	}
	if l := thisProcRE.FindStringSubmatchIndex(body); l != nil {
		score++
		if m.ProcessInUse, err = sizeAt(body, l, 2); err != nil {
			return score, 0, err
		}
	}
	for _, l := range otherRE.FindAllStringSubmatchIndex(body, -1) {
		score++
		var p Process
		if p.PID, err = intAt(body, l, 2, "process id"); err != nil {
			return score, 0, err
		}
		if p.Bytes, err = sizeAt(body, l, 4); err != nil {
			return score, 0, err
		}
		m.OtherProcesses = append(m.OtherProcesses, p)
	}
	if l := allowedRE.FindStringSubmatchIndex(body); l != nil {
		score++
		if m.Allowed, err = sizeAt(body, l, 2); err != nil {
			return score, 0, err
		}
	}
	a := ofAllocRE.FindStringSubmatchIndex(body)
	if a == nil {
		return score, 0, incomplete(m, `"Of the allocated memory <size> is allocated by PyTorch"`)
	}
	score++
	if m.Allocated, err = sizeAt(body, a, 2); err != nil {
		return score, 0, err
	}
	if l := privateRE.FindStringSubmatchIndex(body); l != nil {
		score++
		if m.PrivatePools, err = sizeAt(body, l, 2); err != nil {
			return score, 0, err
		}
	}
	if u == nil {
		return score, 0, incomplete(m, `"<size> is reserved by PyTorch but unallocated"`)
	}
	score++
	if m.ReservedUnallocated, err = sizeAt(rest, u, 2); err != nil {
		return score, 0, err
	}
	// CUDACachingAllocator.cpp prints allocated + allocated_in_private_pools
	// and reserved − allocated − allocated_in_private_pools, so the two add
	// up to reserved.
	m.Reserved = m.Allocated + m.ReservedUnallocated
	m.Hint = hintIn(body)
	if m.Hint != NoHint {
		score++
	}
	return score, len(body), nil
}

// parseLegacy reads the rest of a legacy-layout message and returns the
// updated score and where the message ends in rest.
func parseLegacy(m *Message, rest string, score int) (int, int, error) {
	l := legacyRE.FindStringSubmatchIndex(rest)
	if l == nil {
		return score, 0, incomplete(m, `". GPU <n> has a total capacity of ..." (PyTorch ≥ 2.1) or " (GPU <n>; <size> total capacity; ...)" (PyTorch ≤ 2.0)`)
	}
	score++
	var err error
	if m.DeviceIndex, err = intAt(rest, l, 2, "GPU device index"); err != nil {
		return score, 0, err
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(rest[l[4]:l[5]], ";") {
		part = strings.TrimSpace(part)
		p := legacyPartRE.FindStringSubmatchIndex(part)
		if p == nil {
			continue
		}
		v, err := sizeAt(part, p, 2)
		if err != nil {
			return score, 0, err
		}
		key := part[p[6]:p[7]]
		seen[key] = true
		score++
		switch key {
		case "total capacity":
			m.Total = v
		case "already allocated":
			m.Allocated = v
		case "free":
			m.Free = v
		case "allowed":
			m.Allowed = v
		case "reserved in total by PyTorch", "cached":
			m.Reserved = v
		}
	}
	for _, need := range []struct{ key, text string }{
		{"total capacity", `"<size> total capacity"`},
		{"already allocated", `"<size> already allocated"`},
		{"free", `"<size> free"`},
	} {
		if !seen[need.key] {
			return score, 0, incomplete(m, need.text)
		}
	}
	if !seen["reserved in total by PyTorch"] && !seen["cached"] {
		return score, 0, incomplete(m, `"<size> reserved in total by PyTorch"`)
	}
	m.ReservedUnallocated = m.Reserved - m.Allocated
	end := l[1]
	// The optional advice that follows ends with "PYTORCH_CUDA_ALLOC_CONF".
	tail := rest[end:]
	if len(tail) > 300 {
		tail = tail[:300]
	}
	if i := strings.Index(tail, "PYTORCH_CUDA_ALLOC_CONF"); i >= 0 && strings.HasPrefix(strings.TrimSpace(tail), "If reserved") {
		tail = tail[:i+len("PYTORCH_CUDA_ALLOC_CONF")]
		m.Hint = hintIn(tail)
		end += len(tail)
		if m.Hint != NoHint {
			score++
		}
	}
	return score, end, nil
}

func hintIn(s string) Hint {
	switch {
	case expandableRE.MatchString(s):
		return HintExpandableSegments
	case maxSplitHintRE.MatchString(s):
		return HintMaxSplitSize
	}
	return NoHint
}

func incomplete(m *Message, what string) error {
	return fmt.Errorf("incomplete CUDA out-of-memory message (Tried to allocate %s): expected %s", alloc.FormatSize(m.Requested), what)
}

// intAt returns submatch i (by index pair) of s, a run of digits, as a
// non-negative int32; what names it in the error. No GPU index or process
// id reaches 2^31 (PyTorch's c10::DeviceIndex is a small integer, Linux's
// pid_max at most 2^22), so a larger one is not a message PyTorch printed.
func intAt(s string, loc []int, i int, what string) (int, error) {
	digits := s[loc[i]:loc[i+1]]
	v, err := strconv.ParseInt(digits, 10, 32)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("CUDA out-of-memory message: %s %s is out of range (at most %d)", what, clipDigits(digits), math.MaxInt32)
	}
	return int(v), nil
}

// clipDigits shortens a long run of digits for a message.
func clipDigits(d string) string {
	if len(d) <= 24 {
		return d
	}
	return d[:20] + fmt.Sprintf("… (%d digits)", len(d))
}

// sizeAt reads the size whose number is submatch i and unit submatch i+2.
func sizeAt(s string, loc []int, i int) (int64, error) {
	return parseSize(s[loc[i]:loc[i+1]], s[loc[i+2]:loc[i+3]])
}

func parseSize(num, unit string) (int64, error) {
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("reading size %q: %w", num, err)
	}
	var mult float64
	switch unit {
	case "bytes", "byte", "B":
		mult = 1
	case "KiB", "KB":
		mult = 1 << 10
	case "MiB", "MB":
		mult = 1 << 20
	case "GiB", "GB":
		mult = 1 << 30
	case "TiB", "TB":
		mult = 1 << 40
	default:
		return 0, fmt.Errorf("reading size: unknown unit %q", unit)
	}
	b := math.Round(v * mult)
	if b > math.MaxInt64/2 {
		return 0, fmt.Errorf("reading size: %s %s is out of range", num, unit)
	}
	return int64(b), nil
}
