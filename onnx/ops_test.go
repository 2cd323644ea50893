package onnx_test

import (
	"math"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/onnx/onnxpb"
	"github.com/batchfit/batchfit/train"
)

func build(t *testing.T, b *mb, c models.Config) (*onnx.Model, *graph.Graph) {
	t.Helper()
	m, err := onnx.Parse(b.bytes(t), "test.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	return m, g
}

func kinds(g *graph.Graph) map[graph.Kind]int {
	k := map[graph.Kind]int{}
	for _, op := range g.Ops {
		k[op.Kind]++
	}
	return k
}

// layerNormDecomposed writes F.layer_norm as torch exports it before
// opset 17; affine adds the weight and bias.
func layerNormDecomposed(b *mb, x, out string, affine bool) *mb {
	b.node("ReduceMean", "/ln/ReduceMean", ins(x), ins("ln.m"), aInts("axes", -1)).
		node("Sub", "/ln/Sub", ins(x, "ln.m"), ins("ln.d")).
		constant("ln.two", 2).
		node("Pow", "/ln/Pow", ins("ln.d", "ln.two"), ins("ln.p")).
		node("ReduceMean", "/ln/ReduceMean_1", ins("ln.p"), ins("ln.v"), aInts("axes", -1)).
		constant("ln.eps", 1e-5).
		node("Add", "/ln/Add", ins("ln.v", "ln.eps"), ins("ln.e")).
		node("Sqrt", "/ln/Sqrt", ins("ln.e"), ins("ln.s"))
	if !affine {
		return b.node("Div", "/ln/Div", ins("ln.d", "ln.s"), ins(out))
	}
	return b.node("Div", "/ln/Div", ins("ln.d", "ln.s"), ins("ln.n")).
		weight("ln.weight", 16).weight("ln.bias", 16).
		node("Mul", "/ln/Mul", ins("ln.n", "ln.weight"), ins("ln.w")).
		node("Add", "/ln/Add_1", ins("ln.w", "ln.bias"), ins(out))
}

func TestLayerNormPattern(t *testing.T) {
	for _, affine := range []bool{true, false} {
		b := newModel(14).input("x", tFloat, "batch", 16)
		layerNormDecomposed(b, "x", "y", affine).output("y")
		_, g := build(t, b, models.Config{Batch: 2})
		k := kinds(g)
		switch {
		case affine && (k[graph.LayerNorm] != 1 || len(g.Ops) != 2):
			t.Errorf("affine: ops %v, want one layer_norm and the loss", k)
		case !affine && (k[graph.LayerNorm] != 0 || k[graph.Mean] != 2):
			t.Errorf("no weight: ops %v, want the primitive ops", k)
		}
		if affine && g.ParamCount() != 32 {
			t.Errorf("layer norm: %d parameters, want 32", g.ParamCount())
		}
	}
	// opset 17's LayerNormalization gives the same graph.
	b := newModel(17).input("x", tFloat, "batch", 16).weight("ln.weight", 16).weight("ln.bias", 16).
		node("LayerNormalization", "/ln/LayerNormalization", ins("x", "ln.weight", "ln.bias"), ins("y"), aInt("axis", -1)).output("y")
	_, g := build(t, b, models.Config{Batch: 2})
	if k := kinds(g); k[graph.LayerNorm] != 1 || g.Tensor(g.Params()[0]).Name != "ln.weight" {
		t.Errorf("LayerNormalization: ops %v, params %v", k, g.Params())
	}
}

func TestGELUPattern(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 8).
		constant("sqrt2", 1.4142135).
		node("Div", "/act/Div", ins("x", "sqrt2"), ins("d")).
		node("Erf", "/act/Erf", ins("d"), ins("e")).
		constant("one", 1).
		node("Add", "/act/Add", ins("e", "one"), ins("a")).
		node("Mul", "/act/Mul", ins("x", "a"), ins("m")).
		constant("half", 0.5).
		node("Mul", "/act/Mul_1", ins("m", "half"), ins("y")).output("y")
	_, g := build(t, b, models.Config{Batch: 2})
	if k := kinds(g); k[graph.GELU] != 1 || len(g.Ops) != 2 {
		t.Errorf("ops %v, want one gelu and the loss", k)
	}
}

