package models

import (
	"reflect"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
)

func vitTC(t *testing.T) TransformerConfig {
	return hfZooEntry(t, "vit-base-patch16-224").tc
}

// hfKinds lists the kinds of the ops whose names start with prefix.
func hfKinds(g *graph.Graph, prefix string) string {
	var ks []string
	for _, op := range g.Ops {
		if strings.HasPrefix(op.Name, prefix) {
			ks = append(ks, string(op.Kind))
		}
	}
	return strings.Join(ks, " ")
}

// The current code (SDPA): per layer layernorm_before, key, value, query
// (each a linear and two views), the kernel, transpose + contiguous (the one
// copy), a view, output.dense, the residual add, layernorm_after, the MLP
// and the second add. Dropout 0.0 leaves no dropout op.
func TestViTGraph(t *testing.T) {
	g, _, err := Build("vit-base-patch16-224", Config{Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := "layer_norm linear view view linear view view linear view view attention view contiguous view linear add layer_norm linear gelu linear add"
	if got := hfKinds(g, "vit.encoder.layer.0."); got != want {
		t.Errorf("layer 0 ops\n got %s\nwant %s", got, want)
	}
	if got, want := hfKinds(g, "vit.embeddings."), "conv2d view view view cat add"; got != want {
		t.Errorf("embedding ops %q, want %q", got, want)
	}
	for _, k := range []graph.Kind{graph.Dropout, graph.Cast} {
		if n := hfCount(g, k, ""); n != 0 {
			t.Errorf("%d %s ops in a float32 model with dropout 0", n, k)
		}
	}
	if n := hfCount(g, graph.Attention, ""); n != 12 {
		t.Errorf("%d attention ops, want 12", n)
	}
	a := hfOp(t, g, "vit.encoder.layer.0.attention.attention.sdpa")
	if a.Attr.Causal || a.Attr.P != 0 || a.Attr.Heads != 12 || a.Attr.KVHeads != 12 {
		t.Errorf("sdpa attrs %+v, want bidirectional, p=0, 12 heads", a.Attr)
	}
	if s := g.Tensor(a.Output).Shape.String(); s != "[2, 12, 197, 64]" {
		t.Errorf("attention output %s", s)
	}
	for i, name := range []string{"query", "key", "value"} {
		proj := hfOp(t, g, "vit.encoder.layer.0.attention.attention."+name).Output
		if g.Storage(a.Inputs[i]) != g.Storage(proj) {
			t.Errorf("sdpa %s is not a view of the %s projection", name, name)
		}
	}
	// The patches: flatten(2).transpose(1, 2) of the convolution, viewed;
	// the cat makes the first new [B, 197, E].
	conv := hfOp(t, g, "vit.embeddings.patch_embeddings.projection")
	if s := g.Tensor(conv.Output).Shape.String(); s != "[2, 768, 14, 14]" {
		t.Errorf("projection output %s", s)
	}
	cat := hfOp(t, g, "vit.embeddings.cat")
	if g.Storage(cat.Inputs[1]) != g.Storage(conv.Output) || g.Tensor(cat.Output).Shape.String() != "[2, 197, 768]" {
		t.Errorf("cat of %v into %v", g.Tensor(cat.Inputs[1]).Shape, g.Tensor(cat.Output).Shape)
	}
	// The classifier reads sequence_output[:, 0, :], a view of the final
	// LayerNorm's output, without a copy (2-D addmm takes strides).
	cls := hfOp(t, g, "classifier")
	if g.Storage(cls.Inputs[0]) != g.Storage(hfOp(t, g, "vit.layernorm").Output) || g.Tensor(cls.Inputs[0]).Shape.String() != "[2, 768]" {
		t.Errorf("classifier input %s %v", g.Tensor(cls.Inputs[0]).Name, g.Tensor(cls.Inputs[0]).Shape)
	}
	if n := hfCount(g, graph.Contiguous, ""); n != 12 {
		t.Errorf("%d copies, want the 12 attention-output copies", n)
	}
	ce := hfOp(t, g, "loss.cross_entropy")
	if l, y := g.Tensor(ce.Inputs[0]), g.Tensor(ce.Inputs[1]); l.Shape.String() != "[2, 1000]" || y.Shape.String() != "[2]" || y.DType != graph.I64 {
		t.Errorf("cross_entropy of %v and %v %s", l.Shape, y.Shape, y.DType)
	}
	in := g.Tensor(g.Inputs[0])
	if in.Shape.String() != "[2, 3, 224, 224]" || in.DType != graph.F32 {
		t.Errorf("input %v %s", in.Shape, in.DType)
	}
	// Seq means nothing to a vision model.
	g2, _, err := Build("vit-base-patch16-224", Config{Batch: 2, Seq: 77})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, g2) {
		t.Error("Config.Seq changed the ViT graph")
	}
}

// model.parameters(): the embeddings' own cls_token and position_embeddings
// before the projection; per layer attention, intermediate, output, then
// the two LayerNorms (registration order, not call order).
func TestViTParamOrder(t *testing.T) {
	tc := vitTC(t)
	g := hfBuild(t, "vit", tc, Config{Batch: 1, Layers: 1})
	var names []string
	for _, p := range g.Params() {
		names = append(names, g.Tensor(p).Name)
	}
	want := "vit.embeddings.cls_token vit.embeddings.position_embeddings " +
		"vit.embeddings.patch_embeddings.projection.weight vit.embeddings.patch_embeddings.projection.bias " +
		"vit.encoder.layer.0.attention.attention.query.weight vit.encoder.layer.0.attention.attention.query.bias " +
		"vit.encoder.layer.0.attention.attention.key.weight vit.encoder.layer.0.attention.attention.key.bias " +
		"vit.encoder.layer.0.attention.attention.value.weight vit.encoder.layer.0.attention.attention.value.bias " +
		"vit.encoder.layer.0.attention.output.dense.weight vit.encoder.layer.0.attention.output.dense.bias " +
		"vit.encoder.layer.0.intermediate.dense.weight vit.encoder.layer.0.intermediate.dense.bias " +
		"vit.encoder.layer.0.output.dense.weight vit.encoder.layer.0.output.dense.bias " +
		"vit.encoder.layer.0.layernorm_before.weight vit.encoder.layer.0.layernorm_before.bias " +
		"vit.encoder.layer.0.layernorm_after.weight vit.encoder.layer.0.layernorm_after.bias " +
		"vit.layernorm.weight vit.layernorm.bias classifier.weight classifier.bias"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("parameters\n got %s\nwant %s", got, want)
	}
	tc.QKVBias = false
	if got, want := hfBuild(t, "vit", tc, Config{Batch: 1, Layers: 1}).ParamCount(), hfBuild(t, "vit", vitTC(t), Config{Batch: 1, Layers: 1}).ParamCount()-3*768; got != want {
		t.Errorf("qkv_bias false: %d parameters, want %d", got, want)
	}
}

