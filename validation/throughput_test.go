package validation_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/validation"
)

// throughputSets are the calibration set's files: the rows selected from
// DeepLearningExamples' and Lambda's tables (validation/throughput_select.py),
// timm's RTX 3090 training benchmark (validation/throughput_timm.py),
// torchtitan's language-model rows, and the step times this project
// measured on one H200 (validation/steptime_gpu.py, source "own
// measurement"), held to the same thresholds as every other source.
var throughputSets = []string{"../testdata/throughput/throughput.csv", "../testdata/throughput/timm.csv",
	"../testdata/throughput/transformers.csv", "../testdata/throughput/own-h200.csv"}

// loadThroughputSets reads every file of the calibration set.
func loadThroughputSets(t testing.TB) []validation.ThroughputRow {
	t.Helper()
	var rows []validation.ThroughputRow
	for _, p := range throughputSets {
		r, err := validation.LoadThroughput(p)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r...)
	}
	return rows
}

// everySourceMeetsTarget switches on the same threshold for each source's
// exact rows. Every source has met it since the per-SM rates of the NCHW
// transposes and depthwise kernels and the per-architecture GEMM share
// (docs/accuracy.md §4.4): the H200 rows measured by this project, and
// Lambda's v0 and v2 tables, which it had printed as above it.
const everySourceMeetsTarget = true

// Thresholds of the calibration test, fixed for every row and every
// source: no per-row, per-model or per-source tolerance.
const (
	// maxThroughputMedianAbsErr bounds the median |error| of samples/s over
	// the rows whose model batchfit builds exactly.
	maxThroughputMedianAbsErr = 0.12
	// maxKernelClassMedianAbsErr bounds the median |error| of the rows
	// whose time is mostly one class of kernel the model times by its own
	// rule: the transformers (ViT, Swin, and the language models of
	// torchtitan's tables: cuBLAS GEMMs, flash attention and the
	// memory-bound norms and activations around them) and the depthwise nets
	// (MobileNet, EfficientNet: depthwise convolutions).
	maxKernelClassMedianAbsErr = 0.15
	// minPairsRight bounds from below the share of pairs (of models in one
	// setup, of batch sizes of one workload), measured more than
	// validation.PairGap apart, that the prediction orders as measured.
	minPairsRight = 0.90
)

// kernelClass names the rows held to maxKernelClassMedianAbsErr.
func kernelClass(r validation.ThroughputRow) string {
	switch r.Family() {
	case "vit", "swin", "llama", "gpt2":
		return "transformer"
	case "depthwise":
		return "depthwise"
	}
	return ""
}