// TestUnaryKinds: ReLU6 (Clip) is hardtanh; Sqrt, Reciprocal and an Erf
// outside the GELU pattern keep their own kinds, whose rules in the op
// table say what autograd saves.
func TestUnaryKinds(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 8).
		constant("lo", 0).constant("hi", 6).
		node("Clip", "/relu6", ins("x", "lo", "hi"), ins("r")).
		node("Sqrt", "/sqrt", ins("r"), ins("s")).
		node("Reciprocal", "/recip", ins("s"), ins("q")).
		node("Erf", "/erf", ins("q"), ins("y")).output("y")
	m, g := build(t, b, models.Config{Batch: 2})
	k := kinds(g)
	for _, want := range []graph.Kind{graph.Hardtanh, graph.Sqrt, graph.Reciprocal, graph.Erf} {
		if k[want] != 1 {
			t.Errorf("ops %v, want one %s", k, want)
		}
	}
	if len(m.Notes()) != 0 {
		t.Errorf("notes %q, want none", m.Notes())
	}
}

func TestLosses(t *testing.T) {
	// [N, L, V] logits: cross entropy over [N·L, V] with [N, L] targets.
	b := newModel(14).input("ids", tInt64, "batch", "sequence").weight("emb.weight", 50, 8).
		node("Gather", "/emb/Gather", ins("emb.weight", "ids"), ins("h")).
		node("Transpose", "/head/Transpose", ins("emb.weight"), ins("wt"), aInts("perm", 1, 0)).
		node("MatMul", "/head/MatMul", ins("h", "wt"), ins("y")).output("y")
	m, g := build(t, b, models.Config{Batch: 2, Seq: 5})
	if d := m.Dims(); len(d) != 1 || d[0] != models.DimSeq {
		t.Errorf("dims %v, want [seq]", d)
	}
	if got := g.ParamCount(); got != 400 {
		t.Errorf("tied embedding and head: %d parameters, want 400 (counted once)", got)
	}
	loss := g.Ops[len(g.Ops)-1]
	if loss.Kind != graph.CrossEntropy || g.Tensor(loss.Inputs[0]).Shape.String() != "[10, 50]" {
		t.Errorf("loss %s of %v", loss.Kind, g.Tensor(loss.Inputs[0]).Shape)
	}
	if _, err := m.Build(models.Config{Batch: 2}); err == nil || !strings.Contains(err.Error(), "sequence") {
		t.Errorf("build without a sequence length: %v", err)
	}
	if _, err := m.Build(models.Config{Batch: 2, Seq: 5, Layers: 3}); err == nil {
		t.Error("layers of an ONNX model changed")
	}

	// A [N] output: mean squared error against a float target.
	b = newModel(14).input("x", tFloat, "batch", 8).weight("w", 8, 1).
		node("MatMul", "/MatMul", ins("x", "w"), ins("m")).
		constInts("axes", 1).
		node("Squeeze", "/Squeeze", ins("m", "axes"), ins("y")).output("y")
	_, g = build(t, b, models.Config{Batch: 3})
	if loss := g.Ops[len(g.Ops)-1]; loss.Kind != graph.MSELoss {
		t.Errorf("loss %s, want mse_loss", loss.Kind)
	}
}

// TestShapeArithmetic: the x.view(x.size(0), -1) of an export, computed
// from Shape, Gather, Unsqueeze and Concat, follows the batch.
func TestShapeArithmetic(t *testing.T) {
	b := newModel(14).input("x", tFloat, "N", 4, 6, 6).
		node("Shape", "/Shape", ins("x"), ins("s")).
		node("Constant", "/c0", nil, ins("i0"), aTensor("value", intTensor("", []int64{0}))).
		node("Gather", "/Gather", ins("s", "i0"), ins("n"), aInt("axis", 0)).
		constInts("ax0", 0).
		node("Unsqueeze", "/Unsqueeze", ins("n", "ax0"), ins("n1")).
		constInts("minus1", -1).
		node("Concat", "/Concat", ins("n1", "minus1"), ins("shape"), aInt("axis", 0)).
		node("Reshape", "/Reshape", ins("x", "shape"), ins("f")).
		weight("fc.weight", 3, 144).weight("fc.bias", 3).
		node("Gemm", "/fc/Gemm", ins("f", "fc.weight", "fc.bias"), ins("y"), aInt("transB", 1)).output("y")
	for _, batch := range []int64{1, 7} {
		_, g := build(t, b, models.Config{Batch: batch})
		var fc *graph.Op
		for i := range g.Ops {
			if g.Ops[i].Kind == graph.Linear {
				fc = &g.Ops[i]
			}
		}
		if want := (graph.Shape{batch, 144}).String(); fc == nil || g.Tensor(fc.Inputs[0]).Shape.String() != want {
			t.Errorf("batch %d: linear input %v", batch, fc)
		}
	}
}

