package models

import (
	"math"

	"github.com/batchfit/batchfit/graph"
)

// torchvision.models.efficientnet (0.14): EfficientNet B0–B4 (MBConv
// blocks, BatchNorm2d, stochastic_depth_prob 0.2).
//
// Image size: torchvision's pretrained weights come with transforms that
// resize to 224 (B0), 240 (B1), 260 (B2), 300 (B3) and 380 (B4), but the
// network accepts any size (it ends in an adaptive pool), so the zoo uses
// Config.Image with the torchvision family's default of 224 for all five;
// pass --image 380 (Config.Image) for B4 at its training resolution.

type tvEfficientNetSpec struct {
	name                  string
	width, depth, dropout float64
	desc                  string
}

var tvEfficientNets = []tvEfficientNetSpec{
	{"efficientnet_b0", 1.0, 1.0, 0.2, "EfficientNet-B0 (torchvision): MBConv blocks with squeeze-excitation, SiLU and stochastic depth, 5.3M parameters"},
	{"efficientnet_b1", 1.0, 1.1, 0.2, "EfficientNet-B1 (torchvision): B0 scaled in depth (×1.1), 7.8M parameters"},
	{"efficientnet_b2", 1.1, 1.2, 0.3, "EfficientNet-B2 (torchvision): B0 scaled in width (×1.1) and depth (×1.2), 9.1M parameters"},
	{"efficientnet_b3", 1.2, 1.4, 0.3, "EfficientNet-B3 (torchvision): B0 scaled in width (×1.2) and depth (×1.4), 12.2M parameters"},
	{"efficientnet_b4", 1.4, 1.8, 0.4, "EfficientNet-B4 (torchvision): B0 scaled in width (×1.4) and depth (×1.8), 19.3M parameters"},
}

// tvMBConvConfig is MBConvConfig before width and depth scaling:
// expand_ratio, kernel, stride, input_channels, out_channels, num_layers.
type tvMBConvConfig struct {
	expand                       float64
	kernel, stride, in, out, num int64
}

// The efficientnet_b* inverted_residual_setting of _efficientnet_conf.
var tvEfficientNetSetting = []tvMBConvConfig{
	{1, 3, 1, 32, 16, 1},
	{6, 3, 2, 16, 24, 2},
	{6, 5, 2, 24, 40, 2},
	{6, 3, 2, 40, 80, 3},
	{6, 5, 1, 80, 112, 3},
	{6, 5, 2, 112, 192, 4},
	{6, 3, 1, 192, 320, 1},
}

func init() {
	for _, s := range tvEfficientNets {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvEfficientNet(s, c) },
		})
	}
}

// tvMakeDivisibleF is torchvision.models._utils._make_divisible(v, 8) for
// a float v: int(v + 4) // 8 * 8, at least 8, plus 8 when that lost more
// than 10 % of v.
func tvMakeDivisibleF(v float64) int64 {
	const divisor = 8
	n := max(divisor, int64(v+divisor/2)/divisor*divisor)
	if float64(n) < 0.9*v {
		n += divisor
	}
	return n
}

// tvEfficientNet is EfficientNet._forward_impl: features (stem, seven
// stages of MBConv blocks, 1×1 head conv), avgpool, flatten, classifier
// (Dropout(p, inplace=True), Linear).
func tvEfficientNet(s tvEfficientNetSpec, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(s.name, c)
	adjust := func(ch int64) int64 { return tvMakeDivisibleF(float64(ch) * s.width) } // MBConvConfig.adjust_channels
	type stage struct {
		cnf tvMBConvConfig
		num int64
	}
	var stages []stage
	var total int64
	for _, cnf := range tvEfficientNetSetting {
		cnf.in, cnf.out = adjust(cnf.in), adjust(cnf.out)
		n := int64(math.Ceil(float64(cnf.num) * s.depth)) // MBConvConfig.adjust_depth
		stages = append(stages, stage{cnf, n})
		total += n
	}
	h := x
	b.Scope("features", func() {
		h = tvConvNormActivation(b, "0", h, stages[0].cnf.in, 3, 2, 1, graph.SiLU)
		var id int64 // stage_block_id
		for i, st := range stages {
			b.Scope(itoa(int64(i+1)), func() {
				for j := int64(0); j < st.num; j++ {
					cnf := st.cnf
					if j > 0 {
						cnf.in, cnf.stride = cnf.out, 1
					}
					sd := 0.2 * float64(id) / float64(total)
					b.Block(itoa(j), func() { h = tvMBConv(b, h, cnf, sd) })
					id++
				}
			})
		}
		last := stages[len(stages)-1].cnf.out
		h = tvConvNormActivation(b, itoa(int64(len(stages)+1)), h, 4*last, 1, 1, 1, graph.SiLU)
	})
	h = tvGlobalAvgPool(b, "avgpool", h) // nn.AdaptiveAvgPool2d(1): a mean
	h = b.Flatten("flatten", h, 1)
	b.Scope("classifier", func() {
		// In place on the flattened view of the pooled tensor: on the CPU
		// _dropout_impl's input.mul_(noise) saves the noise.
		h = b.Dropout("0", h, s.dropout, true)
		h = b.Linear("1", h, tvClasses, true)
	})
	return tvFinish(b, h, y)
}

// tvMBConv is efficientnet.MBConv.forward: block = [1×1 expand
// Conv2dNormActivation with SiLU when the expanded width differs], depthwise
// Conv2dNormActivation with SiLU, SqueezeExcitation(expanded, max(1, in/4),
// activation=SiLU(inplace=True)) with the default Sigmoid scale, 1×1 project
// Conv2dNormActivation without activation; then, with a residual
// connection, result = stochastic_depth(result); result += input.
func tvMBConv(b *graph.Builder, input graph.TensorID, cnf tvMBConvConfig, sd float64) graph.TensorID {
	expanded := tvMakeDivisibleF(float64(cnf.in) * cnf.expand) // adjust_channels(input_channels, expand_ratio)
	h := input
	b.Scope("block", func() {
		idx := int64(0)
		next := func() string { s := itoa(idx); idx++; return s }
		if expanded != cnf.in {
			h = tvConvNormActivation(b, next(), h, expanded, 1, 1, 1, graph.SiLU)
		}
		h = tvConvNormActivation(b, next(), h, expanded, cnf.kernel, cnf.stride, expanded, graph.SiLU)
		h = tvSqueezeExcitationWith(b, next(), h, max(1, cnf.in/4), graph.SiLU, true, graph.Sigmoid)
		h = tvConvNormActivation(b, next(), h, cnf.out, 1, 1, 1, "")
	})
	if cnf.stride == 1 && cnf.in == cnf.out {
		h = b.StochasticDepth("stochastic_depth", h, sd)
		h = b.AddInplace("add", h, input) // result += input
	}
	return h
}
