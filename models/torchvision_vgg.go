package models

import "github.com/batchfit/batchfit/graph"

// torchvision.models.vgg (0.14): VGG(make_layers(cfg, batch_norm)).

// tvVGGPool marks a max pool ("M") in a VGG configuration.
const tvVGGPool = 0

// vgg.py's cfgs: conv output channels, tvVGGPool for "M".
var tvVGGCfgs = map[string][]int64{
	"A": {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0},
	"B": {64, 64, 0, 128, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0},
	"D": {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0},
	"E": {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0},
}

func init() {
	for _, v := range []struct {
		name, cfg string
		bn        bool
		desc      string
	}{
		{"vgg11", "A", false, "VGG-11 (torchvision, configuration A), 132.9M parameters"},
		{"vgg13", "B", false, "VGG-13 (torchvision, configuration B), 133.0M parameters"},
		{"vgg16", "D", false, "VGG-16 (torchvision, configuration D), 138.4M parameters"},
		{"vgg19", "E", false, "VGG-19 (torchvision, configuration E), 143.7M parameters"},
		{"vgg11_bn", "A", true, "VGG-11 with batch norm (torchvision), 132.9M parameters"},
		{"vgg13_bn", "B", true, "VGG-13 with batch norm (torchvision), 133.1M parameters"},
		{"vgg16_bn", "D", true, "VGG-16 with batch norm (torchvision), 138.4M parameters"},
		{"vgg19_bn", "E", true, "VGG-19 with batch norm (torchvision), 143.7M parameters"},
	} {
		v := v
		Register(Model{
			Name: v.name, Family: "torchvision", Description: v.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvVGG(v.name, tvVGGCfgs[v.cfg], v.bn, c) },
		})
	}
}

// tvVGG is VGG.forward: features, avgpool, flatten, classifier. VGG has no
// residual blocks, so the graph declares none.
func tvVGG(name string, cfg []int64, batchNorm bool, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(name, c)
	h := x
	b.Scope("features", func() {
		// make_layers: one nn.Sequential; indices count every module.
		idx := int64(0)
		next := func() string { s := itoa(idx); idx++; return s }
		for _, v := range cfg {
			if v == tvVGGPool {
				h = b.MaxPool2d(next(), h, graph.Pool2dOpts{Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}})
				continue
			}
			h = b.Conv2d(next(), h, v, tvConv(3, 1, 1, 1, true))
			if batchNorm {
				h = b.BatchNorm2d(next(), h)
			}
			h = b.Act(graph.ReLU, next(), h, true) // nn.ReLU(inplace=True)
		}
	})
	h = b.AdaptiveAvgPool2d("avgpool", h, 7, 7)
	h = b.Flatten("flatten", h, 1) // torch.flatten(x, 1): a view
	b.Scope("classifier", func() {
		h = b.Linear("0", h, 4096, true)
		h = b.Act(graph.ReLU, "1", h, true) // nn.ReLU(True)
		h = b.Dropout("2", h, 0.5, false)   // nn.Dropout(p=0.5), not in-place
		h = b.Linear("3", h, 4096, true)
		h = b.Act(graph.ReLU, "4", h, true)
		h = b.Dropout("5", h, 0.5, false)
		h = b.Linear("6", h, tvClasses, true)
	})
	return tvFinish(b, h, y)
}
