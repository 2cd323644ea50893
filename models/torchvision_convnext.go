package models

import "github.com/batchfit/batchfit/graph"

// torchvision.models.convnext (0.14): ConvNeXt Tiny, Small and Base
// (layer_scale 1e-6, LayerNorm2d with eps 1e-6, the default stochastic
// depth of each builder).
//
// Memory layout matters here: LayerNorm2d permutes to channels-last,
// normalizes and permutes back, so from the stem on every feature map is a
// channels-last NCHW tensor (NHWC strides). Convolutions keep their input's
// memory format, so each block's permute(0, 2, 3, 1) is contiguous again
// and only the stem's layer_norm sees a non-contiguous input (which
// native_layer_norm copies into a temporary; it saves the permuted input
// itself). The builder follows these layouts.

type tvConvNeXtStage struct {
	in, out, layers int64 // CNBlockConfig: out 0 is None (no downsampling)
}

type tvConvNeXtSpec struct {
	name   string
	stages []tvConvNeXtStage
	sdProb float64
	desc   string
}

var tvConvNeXts = []tvConvNeXtSpec{
	{"convnext_tiny", []tvConvNeXtStage{{96, 192, 3}, {192, 384, 3}, {384, 768, 9}, {768, 0, 3}}, 0.1,
		"ConvNeXt-Tiny (torchvision): depthwise 7×7 conv, LayerNorm and inverted MLP blocks (3-3-9-3), 28.6M parameters"},
	{"convnext_small", []tvConvNeXtStage{{96, 192, 3}, {192, 384, 3}, {384, 768, 27}, {768, 0, 3}}, 0.4,
		"ConvNeXt-Small (torchvision): 3-3-27-3 blocks of width 96-768, 50.2M parameters"},
	{"convnext_base", []tvConvNeXtStage{{128, 256, 3}, {256, 512, 3}, {512, 1024, 27}, {1024, 0, 3}}, 0.5,
		"ConvNeXt-Base (torchvision): 3-3-27-3 blocks of width 128-1024, 88.6M parameters"},
}

func init() {
	for _, s := range tvConvNeXts {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvConvNeXt(s, c) },
		})
	}
}

// tvConvNeXt is ConvNeXt._forward_impl: features (stem, stages of CNBlocks
// with LayerNorm2d + 2×2 stride-2 conv downsampling between them), avgpool,
// classifier (LayerNorm2d, Flatten, Linear).
func tvConvNeXt(s tvConvNeXtSpec, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(s.name, c)
	var total int64
	for _, st := range s.stages {
		total += st.layers
	}
	h := x
	b.Scope("features", func() {
		// Conv2dNormActivation(3, C, kernel_size=4, stride=4, padding=0,
		// norm_layer=LayerNorm2d, activation_layer=None, bias=True)
		b.Scope("0", func() {
			h = b.Conv2d("0", h, s.stages[0].in, tvConv(4, 4, 0, 1, true))
			h = tvLayerNorm2d(b, "1", h)
		})
		idx := int64(1)
		var id int64 // stage_block_id
		for _, st := range s.stages {
			b.Scope(itoa(idx), func() {
				for j := int64(0); j < st.layers; j++ {
					sd := s.sdProb * float64(id) / (float64(total) - 1.0)
					b.Block(itoa(j), func() { h = tvCNBlock(b, h, sd) })
					id++
				}
			})
			idx++
			if st.out != 0 {
				b.Scope(itoa(idx), func() {
					h = tvLayerNorm2d(b, "0", h)
					h = b.Conv2d("1", h, st.out, tvConv(2, 2, 0, 1, true))
				})
				idx++
			}
		}
	})
	h = tvGlobalAvgPool(b, "avgpool", h) // nn.AdaptiveAvgPool2d(1): a mean
	b.Scope("classifier", func() {
		h = tvLayerNorm2d(b, "0", h)
		h = b.Flatten("1", h, 1)
		h = b.Linear("2", h, tvClasses, true)
	})
	return tvFinish(b, h, y)
}

// tvCNBlock is convnext.CNBlock.forward: result = layer_scale *
// block(input); result = stochastic_depth(result); result += input. block
// is depthwise Conv2d(dim, dim, 7, padding=3, bias), Permute([0, 2, 3, 1]),
// LayerNorm(dim, eps=1e-6), Linear(dim, 4·dim), GELU, Linear(4·dim, dim),
// Permute([0, 3, 1, 2]). layer_scale is the block's own parameter [dim, 1,
// 1], first in model.parameters().
func tvCNBlock(b *graph.Builder, input graph.TensorID, sd float64) graph.TensorID {
	s := b.Shape(input)
	if len(s) != 4 {
		b.Fail("CNBlock expects [N, C, H, W], got %v", s)
		return graph.None
	}
	dim := s[1]
	scale := b.Param("layer_scale", graph.Shape{dim, 1, 1})
	h := input
	b.Scope("block", func() {
		h = b.Conv2d("0", h, dim, tvConv(7, 1, 3, dim, true))
		h = b.Permute("1", h, 0, 2, 3, 1)
		h = b.LayerNorm("2", h, 1, true)
		// F.linear of a 4-D input: matmul folds it to 2-D (a view), mm
		// saves it, and the bias is added in place.
		h = b.Linear("3", h, 4*dim, true)
		h = b.Act(graph.GELU, "4", h, false)
		h = b.Linear("5", h, dim, true)
		h = b.Permute("6", h, 0, 3, 1, 2)
	})
	// mul saves the block output (for layer_scale's gradient) and
	// layer_scale (for the block's).
	h = b.Mul("mul", scale, h)
	h = b.StochasticDepth("stochastic_depth", h, sd)
	return b.AddInplace("add", h, input) // result += input
}

// tvLayerNorm2d is convnext.LayerNorm2d.forward: x.permute(0, 2, 3, 1),
// F.layer_norm over C (eps 1e-6), .permute(0, 3, 1, 2). On a [N, C, 1, 1]
// map (the classifier's, after the pool) the permutes move only size-1
// dims: the tensors stay contiguous, so they are recorded as the
// equivalent reshapes (views with the same storage), which keeps the
// following flatten a view, as in PyTorch.
func tvLayerNorm2d(b *graph.Builder, name string, x graph.TensorID) graph.TensorID {
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("%s: LayerNorm2d expects [N, C, H, W], got %v", name, s)
		return graph.None
	}
	if s[2] == 1 && s[3] == 1 {
		h := b.Reshape(name+".permute", x, s[0], 1, 1, s[1])
		h = b.LayerNorm(name, h, 1, true)
		return b.Reshape(name+".permute_back", h, s[0], s[1], 1, 1)
	}
	h := b.Permute(name+".permute", x, 0, 2, 3, 1)
	h = b.LayerNorm(name, h, 1, true)
	return b.Permute(name+".permute_back", h, 0, 3, 1, 2)
}