// The image side and depth follow Config like torchvision's vit_b_16,
// whose parameters these are: 384 pixels add 380 positions, and two layers
// leave the embeddings, two layers, the LayerNorm and the head.
func TestViTDims(t *testing.T) {
	tc := vitTC(t)
	for _, tt := range []struct {
		c    Config
		want int64
	}{
		{Config{Batch: 1, Image: 384}, 86_859_496}, // torchvision vit_b_16(image_size=384)
		{Config{Batch: 1, Layers: 2}, 15_688_936},  // 742,656 + 2·7,087,872 + 1,536 + 769,000
		// 200 is no multiple of 16: image_size 200 makes (200 // 16)² = 144
		// patches, as the stride-16 convolution does.
		{Config{Batch: 1, Image: 200}, 86_567_656 - (197-145)*768},
	} {
		if got := hfBuild(t, "vit", tc, tt.c).ParamCount(); got != tt.want {
			t.Errorf("%+v: %d parameters, want %d", tt.c, got, tt.want)
		}
	}
	g := hfBuild(t, "vit", tc, Config{Batch: 1, Image: 384, Layers: 1})
	if s := g.Tensor(hfOp(t, g, "vit.encoder.layer.0.attention.attention.sdpa").Output).Shape.String(); s != "[1, 12, 577, 64]" {
		t.Errorf("384 px attention %s, want 577 positions", s)
	}
	// Width keeps the 64-wide heads and the 4× MLP.
	g = hfBuild(t, "vit-s", tc, Config{Batch: 1, Layers: 1, Hidden: 384})
	if a := hfOp(t, g, "vit.encoder.layer.0.attention.attention.sdpa"); a.Attr.Heads != 6 {
		t.Errorf("hidden 384: %d heads, want 6", a.Attr.Heads)
	}
	if s := g.Tensor(hfOp(t, g, "vit.encoder.layer.0.intermediate.dense").Output).Shape.String(); s != "[1, 197, 1536]" {
		t.Errorf("hidden 384: intermediate %s", s)
	}
}

