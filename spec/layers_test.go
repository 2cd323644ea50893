package spec

import (
	"reflect"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// TestLayers builds one small spec per layer type (with an mse loss, which
// takes any output shape) and checks the ops it emits, the shape that comes
// out and the parameters it creates.
func TestLayers(t *testing.T) {
	const conv1 = "  - conv2d: {out: 3, kernel: 1}\n" // 3·3 + 3 = 12 parameters, shape kept
	for _, tc := range []struct {
		name   string
		input  string // the input mapping
		layers string
		kinds  string // op kinds before the loss
		out    graph.Shape
		params int64
		blocks int
	}{
		{"linear", "[8]", "  - linear: 4\n", "linear", graph.Shape{2, 4}, 8*4 + 4, 0},
		{"linear no bias", "[8]", "  - linear: {out: 4, bias: false}\n", "linear", graph.Shape{2, 4}, 8 * 4, 0},
		{"Linear torch names", "[8]", "  - Linear: {in_features: 8, out_features: 4}\n", "linear", graph.Shape{2, 4}, 8*4 + 4, 0},
		{"linear sibling fields", "[8]", "  - linear: 4\n    bias: false\n    name: fc\n", "linear", graph.Shape{2, 4}, 32, 0},
		{"linear on a sequence", "[5, 8]", "  - linear: 4\n", "linear", graph.Shape{2, 5, 4}, 36, 0},
		{"linear expression", "[8]", "  - linear: 2 * $h + 1\n", "linear", graph.Shape{2, 7}, 8*7 + 7, 0},
		{"conv2d", "[3, 8, 8]", "  - conv2d: {out: 4, kernel: 3}\n", "conv2d", graph.Shape{2, 4, 6, 6}, 4*3*9 + 4, 0},
		{"conv2d stride padding", "[3, 8, 8]", "  - conv2d: {out: 4, kernel: 3, stride: 2, padding: 1}\n", "conv2d", graph.Shape{2, 4, 4, 4}, 112, 0},
		{"conv2d pairs", "[3, 8, 8]", "  - conv2d: {out: 4, kernel: [3, 1], padding: [1, 0], bias: false}\n", "conv2d", graph.Shape{2, 4, 8, 8}, 4 * 3 * 3, 0},
		{"conv2d same dilated", "[3, 8, 8]", "  - conv2d: {out: 4, kernel: 3, dilation: 2, padding: same}\n", "conv2d", graph.Shape{2, 4, 8, 8}, 112, 0},
		{"conv2d valid", "[3, 8, 8]", "  - Conv2d: {out_channels: 4, kernel_size: 3, padding: valid}\n", "conv2d", graph.Shape{2, 4, 6, 6}, 112, 0},
		{"conv2d groups", "[4, 8, 8]", "  - conv2d: {out: 8, kernel: 1, groups: 2}\n", "conv2d", graph.Shape{2, 8, 8, 8}, 8*2 + 8, 0},
		{"batchnorm2d", "[3, 8, 8]", "  - batchnorm2d\n", "batch_norm", graph.Shape{2, 3, 8, 8}, 6, 0},
		{"BatchNorm2d checked", "[3, 8, 8]", "  - BatchNorm2d: {num_features: 3}\n", "batch_norm", graph.Shape{2, 3, 8, 8}, 6, 0},
		{"batchnorm1d", "[5]", "  - batchnorm1d\n", "batch_norm", graph.Shape{2, 5}, 10, 0},
		{"layernorm", "[4, 6]", "  - layernorm\n", "layer_norm", graph.Shape{2, 4, 6}, 12, 0},
		{"layernorm dims", "[4, 6]", "  - layernorm: {dims: 2}\n", "layer_norm", graph.Shape{2, 4, 6}, 48, 0},
		{"layernorm no bias", "[4, 6]", "  - layernorm: {bias: false}\n", "layer_norm", graph.Shape{2, 4, 6}, 6, 0},
		{"rmsnorm", "[6]", "  - rmsnorm\n", "rms_norm", graph.Shape{2, 6}, 6, 0},
		{"relu", "[8]", "  - linear: 4\n  - relu\n", "linear relu", graph.Shape{2, 4}, 36, 0},
		{"ReLU inplace", "[8]", "  - linear: 4\n  - ReLU: {inplace: true}\n", "linear relu", graph.Shape{2, 4}, 36, 0},
		{"gelu", "[8]", "  - linear: 4\n  - gelu\n", "linear gelu", graph.Shape{2, 4}, 36, 0},
		{"gelu tanh", "[8]", "  - linear: 4\n  - GELU: {approximate: tanh}\n", "linear gelu_tanh", graph.Shape{2, 4}, 36, 0},
		{"silu", "[8]", "  - linear: 4\n  - SiLU\n", "linear silu", graph.Shape{2, 4}, 36, 0},
		{"sigmoid", "[8]", "  - linear: 4\n  - sigmoid\n", "linear sigmoid", graph.Shape{2, 4}, 36, 0},
		{"tanh", "[8]", "  - linear: 4\n  - Tanh\n", "linear tanh", graph.Shape{2, 4}, 36, 0},
		{"hardswish", "[8]", "  - linear: 4\n  - hardswish\n", "linear hardswish", graph.Shape{2, 4}, 36, 0},
		{"hardsigmoid", "[8]", "  - linear: 4\n  - hardsigmoid\n", "linear hardsigmoid", graph.Shape{2, 4}, 36, 0},
		{"softmax", "[8]", "  - linear: 4\n  - softmax\n", "linear softmax", graph.Shape{2, 4}, 36, 0},
		{"logsoftmax", "[8]", "  - linear: 4\n  - log_softmax: -1\n", "linear log_softmax", graph.Shape{2, 4}, 36, 0},
		{"dropout", "[8]", "  - linear: 4\n  - dropout\n", "linear dropout", graph.Shape{2, 4}, 36, 0},
		{"dropout p", "[8]", "  - linear: 4\n  - Dropout: {p: 0.1, inplace: true}\n", "linear dropout", graph.Shape{2, 4}, 36, 0},
		{"dropout 0 is no op", "[8]", "  - linear: 4\n  - dropout: 0\n", "linear", graph.Shape{2, 4}, 36, 0},
		{"maxpool2d", "[3, 8, 8]", conv1 + "  - maxpool2d: 2\n", "conv2d max_pool2d", graph.Shape{2, 3, 4, 4}, 12, 0},
		{"MaxPool2d padded", "[3, 8, 8]", conv1 + "  - MaxPool2d: {kernel_size: 3, stride: 2, padding: 1}\n", "conv2d max_pool2d", graph.Shape{2, 3, 4, 4}, 12, 0},
		{"maxpool2d ceil", "[3, 8, 8]", conv1 + "  - maxpool2d: {kernel: 3, stride: 2, ceil_mode: true}\n", "conv2d max_pool2d", graph.Shape{2, 3, 4, 4}, 12, 0},
		{"avgpool2d", "[3, 8, 8]", conv1 + "  - avgpool2d: [2, 4]\n", "conv2d avg_pool2d", graph.Shape{2, 3, 4, 2}, 12, 0},
		{"adaptiveavgpool2d", "[3, 8, 8]", conv1 + "  - adaptiveavgpool2d: 1\n", "conv2d adaptive_avg_pool2d", graph.Shape{2, 3, 1, 1}, 12, 0},
		{"AdaptiveAvgPool2d pair", "[3, 8, 8]", conv1 + "  - AdaptiveAvgPool2d: {output_size: [2, 3]}\n", "conv2d adaptive_avg_pool2d", graph.Shape{2, 3, 2, 3}, 12, 0},
		{"flatten", "[3, 8, 8]", conv1 + "  - flatten\n", "conv2d view", graph.Shape{2, 192}, 12, 0},
		{"flatten start", "[3, 8, 8]", conv1 + "  - flatten: {start_dim: 2}\n", "conv2d view", graph.Shape{2, 3, 64}, 12, 0},
		{"flatten of flat is no op", "[8]", "  - flatten\n  - linear: 4\n", "linear", graph.Shape{2, 4}, 36, 0},
		{"mean", "[3, 8, 8]", conv1 + "  - mean: {dim: [2, -1]}\n", "conv2d mean", graph.Shape{2, 3}, 12, 0},
		{"embedding", "{shape: [5], dtype: int64}", "  - embedding: {num: 10, dim: 4}\n", "embedding", graph.Shape{2, 5, 4}, 40, 0},
		{"position_embedding", "{shape: [5], dtype: int64}", "  - Embedding: {num_embeddings: 10, embedding_dim: 4}\n  - position_embedding: 8\n",
			"embedding view embedding add", graph.Shape{2, 5, 4}, 40 + 32, 0},
		// qkv 8·24+24, proj 8·8+8: 4·64 + 4·8 = 288
		{"attention", "{shape: [5], dtype: int64}", "  - embedding: {num: 10, dim: 8}\n  - attention: {heads: 2, causal: true}\n",
			"embedding linear view view view view view attention view contiguous linear", graph.Shape{2, 5, 8}, 40*2 + 288, 0},
		{"residual", "[8]", "  - residual:\n    - linear: 8\n    - relu\n", "linear relu add", graph.Shape{2, 8}, 72, 0},
		{"residual mapping", "[8]", "  - residual: {layers: [linear: 8], name: skip}\n", "linear add", graph.Shape{2, 8}, 72, 0},
		{"repeat", "[8]", "  - repeat: 3\n    block: [linear: 8, relu]\n", "linear relu linear relu linear relu", graph.Shape{2, 8}, 3 * 72, 3},
		{"repeat mapping", "[8]", "  - repeat: {count: $h - 1, block: [linear: 8]}\n", "linear linear", graph.Shape{2, 8}, 2 * 72, 2},
		{"repeat zero", "[8]", "  - repeat: 0\n    block: [linear: 3]\n  - linear: 4\n", "linear", graph.Shape{2, 4}, 36, 0},
		{"nested repeat makes outer blocks", "[8]", "  - repeat: 2\n    block:\n      - repeat: 2\n        block: [linear: 8]\n",
			"linear linear linear linear", graph.Shape{2, 8}, 4 * 72, 2},
		{"alias reuses a block", "[8]", "  - repeat: 1\n    block: &b [linear: 8, relu]\n  - residual: *b\n", "linear relu linear relu add", graph.Shape{2, 8}, 144, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "input: " + tc.input + "\nloss: mse\nparams: {h: 3}\nlayers:\n" + tc.layers
			s, err := Parse([]byte(src), "t.yaml")
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			g, err := s.Build(2, 0, nil)
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			var kinds []string
			for _, op := range g.Ops[:len(g.Ops)-1] {
				kinds = append(kinds, string(op.Kind))
			}
			if got := strings.Join(kinds, " "); got != tc.kinds {
				t.Errorf("ops %q, want %q", got, tc.kinds)
			}
			loss := g.Ops[len(g.Ops)-1]
			if loss.Kind != graph.MSELoss {
				t.Fatalf("last op %s", loss.Kind)
			}
			if out := g.Tensor(loss.Inputs[0]).Shape; !reflect.DeepEqual(out, tc.out) {
				t.Errorf("output %v, want %v", out, tc.out)
			}
			if g.ParamCount() != tc.params {
				t.Errorf("params %d, want %d", g.ParamCount(), tc.params)
			}
			if len(g.Blocks) != tc.blocks {
				t.Errorf("blocks %v, want %d", g.Blocks, tc.blocks)
			}
			if err := g.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLayerDetails checks attributes and names the table above does not.
func TestLayerDetails(t *testing.T) {
	build := func(src string) *graph.Graph {
		t.Helper()
		s, err := Parse([]byte(src), "t.yaml")
		if err != nil {
			t.Fatal(err)
		}
		g, err := s.Build(2, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	g := build(`
input: [3, 8, 8]
loss: mse
layers:
  - conv2d: {out: 4, kernel: 3, stride: [2, 1], padding: 1, name: stem}
  - relu: {inplace: true}
  - maxpool2d: {kernel: 3, stride: 2, padding: 1, dilation: 1}
  - dropout: {p: 0.25}
  - softmax: 1
`)
	conv := g.Ops[0]
	if conv.Name != "stem" || conv.Attr.Kernel != [2]int64{3, 3} || conv.Attr.Stride != [2]int64{2, 1} || conv.Attr.Padding != [2]int64{1, 1} {
		t.Errorf("conv %s %+v", conv.Name, conv.Attr)
	}
	if g.Tensor(conv.Weight).Name != "stem.weight" {
		t.Errorf("conv weight %q", g.Tensor(conv.Weight).Name)
	}
	if relu := g.Ops[1]; !relu.Attr.Inplace || g.Tensor(relu.Output).View == graph.None {
		t.Errorf("inplace relu: %+v", relu)
	}
	if pool := g.Ops[2]; pool.Attr.Stride != [2]int64{2, 2} || pool.Attr.Padding != [2]int64{1, 1} {
		t.Errorf("pool %+v", pool.Attr)
	}
	if d := g.Ops[3]; d.Attr.P != 0.25 {
		t.Errorf("dropout p %g", d.Attr.P)
	}
	if sm := g.Ops[4]; sm.Attr.Dim != 1 {
		t.Errorf("softmax dim %d", sm.Attr.Dim)
	}

	// Module names follow nn.Sequential (indices), repeats are "layers"
	// when alone, explicit names win, blocks nest no deeper than the outer
	// repeat.
	g = build(`
input: [4]
layers:
  - linear: 4
  - repeat: 2
    block:
      - residual: [linear: 4]
        name: res
  - Linear: {out: 2, name: head}
`)
	var names []string
	for _, op := range g.Ops {
		names = append(names, op.Name)
	}
	want := "0 layers.0.res.0 layers.0.res layers.1.res.0 layers.1.res head loss"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("op names %q, want %q", got, want)
	}
	if !reflect.DeepEqual(g.Blocks, []string{"layers.0", "layers.1"}) {
		t.Errorf("blocks %v", g.Blocks)
	}
	if g.Ops[1].Block != 0 || g.Ops[3].Block != 1 || g.Ops[0].Block != -1 || g.Ops[5].Block != -1 {
		t.Errorf("op blocks %d %d %d %d", g.Ops[0].Block, g.Ops[1].Block, g.Ops[3].Block, g.Ops[5].Block)
	}
	if tgt := g.Tensor(g.Targets[0]); !reflect.DeepEqual(tgt.Shape, graph.Shape{2}) || tgt.DType != graph.I64 {
		t.Errorf("cross-entropy targets %v %s", tgt.Shape, tgt.DType)
	}

	// Two repeats in one list keep their indices.
	g = build("input: [4]\nlayers:\n  - repeat: 1\n    block: [linear: 4]\n  - repeat: 1\n    block: [linear: 4]\n")
	if !reflect.DeepEqual(g.Blocks, []string{"0.0", "1.0"}) {
		t.Errorf("blocks of two repeats %v", g.Blocks)
	}
	// The graph is named after the spec's name field.
	if g := build("name: Custom\ninput: [4]\nlayers: [linear: 2]\n"); g.Name != "Custom" {
		t.Errorf("graph name %q", g.Name)
	}
	// mse targets have the output's shape and dtype.
	g = build("input: {shape: [4], dtype: bf16}\nloss: MSELoss\nlayers: [linear: 3]\n")
	if tgt := g.Tensor(g.Targets[0]); !reflect.DeepEqual(tgt.Shape, graph.Shape{2, 3}) || tgt.DType != graph.BF16 {
		t.Errorf("mse targets %v %s", tgt.Shape, tgt.DType)
	}
}