// TestViews: reshape of a split is a view in PyTorch (stride-compatible);
// reshape of a transposed tensor is a copy.
func TestViews(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 6, 8).
		node("Split", "/Split", ins("x"), ins("q", "k", "v"), aInt("axis", 1)).
		constInts("s4", 0, 4, 4).
		node("Reshape", "/Reshape", ins("q", "s4"), ins("q4")).
		node("Transpose", "/Transpose", ins("k"), ins("kt"), aInts("perm", 0, 2, 1)).
		constInts("s2", 0, 16).
		node("Reshape", "/Reshape_1", ins("kt", "s2"), ins("k2")).
		node("Flatten", "/Flatten", ins("q4"), ins("qf"), aInt("axis", 1)).
		node("Add", "/Add", ins("qf", "k2"), ins("y")).output("y")
	_, g := build(t, b, models.Config{Batch: 2})
	copies := map[string]bool{}
	for _, op := range g.Ops {
		if op.Kind == graph.Contiguous {
			copies[op.Name] = true
		}
	}
	if copies["/Reshape"] || !copies["/Reshape_1"] {
		t.Errorf("copies %v: want /Reshape_1 (of a transposed tensor) only", copies)
	}
}

func TestVisionOps(t *testing.T) {
	b := newModel(13).input("img", tFloat, "batch", 3, 16, 16).
		weight("conv.weight", 8, 3, 3, 3).weight("conv.bias", 8).
		node("Conv", "/conv/Conv", ins("img", "conv.weight", "conv.bias"), ins("c"),
			aInts("kernel_shape", 3, 3), aString("auto_pad", "SAME_UPPER")).
		weight("bn.weight", 8).weight("bn.bias", 8).weight("bn.running_mean", 8).weight("bn.running_var", 8).
		node("BatchNormalization", "/bn/BatchNormalization", ins("c", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"), ins("n")).
		node("HardSwish", "/act", ins("n"), ins("h")).
		node("AveragePool", "/pool", ins("h"), ins("p"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1)).
		node("MaxPool", "/maxpool", ins("p"), ins("mp"), aInts("kernel_shape", 2, 2), aInts("strides", 2, 2)).
		node("GlobalAveragePool", "/gap", ins("mp"), ins("g")).
		node("Flatten", "/flatten", ins("g"), ins("f")).
		weight("fc.weight", 5, 8).weight("fc.bias", 5).
		node("Gemm", "/fc/Gemm", ins("f", "fc.weight", "fc.bias"), ins("l"), aInt("transB", 1)).
		node("LogSoftmax", "/lsm", ins("l"), ins("y"), aInt("axis", 1)).output("y")
	m, g := build(t, b, models.Config{Batch: 2})
	k := kinds(g)
	for _, want := range []graph.Kind{graph.Conv2d, graph.BatchNorm, graph.Hardswish, graph.AvgPool2d, graph.MaxPool2d, graph.Mean, graph.Linear, graph.LogSoftmax} {
		if k[want] != 1 {
			t.Errorf("ops %v: want one %s", k, want)
		}
	}
	// 16 → conv SAME → 16 → avg 3/2 ceil → 8 → max 2/2 → 4
	for _, op := range g.Ops {
		if op.Kind == graph.MaxPool2d && g.Tensor(op.Output).Shape.String() != "[2, 8, 4, 4]" {
			t.Errorf("max pool output %v", g.Tensor(op.Output).Shape)
		}
	}
	if got, want := g.ParamCount(), int64(8*27+8+16+5*8+5); got != want {
		t.Errorf("%d parameters, want %d", got, want)
	}
	if !strings.Contains(strings.Join(m.Notes(), " "), "eval mode") {
		t.Errorf("notes %q should say the batch norm was exported in eval mode", m.Notes())
	}
	if _, err := m.Build(models.Config{Batch: 2, Image: 224}); err == nil {
		t.Error("image size of an ONNX model changed")
	}
}

func TestTransformerOps(t *testing.T) {
	// x [B, L, 16] → attention-like: q·kᵀ / 4, softmax, dropout, ·v; then
	// select token 0 and classify.
	b := newModel(14).input("x", tFloat, "batch", "seq", 16).
		weight("q.weight", 16, 16).
		node("Transpose", "/q/Transpose", ins("q.weight"), ins("qwt"), aInts("perm", 1, 0)).
		node("MatMul", "/q/MatMul", ins("x", "qwt"), ins("q")).
		node("Transpose", "/kt", ins("x"), ins("kt"), aInts("perm", 0, 2, 1)).
		node("MatMul", "/scores", ins("q", "kt"), ins("s")).
		constant("four", 4).
		node("Div", "/scale", ins("s", "four"), ins("ss")).
		node("Softmax", "/softmax", ins("ss"), ins("a"), aInt("axis", -1)).
		constant("ratio", 0.1).
		node("Constant", "/train", nil, ins("train"), aTensor("value", intTensor("", []int64{1}))).
		node("Dropout", "/drop", ins("a", "ratio", "train"), ins("ad", "mask")).
		node("MatMul", "/ctx", ins("ad", "x"), ins("c")).
		node("Constant", "/zero", nil, ins("zero"), aTensor("value", intTensor("", []int64{0}))).
		node("Gather", "/select", ins("c", "zero"), ins("c0"), aInt("axis", 1)).
		node("Tanh", "/tanh", ins("c0"), ins("y")).output("y")
	m, g := build(t, b, models.Config{Batch: 2, Seq: 7})
	k := kinds(g)
	if k[graph.Linear] != 1 || k[graph.MatMul] != 2 || k[graph.Softmax] != 1 || k[graph.Dropout] != 1 || k[graph.Tanh] != 1 {
		t.Errorf("ops %v", k)
	}
	for _, op := range g.Ops {
		if op.Kind == graph.Dropout && math.Abs(op.Attr.P-0.1) > 1e-6 {
			t.Errorf("dropout p = %g, want the node's ratio 0.1", op.Attr.P)
		}
		if op.Kind == graph.Softmax && g.Tensor(op.Output).Shape.String() != "[2, 7, 7]" {
			t.Errorf("scores %v", g.Tensor(op.Output).Shape)
		}
	}
	if m.DefaultSeq() != 0 {
		t.Errorf("default seq %d for a symbolic sequence axis", m.DefaultSeq())
	}
}

// TestClassToken: a ViT-style class token (a parameter expanded to the
// batch and concatenated) and position embedding (a parameter added).
func TestClassToken(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 4, 8).
		weight("cls_token", 1, 1, 8).weight("pos_embedding", 1, 5, 8).
		node("Shape", "/Shape", ins("x"), ins("s")).
		node("Constant", "/c0", nil, ins("i0"), aTensor("value", intTensor("", []int64{0}))).
		node("Gather", "/Gather", ins("s", "i0"), ins("n"), aInt("axis", 0)).
		constInts("ax0", 0).
		node("Unsqueeze", "/Unsqueeze", ins("n", "ax0"), ins("n1")).
		constInts("one8", 1, 8).
		node("Concat", "/Concat", ins("n1", "one8"), ins("s3"), aInt("axis", 0)). // [batch, 1, 8]
		node("Expand", "/Expand", ins("cls_token", "s3"), ins("cls")).
		node("Concat", "/Concat_2", ins("cls", "x"), ins("tokens"), aInt("axis", 1)).
		node("Add", "/Add", ins("tokens", "pos_embedding"), ins("h")).
		node("Constant", "/zero", nil, ins("zero"), aTensor("value", intTensor("", []int64{0}))).
		node("Gather", "/select", ins("h", "zero"), ins("h0"), aInt("axis", 1)).
		weight("head.weight", 8, 3). // Gemm transB=0: [in, out]
		node("Gemm", "/head/Gemm", ins("h0", "head.weight"), ins("y")).output("y")
	_, g := build(t, b, models.Config{Batch: 6})
	if got, want := g.ParamCount(), int64(8+40+24); got != want {
		t.Errorf("%d parameters, want %d", got, want)
	}
	k := kinds(g)
	if k[graph.Cat] != 1 || k[graph.Add] != 1 || k[graph.Linear] != 1 {
		t.Errorf("ops %v", k)
	}
	for _, op := range g.Ops {
		if op.Kind == graph.Cat && g.Tensor(op.Output).Shape.String() != "[6, 5, 8]" {
			t.Errorf("tokens %v", g.Tensor(op.Output).Shape)
		}
	}
}

// TestWeightBothWays: one weight used as [out, in] by a Gemm and as
// [in, out] by a MatMul is one parameter.
func TestWeightBothWays(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 4).weight("w", 8, 4).
		node("Gemm", "/enc/Gemm", ins("x", "w"), ins("h"), aInt("transB", 1)).
		node("Relu", "/relu", ins("h"), ins("r")).
		node("MatMul", "/dec/MatMul", ins("r", "w"), ins("y")).output("y")
	_, g := build(t, b, models.Config{Batch: 2})
	if got := g.ParamCount(); got != 32 {
		t.Errorf("%d parameters, want 32 (one shared weight)", got)
	}
	if k := kinds(g); k[graph.Linear] != 1 || k[graph.MatMul] != 1 {
		t.Errorf("ops %v: want a linear and a matmul", k)
	}
}

