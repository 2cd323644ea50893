package validation

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/cost"
	"github.com/batchfit/batchfit/gpu"
)

// kernelProfiles reads every profile of testdata/throughput/kernels-h200.
func kernelProfiles(t *testing.T) []*KernelProfile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "throughput", "kernels-h200", "*.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var ps []*KernelProfile
	for _, p := range paths {
		if strings.HasSuffix(p, ".trace.json.gz") {
			continue
		}
		k, err := LoadKernelProfile(p)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, k)
	}
	if len(ps) < 15 {
		t.Fatalf("%d kernel profiles, want the 17 of kernels_gpu.py's runs", len(ps))
	}
	return ps
}

// holdTotal logs one model's measured and predicted time of a kind of
// kernel (µs) and fails where they are more than tol apart.
func holdTotal(t *testing.T, run, what string, measured, predicted, tol float64) {
	t.Helper()
	e := predicted/measured - 1
	t.Logf("%-24s %s: measured %6.2f ms, batchfit %6.2f ms (%+.1f %%)", run, what, measured/1e3, predicted/1e3, 100*e)
	if e > tol || e < -tol {
		t.Errorf("%s: %s %.2f ms by batchfit's rule, %.2f ms measured: %+.1f %%, more than %.0f %%", run, what, predicted/1e3, measured/1e3, 100*e, 100*tol)
	}
}

func numelOf(s []int64) float64 {
	n := 1.0
	for _, d := range s {
		n *= float64(d)
	}
	return n
}

// TestSpatialBatchNormProfiles holds cost's batch-norm rule (cost/kernel.go)
// to the H200 profiles: PyTorch
// runs cuDNN's spatial kernels (1C11) for NCHW input and the persistent
// ones for channels-last (getCudnnBatchNormMode,
// aten/src/ATen/native/cudnn/BatchNorm.cpp), and the spatial kernels' time
// per model is what cost.SpatialBatchNormSeconds gives its calls, within
// 5 %.
func TestSpatialBatchNormProfiles(t *testing.T) {
	g, err := gpu.Lookup("h200")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range kernelProfiles(t) {
		var measured, predicted float64
		seen := map[int]bool{}
		spatial, persistent := 0, 0
		for _, k := range p.Kernels {
			op := p.Ops[k.Op]
			if op.Name != "aten::cudnn_batch_norm" && op.Name != "aten::cudnn_batch_norm_backward" {
				continue
			}
			if len(op.Shapes) == 0 || len(op.Shapes[0]) != 4 {
				continue
			}
			switch {
			case strings.Contains(k.Name, "1C11"):
				spatial++
			case strings.Contains(strings.ToLower(k.Name), "nhwc"):
				persistent++
			}
			measured += k.US
			if seen[k.Op] {
				continue
			}
			seen[k.Op] = true
			passes := 3.0
			if strings.HasSuffix(op.Name, "_backward") {
				passes = 5
			}
			// float16 under autocast: 2 bytes an element
			x := op.Shapes[0]
			predicted += 1e6 * cost.SpatialBatchNormSeconds(g.Rates, float64(x[1]), numelOf(x), 2, passes)
		}
		if measured == 0 {
			continue
		}
		switch p.Layout {
		case "nchw":
			if persistent > 0 || spatial == 0 {
				t.Errorf("%s: %d spatial and %d persistent batch-norm kernels, want spatial only", p.Run, spatial, persistent)
			}
			checked++
			holdTotal(t, p.Run, "batch norm", measured, predicted, 0.05)
		case "nhwc":
			if spatial > 0 || persistent == 0 {
				t.Errorf("%s: %d spatial and %d persistent batch-norm kernels, want persistent only", p.Run, spatial, persistent)
			}
		}
	}
	if checked < 5 {
		t.Errorf("%d NCHW models with batch norm, want 5", checked)
	}
}

