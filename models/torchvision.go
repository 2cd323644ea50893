package models

import "github.com/batchfit/batchfit/graph"

// The torchvision family: classification models of torchvision 0.14
// (torchvision/models/*.py), each mirroring its forward() op for op in
// training mode. All take a float32 [B, 3, S, S] image batch (S =
// Config.Image, default 224) and int64 [B] class targets, and end in
// F.cross_entropy over 1000 classes.

const (
	tvClasses      = 1000
	tvDefaultImage = 224
)

// tvStart opens a torchvision graph: the builder, the image batch and the
// targets.
func tvStart(name string, c Config) (b *graph.Builder, x, y graph.TensorID, image int64) {
	image = orDefault(c.Image, tvDefaultImage)
	b = graph.NewBuilder(name)
	b.Adapters = c.Adapters
	b.Quant = c.Quant
	x = b.Input("x", graph.Shape{c.Batch, 3, image, image}, graph.F32)
	y = b.Target("y", graph.Shape{c.Batch}, graph.I64)
	return b, x, y, image
}

// tvConv is nn.Conv2d's square kernel, stride, padding and groups (dilation
// 1).
func tvConv(kernel, stride, padding, groups int64, bias bool) graph.Conv2dOpts {
	return graph.Conv2dOpts{
		Kernel:  [2]int64{kernel, kernel},
		Stride:  [2]int64{stride, stride},
		Padding: [2]int64{padding, padding},
		Groups:  groups,
		Bias:    bias,
	}
}

// tvFinish adds the loss and completes the graph.
func tvFinish(b *graph.Builder, logits, y graph.TensorID) (*graph.Graph, error) {
	b.CrossEntropy("loss", logits, y)
	return b.Graph()
}

// tvGlobalAvgPool is nn.AdaptiveAvgPool2d((1, 1)) (or AdaptiveAvgPool2d(1))
// on [N, C, H, W]. For a 1×1 output, at::adaptive_avg_pool2d runs
// input.mean({-1, -2}, keepdim=True) instead of the pooling kernel, so
// autograd records MeanBackward1, which saves only sizes (torch 1.13's CPU
// reference shows MeanBackward1 for resnet18's avgpool). Builder.Mean has
// no keepdim, so the keepdim result [N, C, 1, 1] is the mean [N, C]
// followed by a view: the same single storage.
func tvGlobalAvgPool(b *graph.Builder, name string, x graph.TensorID) graph.TensorID {
	s := b.Shape(x)
	if len(s) != 4 {
		b.Fail("%s: adaptive_avg_pool2d expects [N, C, H, W], got %v", name, s)
		return graph.None
	}
	m := b.Mean(name, x, -1, -2)
	return b.Reshape(name+"_keepdim", m, s[0], s[1], 1, 1)
}
