package cli

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/chart"
	"github.com/batchfit/batchfit/internal/report"

	"github.com/batchfit/batchfit/job"
)

func TestParseBatches(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []int64
		err  string
	}{
		{"64", []int64{64}, ""},
		{"64,8,32,4", []int64{64, 8, 32, 4}, ""},
		{"1:64", []int64{1, 2, 4, 8, 16, 32, 64}, ""},
		{"3:7", []int64{3, 6}, ""},
		{"8:64:8", []int64{8, 16, 24, 32, 40, 48, 56, 64}, ""},
		{"5:5:3", []int64{5}, ""},
		{"1:4096:1", nil, ""}, // 4,096 sizes: the most one --batch gives
		{"1:4097:1", nil, "gives 4,097 batch sizes, more than 4,096"},
		{"1:1000000:1", nil, "gives 1,000,000 batch sizes"},
		{"1:" + strings.Repeat("9", 18) + ":1", nil, "more than 4,096"},
		{strings.Repeat("1,", 4096) + "1", nil, "gives 4,097 batch sizes"},
		// doubling up to the largest int64 stops before it overflows
		{"4611686018427387904:9223372036854775807", []int64{1 << 62}, ""},
		{"1:9223372036854775807", nil, ""},
		{"0:4", nil, "not a positive integer"},
		{"8:4", nil, "ends before it starts"},
		{"1:2:3:4", nil, "want FROM:TO"},
		{"", nil, "required"},
	}
	for _, c := range cases {
		got, err := parseBatches(c.in)
		label := c.in
		if len(label) > 40 {
			label = label[:40] + "…"
		}
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want an error saying %q", label, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", label, err)
		case c.want != nil && !slices.Equal(got, c.want):
			t.Errorf("%s = %v, want %v", label, got, c.want)
		}
		for _, b := range got {
			if b <= 0 {
				t.Errorf("%s: batch %d", label, b)
			}
		}
	}
	if got, _ := parseBatches("1:4096:1"); len(got) != 4096 || got[4095] != 4096 {
		t.Errorf("1:4096:1: %d sizes", len(got))
	}
	if got, _ := parseBatches("1:9223372036854775807"); len(got) != 63 || got[62] != 1<<62 {
		t.Errorf("1:2^63-1: %d sizes, last %d", len(got), got[len(got)-1])
	}
}

func FuzzParseBatches(f *testing.F) {
	for _, s := range []string{"64", "1:64", "8:64:8", "1,2,3", "1:1000000:1", "4611686018427387904:9223372036854775807", ":", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseBatches(s)
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > job.MaxBatchSizes {
			t.Fatalf("%q: %d sizes", s, len(got))
		}
		for _, b := range got {
			if b <= 0 {
				t.Fatalf("%q: batch %d", s, b)
			}
		}
	})
}

// A sweep where some batches run out of memory says so the same way in
// the table, the CSV, the JSON and the chart: the peak figures of such a
// row are the allocator's at the failure, and "needs at least" is what
// the step needs, never below its own saved activations.
func TestSweepOutOfMemoryRows(t *testing.T) {
	t.Parallel()
	args := []string{"sweep", "resnet50", "--batch", "128:512", "--gpu", "t4"}
	out, errs, code := run(append(args, "--json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var pts []report.EstimateJSON
	if err := json.Unmarshal([]byte(out), &pts); err != nil {
		t.Fatal(err)
	}
	csvOut, _, _ := run(append(args, "--csv")...)
	rows, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil || len(rows) != len(pts)+1 {
		t.Fatalf("csv: %v, %d rows", err, len(rows))
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	text, _, _ := run(args...)
	svg := filepath.Join(t.TempDir(), "s.svg")
	run(append(args, "--svg", svg)...)
	b, _ := os.ReadFile(svg)
	d, err := chart.Inspect(b)
	if err != nil {
		t.Fatal(err)
	}
	need := d.Lines["needs at least (out of memory)"]
	oom := 0
	for i, p := range pts {
		row := rows[i+1]
		csvNeed, _ := strconv.ParseInt(row[col["needs_at_least_bytes"]], 10, 64)
		if (p.OOM != "") != (row[col["out_of_memory"]] == "true") || csvNeed != p.NeedsAtLeast {
			t.Errorf("batch %d: JSON oom %q needs %d, CSV %v needs %d", p.Batch, p.OOM, p.NeedsAtLeast, row[col["out_of_memory"]], csvNeed)
		}
		if p.OOM == "" {
			continue
		}
		if p.NeedsAtLeast < p.ActivationsBytes+p.ParametersBytes || p.NeedsAtLeast <= p.GPUCapacityBytes {
			t.Errorf("batch %d: needs %d, below its activations and parameters %d or the capacity %d", p.Batch, p.NeedsAtLeast, p.ActivationsBytes+p.ParametersBytes, p.GPUCapacityBytes)
		}
		if oom >= len(need.Points) || need.Points[oom].X != float64(p.Batch) || need.Points[oom].Y != float64(p.NeedsAtLeast) {
			t.Errorf("batch %d: the chart's need %v, JSON %d", p.Batch, need.Points, p.NeedsAtLeast)
		}
		oom++
		var line string
		for _, l := range strings.Split(text, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == strconv.FormatInt(p.Batch, 10) {
				line = l
			}
		}
		if !strings.Contains(line, "no: OOM*") || !strings.Contains(line, report.FormatBytes(p.NeedsAtLeast)) {
			t.Errorf("batch %d: table row %q does not show the OOM and its need %s", p.Batch, line, report.FormatBytes(p.NeedsAtLeast))
		}
	}
	if oom == 0 || !strings.Contains(text, "* out of memory: ") || !strings.Contains(text, "largest batch swept that fits: 128\n") {
		t.Errorf("%d OOM rows; text:\n%s", oom, text)
	}
	// the header names the swept sizes, not the first one alone
	if head, _, _ := strings.Cut(text, "\n"); !strings.Contains(head, " · batch 128 to 512 (3 sizes) · ") {
		t.Errorf("header %q", head)
	}
}

// When every swept batch fits, the largest is the largest tried, not a
// limit, and the chart and the text say so.
func TestSweepAllFit(t *testing.T) {
	t.Parallel()
	args := []string{"sweep", "resnet18", "--batch", "1:8", "--gpu", "h100-80gb"}
	svg := filepath.Join(t.TempDir(), "s.svg")
	text, errs, code := run(append(args, "--svg", svg)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(svg)
	d, err := chart.Inspect(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Markers) != 1 || d.Markers[0].Label != "all fit; largest tried: 8" {
		t.Errorf("markers %+v", d.Markers)
	}
	if strings.Contains(string(b), "largest batch that fits") || !strings.Contains(text, "every batch swept fits: 8 is the largest tried, not the limit") {
		t.Errorf("the chart or text calls 8 a limit:\n%s", text)
	}
}
