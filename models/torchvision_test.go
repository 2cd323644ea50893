package models

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// The expected numbers come from torchvision 0.14's model definitions
// (Debian's python3-torchvision 0.14.1 on torch 1.13), computed with
// /usr/bin/python3:
//
//	m = getattr(torchvision.models, name)(weights=None)
//	params  = sum(p.numel() for p in m.parameters())
//	tensors = len(list(m.parameters()))
//	conv    = sum(isinstance(x, nn.Conv2d) for x in m.modules())      # likewise BatchNorm2d,
//	                                                                  # Linear, LayerNorm,
//	                                                                  # MultiheadAttention
//
// Linear ops are the nn.Linear modules (MultiheadAttention's out_proj is one)
// plus one in-projection per nn.MultiheadAttention, which calls F.linear
// with in_proj_weight and is no module.
var tvWant = []struct {
	name                  string
	params                int64
	tensors               int
	conv, bn, linear, ln  int
	mha                   int
	blocks                int
	firstParam, someParam string
}{
	{"resnet18", 11689512, 62, 20, 20, 1, 0, 0, 8, "conv1.weight", "layer2.0.downsample.1.bias"},
	{"resnet34", 21797672, 110, 36, 36, 1, 0, 0, 16, "conv1.weight", "layer4.2.bn2.weight"},
	{"resnet50", 25557032, 161, 53, 53, 1, 0, 0, 16, "conv1.weight", "layer1.0.downsample.0.weight"},
	{"resnet101", 44549160, 314, 104, 104, 1, 0, 0, 33, "conv1.weight", "layer3.22.conv3.weight"},
	{"resnet152", 60192808, 467, 155, 155, 1, 0, 0, 50, "conv1.weight", "layer3.35.bn3.bias"},
	{"wide_resnet50_2", 68883240, 161, 53, 53, 1, 0, 0, 16, "conv1.weight", "layer4.2.conv2.weight"},
	{"vgg11", 132863336, 22, 8, 0, 3, 0, 0, 0, "features.0.weight", "features.18.bias"},
	{"vgg13", 133047848, 26, 10, 0, 3, 0, 0, 0, "features.0.weight", "features.22.bias"},
	{"vgg16", 138357544, 32, 13, 0, 3, 0, 0, 0, "features.0.weight", "features.28.weight"},
	{"vgg19", 143667240, 38, 16, 0, 3, 0, 0, 0, "features.0.weight", "features.34.weight"},
	{"vgg11_bn", 132868840, 38, 8, 8, 3, 0, 0, 0, "features.0.weight", "features.26.bias"},
	{"vgg13_bn", 133053736, 46, 10, 10, 3, 0, 0, 0, "features.0.weight", "features.32.weight"},
	{"vgg16_bn", 138365992, 58, 13, 13, 3, 0, 0, 0, "features.0.weight", "features.41.bias"},
	{"vgg19_bn", 143678248, 70, 16, 16, 3, 0, 0, 0, "features.0.weight", "features.50.weight"},
	{"vit_b_16", 86567656, 152, 1, 0, 37 + 12, 25, 12, 12, "class_token", "encoder.layers.encoder_layer_11.self_attention.in_proj_bias"},
	{"vit_b_32", 88224232, 152, 1, 0, 37 + 12, 25, 12, 12, "class_token", "encoder.layers.encoder_layer_0.mlp.3.weight"},
	{"vit_l_16", 304326632, 296, 1, 0, 73 + 24, 49, 24, 24, "class_token", "encoder.layers.encoder_layer_23.self_attention.out_proj.bias"},
	{"mobilenet_v3_large", 5483032, 174, 62, 46, 2, 0, 0, 15, "features.0.0.weight", "features.13.block.2.fc1.bias"},
	{"mobilenet_v3_small", 2542856, 142, 52, 34, 2, 0, 0, 11, "features.0.0.weight", "features.1.block.1.fc2.weight"},
	{"mobilenet_v2", 3504872, 158, 52, 52, 1, 0, 0, 17, "features.0.0.weight", "features.12.conv.2.weight"},
	{"efficientnet_b0", 5288548, 213, 81, 49, 1, 0, 0, 16, "features.0.0.weight", "features.5.2.block.3.1.bias"},
	{"efficientnet_b1", 7794184, 301, 115, 69, 1, 0, 0, 23, "features.0.0.weight", "features.5.3.block.2.fc2.weight"},
	{"efficientnet_b2", 9109994, 301, 115, 69, 1, 0, 0, 23, "features.0.0.weight", "features.5.3.block.2.fc2.weight"},
	{"efficientnet_b3", 12233232, 340, 130, 78, 1, 0, 0, 26, "features.0.0.weight", "features.5.4.block.2.fc2.weight"},
	{"efficientnet_b4", 19341616, 418, 160, 96, 1, 0, 0, 32, "features.0.0.weight", "features.5.5.block.2.fc2.weight"},
	// ConvNeXt's LayerNorm2d is an nn.LayerNorm subclass; each CNBlock's
	// own layer_scale precedes its block's parameters.
	{"convnext_tiny", 28589128, 182, 22, 0, 37, 23, 0, 18, "features.0.0.weight", "features.5.6.block.0.weight"},
	{"convnext_small", 50223688, 344, 40, 0, 73, 41, 0, 36, "features.0.0.weight", "features.5.18.block.0.weight"},
	{"convnext_base", 88591464, 344, 40, 0, 73, 41, 0, 36, "features.0.0.weight", "features.5.18.block.0.weight"},
	// Swin's window attention is explicit matmul/softmax ops, no
	// attention kernel; its Linear ops are qkv, proj, the MLP's two, the
	// three patch-merging reductions and the head.
	{"swin_t", 28288354, 173, 1, 0, 52, 29, 0, 12, "features.0.0.weight", "features.5.4.norm1.bias"},
	// DenseNet: one checkpointable block per dense layer.
	{"densenet121", 7978856, 364, 120, 121, 1, 0, 0, 58, "features.conv0.weight", "features.norm5.bias"},
	{"densenet161", 28681000, 484, 160, 161, 1, 0, 0, 78, "features.conv0.weight", "features.norm5.bias"},
	{"densenet169", 14149480, 508, 168, 169, 1, 0, 0, 82, "features.conv0.weight", "features.norm5.bias"},
	{"densenet201", 20013928, 604, 200, 201, 1, 0, 0, 98, "features.conv0.weight", "features.norm5.bias"},
}