// Eager attention and the releases before the attention interface.
func TestViTAttentionPaths(t *testing.T) {
	c := Config{Batch: 2, Layers: 2}
	with := func(impl, version string) TransformerConfig {
		tc := vitTC(t)
		tc.AttnImpl, tc.Version = impl, version
		return tc
	}
	// Current eager_attention_forward: matmul, * scaling, softmax in
	// float32 and back (two casts, copies only when not float32 at run
	// time), dropout (none at p=0), matmul, transpose + contiguous.
	g := hfBuild(t, "eager", with("eager", ""), c)
	want := "view matmul mul cast softmax cast matmul view contiguous"
	if got := strings.TrimPrefix(hfKinds(g, "vit.encoder.layer.0.attention.attention."), "linear view view linear view view linear view view "); !strings.HasPrefix(got, want) {
		t.Errorf("eager core %q, want %q first", got, want)
	}
	if hfCount(g, graph.Attention, "") != 0 || hfCount(g, graph.Softmax, "") != 2 || hfCount(g, graph.MatMul, "") != 4 || hfCount(g, graph.Cast, "") != 4 {
		t.Errorf("eager: %d attention, %d softmax, %d matmul, %d cast", hfCount(g, graph.Attention, ""),
			hfCount(g, graph.Softmax, ""), hfCount(g, graph.MatMul, ""), hfCount(g, graph.Cast, ""))
	}
	// Before the interface the eager softmax ran in the input dtype.
	g = hfBuild(t, "eager-4.47", with("eager", "4.47"), c)
	if n := hfCount(g, graph.Cast, ""); n != 0 {
		t.Errorf("4.47 eager: %d casts, want none", n)
	}
	first := func(g *graph.Graph) string {
		for _, op := range g.Ops {
			if op.Kind == graph.Linear && strings.HasPrefix(op.Name, "vit.encoder.layer.0.attention.attention.") {
				return op.Name[strings.LastIndex(op.Name, ".")+1:]
			}
		}
		return ""
	}
	// The projection order and the copies sdpa_attention_forward made.
	for _, tt := range []struct {
		version string
		first   string
		copies  int
	}{
		{"", "key", 1},
		{"4.56", "key", 1},
		{"4.55", "key", 4}, // query/key/value.contiguous(): the three transposed views are copied
		{"4.50", "key", 4},
		{"4.49", "query", 1}, // ViTSdpaSelfAttention: F.scaled_dot_product_attention on the views
		{"4.46", "query", 1},
	} {
		g := hfBuild(t, "vit", with("sdpa", tt.version), c)
		if f := first(g); f != tt.first {
			t.Errorf("%q: first projection %s, want %s", tt.version, f, tt.first)
		}
		if n := hfCount(g, graph.Contiguous, "layer.0.attention"); n != tt.copies {
			t.Errorf("%q: %d copies in layer 0's attention, want %d", tt.version, n, tt.copies)
		}
	}
}

