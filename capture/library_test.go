package capture

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
)

// TestT5PositionBiasLeaf: the committed T5 capture (two decoder layers,
// four heads, 16 positions) makes one torch.zeros position bias, the
// first decoder layer's cross-attention's (T5Attention without a
// relative_attention_bias), [1, 4, 16, 16] float32. Under the library's
// gradient checkpointing it is a leaf that requires grad, and so is the
// sum with the mask the next layer reads; without, neither requires grad.
// The final rescale, sequence_output * d_model ** -0.5, keeps its number.
func TestT5PositionBiasLeaf(t *testing.T) {
	m, err := Load("../testdata/capture/hf-t5-eager.bfgraph.gz")
	if err != nil {
		t.Fatal(err)
	}
	for _, ckpt := range []bool{false, true} {
		g, err := m.Build(models.Config{Batch: 4, CPU: true, NoCache: ckpt, LibraryCheckpointing: ckpt})
		if err != nil {
			t.Fatal(err)
		}
		var leaves []graph.TensorID
		for i := range g.Tensors {
			if g.Tensors[i].Leaf {
				leaves = append(leaves, graph.TensorID(i))
			}
		}
		var bias graph.TensorID = graph.None
		for _, op := range g.Ops {
			if op.Name == "decoder.block.0.layer.1.EncDecAttention" && op.Kind == graph.Full {
				bias = op.Output
			}
		}
		if bias == graph.None {
			t.Fatal("no zeros in the first decoder layer's cross-attention")
		}
		if s := g.Tensors[bias].Shape; len(s) != 4 || s[0] != 1 || s[1] != 4 || s[2] != 16 || s[3] != 16 {
			t.Errorf("the position bias is %v, want [1 4 16 16]", s)
		}
		read := false
		for _, op := range g.Ops {
			for _, in := range op.Inputs {
				if in == bias && op.Kind == graph.Add {
					read = true
					if g.Tensors[op.Output].RequiresGrad != ckpt {
						t.Errorf("checkpointing %v: the biased mask requires grad %v", ckpt, !ckpt)
					}
				}
			}
		}
		if !read {
			t.Error("no add reads the position bias")
		}
		if want := map[bool]int{false: 0, true: 1}[ckpt]; len(leaves) != want || (ckpt && leaves[0] != bias) {
			t.Errorf("checkpointing %v: leaves %v, want %d (the position bias, %d)", ckpt, leaves, want, bias)
		}
		// the numbers the mask and bucket arithmetic wraps are no
		// node's: only the rescale, the one that requires grad, keeps
		// its own
		var kept int
		for _, op := range g.Ops {
			if op.Kind == graph.Mul && op.Attr.Scalar && g.Tensors[op.Output].RequiresGrad && op.Attr.Number.Kept {
				kept++
			}
		}
		if kept != 1 {
			t.Errorf("%d ops that require grad keep a Python number, want 1 (the rescale)", kept)
		}
	}
}
