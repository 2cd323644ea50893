package predict

import (
	"fmt"
	"strings"

	"github.com/batchfit/batchfit/graph"
)

// Reliance is what a prediction relies on beyond the rules every training
// step shares: each is a group of rules whose error on real GPUs is
// measured apart. The predictions that rely on exactly the same set make
// one group, which earns its own band (Bands, BandFor).
type Reliance uint8

const (
	// Convolutions: cuDNN's kernels, whose workspaces are taken at the
	// release's figure (train/conv_cudnn.go: the explicit-GEMM bound, or
	// cuDNN 9's NHWC copies), the algorithm cuDNN's heuristic picks being
	// unknown without the GPU.
	Convolutions Reliance = 1 << iota
	// Adapters: LoRA adapters on a frozen base.
	Adapters
	// Quantized: Linear weights stored in 4 or 8 bits (bitsandbytes,
	// torchao), with the libraries' own dequantization buffers.
	Quantized
	// Sharded: data, tensor or pipeline parallelism, with NCCL's buffers
	// taken at their upper bound (profile/nccl.go) and the wrappers'
	// gathers.
	Sharded
	// ForwardOnly: inference, a forward under no_grad or a generation.
	ForwardOnly
	numReliances = 5
)

var relianceNames = [numReliances]string{"convolutions", "adapters", "quantized", "sharded", "inference"}

// String lists the reliances, "dense training" for none.
func (r Reliance) String() string {
	var s []string
	for i, n := range relianceNames {
		if r&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if len(s) == 0 {
		return "dense training"
	}
	return strings.Join(s, ", ")
}

// Reliances says what a request's prediction relies on. It builds the
// request's graph (once per search with Request.Graphs) to see whether
// cuDNN convolutions run.
func (r Request) Reliances() (Reliance, error) {
	if r.Source == nil {
		return 0, fmt.Errorf("no model given")
	}
	var g *graph.Graph
	if !r.Setup.CPU {
		c := r.Config
		c.Batch = 1
		if c.Stage < 0 {
			// every stage is predicted: the first tells whether the
			// model has convolutions as well as any
			c.Stage = 0
		}
		var err error
		if g, err = r.Graphs.Build(r.Source, c); err != nil {
			return 0, err
		}
	}
	return r.reliancesOf(g), nil
}

// reliancesOf is Reliances with the request's graph at hand (nil on the
// CPU, where no cuDNN runs).
func (r Request) reliancesOf(g *graph.Graph) Reliance {
	var rel Reliance
	if r.Config.Adapters != nil {
		rel |= Adapters
	}
	if r.Config.Quant != nil {
		rel |= Quantized
	}
	if r.multiGPU() {
		rel |= Sharded
	}
	if r.Infer != nil || r.Config.Decode != nil {
		rel |= ForwardOnly
	}
	if g != nil && !r.Setup.CPU {
		for i := range g.Ops {
			if k := g.Ops[i].Kind; k == graph.Conv2d || k == graph.ConvTranspose2d {
				rel |= Convolutions
				break
			}
		}
	}
	return rel
}
