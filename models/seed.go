package models

import "github.com/batchfit/batchfit/graph"

// The two networks of the seed question: an MLP of L hidden layers of H
// units on flattened 28×28 inputs, and a small CNN on 3×32×32 images.
// validation/reference.py defines the same modules for the PyTorch
// cross-check.

func init() {
	Register(Model{
		Name: "mlp", Family: "seed",
		Description: "Linear 784→H, ReLU, (L−1)× [Linear H→H, ReLU], Linear H→10 (default L=4, H=1024)",
		Dims:        []Dim{DimLayers, DimHidden},
		Build: func(c Config) (*graph.Graph, error) {
			return mlpWith(c.Adapters, c.Quant, c.Batch, orDefault(c.Layers, 4), orDefault(c.Hidden, 1024))
		},
	})
	Register(Model{
		Name: "simpleconv", Family: "seed",
		Description: "Conv 3→32 3×3, ReLU, MaxPool 2, Conv 32→64 3×3, ReLU, MaxPool 2, Linear 4096→10 on 3×32×32",
		Build: func(c Config) (*graph.Graph, error) {
			return simpleConvWith(c.Adapters, c.Batch)
		},
	})
}

// MLP builds nn.Sequential(Flatten, Linear(784, H), ReLU, [Linear(H, H),
// ReLU]×(L−1), Linear(H, 10)) with a cross-entropy loss over 10 classes.
func MLP(batch, layers, hidden int64) (*graph.Graph, error) {
	return mlpWith(nil, nil, batch, layers, hidden)
}

func mlpWith(a *graph.Adapters, q *graph.Quant, batch, layers, hidden int64) (*graph.Graph, error) {
	b := graph.NewBuilder("mlp")
	b.Adapters = a
	b.Quant = q
	if layers < 1 || hidden < 1 {
		b.Fail("mlp needs at least one hidden layer of at least one unit, got L=%d H=%d", layers, hidden)
	}
	x := b.Input("x", graph.Shape{batch, 784}, graph.F32)
	y := b.Target("y", graph.Shape{batch}, graph.I64)
	h := x
	for i := int64(0); i < layers && b.Err() == nil; i++ {
		b.Block(itoa(i), func() {
			h = b.Linear("linear", h, hidden, true)
			h = b.Act(graph.ReLU, "relu", h, false)
		})
	}
	logits := b.Linear("head", h, 10, true)
	b.CrossEntropy("loss", logits, y)
	return b.Graph()
}

// SimpleConv builds the seed CNN with a cross-entropy loss over 10 classes.
func SimpleConv(batch int64) (*graph.Graph, error) { return simpleConvWith(nil, batch) }

func simpleConvWith(a *graph.Adapters, batch int64) (*graph.Graph, error) {
	b := graph.NewBuilder("simpleconv")
	b.Adapters = a
	x := b.Input("x", graph.Shape{batch, 3, 32, 32}, graph.F32)
	y := b.Target("y", graph.Shape{batch}, graph.I64)
	k3 := graph.Conv2dOpts{Kernel: [2]int64{3, 3}, Padding: [2]int64{1, 1}, Bias: true}
	p2 := graph.Pool2dOpts{Kernel: [2]int64{2, 2}}
	h := b.Conv2d("conv1", x, 32, k3)
	h = b.Act(graph.ReLU, "relu1", h, false)
	h = b.MaxPool2d("pool1", h, p2)
	h = b.Conv2d("conv2", h, 64, k3)
	h = b.Act(graph.ReLU, "relu2", h, false)
	h = b.MaxPool2d("pool2", h, p2)
	h = b.Flatten("flatten", h, 1)
	logits := b.Linear("fc", h, 10, true)
	b.CrossEntropy("loss", logits, y)
	return b.Graph()
}

func itoa(i int64) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
