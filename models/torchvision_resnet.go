package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// torchvision.models.resnet (0.14): ResNet with BasicBlock or Bottleneck.

type tvResNetSpec struct {
	name          string
	bottleneck    bool
	layers        [4]int
	groups        int64 // ResNet(groups=...)
	widthPerGroup int64 // ResNet(width_per_group=...)
	desc          string
}

var tvResNets = []tvResNetSpec{
	{"resnet18", false, [4]int{2, 2, 2, 2}, 1, 64, "ResNet-18 (torchvision): BasicBlock [2, 2, 2, 2], 11.7M parameters"},
	{"resnet34", false, [4]int{3, 4, 6, 3}, 1, 64, "ResNet-34 (torchvision): BasicBlock [3, 4, 6, 3], 21.8M parameters"},
	{"resnet50", true, [4]int{3, 4, 6, 3}, 1, 64, "ResNet-50 (torchvision): Bottleneck [3, 4, 6, 3], 25.6M parameters"},
	{"resnet101", true, [4]int{3, 4, 23, 3}, 1, 64, "ResNet-101 (torchvision): Bottleneck [3, 4, 23, 3], 44.5M parameters"},
	{"resnet152", true, [4]int{3, 8, 36, 3}, 1, 64, "ResNet-152 (torchvision): Bottleneck [3, 8, 36, 3], 60.2M parameters"},
	{"wide_resnet50_2", true, [4]int{3, 4, 6, 3}, 1, 128, "Wide ResNet-50-2 (torchvision): Bottleneck [3, 4, 6, 3] of twice the width, 68.9M parameters"},
}

func init() {
	for _, s := range tvResNets {
		s := s
		Register(Model{
			Name: s.name, Family: "torchvision", Description: s.desc,
			Build: func(c Config) (*graph.Graph, error) { return tvResNet(s, c) },
		})
	}
}

// tvResNet is ResNet._forward_impl: conv1, bn1, relu, maxpool, layer1-4,
// avgpool, flatten, fc.
func tvResNet(s tvResNetSpec, c Config) (*graph.Graph, error) {
	b, x, y, _ := tvStart(s.name, c)
	expansion := int64(1)
	if s.bottleneck {
		expansion = 4
	}
	h := b.Conv2d("conv1", x, 64, tvConv(7, 2, 3, 1, false))
	h = b.BatchNorm2d("bn1", h)
	h = b.Act(graph.ReLU, "relu", h, true) // nn.ReLU(inplace=True)
	h = b.MaxPool2d("maxpool", h, graph.Pool2dOpts{Kernel: [2]int64{3, 3}, Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}})
	inplanes := int64(64)
	for i, planes := range []int64{64, 128, 256, 512} {
		stride := int64(2)
		if i == 0 {
			stride = 1
		}
		b.Scope(fmt.Sprintf("layer%d", i+1), func() {
			// ResNet._make_layer: the first block strides and, when the
			// shape changes, gets downsample = Sequential(conv1x1, bn).
			for j := 0; j < s.layers[i]; j++ {
				st := int64(1)
				if j == 0 {
					st = stride
				}
				down := j == 0 && (st != 1 || inplanes != planes*expansion)
				b.Block(itoa(int64(j)), func() {
					if s.bottleneck {
						h = tvBottleneck(b, h, planes, st, down, s.groups, s.widthPerGroup)
					} else {
						h = tvBasicBlock(b, h, planes, st, down)
					}
				})
				inplanes = planes * expansion
			}
		})
	}
	h = tvGlobalAvgPool(b, "avgpool", h) // nn.AdaptiveAvgPool2d((1, 1)): a mean
	h = b.Flatten("flatten", h, 1)       // torch.flatten(x, 1): a view
	logits := b.Linear("fc", h, tvClasses, true)
	return tvFinish(b, logits, y)
}

// tvBasicBlock is BasicBlock.forward.
func tvBasicBlock(b *graph.Builder, x graph.TensorID, planes, stride int64, down bool) graph.TensorID {
	identity := x
	out := b.Conv2d("conv1", x, planes, tvConv(3, stride, 1, 1, false))
	out = b.BatchNorm2d("bn1", out)
	out = b.Act(graph.ReLU, "relu", out, true)
	out = b.Conv2d("conv2", out, planes, tvConv(3, 1, 1, 1, false))
	out = b.BatchNorm2d("bn2", out)
	if down {
		identity = tvDownsample(b, x, planes, stride)
	}
	out = b.AddInplace("add", out, identity) // out += identity
	return b.Act(graph.ReLU, "relu", out, true)
}

// tvBottleneck is Bottleneck.forward (the stride on the 3×3 conv, as in
// torchvision's "ResNet V1.5").
func tvBottleneck(b *graph.Builder, x graph.TensorID, planes, stride int64, down bool, groups, baseWidth int64) graph.TensorID {
	// width = int(planes * (base_width / 64.0)) * groups
	width := planes * baseWidth / 64 * groups
	identity := x
	out := b.Conv2d("conv1", x, width, tvConv(1, 1, 0, 1, false))
	out = b.BatchNorm2d("bn1", out)
	out = b.Act(graph.ReLU, "relu", out, true)
	out = b.Conv2d("conv2", out, width, tvConv(3, stride, 1, groups, false))
	out = b.BatchNorm2d("bn2", out)
	out = b.Act(graph.ReLU, "relu", out, true)
	out = b.Conv2d("conv3", out, planes*4, tvConv(1, 1, 0, 1, false))
	out = b.BatchNorm2d("bn3", out)
	if down {
		identity = tvDownsample(b, x, planes*4, stride)
	}
	out = b.AddInplace("add", out, identity) // out += identity
	return b.Act(graph.ReLU, "relu", out, true)
}

// tvDownsample is nn.Sequential(conv1x1(inplanes, out, stride), BatchNorm2d).
func tvDownsample(b *graph.Builder, x graph.TensorID, out, stride int64) graph.TensorID {
	var h graph.TensorID
	b.Scope("downsample", func() {
		h = b.Conv2d("0", x, out, tvConv(1, stride, 0, 1, false))
		h = b.BatchNorm2d("1", h)
	})
	return h
}