func TestTorchvisionModels(t *testing.T) {
	const batch = 2
	for _, w := range tvWant {
		t.Run(w.name, func(t *testing.T) {
			g, m, err := Build(w.name, Config{Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			if m.Family != "torchvision" || m.Description == "" {
				t.Errorf("family %q, description %q", m.Family, m.Description)
			}
			if err := g.Validate(); err != nil {
				t.Fatal(err)
			}
			if got := g.ParamCount(); got != w.params {
				t.Errorf("ParamCount = %d, want %d", got, w.params)
			}
			ps := g.Params()
			if len(ps) != w.tensors {
				t.Errorf("%d parameter tensors, want %d", len(ps), w.tensors)
			}
			if len(ps) > 0 && g.Tensor(ps[0]).Name != w.firstParam {
				t.Errorf("first parameter %q, want %q", g.Tensor(ps[0]).Name, w.firstParam)
			}
			found := false
			for _, p := range ps {
				found = found || g.Tensor(p).Name == w.someParam
			}
			if !found {
				t.Errorf("no parameter %q", w.someParam)
			}
			counts := map[graph.Kind]int{}
			for _, op := range g.Ops {
				counts[op.Kind]++
			}
			for _, c := range []struct {
				k    graph.Kind
				want int
			}{{graph.Conv2d, w.conv}, {graph.BatchNorm, w.bn}, {graph.Linear, w.linear}, {graph.LayerNorm, w.ln}, {graph.Attention, w.mha}} {
				if counts[c.k] != c.want {
					t.Errorf("%d %s ops, want %d", counts[c.k], c.k, c.want)
				}
			}
			if len(g.Blocks) != w.blocks {
				t.Errorf("%d blocks, want %d", len(g.Blocks), w.blocks)
			}
			// The loss is F.cross_entropy(logits [B, 1000], targets [B] int64)
			// on a float32 [B, 3, 224, 224] batch.
			loss := g.Ops[len(g.Ops)-1]
			if loss.Kind != graph.CrossEntropy || loss.Output != g.Loss {
				t.Fatalf("last op %s %s is not the loss", loss.Kind, loss.Name)
			}
			if s := g.Tensor(loss.Inputs[0]).Shape; s.String() != "[2, 1000]" {
				t.Errorf("logits %v, want [2, 1000]", s)
			}
			if x := g.Tensor(g.Inputs[0]); x.Shape.String() != "[2, 3, 224, 224]" || x.DType != graph.F32 {
				t.Errorf("input %v %s", x.Shape, x.DType)
			}
			if y := g.Tensor(g.Targets[0]); y.Shape.String() != "[2]" || y.DType != graph.I64 {
				t.Errorf("targets %v %s", y.Shape, y.DType)
			}
			for _, b := range g.Blocks {
				if strings.Contains(b, "..") || strings.HasPrefix(b, ".") {
					t.Errorf("bad block name %q", b)
				}
			}
		})
	}
}

// Every registered torchvision model is in the table above.
func TestTorchvisionAllChecked(t *testing.T) {
	want := map[string]bool{}
	for _, w := range tvWant {
		want[w.name] = true
	}
	for _, m := range All() {
		if m.Family == "torchvision" && !want[m.Name] {
			t.Errorf("%s has no expected numbers in tvWant", m.Name)
		}
	}
	if err := Check(); err != nil {
		t.Error(err)
	}
}

// ViT's sizes follow the image side (pos_embedding has (S/patch)² + 1
// rows) and the layer override; numbers from torchvision 0.14:
// vit_b_16(image_size=384), vit_b_32(image_size=384), and
// VisionTransformer(224, 16, num_layers=2, 12, 768, 3072).
func TestTorchvisionViTDims(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    Config
		params int64
	}{
		{"vit_b_16", Config{Batch: 1, Image: 384}, 86859496},
		{"vit_b_32", Config{Batch: 1, Image: 384}, 88297192},
		{"vit_b_16", Config{Batch: 1, Layers: 2}, 15688936},
	} {
		g, _, err := Build(c.name, c.cfg)
		if err != nil {
			t.Fatalf("%s %+v: %v", c.name, c.cfg, err)
		}
		if got := g.ParamCount(); got != c.params {
			t.Errorf("%s %+v: ParamCount = %d, want %d", c.name, c.cfg, got, c.params)
		}
	}
	if _, _, err := Build("vit_b_16", Config{Batch: 1, Image: 200}); err == nil {
		t.Error("vit_b_16 at 200 px (not a multiple of 16) built without error")
	}
}

// opAt finds the first op named name.
func opAt(t *testing.T, g *graph.Graph, name string) graph.Op {
	t.Helper()
	for _, op := range g.Ops {
		if op.Name == name {
			return op
		}
	}
	t.Fatalf("no op %q", name)
	return graph.Op{}
}

// lastOpAt finds the last op named name (a module called twice, such as a
// block's shared nn.ReLU).
func lastOpAt(t *testing.T, g *graph.Graph, name string) graph.Op {
	t.Helper()
	for i := len(g.Ops) - 1; i >= 0; i-- {
		if g.Ops[i].Name == name {
			return g.Ops[i]
		}
	}
	t.Fatalf("no op %q", name)
	return graph.Op{}
}

// The encoder layer's multi-head attention, step by step as torch 1.13's
// F.multi_head_attention_forward runs it (B=2, L=197, E=768, H=12, D=64).
// Each line: op name, kind, output shape, and whether the output is a view
// (shares an earlier storage) — written from the PyTorch source, and
// matching what a TorchDispatchMode trace of torchvision's EncoderBlock
// shows (transpose, clone, view, ...).
func TestTorchvisionViTAttentionSteps(t *testing.T) {
	g, _, err := Build("vit_b_16", Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	const p = "encoder.layers.encoder_layer_0."
	want := []struct {
		name  string
		kind  graph.Kind
		shape string
		view  bool
	}{
		{"ln_1", graph.LayerNorm, "[2, 197, 768]", false},
		{"self_attention.transpose", graph.View, "[197, 2, 768]", true}, // query.transpose(1, 0)
		{"self_attention.in_proj", graph.Linear, "[197, 2, 2304]", false},
		{"self_attention.q_chunk", graph.View, "[197, 2, 768]", true}, // .chunk(3, dim=-1)
		{"self_attention.q_contiguous", graph.Contiguous, "[197, 2, 768]", false},
		{"self_attention.q_view", graph.View, "[197, 2, 12, 64]", true},
		{"self_attention.q_transpose", graph.View, "[2, 12, 197, 64]", true},
		{"self_attention.k_chunk", graph.View, "[197, 2, 768]", true},
		{"self_attention.k_contiguous", graph.Contiguous, "[197, 2, 768]", false},
		{"self_attention.k_view", graph.View, "[197, 2, 12, 64]", true},
		{"self_attention.k_transpose", graph.View, "[2, 12, 197, 64]", true},
		{"self_attention.v_chunk", graph.View, "[197, 2, 768]", true},
		{"self_attention.v_contiguous", graph.Contiguous, "[197, 2, 768]", false},
		{"self_attention.v_view", graph.View, "[197, 2, 12, 64]", true},
		{"self_attention.v_transpose", graph.View, "[2, 12, 197, 64]", true},
		{"self_attention.attention", graph.Attention, "[2, 12, 197, 64]", false},
		{"self_attention.attn_view", graph.View, "[24, 197, 64]", true},
		{"self_attention.attn_transpose", graph.View, "[197, 24, 64]", true},
		{"self_attention.attn_contiguous", graph.Contiguous, "[197, 24, 64]", false},
		{"self_attention.attn_flat", graph.View, "[394, 768]", true},
		{"self_attention.out_proj", graph.Linear, "[394, 768]", false},
		{"self_attention.out_view", graph.View, "[197, 2, 768]", true},
		{"self_attention.out_transpose", graph.View, "[2, 197, 768]", true},
		{"add", graph.Add, "[2, 197, 768]", false}, // x = x + input
		{"ln_2", graph.LayerNorm, "[2, 197, 768]", false},
		{"mlp.0", graph.Linear, "[2, 197, 3072]", false},
		{"mlp.1", graph.GELU, "[2, 197, 3072]", false},
		{"mlp.3", graph.Linear, "[2, 197, 768]", false},
		{"add_1", graph.Add, "[2, 197, 768]", false},
	}
	var ops []graph.Op
	for _, op := range g.Ops {
		// Sub-ops the builder adds inside one op (named "<op>.<part>",
		// such as the copy F.linear makes of a non-contiguous input) are
		// the builder's business, not the model's.
		if strings.HasPrefix(op.Name, p) && !strings.HasPrefix(op.Name, p+"self_attention.in_proj.") {
			ops = append(ops, op)
		}
	}
	if len(ops) != len(want) {
		var names []string
		for _, op := range ops {
			names = append(names, strings.TrimPrefix(op.Name, p))
		}
		t.Fatalf("%d ops in encoder_layer_0, want %d: %v", len(ops), len(want), names)
	}
	for i, w := range want {
		op := ops[i]
		out := g.Tensor(op.Output)
		got := fmt.Sprintf("%s %s %v view=%v", strings.TrimPrefix(op.Name, p), op.Kind, out.Shape, out.View != graph.None)
		exp := fmt.Sprintf("%s %s %s view=%v", w.name, w.kind, w.shape, w.view)
		if got != exp {
			t.Errorf("op %d: got %s, want %s", i, got, exp)
		}
	}
	// q, k and v are copied into three separate storages (1.13's chunk then
	// .contiguous() each), and the in-projection reads a view of ln_1's
	// output.
	qs := g.Storage(opAt(t, g, p+"self_attention.q_transpose").Output)
	ks := g.Storage(opAt(t, g, p+"self_attention.k_transpose").Output)
	vs := g.Storage(opAt(t, g, p+"self_attention.v_transpose").Output)
	if qs == ks || ks == vs || qs == vs {
		t.Error("q, k, v share a storage")
	}
	src := opAt(t, g, p+"self_attention.in_proj").Inputs[0]
	for _, op := range g.Ops {
		if op.Output == src && op.Name == p+"self_attention.in_proj.input_copy" {
			src = op.Inputs[0] // the builder's copy of the transposed view
		}
	}
	if g.Tensor(src).View != opAt(t, g, p+"ln_1").Output || g.Tensor(src).Shape.String() != "[197, 2, 768]" {
		t.Error("in_proj does not read the transposed view of ln_1's output")
	}
	in := opAt(t, g, p+"self_attention.in_proj")
	if w := g.Tensor(in.Weight); w.Name != p+"self_attention.in_proj_weight" || w.Shape.String() != "[2304, 768]" {
		t.Errorf("in_proj weight %s %v", w.Name, w.Shape)
	}
	at := opAt(t, g, p+"self_attention.attention")
	if at.Attr.Causal || at.Attr.P != 0 || at.Attr.Heads != 12 || at.Attr.KVHeads != 12 {
		t.Errorf("attention attrs %+v", at.Attr)
	}
	// The head reads x[:, 0], a view of the final LayerNorm's output.
	head := opAt(t, g, "heads.head")
	if g.Storage(head.Inputs[0]) != opAt(t, g, "encoder.ln").Output {
		t.Error("heads.head does not read a view of encoder.ln's output")
	}
}

// ResNet: the ReLUs and the residual add are in place (their outputs share
// the batch norm's storage), and avgpool is the mean that
// adaptive_avg_pool2d runs for a 1×1 output.
func TestTorchvisionResNetInplace(t *testing.T) {
	g, _, err := Build("resnet50", Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	bn3 := opAt(t, g, "layer1.0.bn3").Output
	add := opAt(t, g, "layer1.0.add")
	if !add.Attr.Inplace || g.Storage(add.Output) != bn3 {
		t.Error("out += identity is not in place on bn3's output")
	}
	if g.Storage(add.Inputs[1]) != opAt(t, g, "layer1.0.downsample.1").Output {
		t.Error("layer1.0 adds something other than its downsample")
	}
	last := lastOpAt(t, g, "layer1.0.relu")
	if !last.Attr.Inplace || g.Storage(last.Output) != bn3 {
		t.Error("the block's last ReLU is not in place")
	}
	if op := opAt(t, g, "avgpool"); op.Kind != graph.Mean || g.Tensor(op.Output).Shape.String() != "[2, 2048]" {
		t.Errorf("avgpool is %s %v", op.Kind, g.Tensor(op.Output).Shape)
	}
	if s := g.Tensor(lastOpAt(t, g, "layer4.2.relu").Output).Shape.String(); s != "[2, 2048, 7, 7]" {
		t.Errorf("layer4 output %s", s)
	}
}

// VGG: avgpool to 7×7 is a real adaptive_avg_pool2d (1.13's CPU
// reference records AdaptiveAvgPool2DBackward0), and the classifier's
// dropouts are not in place.
func TestTorchvisionVGG(t *testing.T) {
	g, _, err := Build("vgg16_bn", Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if op := opAt(t, g, "avgpool"); op.Kind != graph.AdaptiveAvgPool2d {
		t.Errorf("avgpool is %s", op.Kind)
	}
	for _, n := range []string{"classifier.2", "classifier.5"} {
		if op := opAt(t, g, n); op.Kind != graph.Dropout || op.Attr.Inplace || op.Attr.P != 0.5 {
			t.Errorf("%s: %s inplace=%v p=%g", n, op.Kind, op.Attr.Inplace, op.Attr.P)
		}
	}
	if op := opAt(t, g, "features.2"); op.Kind != graph.ReLU || !op.Attr.Inplace {
		t.Errorf("features.2 is %s inplace=%v", op.Kind, op.Attr.Inplace)
	}
	if _, _, err := Build("vgg16", Config{Batch: 1, Image: 16}); err == nil {
		t.Error("vgg16 at 16 px built without error")
	}
}

// MobileNetV3: the squeeze-excitation scales its input (scale * input) and
// the residual add is in place.
func TestTorchvisionMobileNetV3(t *testing.T) {
	g, _, err := Build("mobilenet_v3_large", Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	mul := opAt(t, g, "features.4.block.2.mul")
	if mul.Kind != graph.Mul || g.Tensor(mul.Output).Shape.String() != "[2, 72, 28, 28]" {
		t.Errorf("SE mul %s %v", mul.Kind, g.Tensor(mul.Output).Shape)
	}
	if op := opAt(t, g, "features.4.block.2.scale_activation"); op.Kind != graph.Hardsigmoid || op.Attr.Inplace {
		t.Errorf("scale_activation %s inplace=%v", op.Kind, op.Attr.Inplace)
	}
	if op := opAt(t, g, "features.5.add"); !op.Attr.Inplace {
		t.Error("features.5: result += input is not in place")
	}
	if op := opAt(t, g, "features.7.block.0.2"); op.Kind != graph.Hardswish || !op.Attr.Inplace {
		t.Errorf("features.7.block.0.2 is %s inplace=%v", op.Kind, op.Attr.Inplace)
	}
}

// TestTorchvisionViTLayerNormCopies: every residual sum of the encoder is
// laid out like its first operand, the transposed attention output
// (TensorIterator's reorder_dimensions), so each LayerNorm that reads one
// copies its input (layer_norm's expect_contiguous); the first layer's
// ln_1 reads the contiguous sum of the patch tokens and the position
// embedding. As recorded on an H200 (testdata/measured/snapshots).
func TestTorchvisionViTLayerNormCopies(t *testing.T) {
	for _, packed := range []bool{false, true} {
		g, _, err := Build("vit_b_16", Config{Batch: 2, Layers: 2, MHAPackedInProjection: packed})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			op   string
			copy bool
		}{
			{"encoder.layers.encoder_layer_0.ln_1", false},
			{"encoder.layers.encoder_layer_0.ln_2", true},
			{"encoder.layers.encoder_layer_1.ln_1", true},
			{"encoder.layers.encoder_layer_1.ln_2", true},
			{"encoder.ln", true},
		} {
			if got := opAt(t, g, c.op).Attr.InputCopy; got != c.copy {
				t.Errorf("packed %v: %s InputCopy = %v, want %v", packed, c.op, got, c.copy)
			}
		}
	}
}
