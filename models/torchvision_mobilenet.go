package models

import "github.com/batchfit/batchfit/graph"

// torchvision.models.mobilenetv3 (0.14): MobileNetV3 large and small
// (width_mult 1.0, not reduced_tail, not dilated, dropout 0.2), and
// torchvision.models.mobilenetv2: MobileNetV2 (width_mult 1.0, dropout 0.2).

// tvInvertedResidualConfig is InvertedResidualConfig at width_mult 1.0
// (where adjust_channels leaves these channel counts, all multiples of 8,
// unchanged).
type tvInvertedResidualConfig struct {
	in, kernel, expanded, out int64
	se, hs                    bool // use_se; activation "HS" (Hardswish) or "RE" (ReLU)
	stride                    int64
}

var tvMobileNetV3Large = []tvInvertedResidualConfig{
	{16, 3, 16, 16, false, false, 1},
	{16, 3, 64, 24, false, false, 2},
	{24, 3, 72, 24, false, false, 1},
	{24, 5, 72, 40, true, false, 2},
	{40, 5, 120, 40, true, false, 1},
	{40, 5, 120, 40, true, false, 1},
	{40, 3, 240, 80, false, true, 2},
	{80, 3, 200, 80, false, true, 1},
	{80, 3, 184, 80, false, true, 1},
	{80, 3, 184, 80, false, true, 1},
	{80, 3, 480, 112, true, true, 1},
	{112, 3, 672, 112, true, true, 1},
	{112, 5, 672, 160, true, true, 2},
	{160, 5, 960, 160, true, true, 1},
	{160, 5, 960, 160, true, true, 1},
}

var tvMobileNetV3Small = []tvInvertedResidualConfig{
	{16, 3, 16, 16, true, false, 2},
	{16, 3, 72, 24, false, false, 2},
	{24, 3, 88, 24, false, false, 1},
	{24, 5, 96, 40, true, true, 2},
	{40, 5, 240, 40, true, true, 1},
	{40, 5, 240, 40, true, true, 1},
	{40, 5, 120, 48, true, true, 1},
	{48, 5, 144, 48, true, true, 1},
	{48, 5, 288, 96, true, true, 2},
	{96, 5, 576, 96, true, true, 1},
	{96, 5, 576, 96, true, true, 1},
}

func init() {
	Register(Model{
		Name: "mobilenet_v3_large", Family: "torchvision",
		Description: "MobileNetV3-Large (torchvision): inverted residuals with squeeze-excitation and Hardswish, 5.5M parameters",
		Build: func(c Config) (*graph.Graph, error) {
			return tvMobileNetV3("mobilenet_v3_large", tvMobileNetV3Large, 1280, c)
		},
	})
	Register(Model{
		Name: "mobilenet_v3_small", Family: "torchvision",
		Description: "MobileNetV3-Small (torchvision): inverted residuals with squeeze-excitation and Hardswish, 2.5M parameters",
		Build: func(c Config) (*graph.Graph, error) {
			return tvMobileNetV3("mobilenet_v3_small", tvMobileNetV3Small, 1024, c)
		},
	})
}

// tvMakeDivisible is torchvision.models._utils._make_divisible(v, 8).
func tvMakeDivisible(v int64) int64 {
	const divisor = 8
	n := max(divisor, (v+divisor/2)/divisor*divisor)
	if 10*n < 9*v { // new_v < 0.9 * v
		n += divisor
	}
	return n
}

// tvConvNormActivation is Conv2dNormActivation(in, out, kernel, stride,
// groups, norm_layer=BatchNorm2d, activation_layer=act) with padding
// (kernel-1)/2 and no conv bias; act "" is activation_layer=None. The
// activation is built with inplace=True.
func tvConvNormActivation(b *graph.Builder, name string, x graph.TensorID, out, kernel, stride, groups int64, act graph.Kind) graph.TensorID {
	h := x
	b.Scope(name, func() {
		h = b.Conv2d("0", h, out, tvConv(kernel, stride, (kernel-1)/2, groups, false))
		h = b.BatchNorm2d("1", h)
		if act != "" {
			h = b.Act(act, "2", h, true)
		}
	})
	return h
}

