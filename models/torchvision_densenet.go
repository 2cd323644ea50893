package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// torchvision.models.densenet (0.14): DenseNet-BC with memory_efficient
// False (the default). Every dense layer concatenates all the feature maps
// before it (torch.cat in _DenseLayer.bn_function), and every dense block
// ends in one more cat of all of them, so a block of L layers runs L+1
// concatenations of growing width: the model of the "many concatenations"
// case.

type tvDenseNetSpec struct {
	name   string
	growth int64
	blocks [4]int
	init   int64 // num_init_features
	desc   string
}

var tvDenseNets = []tvDenseNetSpec{
	{"densenet121", 32, [4]int{6, 12, 24, 16}, 64, "DenseNet-121 (torchvision): dense blocks [6, 12, 24, 16], growth 32, 8.0M parameters"},
	{"densenet161", 48, [4]int{6, 12, 36, 24}, 96, "DenseNet-161 (torchvision): dense blocks [6, 12, 36, 24], growth 48, 28.7M parameters"},
	{"densenet169", 32, [4]int{6, 12, 32, 32}, 64, "DenseNet-169 (torchvision): dense blocks [6, 12, 32, 32], growth 32, 14.1M parameters"},
	{"densenet201", 32, [4]int{6, 12, 48, 32}, 64, "DenseNet-201 (torchvision): dense blocks [6, 12, 48, 32], growth 32, 20.0M parameters"},
}

func init() {
	for _, s := range tvDenseNets {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvDenseNet(s, c) },
		})
	}
}

// tvDenseNet is DenseNet.forward: features (conv0, norm0, relu0, pool0, the
// dense blocks with transitions between them, norm5), then
// F.relu(inplace=True), adaptive_avg_pool2d to (1, 1), flatten and the
// classifier.
func tvDenseNet(s tvDenseNetSpec, c Config) (*graph.Graph, error) {
	const bnSize = 4 // bn_size: the bottleneck is bn_size * growth wide
	b, x, y, _ := tvStart(s.name, c)
	var h graph.TensorID
	b.Scope("features", func() {
		h = b.Conv2d("conv0", x, s.init, tvConv(7, 2, 3, 1, false))
		h = b.BatchNorm2d("norm0", h)
		h = b.Act(graph.ReLU, "relu0", h, true)
		h = b.MaxPool2d("pool0", h, graph.Pool2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}})
		width := s.init
		for i, n := range s.blocks {
			b.Scope(fmt.Sprintf("denseblock%d", i+1), func() {
				// _DenseBlock.forward: features = [init]; each layer
				// reads the cat of all of them and appends its output.
				feats := []graph.TensorID{h}
				for j := 0; j < n; j++ {
					b.Block(fmt.Sprintf("denselayer%d", j+1), func() {
						// torch.cat copies even a list of one.
						o := b.BatchNorm2d("norm1", b.Cat("cat", 1, feats...))
						o = b.Act(graph.ReLU, "relu1", o, true)
						o = b.Conv2d("conv1", o, bnSize*s.growth, tvConv(1, 1, 0, 1, false))
						o = b.BatchNorm2d("norm2", o)
						o = b.Act(graph.ReLU, "relu2", o, true)
						o = b.Conv2d("conv2", o, s.growth, tvConv(3, 1, 1, 1, false))
						feats = append(feats, o)
					})
				}
				h = b.Cat("cat", 1, feats...)
			})
			width += int64(n) * s.growth
			if i == len(s.blocks)-1 {
				break
			}
			// _Transition: norm, relu (in place), 1×1 conv halving the
			// width, AvgPool2d(2, 2).
			b.Scope(fmt.Sprintf("transition%d", i+1), func() {
				h = b.BatchNorm2d("norm", h)
				h = b.Act(graph.ReLU, "relu", h, true)
				h = b.Conv2d("conv", h, width/2, tvConv(1, 1, 0, 1, false))
				h = b.AvgPool2d("pool", h, graph.Pool2dOpts{Kernel: [2]int64{2, 2}, Stride: [2]int64{2, 2}})
			})
			width /= 2
		}
		h = b.BatchNorm2d("norm5", h)
	})
	h = b.Act(graph.ReLU, "relu", h, true)
	h = tvGlobalAvgPool(b, "avgpool", h)
	h = b.Flatten("flatten", h, 1)
	logits := b.Linear("classifier", h, tvClasses, true)
	return tvFinish(b, logits, y)
}
