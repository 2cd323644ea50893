package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/internal/report"
	"github.com/batchfit/batchfit/predict"
)

func TestParseMargin(t *testing.T) {
	t.Parallel()
	const capacity = 10 << 30
	band := predict.Band{Under: 0.05}
	cases := []struct {
		in   string
		want int64
		bad  bool
	}{
		// the answer's band's worst under-prediction as a share of the GPU
		{"band", int64(math.Ceil(0.05 * capacity)), false},
		{"BAND", int64(math.Ceil(0.05 * capacity)), false},
		{"10%", 1 << 30, false},
		{"2GiB", 2 << 30, false},
		{"0", 0, false},
		{"0%", 0, false},
		{"120%", 0, true},
		{"-5%", 0, true},
		{"some", 0, true},
		{"10GiB", 0, true}, // leaves nothing
		// a number without a unit would be bytes: 0.1 meant as a share
		// and 5 meant as GiB would leave the bare figure
		{"0.1", 0, true},
		{"5", 0, true},
		{"0.0", 0, false},
		{"512MiB", 512 << 20, false},
	}
	for _, c := range cases {
		got, err := parseMargin(c.in, capacity, band)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("parseMargin(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

// maxbatch answers with its band by default: its answer's device total
// leaves the band's share of the GPU free, so a real device total as far
// above the prediction as the worst recording of its group still fits;
// --margin 0 answers the bare figure, a larger batch. ResNet-18 relies on
// cuDNN's convolutions and nothing else, so its band is that group's.
func TestMaxBatchMargin(t *testing.T) {
	t.Parallel()
	t4, err := gpu.Lookup("t4")
	if err != nil {
		t.Fatal(err)
	}
	band, ok := predict.Bands[predict.Convolutions]
	if !ok {
		t.Fatal("no band for convolutions")
	}
	answer := func(more ...string) report.MaxBatchJSON {
		t.Helper()
		out, errs, code := run(append([]string{"maxbatch", "resnet18", "--gpu", "t4", "--json"}, more...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errs)
		}
		var m report.MaxBatchJSON
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	safe, bare := answer(), answer("--margin", "0")
	if want := band.Margin(t4.Capacity); safe.MarginBytes != want || bare.MarginBytes != 0 {
		t.Errorf("margins %d and %d, want %d and 0", safe.MarginBytes, bare.MarginBytes, want)
	}
	if safe.MaxBatch >= bare.MaxBatch || safe.MaxBatch < 1 {
		t.Errorf("with the band %d, bare %d: want a smaller answer with the band", safe.MaxBatch, bare.MaxBatch)
	}
	if high := float64(safe.AtMax.DeviceTotalBytes) / (1 - band.Under); high > float64(t4.Capacity) {
		t.Errorf("batch %d: device total %d may really be %.0f, above the T4's %d", safe.MaxBatch, safe.AtMax.DeviceTotalBytes, high, t4.Capacity)
	}
	if bare.AtMax.DeviceTotalBytes > t4.Capacity || bare.AtNext.Fits {
		t.Errorf("bare answer %d: device total %d of %d", bare.MaxBatch, bare.AtMax.DeviceTotalBytes, t4.Capacity)
	}
	// the text says so in one line
	out, _, _ := run("maxbatch", "resnet18", "--gpu", "t4")
	if !strings.Contains(out, "largest batch that fits with the margin") || !strings.Contains(out, "margin: ") || !strings.Contains(out, "--margin 0 for the bare figure") {
		t.Errorf("maxbatch does not say its margin:\n%s", out)
	}
	// sweep's fits column follows the same margin, and estimate prints the band
	out, _, _ = run("sweep", "resnet18", "--batch", "1,2", "--gpu", "t4")
	if !strings.Contains(out, "\nmargin: ") {
		t.Errorf("sweep does not say its margin:\n%s", out)
	}
	out, _, _ = run("sweep", "resnet18", "--batch", "1", "--gpu", "t4", "--csv")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasSuffix(lines[0], ",margin_bytes") ||
		!strings.HasSuffix(lines[1], ","+fmt.Sprint(band.Margin(t4.Capacity))) {
		t.Errorf("sweep --csv does not give its margin:\n%s", out)
	}
	out, _, _ = run("estimate", "resnet18", "--gpu", "t4")
	if !strings.Contains(out, "band: batchfit's device total has been "+band.String()) {
		t.Errorf("estimate prints no band:\n%s", out)
	}
}

// A size for --gpu is not an H100: no step time unless --like names the
// GPU, whose speed it then has (before, any size ran at an H100's rates).
func TestGPUSize(t *testing.T) {
	t.Parallel()
	step := func(args ...string) float64 {
		t.Helper()
		out, errs, code := run(append([]string{"estimate", "resnet18", "--batch", "8", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		var e report.EstimateJSON
		if err := json.Unmarshal([]byte(out), &e); err != nil {
			t.Fatal(err)
		}
		if e.Time == nil {
			return 0
		}
		return e.Time.StepSeconds
	}
	if s := step("--gpu", "24GB"); s != 0 {
		t.Errorf("--gpu 24GB has a step time %g", s)
	}
	if like, l4 := step("--gpu", "24GB", "--like", "l4"), step("--gpu", "l4"); like == 0 || like != l4 {
		t.Errorf("--gpu 24GB --like l4: step %g, l4's %g", like, l4)
	}
	out, _, _ := run("estimate", "resnet18", "--batch", "8", "--gpu", "24GB")
	if !strings.Contains(out, "no step time: a size alone says nothing of speed") {
		t.Errorf("no word on the missing step time:\n%s", out)
	}
}

// plan on a size given as --gpu names the flag that gives it step-time
// rates, as maxbatch --objective throughput does, and runs with it.
func TestPlanOnASizeNamesLike(t *testing.T) {
	t.Parallel()
	args := []string{"plan", "gpt2", "--seq", "256", "--gpu", "24GB", "--global-batch", "8", "--top", "1"}
	_, errs, code := run(args...)
	if code != 2 || !strings.Contains(errs, "--like names the catalog GPU") {
		t.Errorf("exit %d: %s", code, errs)
	}
	if _, errs, code := run(append(args, "--like", "rtx-4090")...); code != 0 {
		t.Errorf("with --like: exit %d: %s", code, errs)
	}
}

// maxbatch, plan and sweep say what margin they were held to in the same
// words, whatever --margin is.
func TestMarginLineIsOneLine(t *testing.T) {
	t.Parallel()
	for _, m := range []string{"band", "0", "10%", "1GiB"} {
		lines := map[string]string{}
		for _, args := range [][]string{
			{"maxbatch", "resnet18", "--gpu", "t4", "--limit", "8"},
			{"sweep", "resnet18", "--gpu", "t4", "--batch", "1,2"},
			{"plan", "resnet18", "--gpu", "t4", "--global-batch", "8", "--top", "1"},
		} {
			out, errs, _ := run(append(args, "--margin", m)...)
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "margin: ") {
					lines[args[0]] = l
				}
			}
			if lines[args[0]] == "" {
				t.Errorf("--margin %s: %s prints no margin line:\n%s%s", m, args[0], out, errs)
			}
		}
		// with the band each plan carries its own (its levers change
		// what it relies on), and the line says so
		if m == "band" {
			if !strings.HasPrefix(lines["plan"], "margin: each plan leaves free the band its own prediction has earned") {
				t.Errorf("--margin band: plan's line %q", lines["plan"])
			}
			lines["plan"] = lines["sweep"]
		}
		if lines["maxbatch"] != lines["sweep"] || lines["sweep"] != lines["plan"] {
			t.Errorf("--margin %s: the margin lines differ:\n%q\n%q\n%q", m, lines["maxbatch"], lines["sweep"], lines["plan"])
		}
	}
}

// --like takes a catalog GPU, not another size.
func TestLikeNamesACatalogGPU(t *testing.T) {
	t.Parallel()
	_, errs, code := run("estimate", "mlp", "--gpu", "24GB", "--like", "16GB")
	if code != 2 || !strings.Contains(errs, "name a GPU from 'batchfit gpus'") {
		t.Errorf("exit %d: %s", code, errs)
	}
	if _, errs, code := run("estimate", "mlp", "--gpu", "24GB", "--like", "rtx-4090"); code != 0 {
		t.Errorf("a catalog GPU: exit %d: %s", code, errs)
	}
}

// With the band, plan holds each plan to its own band: the JSON gives
// each plan's margin, the current setup's at the top, and the least the
// levers reach, which the screens took. gpt2 on one GPU relies on nothing
// (dense training) as it stands; the lora lever reaches adapters and, with
// 4-bit weights, adapters and quantized: the least is the adapters' band.
func TestPlanOwnMargins(t *testing.T) {
	t.Parallel()
	out, errs, code := run("plan", "gpt2", "--seq", "256", "--gpu", "a10g", "--global-batch", "8", "--top", "3", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var p report.PlanJSON
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatal(err)
	}
	a10g, err := gpu.Lookup("a10g")
	if err != nil {
		t.Fatal(err)
	}
	dense, lora := predict.Bands[0], predict.Bands[predict.Adapters]
	if want := dense.Margin(a10g.Capacity); p.MarginBytes != want || p.Current.MarginBytes != want {
		t.Errorf("current setup's margin %d (top %d), want the dense band's %d", p.Current.MarginBytes, p.MarginBytes, want)
	}
	if want := lora.Margin(a10g.Capacity); p.LeastMarginBytes != want {
		t.Errorf("least margin %d, want the adapters' band's %d", p.LeastMarginBytes, want)
	}
	for _, e := range p.Evaluated {
		want := dense.Margin(a10g.Capacity)
		switch e.Trains {
		case "lora":
			want = lora.Margin(a10g.Capacity)
		case "qlora":
			want = predict.Bands[predict.Adapters|predict.Quantized].Margin(a10g.Capacity)
		}
		if e.MarginBytes != want {
			t.Errorf("plan %+v: margin %d, want %d", e, e.MarginBytes, want)
		}
	}
}
