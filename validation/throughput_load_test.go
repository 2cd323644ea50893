package validation

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const tpHeader = "id,source,path,gpu,system,args,throughput,unit,data,exact,tf32_matmul,software,notes\n"

// tpRow is a valid row with one field replaced.
func tpRow(field, value string) string {
	f := map[string]string{"id": "a", "source": "S", "path": "o/r@c:f", "gpu": "v100-16gb", "system": "DGX-1",
		"args": "resnet50 --gpu v100-16gb --batch 64", "throughput": "100", "unit": "images/s",
		"data": "synthetic", "exact": "true", "tf32_matmul": "false", "software": "x", "notes": ""}
	f[field] = value
	var out []string
	for _, h := range throughputHeader {
		out = append(out, f[h])
	}
	return strings.Join(out, ",") + "\n"
}

func TestParseThroughputErrors(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty file"},
		{"header", "id,source\n", "wrong number of fields"},
		{"header name", strings.Replace(tpHeader, "gpu", "device", 1) + tpRow("", ""), `column 4 is "device", expected "gpu"`},
		{"no rows", tpHeader, "no rows"},
		{"throughput", tpHeader + tpRow("throughput", "-3"), `line 2: field "throughput" is "-3"`},
		{"throughput nan", tpHeader + tpRow("throughput", "NaN"), `field "throughput" is "NaN"`},
		{"unit", tpHeader + tpRow("unit", "words/s"), `field "unit" is "words/s"`},
		// a figure in tokens/s is divided by the sequence length
		{"tokens without seq", tpHeader + tpRow("unit", "tokens/s"), `--seq is ""`},
		{"exact", tpHeader + tpRow("exact", "yes"), `field "exact" is "yes"`},
		{"path", tpHeader + tpRow("path", "README.md"), `expected repository@commit:file or a script of this repository`},
		// a script of this repository is named by a path inside it
		{"path outside", tpHeader + tpRow("path", "../steptime_gpu.py"), `"../steptime_gpu.py", expected repository@commit:file`},
		{"path absolute", tpHeader + tpRow("path", "/steptime_gpu.py"), `"/steptime_gpu.py", expected repository@commit:file`},
		{"args", tpHeader + tpRow("args", " "), `field "args" is empty`},
		{"batch", tpHeader + tpRow("args", `"resnet50 --batch 8,16"`), `--batch is "8,16"`},
		{"no batch", tpHeader + tpRow("args", "resnet50"), `--batch is ""`},
		{"gpu", tpHeader + tpRow("gpu", ""), `field "gpu" is empty`},
		{"repeated id", tpHeader + tpRow("", "") + tpRow("", ""), `line 3: id "a" repeats line 2`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseThroughput(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestThroughputRowFlags(t *testing.T) {
	rows, err := ParseThroughput(strings.NewReader(tpHeader +
		tpRow("args", "bert-base-uncased --gpu a10 --batch=24 --seq 384 --precision 16-mixed")))
	if err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	b, err := r.Batch()
	if err != nil || b != 24 {
		t.Fatalf("batch %d, %v", b, err)
	}
	if r.Model() != "bert-base-uncased" || r.Precision() != "16-mixed" {
		t.Fatalf("model %q precision %q", r.Model(), r.Precision())
	}
	// The workload is everything but the batch size.
	if w := r.Workload(); w != "S | x | DGX-1 | bert-base-uncased --gpu a10 --seq 384 --precision 16-mixed" {
		t.Fatalf("workload %q", w)
	}
}

// TestSummarizeThroughput works the summary of six made-up comparisons by
// hand.
func TestSummarizeThroughput(t *testing.T) {
	mk := func(source, gpu, args string, measured, predicted float64) ThroughputComparison {
		r := ThroughputRow{Source: source, GPU: gpu, Args: strings.Fields(args), Throughput: measured}
		b, err := r.Batch()
		if err != nil {
			t.Fatal(err)
		}
		return ThroughputComparison{Row: r, Batch: b, Measured: measured, Predicted: predicted, Err: (predicted - measured) / measured}
	}
	cs := []ThroughputComparison{
		// A sweep of three batch sizes on one GPU: measured 100, 150, 152
		// (flat at the second step), predicted 110, 120, 180 (flat at the
		// first step, not the second).
		mk("A", "g1", "m1 --batch 8", 100, 110),  // +10 %
		mk("A", "g1", "m1 --batch 16", 150, 120), // −20 %
		mk("A", "g1", "m1 --batch 32", 152, 180), // +18.4 %
		mk("A", "g1", "m2 --batch 8", 50, 60),    // +20 %
		mk("B", "g2", "m1 --batch 8", 200, 190),  // −5 %
		mk("B", "g2", "m2 --batch 8", 203, 250),  // +23.2 %, within 5 % of m1's 200
	}
	s := SummarizeThroughput(cs)
	// |errors| sorted: 5, 10, 18.4 (28/152), 20, 20, 23.2 → median
	// (28/152 + 0.2)/2.
	if want := (28.0/152 + 0.2) / 2; math.Abs(s.All.MedianAbsErr-want) > 1e-9 {
		t.Errorf("median |error| %g, want %g", s.All.MedianAbsErr, want)
	}
	if len(s.BySource) != 2 || s.BySource[0].Name != "A" || s.BySource[0].N != 4 || s.BySource[1].N != 2 {
		t.Errorf("by source %+v", s.BySource)
	}
	// Source B: |errors| 5 % and 23.2 %, median 14.1 %.
	if want := (0.05 + 47.0/203) / 2; math.Abs(s.BySource[1].MedianAbsErr-want) > 1e-9 {
		t.Errorf("source B median |error| %g, want %g", s.BySource[1].MedianAbsErr, want)
	}
	if len(s.ByGPU) != 2 || s.ByGPU[0].Name != "g1" || s.ByGPU[0].N != 4 {
		t.Errorf("by GPU %+v", s.ByGPU)
	}
	// m1 (32-true, the default precision): errors +10, −20, +18.4, −5 %.
	if len(s.ByModel) != 2 || s.ByModel[0].Name != "m1 32-true" || s.ByModel[0].N != 4 {
		t.Errorf("by model %+v", s.ByModel)
	}
	// Batch pairs of m1 on g1: (8,16) measured 100<150, predicted 110<120
	// right; (8,32) right; (16,32) measured 150 and 152 are within 5 %: not
	// counted.
	if s.BatchPairs != (Pairs{N: 2, Right: 2}) {
		t.Errorf("batch pairs %+v, want 2 of 2", s.BatchPairs)
	}
	// Model pairs in setup A/g1: m2 (50) against m1 at 8, 16 and 32, all
	// ordered right (60 below 110, 120, 180); setup B/g2: 200 and 203 are
	// within 5 %: not counted.
	if s.ModelPairs != (Pairs{N: 3, Right: 3}) {
		t.Errorf("model pairs %+v, want 3 of 3", s.ModelPairs)
	}
	if len(s.Saturation) != 1 {
		t.Fatalf("saturation %+v, want one sweep", s.Saturation)
	}
	sat := s.Saturation[0]
	// Measured gains +50 %, +1.3 %: flat at the second step. Predicted
	// gains +9.1 %, +50 %: flat at neither.
	if !equalBools(sat.MeasuredFlat, []bool{false, true}) || !equalBools(sat.PredictedFlat, []bool{false, false}) || sat.Agrees() {
		t.Errorf("saturation %+v", sat)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestThroughputSetLoads checks the committed calibration set: it parses,
// every row names a source file, and its figures are per sample.
func TestThroughputSetLoads(t *testing.T) {
	rows, err := LoadThroughput("../testdata/throughput/throughput.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) < 50 {
		t.Fatalf("%d rows", len(rows))
	}
	for _, r := range rows {
		if r.flag("gpu") != r.GPU {
			t.Errorf("%s: args run on %q, gpu column %q", r.ID, r.flag("gpu"), r.GPU)
		}
	}
}

// The rows this project measured (own-h200.csv) name the script that
// measured them by its path in this repository, which must exist there:
// the 30 H200 step times of validation/steptime_gpu.py load, and a row
// naming a script the repository lacks does not.
func TestThroughputOwnMeasurementLoads(t *testing.T) {
	rows, err := LoadThroughput("../testdata/throughput/own-h200.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 30 {
		t.Fatalf("%d rows, want the 30 measured", len(rows))
	}
	for _, r := range rows {
		if r.Source != "own measurement" || r.Path != "validation/steptime_gpu.py" || r.GPU != "h200" || r.flag("gpu") != "h200" {
			t.Errorf("%s: source %q, path %q, gpu %q, args' gpu %q", r.ID, r.Source, r.Path, r.GPU, r.flag("gpu"))
		}
	}
	dir := filepath.Join(t.TempDir(), "testdata", "throughput")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "x.csv")
	if err := os.WriteFile(p, []byte(tpHeader+tpRow("path", "validation/missing.py")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadThroughput(p); err == nil || !strings.Contains(err.Error(), "names validation/missing.py, which this repository lacks") {
		t.Errorf("error %v, want the missing script named", err)
	}
}

func FuzzParseThroughput(f *testing.F) {
	f.Add(tpHeader + tpRow("", ""))
	f.Add(tpHeader + tpRow("args", "x --batch=3"))
	f.Add("id\n\"")
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := ParseThroughput(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, r := range rows {
			if b, err := r.Batch(); err != nil || b <= 0 {
				t.Fatalf("row %q: batch %d, %v", r.ID, b, err)
			}
			_ = r.Workload()
		}
	})
}

// A figure in tokens/s of one GPU is samples/s times the sequence length:
// 8,192 tokens/s at --seq 4096 is 2 sequences/s; images/s stay as
// published.
func TestThroughputSamplesPerSecond(t *testing.T) {
	for _, c := range []struct {
		args, unit string
		want       float64
	}{
		{"Llama-3-8B --gpu v100-16gb --batch 1 --seq 4096", "tokens/s", 2},
		{"Llama-3-8B --gpu v100-16gb --batch 1 --seq=8192", "tokens/s", 1},
		{"resnet50 --gpu v100-16gb --batch 64", "images/s", 8192},
	} {
		in := tpHeader + strings.Replace(tpRow("args", c.args), ",100,images/s,", ",8192,"+c.unit+",", 1)
		rows, err := ParseThroughput(strings.NewReader(in))
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if got := rows[0].SamplesPerSecond(); got != c.want {
			t.Errorf("%s in %s: %g samples/s, want %g", c.args, c.unit, got, c.want)
		}
	}
}
