package onnx_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
	"github.com/batchfit/batchfit/onnx/onnxpb"
)

func readProto(t *testing.T, path string) *onnxpb.ModelProto {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mp onnxpb.ModelProto
	if err := proto.Unmarshal(data, &mp); err != nil {
		t.Fatal(err)
	}
	return &mp
}

// figures is what a weights-variant must reproduce.
func figures(t *testing.T, mp *onnxpb.ModelProto, name string) (params, saved int64) {
	t.Helper()
	data, err := proto.Marshal(mp)
	if err != nil {
		t.Fatal(err)
	}
	m, err := onnx.Parse(data, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	g, err := m.Build(models.Config{Batch: 4})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return g.ParamCount(), simulate(t, g, "1.13").ActivationsBytes
}

// TestWeightPlacements: inline, external, graph inputs and value_info
// weights give the same graph.
func TestWeightPlacements(t *testing.T) {
	base := readProto(t, "../testdata/onnx/simpleconv.onnx")
	wantP, wantS := figures(t, base, "external.onnx")
	if wantP != 60362 {
		t.Fatalf("simpleconv: %d parameters, want 60362", wantP)
	}

	inline := proto.Clone(base).(*onnxpb.ModelProto)
	for _, ti := range inline.Graph.Initializer {
		n := int64(1)
		for _, d := range ti.Dims {
			n *= d
		}
		ti.DataLocation = nil
		ti.ExternalData = nil
		ti.RawData = make([]byte, 4*n)
	}

	asInputs := proto.Clone(base).(*onnxpb.ModelProto)
	asInputs.Graph.Initializer = nil
	for _, ti := range base.Graph.Initializer {
		dims := make([]any, len(ti.Dims))
		for i, d := range ti.Dims {
			dims[i] = d
		}
		asInputs.Graph.Input = append(asInputs.Graph.Input, valueInfo(ti.GetName(), ti.GetDataType(), dims...))
	}

	asValueInfo := proto.Clone(asInputs).(*onnxpb.ModelProto)
	asValueInfo.Graph.ValueInfo = asValueInfo.Graph.Input[1:]
	asValueInfo.Graph.Input = asValueInfo.Graph.Input[:1]

	for name, mp := range map[string]*onnxpb.ModelProto{"inline": inline, "graph inputs": asInputs, "value_info": asValueInfo} {
		p, s := figures(t, mp, name+".onnx")
		if p != wantP || s != wantS {
			t.Errorf("%s weights: %d parameters, %d saved; external: %d, %d", name, p, s, wantP, wantS)
		}
	}

	// mlp.onnx was exported without parameters: they are graph inputs.
	m, err := onnx.Load("../testdata/onnx/mlp.onnx")
	if err != nil {
		t.Fatal(err)
	}
	if in := m.Inputs(); len(in) != 1 || in[0].Name != "input" || in[0].Shape != "[batch, 784]" {
		t.Errorf("mlp inputs: %+v, want one, input [batch, 784]", in)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile("../testdata/onnx/resnet18.onnx")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"truncated.onnx": good[:len(good)/2],
		"text.onnx":      []byte("this is not an ONNX model at all\n"),
		"empty.onnx":     nil,
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := onnx.Load(path)
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "ONNX") {
			t.Errorf("%s: error %q should name the file and what was expected", name, err)
		}
	}
	if _, err := onnx.Load(filepath.Join(dir, "missing.onnx")); err == nil {
		t.Error("a missing file loaded")
	}
	if _, err := onnx.Load(dir); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory: %v", err)
	}
}

func TestDeclaredSizes(t *testing.T) {
	huge := newModel(14).input("x", tFloat, "N", 8).weight("w", 1<<30, 1<<30).
		node("MatMul", "mm", ins("x", "w"), ins("y")).output("y")
	if _, err := onnx.Parse(huge.bytes(t), "huge.onnx"); err == nil || !strings.Contains(err.Error(), "elements") {
		t.Errorf("a 2^60-element weight: %v", err)
	}
	short := newModel(14).input("x", tFloat, "N", 8).output("y")
	w := floatTensor("w", []float32{1, 2, 3}, 8, 4) // 3 values for 32 elements
	short.g.Initializer = append(short.g.Initializer, w)
	short.node("MatMul", "mm", ins("x", "w"), ins("y"))
	if _, err := onnx.Parse(short.bytes(t), "short.onnx"); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("raw data shorter than the shape: %v", err)
	}
}

