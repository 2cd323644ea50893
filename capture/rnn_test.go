package capture

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// TestCapturedRNN builds the captures of two recurrent examples
// (examples/capture/lstm.py: an embedding, a two-layer batch-first
// nn.LSTM of 256 over 35 steps and a decoder; gru.py: a one-layer
// batch-first nn.GRU of 32 over 8 steps whose last hidden state is
// classified), recorded by the meta device as aten::lstm's per-timestep
// ops. Built for a GPU each module is one RNN op (cuDNN's _cudnn_rnn) and
// its state ops; built for the CPU (Config.CPU) the per-timestep ops stay.
// On the GPU the RNN node saves its input, h_0, c_0, its output and
// cuDNN's reserve, worked out here by hand from the shapes and the
// reserve's rule (train.CudnnRNNReserveBytes), and the weights' gradients
// reach every parameter, also when only h_n is read.
func TestCapturedRNN(t *testing.T) {
	prof, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file      string
		batch     int64
		cpuOps    int // at least this many in the CPU form
		nodeSaved int64
	}{
		// embedding, h_0, c_0, the RNN and its h_n and c_n, the decoder
		// (linear), the loss's reshapes and cross-entropy, releases
		{"capture-lstm", 32, 1000,
			// input 32·35·128·4 + h_0 and c_0 2·(2·32·256·4) + output
			// 32·35·256·4 + reserve 256 + 35·32·4·(2·5·256 + 256)
			573440 + 2*65536 + 1146880 + (256 + 35*32*4*(2*5*256+256))},
		// h_0, the RNN and h_n, h_n[-1], the head, the loss
		{"capture-gru", 8, 100,
			// h_0 1·8·32·4 + output 8·8·32·4 + reserve 256 + 8·8·4·6·32;
			// the input is the batch, saved but not an activation
			1024 + 8192 + (256 + 8*8*4*6*32)},
	} {
		m, err := Load("../testdata/capture/" + c.file + ".bfgraph.gz")
		if err != nil {
			t.Fatal(err)
		}
		gpu, err := m.Build(models.Config{Batch: c.batch})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		cpu, err := m.Build(models.Config{Batch: c.batch, CPU: true})
		if err != nil {
			t.Fatalf("%s: CPU form: %v", c.file, err)
		}
		kinds := func(g *graph.Graph) map[graph.Kind]int {
			k := map[graph.Kind]int{}
			for _, op := range g.Ops {
				k[op.Kind]++
			}
			return k
		}
		gk, ck := kinds(gpu), kinds(cpu)
		if gk[graph.RNN] != 1 || ck[graph.RNN] != 0 {
			t.Errorf("%s: %d RNN ops for a GPU and %d for the CPU, want 1 and 0", c.file, gk[graph.RNN], ck[graph.RNN])
		}
		if len(gpu.Ops) > 20 || len(cpu.Ops) < c.cpuOps {
			t.Errorf("%s: %d ops for a GPU (want at most 20), %d for the CPU (want at least %d)", c.file, len(gpu.Ops), len(cpu.Ops), c.cpuOps)
		}
		t.Logf("%s: %d ops on a GPU, %d on the CPU", c.file, len(gpu.Ops), len(cpu.Ops))
		_, sum, err := train.Simulate(gpu, train.Setup{Profile: prof, Steps: 1, ComputeMajor: 9, Optimizer: train.Optimizer{Kind: train.SGD}})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		var node int64
		for _, o := range sum.SavedByOp {
			if o.Kind == graph.RNN {
				node += o.Bytes
			}
		}
		if node != c.nodeSaved {
			t.Errorf("%s: the RNN node saves %d bytes, want %d", c.file, node, c.nodeSaved)
		}
		if want := gpu.ParamCount() * 4; sum.GradientsBytes != want {
			t.Errorf("%s: %d bytes of gradients, want every parameter's %d", c.file, sum.GradientsBytes, want)
		}
		if _, _, err := train.Simulate(gpu, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}}); err == nil {
			t.Errorf("%s: the cuDNN form simulated under the CPU rules", c.file)
		}
	}
}