// TestTransposeRateProfiles measures, in the H200 profiles, the median rate
// in elements per SM per clock of cuDNN's nchwToNhwc kernel that
// transposes the input of a forward convolution (the largest of its call's
// transposes; inputs of at least 2 M elements, the 3-channel stems apart,
// whose padded transposes are slower): the catalog's figure
// (gpu.Achievable.Transpose) within 5 %.
func TestTransposeRateProfiles(t *testing.T) {
	g, err := gpu.Lookup("h200")
	if err != nil {
		t.Fatal(err)
	}
	clocks := float64(g.Rates.SMs) * g.Rates.BoostMHz * 1e6
	if clocks <= 0 {
		t.Fatal("h200 has no SM count or boost clock")
	}
	var rates []float64
	for _, p := range kernelProfiles(t) {
		if p.Layout != "nchw" {
			continue
		}
		largest := map[int]float64{}
		for _, k := range p.Kernels {
			op := p.Ops[k.Op]
			if op.Name == "aten::cudnn_convolution" && strings.Contains(k.Name, "nchwToNhwc") && k.US > largest[k.Op] {
				largest[k.Op] = k.US
			}
		}
		for o, us := range largest {
			x := p.Ops[o].Shapes[0]
			if len(x) != 4 || x[1] < 8 || numelOf(x) < 2e6 {
				continue
			}
			rates = append(rates, numelOf(x)/(us*1e-6)/clocks)
		}
	}
	if len(rates) < 50 {
		t.Fatalf("%d input transposes, want the NCHW profiles' (more than 50)", len(rates))
	}
	sort.Float64s(rates)
	med := rates[len(rates)/2]
	want := g.Rates.Achievable.Transpose
	t.Logf("%d input transposes: median %.2f elements per SM per clock (%.2f–%.2f); the catalog's %.2f", len(rates), med, rates[0], rates[len(rates)-1], want)
	if med < want*0.95 || med > want*1.05 {
		t.Errorf("median transpose rate %.2f elements per SM per clock, the catalog's %.2f: more than 5 %% apart", med, want)
	}
}

// TestDepthwiseRateProfiles holds the catalog's depthwise rates
// (gpu/catalog.go) to the H200 profiles: every depthwise convolution kernel
// of EfficientNet-B0's and MobileNetV3-Large's steps in both layouts and of
// ConvNeXt-T's (the layout transposes apart), each call charged what cost
// charges it — the input, weight and output once forward, twice backward
// (data and weight gradients), by cost.DepthwiseSeconds: a convolution of
// an NCHW tensor its bytes at Depthwise (whichever kernels cuDNN or
// PyTorch run for it), one of a channels-last tensor its bytes at
// DepthwiseCL and its multiply-adds at DepthwiseCLMAC — within 20 % of
// each model's measured depthwise time.
func TestDepthwiseRateProfiles(t *testing.T) {
	g, err := gpu.Lookup("h200")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range kernelProfiles(t) {
		switch p.Model {
		case "efficientnet_b0", "mobilenet_v3_large", "convnext_tiny":
		default:
			continue
		}
		// the forward's output is the backward's dy of the same input and weight
		outOf := map[string][]int64{}
		for _, o := range p.Ops {
			if o.Name == "aten::convolution_backward" && len(o.Shapes) >= 3 {
				outOf[fmt.Sprint(o.Shapes[1], o.Shapes[2])] = o.Shapes[0]
			}
		}
		time := map[int]float64{}
		nhwc := map[int]bool{}
		transposed := map[int]bool{}
		for _, k := range p.Kernels {
			if strings.Contains(k.Name, "nchwToNhwc") || strings.Contains(k.Name, "nhwcToNchw") {
				transposed[k.Op] = true
				continue
			}
			time[k.Op] += k.US
			if strings.Contains(k.Name, "nhwc") {
				nhwc[k.Op] = true
			}
		}
		var measured, predicted float64
		for o, us := range time {
			op := p.Ops[o]
			var x, w, y []int64
			passes := 1.0
			switch op.Name {
			case "aten::convolution_backward":
				if len(op.Shapes) < 3 {
					continue
				}
				y, x, w, passes = op.Shapes[0], op.Shapes[1], op.Shapes[2], 2
			case "aten::cudnn_convolution", "aten::_conv_depthwise2d":
				if len(op.Shapes) < 2 {
					continue
				}
				x, w = op.Shapes[0], op.Shapes[1]
				y = outOf[fmt.Sprint(x, w)]
			default:
				continue
			}
			if len(w) != 4 || w[1] != 1 || y == nil {
				continue // not depthwise
			}
			bytes := passes * 2 * (numelOf(x) + numelOf(w) + numelOf(y))
			macs := passes * numelOf(y) * float64(w[2]*w[3])
			measured += us
			// channels-last input: the run's layout, or NHWC kernels with no
			// transposes around them (ConvNeXt's permutes)
			cl := p.Layout == "nhwc" || (nhwc[o] && !transposed[o])
			predicted += 1e6 * cost.DepthwiseSeconds(g.Rates, cl, 2*macs, bytes)
		}
		if measured == 0 {
			continue
		}
		checked++
		holdTotal(t, p.Run, "depthwise kernels", measured, predicted, 0.2)
	}
	if checked < 6 {
		t.Errorf("%d profiles with depthwise convolutions, want 6", checked)
	}
}

func TestLoadKernelProfileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadKernelProfile(filepath.Join(dir, "missing.json.gz")); err == nil {
		t.Error("a missing file loaded")
	}
	for name, body := range map[string]string{
		"not-gzip.json.gz": "{}",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKernelProfile(p); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming the file", name, err)
		}
	}
}

// TestLayerNormProfiles holds cost's layer-norm rule (cost/kernel.go) to
// the H200 profiles: every forward layer norm of ViT-B/16's, GPT-2's,
// Swin-T's and ConvNeXt-T's steps (float32 under autocast, read and
// written), against cost.LayerNormSeconds for its rows and row length,
// within 12 %; and each model's total within 10 %.
func TestLayerNormProfiles(t *testing.T) {
	g, err := gpu.Lookup("h200")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, p := range kernelProfiles(t) {
		switch p.Model {
		case "vit_b_16", "gpt2", "swin_t", "convnext_tiny":
		default:
			continue
		}
		time := map[int]float64{}
		for _, k := range p.Kernels {
			if p.Ops[k.Op].Name == "aten::native_layer_norm" {
				time[k.Op] += k.US
			}
		}
		var measured, predicted float64
		for o, us := range time {
			x := p.Ops[o].Shapes[0]
			if len(x) < 2 {
				continue
			}
			n := float64(x[len(x)-1])
			rows := numelOf(x) / n
			if rows < 1000 {
				continue // a classifier head's few rows: the launch, not the rule
			}
			want := 1e6 * cost.LayerNormSeconds(g.Rates, rows, n, 4)
			if e := want/us - 1; e > 0.12 || e < -0.12 {
				t.Errorf("%s: layer norm of %v: %.1f µs by the rule, %.1f measured (%+.0f %%)", p.Run, x, want, us, 100*e)
			}
			measured += us
			predicted += want
			calls++
		}
		if measured == 0 {
			continue
		}
		holdTotal(t, p.Run, "layer norm forward", measured, predicted, 0.1)
	}
	if calls < 90 {
		t.Errorf("%d layer-norm calls, want the profiles' 101", calls)
	}
}

// FuzzParseKernelProfile: any bytes give a profile whose every kernel names
// an op that exists, or an error; nothing panics.
func FuzzParseKernelProfile(f *testing.F) {
	f.Add([]byte(`{"run":"r:nchw","strings":["aten::add","k"],"ops":[[0,[],[[2,3],[]]]],"kernels":[[1,0,1.5]]}`))
	f.Add([]byte(`{"strings":["a"],"ops":[[0,[5],[]]],"kernels":[]}`))
	f.Add([]byte(`{"strings":[],"ops":[],"kernels":[[0,0,-1]]}`))
	f.Add([]byte(`{"ops":[[0]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseKernelProfile(b, "fuzz.json")
		if err != nil {
			return
		}
		for _, k := range p.Kernels {
			if k.Op < 0 || k.Op >= len(p.Ops) {
				t.Fatalf("kernel %q names op %d of %d", k.Name, k.Op, len(p.Ops))
			}
		}
	})
}