func TestUnsupportedOperator(t *testing.T) {
	b := newModel(14).input("x", tFloat, "N", 8).
		node("Relu", "/r", ins("x"), ins("h")).
		node("NonMaxSuppression", "/nms", ins("h"), ins("y")).output("y")
	_, err := onnx.Parse(b.bytes(t), "nms.onnx")
	if err == nil {
		t.Fatal("parsed")
	}
	for _, want := range []string{"NonMaxSuppression", `"/nms"`, "index 1", "nms.onnx"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %s", err, want)
		}
	}
}

// TestFixedBatch: a file exported without a dynamic batch axis, its batch
// (here 1) spelled as a number in a reshape target.
func TestFixedBatch(t *testing.T) {
	b := newModel(14).input("x", tFloat, 1, 3, 8, 8).weight("conv.weight", 4, 3, 3, 3).
		weight("fc.weight", 10, 256).weight("fc.bias", 10).
		node("Conv", "/conv/Conv", ins("x", "conv.weight"), ins("c"), aInts("pads", 1, 1, 1, 1)).
		constInts("shape", 1, -1).
		node("Reshape", "/Reshape", ins("c", "shape"), ins("f")).
		node("Gemm", "/fc/Gemm", ins("f", "fc.weight", "fc.bias"), ins("y"), aInt("transB", 1)).output("y")
	m, err := onnx.Parse(b.bytes(t), "fixed.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 6})
	if err != nil {
		t.Fatal(err)
	}
	if s := g.Tensor(g.Inputs[0]).Shape; s[0] != 6 {
		t.Errorf("input shape %v, want batch 6", s)
	}
	if len(m.Notes()) == 0 || !strings.Contains(strings.Join(m.Notes(), " "), "fixed batch") {
		t.Errorf("notes %q should mention the fixed batch", m.Notes())
	}
}

// TestHandComputed pins a small MLP's figures, computed by hand from
// PyTorch's autograd: Gemm(4→8, transB=0 with a bias add) ReLU Gemm(8→2).
func TestHandComputed(t *testing.T) {
	b := newModel(14).input("x", tFloat, "batch", 4).
		weight("fc1.weight", 4, 8).weight("fc1.bias", 8). // MatMul weight [in, out] and a bias Add
		weight("fc2.weight", 2, 8).weight("fc2.bias", 2).
		node("MatMul", "/fc1/MatMul", ins("x", "fc1.weight"), ins("m")).
		node("Add", "/fc1/Add", ins("fc1.bias", "m"), ins("h")).
		node("Relu", "/relu", ins("h"), ins("r")).
		node("Gemm", "/fc2/Gemm", ins("r", "fc2.weight", "fc2.bias"), ins("y"), aInt("transB", 1)).output("y")
	m, err := onnx.Parse(b.bytes(t), "tiny.onnx")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 3})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[graph.Kind]int{}
	for _, op := range g.Ops {
		kinds[op.Kind]++
	}
	if kinds[graph.Linear] != 2 || kinds[graph.Add] != 0 || kinds[graph.ReLU] != 1 {
		t.Errorf("ops %v: want two linear (the bias add fused), one relu", kinds)
	}
	if got, want := g.ParamCount(), int64(4*8+8+8*2+2); got != want {
		t.Errorf("%d parameters, want %d", got, want)
	}
	// relu's result (3·8·4 = 96 B, also fc2's saved input), log_softmax's
	// result (3·2·4 = 24 B) and nll_loss's total_weight (4 B); the input
	// and the targets are batch data.
	if got, want := simulate(t, g, "1.13").ActivationsBytes, int64(96+24+4); got != want {
		t.Errorf("saved %d bytes, want %d", got, want)
	}
	for _, p := range g.Params() {
		// The MatMul weight [in, out] is F.linear's weight [out, in].
		if tt := g.Tensor(p); tt.Name == "fc1.weight" && tt.Shape.String() != "[8, 4]" {
			t.Errorf("fc1.weight has shape %v, want [8, 4]", tt.Shape)
		}
	}
}
