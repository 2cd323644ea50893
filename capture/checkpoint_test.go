package capture

import (
	"math"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// Activation checkpointing of a captured model: each call of a repeated
// block (blocks.0, enc.layers.1, ...) runs under
// torch.utils.checkpoint(use_reentrant=False), which keeps only what the
// call reads from outside and recomputes the rest in backward. The figures
// are autograd's saved bytes after the forward pass in real PyTorch 1.13 on
// the CPU, parameters and the batch left out, measured by
// testdata/checkpoint_saved.py:
//
//	/usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/transformer.py:make:blocks 16
//	/usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/encoder.py:make:enc.layers 8
func TestCapturedCheckpoint(t *testing.T) {
	prof, err := profile.Lookup("1.13")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		file       string
		batch      int64
		none, full int64
	}{
		{"capture-transformer", 16, 6721556, 1576964},
		{"capture-encoder", 8, 5585244, 198980},
	} {
		m, err := Load("../testdata/capture/" + c.file + ".bfgraph.gz")
		if err != nil {
			t.Fatal(err)
		}
		g, err := m.Build(models.Config{Batch: c.batch})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		for _, p := range []struct {
			ck   train.Checkpoint
			want int64
		}{{train.Checkpoint{}, c.none}, {train.FullCheckpoint, c.full}} {
			_, sum, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Checkpoint: p.ck,
				Optimizer: train.Optimizer{Kind: train.SGD}})
			if err != nil {
				t.Fatalf("%s: %v", c.file, err)
			}
			// without checkpointing PyTorch counts 8 bytes more a
			// block: the Python number of the attention's scaling
			// (mul or div by a scalar), which autograd saves as a 0-d
			// double tensor
			if d := float64(sum.ActivationsBytes-p.want) / float64(p.want); math.Abs(d) > 0.001 {
				t.Errorf("%s b%d checkpoint %s: saved %d bytes, PyTorch %d (%+.2f%%)", c.file, c.batch, p.ck, sum.ActivationsBytes, p.want, 100*d)
			}
		}
	}
}
