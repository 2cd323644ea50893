package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// Llama-3.2-1B cut to 2 layers (8 kv heads of 64 channels), float32,
// batch 2 × 2 beams, prompt 16, 4 new tokens: the cache holds 16 + 4 − 1
// = 19 positions of 2·2·8·64·4 = 16,384 bytes a row, 4 rows.
func TestGenerateEstimateJSON(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "Llama-3.2-1B", "--layers", "2", "--mode", "generate", "--prompt", "16", "--new-tokens", "4",
		"--batch", "2", "--beams", "2", "--gpu", "t4", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var m struct {
		Mode       string                `json:"mode"`
		AtPeak     map[string]int64      `json:"at_peak_bytes"`
		Generation report.GenerationJSON `json:"generation"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	const row = 2 * 2 * 8 * 64 * 4
	g := m.Generation
	want := report.GenerationJSON{Prompt: 16, NewTokens: 4, Beams: 2, Cache: "dynamic", Rows: 4,
		KVCacheBytes: 19 * 4 * row, KVCachePositions: 19, KVCachePrefillBytes: 16 * 4 * row, KVCacheBytesPerToken: 4 * row}
	got := g
	got.PeakAllocatedPerTokenBytes, got.PrefillPeakAllocatedBytes, got.PrefillPeakReservedBytes = 0, 0, 0
	if m.Mode != "generate" || got != want {
		t.Errorf("mode %q, generation %+v; want %+v", m.Mode, got, want)
	}
	if _, ok := m.AtPeak["kv_cache"]; !ok {
		t.Errorf("at_peak_bytes has no kv_cache: %v", m.AtPeak)
	}
	if g.PrefillPeakAllocatedBytes <= 0 || g.PrefillPeakReservedBytes < g.PrefillPeakAllocatedBytes {
		t.Errorf("prefill peak allocated %d, reserved %d", g.PrefillPeakAllocatedBytes, g.PrefillPeakReservedBytes)
	}
	// training's JSON keeps its keys: no kv_cache there
	out, _, _ = run("estimate", "mlp", "--batch", "2", "--json")
	if strings.Contains(out, "kv_cache") || strings.Contains(out, `"mode"`) {
		t.Errorf("training JSON mentions the cache or a mode:\n%s", out)
	}
}

func TestGenerateEstimateText(t *testing.T) {
	t.Parallel()
	out, errs, code := run("estimate", "Llama-3.2-1B", "--layers", "2", "--mode", "generate", "--prompt", "16", "--new-tokens", "4", "--batch", "2", "--cache", "static", "--gpu", "t4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, s := range []string{"generate: prompt 16 + 4 new tokens", "static cache", "KV cache at the end", "(20 positions × 2 rows)", "kv cache", "fits: yes"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	out, errs, code = run("estimate", "mlp", "--mode", "eval", "--batch", "8")
	if code != 0 || !strings.Contains(out, "eval under no_grad") || strings.Contains(out, "gradients") {
		t.Errorf("eval: exit %d (%s):\n%s", code, errs, out)
	}
}