// tvMobileNetV3 is MobileNetV3._forward_impl: features, avgpool, flatten,
// classifier.
func tvMobileNetV3(name string, setting []tvInvertedResidualConfig, lastChannel int64, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(name, c)
	h := x
	b.Scope("features", func() {
		h = tvConvNormActivation(b, "0", h, setting[0].in, 3, 2, 1, graph.Hardswish)
		for i, cnf := range setting {
			b.Block(itoa(int64(i+1)), func() { h = tvInvertedResidual(b, h, cnf) })
		}
		lastIn := setting[len(setting)-1].out
		h = tvConvNormActivation(b, itoa(int64(len(setting)+1)), h, 6*lastIn, 1, 1, 1, graph.Hardswish)
	})
	h = tvGlobalAvgPool(b, "avgpool", h) // nn.AdaptiveAvgPool2d(1): a mean
	h = b.Flatten("flatten", h, 1)
	b.Scope("classifier", func() {
		h = b.Linear("0", h, lastChannel, true)
		h = b.Act(graph.Hardswish, "1", h, true) // nn.Hardswish(inplace=True)
		h = b.Dropout("2", h, 0.2, true)         // nn.Dropout(p=0.2, inplace=True)
		h = b.Linear("3", h, tvClasses, true)
	})
	return tvFinish(b, h, y)
}

// tvInvertedResidual is mobilenetv3.InvertedResidual.forward.
func tvInvertedResidual(b *graph.Builder, input graph.TensorID, cnf tvInvertedResidualConfig) graph.TensorID {
	act := graph.ReLU
	if cnf.hs {
		act = graph.Hardswish
	}
	h := input
	b.Scope("block", func() {
		idx := int64(0)
		next := func() string { s := itoa(idx); idx++; return s }
		if cnf.expanded != cnf.in {
			h = tvConvNormActivation(b, next(), h, cnf.expanded, 1, 1, 1, act)
		}
		// depthwise
		h = tvConvNormActivation(b, next(), h, cnf.expanded, cnf.kernel, cnf.stride, cnf.expanded, act)
		if cnf.se {
			h = tvSqueezeExcitation(b, next(), h, tvMakeDivisible(cnf.expanded/4))
		}
		h = tvConvNormActivation(b, next(), h, cnf.out, 1, 1, 1, "")
	})
	if cnf.stride == 1 && cnf.in == cnf.out {
		h = b.AddInplace("add", h, input) // result += input
	}
	return h
}

// tvSqueezeExcitation is torchvision.ops.SqueezeExcitation(C, squeeze,
// activation=nn.ReLU, scale_activation=nn.Hardsigmoid): avgpool, fc1, ReLU,
// fc2, Hardsigmoid (neither in-place), then scale * input.
func tvSqueezeExcitation(b *graph.Builder, name string, input graph.TensorID, squeeze int64) graph.TensorID {
	return tvSqueezeExcitationWith(b, name, input, squeeze, graph.ReLU, false, graph.Hardsigmoid)
}

// tvSqueezeExcitationWith is torchvision.ops.SqueezeExcitation with the
// given activation (in place or not) and scale_activation (never in place).
func tvSqueezeExcitationWith(b *graph.Builder, name string, input graph.TensorID, squeeze int64, act graph.Kind, actInplace bool, scaleAct graph.Kind) graph.TensorID {
	var out graph.TensorID
	b.Scope(name, func() {
		s := b.Shape(input)
		if len(s) != 4 {
			b.Fail("squeeze-excitation expects [N, C, H, W], got %v", s)
			return
		}
		scale := tvGlobalAvgPool(b, "avgpool", input) // nn.AdaptiveAvgPool2d(1): a mean
		scale = b.Conv2d("fc1", scale, squeeze, tvConv(1, 1, 0, 1, true))
		scale = b.Act(act, "activation", scale, actInplace)
		scale = b.Conv2d("fc2", scale, s[1], tvConv(1, 1, 0, 1, true))
		scale = b.Act(scaleAct, "scale_activation", scale, false)
		out = b.Mul("mul", scale, input) // scale * input
	})
	return out
}

