package oom

import (
	"strings"
	"testing"
	"time"
)

func explain(t *testing.T, text string) Explanation {
	t.Helper()
	m, err := Parse(text)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return Explain(m)
}

func TestExplainSeed(t *testing.T) {
	e := explain(t, msgLegacySeed)
	if e.Cause != CauseInsufficientMemory {
		t.Errorf("Cause = %s, want %s", e.Cause, CauseInsufficientMemory)
	}
	// 8.74 GiB > 6.32 GiB free + (8.86 − 8.84) GiB cached.
	wantAvail := gb(6.32) + gb(8.86) - gb(8.84)
	if e.Available != wantAvail {
		t.Errorf("Available = %d, want %d", e.Available, wantAvail)
	}
	if want := gb(8.74) - wantAvail; e.Deficit != want {
		t.Errorf("Deficit = %d, want %d", e.Deficit, want)
	}
	if e.CachedCouldServe || e.ExceedsDevice || e.ExceedsAllowed {
		t.Errorf("flags: %+v", e)
	}
	for _, want := range []string{
		"the request (8.74 GiB) exceeds free + cached memory (6.32 GiB free + 20.48 MiB reserved but unallocated = 6.34 GiB) by 2.40 GiB",
	} {
		if !strings.Contains(e.Summary, want) {
			t.Errorf("Summary %q does not contain %q", e.Summary, want)
		}
	}
	// total − free − reserved = 15.90 − 6.32 − 8.86 GiB
	if want := gb(15.90) - gb(6.32) - gb(8.86); e.OutsidePyTorch != want {
		t.Errorf("OutsidePyTorch = %d, want %d", e.OutsidePyTorch, want)
	}
	text := e.Text()
	for _, want := range []string{"PyTorch ≤ 2.0 message", "shortfall", "2.40 GiB", "Next steps:", "Reduce peak memory by at least 2.40 GiB"} {
		if !strings.Contains(text, want) {
			t.Errorf("Text() does not contain %q:\n%s", want, text)
		}
	}
}