// Pad: constant pads copy (constant_pad_nd, nothing saved), all-zero
// constant pads are the input itself (the exporter writes them before
// AveragePool), reflect and edge save their input
// (reflection_pad2d_backward(grad, self, padding)); the pads input lists
// every axis's begin amounts, then its end amounts.
func TestPad(t *testing.T) {
	b := padModel()
	_, g := build(t, b, models.Config{Batch: 2})
	var pads []graph.Op
	for _, op := range g.Ops {
		if op.Kind == graph.Pad {
			pads = append(pads, op)
		}
	}
	if len(pads) != 3 {
		t.Fatalf("%d pad ops, want 3 (the all-zero pad is no op)", len(pads))
	}
	// 8×8 → +1+3 rows, +2+4 columns = 12×14 → reflect, edge: +2 each.
	want := []struct {
		shape string
		mode  graph.PadMode
	}{{"[2, 3, 12, 14]", graph.PadConstant}, {"[2, 3, 14, 16]", graph.PadReflect}, {"[2, 3, 16, 18]", graph.PadReplicate}}
	for i, w := range want {
		if s := g.Tensor(pads[i].Output).Shape.String(); s != w.shape || pads[i].Attr.Pad != w.mode {
			t.Errorf("pad %d: %s mode %d, want %s mode %d", i, s, pads[i].Attr.Pad, w.shape, w.mode)
		}
	}
	// What each saves, in bytes, from the simulator (the convolution makes
	// them require grad): constant nothing, reflect and edge their inputs
	// (12×14 and 14×16 planes).
	_, sum, err := train.Simulate(g, train.Setup{CPU: true, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
	if err != nil {
		t.Fatal(err)
	}
	saved := map[string]int64{}
	for _, s := range sum.SavedByOp {
		saved[s.Op] += s.Bytes
	}
	if got := saved[pads[0].Name]; got != 0 {
		t.Errorf("constant pad saves %d bytes, want 0", got)
	}
	if got, want := saved[pads[1].Name]+saved[pads[2].Name], int64(2*3*(12*14+14*16)*4); got != want {
		t.Errorf("reflect and edge pads save %d bytes, want %d", got, want)
	}
}

// padModel is TestPad's model: a convolution, then an all-zero constant
// pad, a constant pad, a reflect pad and an edge pad, and a classifier.
func padModel() *mb {
	return newModel(14).input("img", tFloat, "batch", 3, 8, 8).
		weight("conv.weight", 3, 3, 1, 1).
		node("Conv", "/conv/Conv", ins("img", "conv.weight"), ins("x"), aInts("kernel_shape", 1, 1)).
		constInts("zero", 0, 0, 0, 0, 0, 0, 0, 0).
		node("Pad", "/zero", ins("x", "zero"), ins("z")).
		constInts("pads", 0, 0, 1, 2, 0, 0, 3, 4).
		node("Pad", "/constant", ins("z", "pads"), ins("c")).
		constInts("pads1", 0, 0, 1, 1, 0, 0, 1, 1).
		node("Pad", "/reflect", ins("c", "pads1"), ins("r"), aString("mode", "reflect")).
		node("Pad", "/edge", ins("r", "pads1"), ins("e"), aString("mode", "edge")).
		node("GlobalAveragePool", "/gap", ins("e"), ins("g")).
		node("Flatten", "/flatten", ins("g"), ins("f")).
		weight("fc.weight", 5, 3).weight("fc.bias", 5).
		node("Gemm", "/fc/Gemm", ins("f", "fc.weight", "fc.bias"), ins("l"), aInt("transB", 1)).output("l")
}

// A pad mode ONNX has and PyTorch does not is refused by name.
func TestPadWrap(t *testing.T) {
	b := newModel(19).input("img", tFloat, "batch", 3, 8, 8).
		constInts("pads", 0, 0, 1, 1, 0, 0, 1, 1).
		node("Pad", "/wrap", ins("img", "pads"), ins("w"), aString("mode", "wrap")).output("w")
	_, err := onnx.Parse(b.bytes(t), "wrap.onnx")
	if err == nil || !strings.Contains(err.Error(), `pad mode "wrap"`) {
		t.Fatalf("err = %v, want the mode named", err)
	}
}

// Malformed pads are refused with the reason, never wrapped around or
// silently merged.
func TestPadErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		pads []int64
		axes []int64
		want string
	}{
		{"overflow", []int64{0, 0, 0, math.MaxInt64, 0, 0, 0, math.MaxInt64}, nil, "out of range"},
		{"repeated axes", []int64{1, 1, 1, 1}, []int64{-1, -1}, "named twice"},
		{"too few", []int64{1, 1}, nil, "2 pads for 4 axes"},
	} {
		b := newModel(18).input("img", tFloat, "batch", 3, 8, 8).constInts("pads", c.pads...)
		in := ins("img", "pads")
		if c.axes != nil {
			b.constInts("axes", c.axes...)
			in = ins("img", "pads", "", "axes")
		}
		b.node("Pad", "/pad", in, ins("p")).output("p")
		_, err := onnx.Parse(b.bytes(t), "pad.onnx")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// Attributes and opsets out of range are refused with the node, the
// attribute or the opset named, never read as something else: a zero
// stride once came out as "kernel larger than the input".
func TestAttributeRangeErrors(t *testing.T) {
	conv := func(opset int64, attrs ...*onnxpb.AttributeProto) *mb {
		return newModel(opset).input("img", tFloat, "batch", 3, 8, 8).weight("conv.weight", 4, 3, 3, 3).
			node("Conv", "/conv/Conv", ins("img", "conv.weight"), ins("c"), attrs...).output("c")
	}
	pool := func(attrs ...*onnxpb.AttributeProto) *mb {
		return newModel(17).input("img", tFloat, "batch", 3, 8, 8).
			node("MaxPool", "/pool", ins("img"), ins("p"), attrs...).output("p")
	}
	for _, c := range []struct {
		name string
		b    *mb
		want []string
	}{
		{"conv strides 0", conv(17, aInts("strides", 0, 0)), []string{`Conv node "/conv/Conv"`, "strides = [0 0]", "positive"}},
		{"conv strides -1", conv(17, aInts("strides", 1, -1)), []string{"strides = [1 -1]", "positive"}},
		{"conv dilations 0", conv(17, aInts("dilations", 0, 1)), []string{"dilations = [0 1]", "positive"}},
		{"conv kernel 0", conv(17, aInts("kernel_shape", 0, 0)), []string{"kernel_shape = [0 0]", "positive"}},
		{"pool strides 0", pool(aInts("kernel_shape", 2, 2), aInts("strides", 0, 0)), []string{`MaxPool node "/pool"`, "strides = [0 0]", "positive"}},
		{"pool kernel -2", pool(aInts("kernel_shape", -2, 2)), []string{"kernel_shape = [-2 2]", "positive"}},
		{"opset 1000", conv(1000), []string{"opset 1000", "newest batchfit reads", "opset_version=20"}},
		{"opset 21", conv(21), []string{"opset 21", "opset 20"}},
		{"opset 0", conv(0), []string{"opset 0 out of range"}},
	} {
		_, err := onnx.Parse(c.b.bytes(t), "m.onnx")
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: err = %v, want %q", c.name, err, w)
				break
			}
		}
	}
	// The newest opset read still reads.
	if _, err := onnx.Parse(conv(20, aInts("strides", 2, 2)).bytes(t), "m.onnx"); err != nil {
		t.Errorf("opset 20: %v", err)
	}
}
