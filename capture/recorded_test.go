package capture

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"

	"github.com/batchfit/batchfit/models"
)

// TestWrappedNumbers: the ops of a captured model that are handed the
// 0-d tensor of a Python number (graph.Attr.Number) are its add.Tensor,
// sub.Tensor, mul.Tensor and div.Tensor calls with a number, and those
// that keep it its mul.Tensor and div.Tensor ones. GPT-2's gelu_new,
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), makes
// three multiplications by a number in each of its two layers (a double
// each) and one add of a number (1.0 + ...), which keeps none; its F.dropout's div_(1 - p)
// reaches div_.Scalar from C++, whose number is no tensor.
func TestWrappedNumbers(t *testing.T) {
	m, err := Load("../testdata/capture/hf-gpt2-eager.bfgraph.gz")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 4, CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	var kept, wrapped, scalars int
	for _, op := range g.Ops {
		if !op.Attr.Scalar {
			continue
		}
		scalars++
		n := op.Attr.Number
		if !n.Wrapped {
			continue
		}
		wrapped++
		if n.DType != graph.F64 || !strings.Contains(op.Name, "mlp.act") {
			t.Errorf("%s is handed a wrapped %s: only gelu_new's doubles are", op.Name, n.DType)
		}
		if n.Kept {
			kept++
		}
	}
	if kept != 6 || wrapped != 8 {
		t.Errorf("%d ops keep a number and %d are handed one among %d scaling ops, want 6 and 8", kept, wrapped, scalars)
	}
}

// TestBlockArgs: a capture records what each call of a candidate block
// is handed (producer 3's "calls"), and the build gives each block its
// arguments (graph.Graph.BlockArgs). transformers 4.44's LlamaModel hands
// each decoder layer the hidden states, the causal mask, position_ids,
// cache_position and the (cos, sin) position embeddings; the layer reads
// neither position_ids, (1, 16) int64, nor cache_position, its base.
func TestBlockArgs(t *testing.T) {
	m, err := Load("../testdata/capture/hf-llama-eager.bfgraph.gz")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 4, CPU: true, NoCache: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Blocks) != 2 || len(g.BlockArgs) != 2 {
		t.Fatalf("%d blocks, arguments of %d; want 2 and 2", len(g.Blocks), len(g.BlockArgs))
	}
	for b, args := range g.BlockArgs {
		read := map[graph.TensorID]bool{}
		for _, op := range g.Ops {
			if op.Block == int32(b) {
				for _, in := range op.Inputs {
					read[in] = true
				}
			}
		}
		var unread []string
		for _, a := range args {
			if !read[a] {
				unread = append(unread, fmt.Sprintf("%v %s", g.Tensors[a].Shape, g.Tensors[a].DType))
			}
		}
		if len(args) != 6 || len(unread) != 2 || unread[0] != "[16] int64" || unread[1] != "[1, 16] int64" {
			t.Errorf("block %s: handed %d tensors, unread %v; want 6, cache_position [16] and position_ids [1, 16] unread",
				g.Blocks[b], len(args), unread)
		}
	}
}