// TestThroughputCalibration predicts the samples/s of every published
// training throughput of the calibration set (testdata/throughput) and
// prints the errors per source and per GPU, the share of pairs ordered as
// measured, and whether the predicted curves over batch size flatten where
// the published ones do. It holds the order of pairs and the saturation to
// the thresholds always, and the median error over the exact rows to
// maxThroughputMedianAbsErr.
func TestThroughputCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("predicts every row of the calibration set")
	}
	rows := loadThroughputSets(t)
	// Rows with the same command line and matmul precision (one run
	// published in several releases of a table) are predicted once.
	memo := map[string]float64{}
	cmps, err := validation.CompareThroughput(rows, func(r validation.ThroughputRow) (float64, error) {
		k := fmt.Sprint(strings.Join(r.Args, " "), r.TF32Matmul)
		if v, ok := memo[k]; ok {
			return v, nil
		}
		v, err := validation.PredictThroughput(r)
		memo[k] = v
		return v, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var exact, inexact []validation.ThroughputComparison
	for _, c := range cmps {
		if c.Row.Exact {
			exact = append(exact, c)
		} else {
			inexact = append(inexact, c)
		}
	}

	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "row\tgpu\tbatch\tmeasured/s\tpredicted/s\terror\t")
	for _, c := range cmps {
		id := c.Row.ID
		if !c.Row.Exact {
			id += " (model differs)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%s\t\n", id, c.Row.GPU, c.Batch, c.Measured, c.Predicted, pct(c.Err))
	}
	tw.Flush()
	t.Logf("calibration set, %d rows (error = (predicted − measured) / measured):\n%s", len(cmps), buf.String())

	se := validation.SummarizeThroughput(exact)
	t.Logf("rows whose model batchfit builds exactly:\n%s", throughputTable(se))
	t.Logf("rows whose model batchfit builds exactly, each source by family:\n%s", sourceFamilyTable(exact))
	if len(inexact) > 0 {
		t.Logf("rows whose model differs from batchfit's (BERT SQuAD: QA head, not the masked-LM head):\n%s",
			throughputTable(validation.SummarizeThroughput(inexact)))
	}
	sa := validation.SummarizeThroughput(cmps)
	t.Logf("every row:\n%s", throughputTable(sa))

	if se.All.MedianAbsErr > maxThroughputMedianAbsErr {
		t.Errorf("median |error| of samples/s over %d rows is %.1f %%, more than %.0f %%",
			se.All.N, 100*se.All.MedianAbsErr, 100*maxThroughputMedianAbsErr)
	}
	for _, g := range se.BySource {
		if g.MedianAbsErr <= maxThroughputMedianAbsErr {
			continue
		}
		if everySourceMeetsTarget {
			t.Errorf("source %s: median |error| of %d rows is %.1f %%, more than %.0f %%", g.Name, g.N, 100*g.MedianAbsErr, 100*maxThroughputMedianAbsErr)
		} else {
			t.Logf("source %s: median |error| of %d rows is %.1f %%, above %.0f %% (not yet held: everySourceMeetsTarget is false)", g.Name, g.N, 100*g.MedianAbsErr, 100*maxThroughputMedianAbsErr)
		}
	}
	byClass := map[string][]validation.ThroughputComparison{}
	for _, c := range exact {
		if k := kernelClass(c.Row); k != "" {
			byClass[k] = append(byClass[k], c)
		}
	}
	for _, k := range []string{"transformer", "depthwise"} {
		g := validation.SummarizeThroughput(byClass[k]).All
		t.Logf("%s rows: %d, median |error| %.1f %%, median error %s, worst %.1f %%", k, g.N, 100*g.MedianAbsErr, pct(g.MedianErr), 100*g.MaxAbsErr)
		if g.N == 0 || g.MedianAbsErr > maxKernelClassMedianAbsErr {
			t.Errorf("%s rows: median |error| of %d rows is %.1f %%, more than %.0f %%", k, g.N, 100*g.MedianAbsErr, 100*maxKernelClassMedianAbsErr)
		}
	}
	// The order is held over every row: the masked-LM head batchfit builds
	// for BERT SQuAD adds the same work to every row of one model (a
	// quarter of BERT-base's forward at sequence 384, a tenth of
	// BERT-large's), less than the gap between the sizes, so it cannot
	// turn a pair of rows measured apart; the errors are held over the
	// exact rows only.
	for _, p := range []struct {
		name string
		p    validation.Pairs
	}{{"models in one setup", sa.ModelPairs}, {"batch sizes of one workload", sa.BatchPairs}} {
		if p.p.Share() < minPairsRight {
			t.Errorf("pairs of %s ordered as measured: %d of %d (%.0f %%), fewer than %.0f %%",
				p.name, p.p.Right, p.p.N, 100*p.p.Share(), 100*minPairsRight)
		}
	}
	for _, s := range sa.Saturation {
		why, known := knownSaturationMiss(s.Workload)
		t.Logf("%s over batches %v: measured %.2f ms a step + %.3f ms a sample, predicted %.2f + %.3f; flat at %v measured, %v predicted",
			s.Workload, s.Batches, 1e3*s.Measured.Fixed, 1e3*s.Measured.PerSample, 1e3*s.Predicted.Fixed, 1e3*s.Predicted.PerSample,
			s.MeasuredFlat, s.PredictedFlat)
		switch {
		case !s.Agrees() && !known:
			t.Errorf("%s: over batches %v the measured curve is flat at steps %v, the predicted at %v",
				s.Workload, s.Batches, s.MeasuredFlat, s.PredictedFlat)
		case s.Agrees() && known:
			t.Errorf("%s: listed as a known miss (%s), but the predicted curve now flattens where the measured one does: take it off the list",
				s.Workload, why)
		case known:
			t.Logf("known miss: %s", why)
		}
	}
}

// knownSaturationMiss names the sweeps whose measured curve flattens later
// than the predicted one for a cause batchfit does not model, with the
// cause (docs/accuracy.md §4.1). A listed sweep is still checked: the test
// fails when it comes to agree, so that the list only holds misses.
func knownSaturationMiss(workload string) (string, bool) {
	if strings.Contains(workload, "nnunet2d-msd01") {
		// The per-sample time is predicted within −8 % to +15 % on three
		// of the four setups (+41 % for float32 on the V100), the fixed
		// time per step 4 to 12 ms short: in DeepLearningExamples'
		// benchmark mode DALI copies a whole BraTS volume to the GPU for
		// every 2D batch and crops it there, and PyTorch Lightning runs
		// the loop, work once a step that batchfit's model of an eager
		// step does not have.
		return "the input pipeline's and training loop's fixed work per step (DALI, PyTorch Lightning), which batchfit does not model", true
	}
	return "", false
}