// tvMobileNetV2Setting is MobileNetV2's inverted_residual_setting: expand
// ratio t, output channels c, repeats n, first stride s.
var tvMobileNetV2Setting = [][4]int64{
	{1, 16, 1, 1},
	{6, 24, 2, 2},
	{6, 32, 3, 2},
	{6, 64, 4, 2},
	{6, 96, 3, 1},
	{6, 160, 3, 2},
	{6, 320, 1, 1},
}

func init() {
	Register(Model{
		Name: "mobilenet_v2", Family: "torchvision",
		Description: "MobileNetV2 (torchvision): inverted residuals with linear bottlenecks and ReLU6, 3.5M parameters",
		Build:       tvMobileNetV2,
	})
}

// tvMobileNetV2 is MobileNetV2._forward_impl at width_mult 1.0 (where
// _make_divisible leaves every channel count unchanged): features,
// adaptive_avg_pool2d to 1×1, flatten, classifier (Dropout(0.2), not in
// place, then Linear). Every Conv2dNormActivation uses nn.ReLU6 in place,
// hardtanh_(x, 0, 6).
func tvMobileNetV2(c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart("mobilenet_v2", c)
	h := x
	b.Scope("features", func() {
		in := int64(32)
		h = tvConvNormActivation(b, "0", h, in, 3, 2, 1, graph.Hardtanh)
		idx := int64(1)
		for _, st := range tvMobileNetV2Setting {
			t, out, n, s := st[0], st[1], st[2], st[3]
			for i := int64(0); i < n; i++ {
				stride := s
				if i > 0 {
					stride = 1
				}
				inC := in
				b.Block(itoa(idx), func() { h = tvInvertedResidualV2(b, h, inC, out, stride, t) })
				in = out
				idx++
			}
		}
		h = tvConvNormActivation(b, itoa(idx), h, 1280, 1, 1, 1, graph.Hardtanh)
	})
	h = tvGlobalAvgPool(b, "adaptive_avg_pool2d", h) // F.adaptive_avg_pool2d(x, (1, 1)): a mean
	h = b.Flatten("flatten", h, 1)
	b.Scope("classifier", func() {
		h = b.Dropout("0", h, 0.2, false) // nn.Dropout(p=0.2)
		h = b.Linear("1", h, tvClasses, true)
	})
	return tvFinish(b, h, y)
}

// tvInvertedResidualV2 is mobilenetv2.InvertedResidual.forward: conv is
// [1×1 expand Conv2dNormActivation when t != 1], 3×3 depthwise
// Conv2dNormActivation, 1×1 Conv2d, BatchNorm2d; x + conv(x) (not in place)
// when the stride is 1 and the channels match.
func tvInvertedResidualV2(b *graph.Builder, x graph.TensorID, in, out, stride, t int64) graph.TensorID {
	hidden := in * t // int(round(inp * expand_ratio))
	h := x
	b.Scope("conv", func() {
		idx := int64(0)
		next := func() string { s := itoa(idx); idx++; return s }
		if t != 1 {
			h = tvConvNormActivation(b, next(), h, hidden, 1, 1, 1, graph.Hardtanh)
		}
		h = tvConvNormActivation(b, next(), h, hidden, 3, stride, hidden, graph.Hardtanh)
		h = b.Conv2d(next(), h, out, tvConv(1, 1, 0, 1, false))
		h = b.BatchNorm2d(next(), h)
	})
	if stride == 1 && in == out {
		h = b.Add("add", x, h) // x + self.conv(x)
	}
	return h
}