func TestExplain(t *testing.T) {
	tests := []struct {
		name       string
		text       string
		cause      Cause
		maxSplit   int64
		findings   []string // substrings that must appear among the findings
		steps      []string // substrings that must appear among the steps
		notInSteps []string
		firstStep  string // a substring of the first, most effective step
	}{
		{
			name: "fragmentation", text: msgFragmented, cause: CauseFragmentation, maxSplit: 4096,
			findings: []string{"alone is more than the request (4.00 GiB)", "NVML counts 37.88 GiB in use by this process, 901.12 MiB more than PyTorch reserved"},
			steps:    []string{"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "max_split_size_mb:4096", "empty_cache() will not help"},
		},
		{
			// 2 MiB ≤ kLargeBuffer, and 22.94 GiB allocated ≥ 246.39 MiB
			// reserved but unallocated: the tensors fill the GPU.
			name: "small request, container pid", text: msgCurrent21, cause: CauseTensorsFillGPU,
			findings:   []string{"2.00 MiB is the segment size of the small pool, so the tensor itself needed at most 1 MiB", "probably this one", "Even a fixed-size 2.00 MiB segment could not be obtained"},
			steps:      []string{"Reduce peak memory", "may win back part of the 246.39 MiB reserved but unallocated"},
			notInSteps: []string{"Free the GPU from other processes", "max_split_size_mb"},
			firstStep:  "Reduce peak memory",
		},
		{
			name: "20 MiB request", text: msgCurrentFull, cause: CauseMemoryFraction,
			findings: []string{"20.00 MiB is the segment size for requests between 1 MiB and 10 MiB", "1 other process(es) use 1024.00 MiB on this GPU: 1234"},
			steps:    []string{"set_per_process_memory_fraction"},
		},
		{
			name: "fraction, legacy", text: msgLegacyAllowed, cause: CauseMemoryFraction,
			findings: []string{"A per-process limit of 19.80 GiB is set", "reserved + request = 21.10 GiB is above it"},
			steps:    []string{"needs at least 21.10 GiB allowed", "The device itself had room: 20.06 GiB free"},
		},
		{
			name: "too large", text: msgTooLarge, cause: CauseExceedsDevice,
			findings: []string{"121.4% of the GPU's total capacity"},
			steps:    []string{"it alone needs 96.00 GiB but the GPU has 79.10 GiB"},
		},
		{
			name: "other processes", text: msgOthers, cause: CauseOtherProcesses,
			findings: []string{"2 other process(es) use 10.95 GiB on this GPU: 4242 (5.00 GiB), 4343 (5.95 GiB)"},
			steps:    []string{"they hold 10.95 GiB, the shortfall is 412.00 MiB"},
		},
		{
			// 12.50 MiB ≤ kLargeBuffer; 10.31 GiB allocated ≥ 10.33 − 10.31
			// GiB reserved but unallocated.
			name: "legacy, tensors fill the GPU", text: msgLegacyCached, cause: CauseTensorsFillGPU,
			findings: []string{"every piece of the 20.48 MiB reserved but unallocated that could have served it was smaller than 12.50 MiB"},
			steps:    []string{"Reduce peak memory", "11.44 MiB more free (12.50 MiB requested, 1.06 MiB free)"},
		},
		{
			// 10.33 − 10.29 GiB = 40.96 MiB reserved but unallocated
			// against 40 MiB requested: 0.96 MiB apart, less than the
			// rounding of the two GiB figures (2 × 5.37 MB). 40 MiB is
			// more than a 20 MiB page, so fragmentation; max_split_size_mb
			// is 40 rounded down to a power of two, 32.
			name: "legacy fragmentation within rounding", cause: CauseFragmentation, maxSplit: 32,
			text:     "RuntimeError: CUDA out of memory. Tried to allocate 40.00 MiB (GPU 0; 10.92 GiB total capacity; 10.29 GiB already allocated; 1.06 MiB free; 10.33 GiB reserved in total by PyTorch)",
			findings: []string{"as large as, to within the rounding of the printed figures,"},
			steps:    []string{"Upgrade PyTorch and set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "max_split_size_mb:32"},
		},
		{
			// A nearly full GPU: 20 MiB (the segment of a 1–10 MiB tensor)
			// fits neither the 10 MiB free nor, by get_free_block, any
			// cached piece; such pieces are smaller than a 20 MiB page, so
			// no setting joins them. Live: 14.56 GiB = 14909.44 MiB of
			// 10 + 14909.44 + 921.60 = 15841.04 MiB (15.47 GiB), 94.1%.
			name:       "nearly full GPU",
			text:       "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.78 GiB of which 10.00 MiB is free. Of the allocated memory 14.56 GiB is allocated by PyTorch, and 921.60 MiB is reserved by PyTorch but unallocated.",
			cause:      CauseTensorsFillGPU,
			findings:   []string{"smaller than a page of an expandable segment (20.00 MiB in the large pool, 2.00 MiB in the small one)"},
			steps:      []string{"the live tensors hold 14.56 GiB, 94.1% of the 15.47 GiB the GPU leaves PyTorch", "needed 10.00 MiB more free (20.00 MiB requested, 10.00 MiB free)", "batch size", "activation checkpointing", "bf16/fp16", "may win back part of the 921.60 MiB reserved but unallocated, never more", "empty_cache() will not help"},
			notInSteps: []string{"max_split_size_mb", "the settings are not enough"},
			firstStep:  "Reduce peak memory",
		},
		{
			// Free (10 MiB) and cached (15 MiB) together cover 20 MiB,
			// neither alone does; all in pieces under a page, live
			// tensors far larger than the cache: the tensors fill it.
			name:  "split but stranded",
			text:  "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.78 GiB of which 10.00 MiB is free. Of the allocated memory 15.00 GiB is allocated by PyTorch, and 15.00 MiB is reserved by PyTorch but unallocated.",
			cause: CauseTensorsFillGPU,
			steps: []string{"Reduce peak memory"},
		},
		{
			// The same request while the cache (11 GiB) holds more than the
			// live tensors (4 GiB): the cache's history is the larger part,
			// so fragmentation.
			name:  "small request, cache larger than tensors",
			text:  "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 15.78 GiB of which 10.00 MiB is free. Of the allocated memory 4.00 GiB is allocated by PyTorch, and 11.00 GiB is reserved by PyTorch but unallocated.",
			cause: CauseFragmentation,
			steps: []string{"expandable_segments:True", "max_split_size_mb cannot help this request"},
		},
		{
			name:  "split between free and cache",
			text:  "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 600.00 MiB is free. Of the allocated memory 21.50 GiB is allocated by PyTorch, and 700.00 MiB is reserved by PyTorch but unallocated.",
			cause: CauseSplitFree, maxSplit: 1024,
			findings: []string{"does not exceed free + cached memory (600.00 MiB free + 700.00 MiB reserved but unallocated = 1.27 GiB)"},
			steps:    []string{"expandable_segments:True", "max_split_size_mb:1024"},
		},
		{
			name:  "unexplained",
			text:  "CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 10.00 GiB is free. Of the allocated memory 12.00 GiB is allocated by PyTorch, and 2.00 MiB is reserved by PyTorch but unallocated.",
			cause: CauseUnexplained,
			steps: []string{"another process"},
		},
		{
			name: "small max split", text: "CUDA out of memory. Tried to allocate 22.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 2.00 MiB is free. Of the allocated memory 21.50 GiB is allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.",
			cause: CauseFragmentation, maxSplit: 22,
			steps: []string{"max_split_size_mb:22"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := explain(t, tt.text)
			if e.Cause != tt.cause {
				t.Errorf("Cause = %s, want %s (summary %q)", e.Cause, tt.cause, e.Summary)
			}
			if e.MaxSplitSizeMB != tt.maxSplit {
				t.Errorf("MaxSplitSizeMB = %d, want %d", e.MaxSplitSizeMB, tt.maxSplit)
			}
			findings := strings.Join(e.Findings, "\n")
			for _, want := range tt.findings {
				if !strings.Contains(findings, want) {
					t.Errorf("findings do not contain %q:\n%s", want, findings)
				}
			}
			steps := strings.Join(e.Steps, "\n")
			for _, want := range tt.steps {
				if !strings.Contains(steps, want) {
					t.Errorf("steps do not contain %q:\n%s", want, steps)
				}
			}
			if tt.firstStep != "" && (len(e.Steps) == 0 || !strings.Contains(e.Steps[0], tt.firstStep)) {
				t.Errorf("first step is not %q:\n%s", tt.firstStep, steps)
			}
			for _, bad := range tt.notInSteps {
				if strings.Contains(steps, bad) {
					t.Errorf("steps contain %q:\n%s", bad, steps)
				}
			}
			if len(e.Steps) == 0 || e.Summary == "" {
				t.Errorf("empty explanation: %+v", e)
			}
			text := e.Text()
			if !strings.Contains(text, e.Summary) || !strings.Contains(text, "Findings:") {
				t.Errorf("Text() misses the summary or findings:\n%s", text)
			}
			// the headline says the cause in words, never its JSON label
			head, _, _ := strings.Cut(text, "\n")
			if !strings.HasSuffix(head, ": "+e.Cause.Words()) || strings.Contains(head, "_") {
				t.Errorf("headline %q: want the cause %s in words", head, e.Cause)
			}
		})
	}
}

func TestExplainDoesNotAliasMessage(t *testing.T) {
	m, err := Parse(msgOthers)
	if err != nil {
		t.Fatal(err)
	}
	e := Explain(m)
	m.OtherProcesses[0].Bytes = 0
	if e.Message.OtherProcesses[0].Bytes == 0 {
		t.Error("Explanation shares OtherProcesses with the Message")
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		msgCurrentFull, msgCurrentMinimal, msgCurrent21, msgLegacySeed, msgLegacyAllowed,
		msgLegacyCached, msgFragmented, msgTooLarge, msgOthers,
		wrap(msgCurrentFull, 60, true), traceback(3, msgLegacySeed),
		"CUDA out of memory. Tried to allocate", "", "CUDA error: out of memory",
		// hostile shapes: a device index past int64, sizes past any GPU,
		// negative and non-finite figures
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 99999999999999999999 has a total capacity of 14.75 GiB of which 3.06 MiB is free.",
		"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1e20 GiB. GPU 0 has a total capacity of 1e308 GiB of which -5.00 MiB is free.",
		"CUDA out of memory. Tried to allocate nan MiB (GPU 0; inf GiB total capacity; -1.00 GiB already allocated; 0 bytes free; 99999999999999999999.00 GiB reserved in total by PyTorch)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<20 {
			s = s[:1<<20]
		}
		start := time.Now()
		ms, err := ParseAll(s)
		if err == nil {
			for _, m := range ms {
				_ = Explain(m).Text()
			}
		}
		m, err := Parse(s)
		if (err == nil) != (m != nil) {
			t.Fatalf("Parse returned %v, %v", m, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Parse took %v on %d bytes", d, len(s))
		}
	})
}

// TestParseLargeInput checks that Parse stays linear on a long log with
// many partial messages.
func TestParseLargeInput(t *testing.T) {
	var b strings.Builder
	for b.Len() < 4<<20 {
		b.WriteString("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 79.10 GiB of\n")
	}
	b.WriteString(msgLegacySeed)
	start := time.Now()
	m, err := Parse(b.String())
	if err != nil {
		t.Fatal(err)
	}
	if m.Requested != gb(8.74) {
		t.Errorf("Requested = %d", m.Requested)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Parse took %v", d)
	}
}

// Every cause has words of its own for the report, not its JSON label.
func TestCauseWords(t *testing.T) {
	for _, c := range []Cause{CauseExceedsDevice, CauseMemoryFraction, CauseFragmentation, CauseTensorsFillGPU, CauseSplitFree, CauseOtherProcesses, CauseInsufficientMemory, CauseUnexplained} {
		if w := c.Words(); w == string(c) || strings.Contains(w, "_") {
			t.Errorf("%s: %q", c, w)
		}
	}
}
