package oom

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/alloc"
)

// Messages written from the format strings in CUDACachingAllocator.cpp
// (see the package documentation); the figures are chosen by hand.
const (
	// PyTorch 2.3+: NVML info for this and another process, a memory
	// fraction, private pools, the expandable_segments hint with its
	// double spaces.
	msgCurrentFull = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 3.44 MiB is free. Including non-PyTorch memory, this process has 79.09 GiB memory in use. Process 1234 has 1.00 GiB memory in use. 5.00 GiB allowed; Of the allocated memory 78.20 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and 412.51 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"

	// No NVML, no fraction, no private pools.
	msgCurrentMinimal = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has a total capacity of 23.64 GiB of which 1.12 GiB is free. Of the allocated memory 19.87 GiB is allocated by PyTorch, and 2.40 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"

	// PyTorch 2.1: "capacty" and the max_split_size_mb hint; NVML lists
	// the process under a container-foreign PID.
	msgCurrent21 = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacty of 23.65 GiB of which 1.06 MiB is free. Process 2331 has 23.64 GiB memory in use. Of the allocated memory 22.94 GiB is allocated by PyTorch, and 246.39 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"

	// The seed example (PyTorch ≤ 2.0).
	msgLegacySeed = "RuntimeError: CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"

	// ≤2.0 with a memory fraction.
	msgLegacyAllowed = "RuntimeError: CUDA out of memory. Tried to allocate 2.50 GiB (GPU 3; 39.59 GiB total capacity; 18.52 GiB already allocated; 20.06 GiB free; 19.80 GiB allowed; 18.60 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"

	// The oldest layout (1.x): "cached", no advice.
	msgLegacyCached = "RuntimeError: CUDA out of memory. Tried to allocate 12.50 MiB (GPU 0; 10.92 GiB total capacity; 10.31 GiB already allocated; 1.06 MiB free; 10.33 GiB cached)"

	// Fragmentation: 6 GiB cached but unallocated, 4 GiB requested.
	msgFragmented = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 39.39 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 37.88 GiB memory in use. Of the allocated memory 31.00 GiB is allocated by PyTorch, and 6.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"

	// A request larger than the device, tolerated units "GB"/"MB".
	msgTooLarge = "CUDA out of memory. Tried to allocate 96.00 GB. GPU 0 has a total capacity of 79.10 GB of which 78.00 GB is free. Of the allocated memory 100.00 MB is allocated by PyTorch, and 4.00 MB is reserved by PyTorch but unallocated."

	// Other processes hold the memory.
	msgOthers = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 512.00 MiB is free. Including non-PyTorch memory, this process has 4.30 GiB memory in use. Process 4242 has 5.00 GiB memory in use. Process 4343 has 5.95 GiB memory in use. Of the allocated memory 3.80 GiB is allocated by PyTorch, and 100.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

const (
	mib = 1 << 20
	gib = 1 << 30
)

// gb converts a figure printed in GiB (or MiB) to the bytes Parse returns.
func gb(v float64) int64 { return int64(v*gib + 0.5) }
func mb(v float64) int64 { return int64(v*mib + 0.5) }
func kb(v float64) int64 { return int64(v*1024 + 0.5) }
func sum(v ...int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Message
	}{
		{"current full", msgCurrentFull, Message{
			Format: Current, Requested: 20 * mib, DeviceIndex: 0,
			Total: gb(79.10), Free: mb(3.44),
			Allocated: gb(78.20), ReservedUnallocated: mb(412.51), Reserved: gb(78.20) + mb(412.51),
			PrivatePools: gb(1), ProcessInUse: gb(79.09),
			OtherProcesses: []Process{{1234, gb(1)}}, Allowed: gb(5),
			Hint: HintExpandableSegments,
		}},
		{"current minimal", msgCurrentMinimal, Message{
			Format: Current, Requested: gb(1.95), DeviceIndex: 1,
			Total: gb(23.64), Free: gb(1.12),
			Allocated: gb(19.87), ReservedUnallocated: gb(2.40), Reserved: gb(19.87) + gb(2.40),
			Hint: HintExpandableSegments,
		}},
		{"2.1 capacty typo", msgCurrent21, Message{
			Format: Current, Requested: 2 * mib, Total: gb(23.65), Free: mb(1.06),
			Allocated: gb(22.94), ReservedUnallocated: mb(246.39), Reserved: gb(22.94) + mb(246.39),
			OtherProcesses: []Process{{2331, gb(23.64)}}, Hint: HintMaxSplitSize,
		}},
		{"legacy seed", msgLegacySeed, Message{
			Format: Legacy, Requested: gb(8.74), Total: gb(15.90), Free: gb(6.32),
			Allocated: gb(8.84), Reserved: gb(8.86), ReservedUnallocated: gb(8.86) - gb(8.84),
			Hint: HintMaxSplitSize,
		}},
		{"legacy allowed", msgLegacyAllowed, Message{
			Format: Legacy, Requested: gb(2.5), DeviceIndex: 3, Total: gb(39.59), Free: gb(20.06),
			Allocated: gb(18.52), Reserved: gb(18.60), ReservedUnallocated: gb(18.60) - gb(18.52),
			Allowed: gb(19.80), Hint: HintMaxSplitSize,
		}},
		{"legacy cached", msgLegacyCached, Message{
			Format: Legacy, Requested: mb(12.5), Total: gb(10.92), Free: mb(1.06),
			Allocated: gb(10.31), Reserved: gb(10.33), ReservedUnallocated: gb(10.33) - gb(10.31),
		}},
		{"GB units", msgTooLarge, Message{
			Format: Current, Requested: gb(96), Total: gb(79.10), Free: gb(78),
			Allocated: mb(100), ReservedUnallocated: mb(4), Reserved: mb(104),
		}},
		{"KiB and bytes", "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 0 bytes is free. Of the allocated memory 7.60 GiB is allocated by PyTorch, and 1023.50 KiB is reserved by PyTorch but unallocated.", Message{
			Format: Current, Requested: 2 * mib, Total: gb(7.79), Free: 0,
			Allocated: gb(7.60), ReservedUnallocated: kb(1023.5), Reserved: gb(7.60) + kb(1023.5),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := *m
			got.Text = ""
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
			if !strings.HasPrefix(m.Text, "CUDA out of memory. Tried to allocate") {
				t.Errorf("Text = %q, want it to start at the message", m.Text)
			}
			if strings.Contains(m.Text, "Error:") {
				t.Errorf("Text = %q includes the exception prefix", m.Text)
			}
		})
	}
}