// Dropout where the config asks for it; bfloat16 casts the float32 batch.
func TestViTDropoutAndDType(t *testing.T) {
	tc := vitTC(t)
	tc.DropoutP, tc.AttnDropoutP = 0.1, 0.1
	g := hfBuild(t, "vit", tc, Config{Batch: 2})
	if n := hfCount(g, graph.Dropout, ""); n != 1+2*12 {
		t.Errorf("%d dropout ops, want 25 (embeddings, then attention output and MLP output per layer)", n)
	}
	if a := hfOp(t, g, "vit.encoder.layer.11.attention.attention.sdpa"); a.Attr.P != 0.1 {
		t.Errorf("attention dropout %g", a.Attr.P)
	}
	tc = vitTC(t)
	tc.DType = graph.BF16
	g = hfBuild(t, "vit-bf16", tc, Config{Batch: 2, Layers: 1})
	cast := hfOp(t, g, "vit.pixel_values_to")
	if cast.Inputs[0] != g.Inputs[0] || g.Tensor(cast.Output).DType != graph.BF16 || g.Tensor(g.Inputs[0]).DType != graph.F32 {
		t.Errorf("pixel_values cast %+v", cast)
	}
	if d := g.Tensor(hfOp(t, g, "classifier").Output).DType; d != graph.BF16 {
		t.Errorf("bf16 logits are %s", d)
	}
}

// One label is regression: MSELoss(logits.squeeze(), labels.squeeze()) on
// float labels; problem_type "regression" with more labels keeps [B, n].
func TestViTRegression(t *testing.T) {
	tc := vitTC(t)
	tc.NumLabels = 1
	g := hfBuild(t, "vit-reg", tc, Config{Batch: 4, Layers: 1})
	mse := hfOp(t, g, "loss.mse_loss")
	if p, y := g.Tensor(mse.Inputs[0]), g.Tensor(mse.Inputs[1]); p.Shape.String() != "[4]" || y.Shape.String() != "[4]" || y.DType != graph.F32 {
		t.Errorf("mse_loss of %v and %v %s", p.Shape, y.Shape, y.DType)
	}
	if g.Loss != mse.Output || hfCount(g, graph.CrossEntropy, "") != 0 {
		t.Error("the loss is not the MSE")
	}
	tc.NumLabels, tc.ProblemType = 3, "regression"
	g = hfBuild(t, "vit-reg3", tc, Config{Batch: 4, Layers: 1})
	if y := g.Tensor(hfOp(t, g, "loss.mse_loss").Inputs[1]); y.Shape.String() != "[4, 3]" {
		t.Errorf("regression targets %v", y.Shape)
	}
	tc.ProblemType = "single_label_classification"
	g = hfBuild(t, "vit-cls3", tc, Config{Batch: 4, Layers: 1})
	if hfCount(g, graph.CrossEntropy, "") != 1 {
		t.Error("single_label_classification without cross_entropy")
	}
	// Zero means PretrainedConfig's two labels.
	tc = vitTC(t)
	tc.NumLabels = 0
	g = hfBuild(t, "vit-2", tc, Config{Batch: 1, Layers: 1})
	if s := g.Tensor(hfOp(t, g, "classifier").Output).Shape.String(); s != "[1, 2]" {
		t.Errorf("default labels: logits %s", s)
	}
}

func TestViTErrors(t *testing.T) {
	tc := vitTC(t)
	for _, tt := range []struct {
		name string
		f    func(*TransformerConfig)
		c    Config
		msg  string
	}{
		{"patch", func(tc *TransformerConfig) { tc.PatchSize = 32 }, Config{Batch: 1, Image: 16}, "larger than the 16-pixel image"},
		{"multi-label", func(tc *TransformerConfig) { tc.ProblemType = "multi_label_classification" }, Config{Batch: 1}, "not supported"},
		{"problem", func(tc *TransformerConfig) { tc.ProblemType = "ranking" }, Config{Batch: 1}, "unknown problem_type"},
		{"batch", func(tc *TransformerConfig) {}, Config{}, "batch size"},
		{"image", func(tc *TransformerConfig) {}, Config{Batch: 1, Image: -1}, "image side"},
		{"heads", func(tc *TransformerConfig) { tc.Heads = 0 }, Config{Batch: 1}, "num_attention_heads must be positive"},
		{"activation", func(tc *TransformerConfig) { tc.Activation = "mish" }, Config{Batch: 1}, "activation"},
	} {
		_, err := BuildTransformer(tt.name, hfWith(tc, tt.f), tt.c)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: error %v, want one mentioning %q", tt.name, err, tt.msg)
		}
	}
}