// throughputTable prints a summary: median errors per source and per GPU,
// the pairs ordered right and the saturation checks.
func throughputTable(s validation.ThroughputSummary) string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\trows\tmedian |error|\tmedian error\tworst |error|\t")
	line := func(kind string, g validation.ThroughputGroup) {
		fmt.Fprintf(tw, "%s %s\t%d\t%.1f %%\t%s\t%.1f %%\t\n", kind, g.Name, g.N, 100*g.MedianAbsErr, pct(g.MedianErr), 100*g.MaxAbsErr)
	}
	line("", s.All)
	for _, g := range s.BySource {
		line("source", g)
	}
	for _, g := range s.ByGPU {
		line("gpu", g)
	}
	for _, g := range s.ByFamily {
		line("family", g)
	}
	for _, g := range s.ByModel {
		line("model", g)
	}
	tw.Flush()
	fmt.Fprintf(&buf, "pairs of models in one setup ordered as measured: %d of %d\n", s.ModelPairs.Right, s.ModelPairs.N)
	fmt.Fprintf(&buf, "pairs of batch sizes of one workload ordered as measured: %d of %d\n", s.BatchPairs.Right, s.BatchPairs.N)
	agree := 0
	for _, sat := range s.Saturation {
		if sat.Agrees() {
			agree++
		}
	}
	fmt.Fprintf(&buf, "batch-size sweeps (3+ sizes) whose predicted curve flattens where the measured one does: %d of %d\n", agree, len(s.Saturation))
	return buf.String()
}

// sourceFamilyTable prints each source's rows by family: the same fixed
// thresholds hold every source, and a source's families show which
// kernels its misses come from.
func sourceFamilyTable(cs []validation.ThroughputComparison) string {
	by := map[string][]validation.ThroughputComparison{}
	var sources []string
	for _, c := range cs {
		if _, ok := by[c.Row.Source]; !ok {
			sources = append(sources, c.Row.Source)
		}
		by[c.Row.Source] = append(by[c.Row.Source], c)
	}
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "source\tfamily\trows\tmedian |error|\tmedian error\tworst |error|\t")
	for _, src := range sources {
		for _, g := range validation.SummarizeThroughput(by[src]).ByFamily {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f %%\t%s\t%.1f %%\t\n", src, g.Name, g.N, 100*g.MedianAbsErr, pct(g.MedianErr), 100*g.MaxAbsErr)
		}
	}
	tw.Flush()
	return buf.String()
}

// TestThroughputRequestTF32 checks that a row run with TF32 matmuls (an
// NGC container on Ampere) is predicted with matmul.allow_tf32 on, and that
// the default profile, shared by every prediction, is left as it is.
func TestThroughputRequestTF32(t *testing.T) {
	rows, err := validation.ParseThroughput(strings.NewReader(
		"id,source,path,gpu,system,args,throughput,unit,data,exact,tf32_matmul,software,notes\n" +
			"a,S,o/r@c:f,a100-80gb,m,resnet18 --gpu a100-80gb --batch 8,100,images/s,synthetic,true,true,x,\n" +
			"b,S,o/r@c:f,a100-80gb,m,resnet18 --gpu a100-80gb --batch 8,100,images/s,synthetic,true,false,x,\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		req, err := validation.ThroughputRequest(rows[i])
		if err != nil {
			t.Fatal(err)
		}
		got := req.Setup.Profile != nil && req.Setup.Profile.MatmulAllowTF32
		if got != want {
			t.Errorf("row %s: matmul_allow_tf32 %v, want %v", rows[i].ID, got, want)
		}
	}
	if profile.Default().MatmulAllowTF32 {
		t.Error("the default profile was changed: matmul_allow_tf32 is on")
	}
	// A row whose command line runs on another GPU than its gpu column.
	rows[0].GPU = "h100-80gb"
	if _, err := validation.ThroughputRequest(rows[0]); err == nil || !strings.Contains(err.Error(), `the row's gpu is "h100-80gb"`) {
		t.Errorf("error %v", err)
	}
}