func TestParseText(t *testing.T) {
	m, err := Parse(msgCurrentFull + "\n\nDuring handling of the above exception, another exception occurred:\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(m.Text, "#environment-variables)") {
		t.Errorf("Text = %q, want it to end with the documentation link", m.Text)
	}
	m, err = Parse(msgLegacySeed + "\nTraceback (most recent call last):\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(m.Text, "Memory Management and PYTORCH_CUDA_ALLOC_CONF") {
		t.Errorf("Text = %q", m.Text)
	}
}

// traceback builds a long Python traceback of n frames ending in msg.
func traceback(n int, msg string) string {
	var b strings.Builder
	b.WriteString("[2024-05-01 12:00:00] INFO step 41 loss=2.3141\nTraceback (most recent call last):\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "  File \"/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py\", line %d, in _call_impl\n    return forward_call(*args, **kwargs)\n", 1500+i)
	}
	b.WriteString(msg)
	b.WriteString("\n[2024-05-01 12:00:01] ERROR worker exited with code 1\n")
	return b.String()
}

// wrap breaks s into lines of at most width runes, at spaces (like
// textwrap), or at exactly width when hard is true (like a terminal).
func wrap(s string, width int, hard bool) string {
	var b strings.Builder
	if hard {
		for len(s) > width {
			b.WriteString(s[:width])
			b.WriteByte('\n')
			s = s[width:]
		}
		b.WriteString(s)
		return b.String()
	}
	line := 0
	for i, w := range strings.Split(s, " ") {
		if i > 0 {
			if line+1+len(w) > width {
				b.WriteByte('\n')
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

func TestParseInContext(t *testing.T) {
	want, err := Parse(msgCurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	wantLegacy, err := Parse(msgLegacySeed)
	if err != nil {
		t.Fatal(err)
	}
	prefixed := func(s, prefix string) string {
		lines := strings.Split(s, "\n")
		for i := range lines {
			lines[i] = prefix + lines[i]
		}
		return strings.Join(lines, "\n")
	}
	tests := []struct {
		name string
		text string
		want *Message
	}{
		{"200-line traceback", traceback(100, msgCurrentFull), want},
		{"legacy in traceback", traceback(100, msgLegacySeed), wantLegacy},
		{"soft wrapped at 80", traceback(3, wrap(msgCurrentFull, 80, false)), want},
		{"hard wrapped at 80", traceback(3, wrap(msgCurrentFull, 80, true)), want},
		{"hard wrapped at 61", wrap(msgCurrentFull, 61, true), want},
		{"legacy hard wrapped", wrap(msgLegacySeed, 70, true), wantLegacy},
		{"legacy soft wrapped", wrap(msgLegacySeed, 50, false), wantLegacy},
		{"CRLF", strings.ReplaceAll(traceback(2, wrap(msgCurrentFull, 72, false)), "\n", "\r\n"), want},
		{"torchrun prefixes", prefixed(wrap(msgCurrentFull, 100, false), "[rank0]: "), want},
		{"indented", prefixed(wrap(msgCurrentFull, 100, false), "    "), want},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got, w := *m, *tt.want
			got.Text, w.Text = "", ""
			if !reflect.DeepEqual(got, w) {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, w)
			}
		})
	}
}

// TestParseHardWrapped wraps messages at every width, as a terminal does,
// including inside numbers and words.
func TestParseHardWrapped(t *testing.T) {
	for _, msg := range []string{msgCurrentFull, msgLegacySeed, msgLegacyAllowed, msgOthers, msgCurrent21} {
		want, err := Parse(msg)
		if err != nil {
			t.Fatal(err)
		}
		w := *want
		w.Text = ""
		for width := 8; width <= 160; width++ {
			for _, hard := range []bool{true, false} {
				m, err := Parse(wrap(msg, width, hard))
				if err != nil {
					t.Fatalf("width %d, hard %v: %v", width, hard, err)
				}
				got := *m
				got.Text = ""
				if !reflect.DeepEqual(got, w) {
					t.Fatalf("width %d, hard %v:\n got %+v\nwant %+v", width, hard, got, w)
				}
			}
		}
	}
}

func TestParseAll(t *testing.T) {
	text := "[rank0]: " + msgCurrentFull + "\n[rank1]: " + msgCurrentMinimal + "\nnoise\n" + msgLegacySeed
	ms, err := ParseAll(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("ParseAll found %d messages, want 3", len(ms))
	}
	for i, want := range []int64{20 * mib, gb(1.95), gb(8.74)} {
		if ms[i].Requested != want {
			t.Errorf("message %d: Requested = %d, want %d", i, ms[i].Requested, want)
		}
	}
	// The first message's figures must not leak into the second.
	if ms[1].ProcessInUse != 0 || ms[1].Allowed != 0 || len(ms[1].OtherProcesses) != 0 {
		t.Errorf("second message picked up figures of the first: %+v", ms[1])
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
		notFound         bool
	}{
		{"empty", "", `expected "CUDA out of memory. Tried to allocate ..."`, true},
		{"unrelated", "Traceback (most recent call last):\nValueError: bad shape\n", `no CUDA out-of-memory message found`, true},
		{"runtime oom", "RuntimeError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported", `CUDA error: out of memory`, true},
		{"no tried", "CUDA out of memory.\n", `without "Tried to allocate <size>"`, true},
		{"cut after tried", "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of", `incomplete CUDA out-of-memory message (Tried to allocate 20.00 MiB): expected "GPU <n> has a total capacity`, false},
		{"cut before unallocated", "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 3.44 MiB is free. Of the allocated memory 78.20 GiB is allocated by PyTorch,", `expected "<size> is reserved by PyTorch but unallocated"`, false},
		{"legacy cut", "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free;", `expected ". GPU <n> has a total capacity`, false},
		{"legacy missing free", "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 8.86 GiB reserved in total by PyTorch)", `expected "<size> free"`, false},
		{"other layout", "CUDA out of memory. Tried to allocate 20.00 MiB; whatever", `expected ". GPU <n>`, false},
		// A device index or process id past any GPU or pid is named, not
		// strconv's "value out of range".
		{"huge device", "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 99999999999999999999 has a total capacity of 79.10 GiB of which 3.44 MiB is free.", `GPU device index 99999999999999999999 is out of range`, false},
		{"huge legacy device", "CUDA out of memory. Tried to allocate 8.74 GiB (GPU 4294967296; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)", `GPU device index 4294967296 is out of range`, false},
		{"huge pid", "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of which 3.44 MiB is free. Process 123456789012345678901234567890 has 1.00 GiB memory in use.", `process id 12345678901234567890… (30 digits) is out of range`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(tt.text)
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", m)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if got := errors.Is(err, ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(err, ErrNotFound) = %v, want %v", got, tt.notFound)
			}
			if _, err := ParseAll(tt.text); err == nil {
				t.Errorf("ParseAll found a message")
			}
		})
	}
}

// TestRoundTrip checks that every size alloc.FormatSize prints (PyTorch's
// format_size) parses back to within Resolution.
func TestRoundTrip(t *testing.T) {
	for _, b := range []int64{0, 1, 1000, 1024, 1025, 5000, 1 << 20, 1<<20 + 7, 123456789, 1 << 30, 1<<30 + 1, 85_000_000_000} {
		s := alloc.FormatSize(b)
		num, unit, _ := strings.Cut(s, " ")
		got, err := parseSize(num, unit)
		if err != nil {
			t.Fatalf("parseSize(%q): %v", s, err)
		}
		if d := got - b; d > Resolution(b) || d < -Resolution(b) {
			t.Errorf("%d prints %q, parses to %d: off by %d > Resolution %d", b, s, got, d, Resolution(b))
		}
	}
}
