package capture

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
)

// TestWrappedNumbers: the ops of a captured model that keep the 0-d
// tensor of a Python number (graph.Attr.Number) are its mul.Tensor and
// div.Tensor calls with a number. GPT-2's gelu_new,
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), makes
// three in each of its two layers (an 8-byte double each) and one add of
// a number, which keeps none; its F.dropout's div_(1 - p) reaches
// div_.Scalar from C++, whose number is no tensor.
func TestWrappedNumbers(t *testing.T) {
	m, err := Load("../testdata/capture/hf-gpt2-eager.bfgraph.gz")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 4, CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	var kept, scalars int
	for _, op := range g.Ops {
		if !op.Attr.Scalar {
			continue
		}
		scalars++
		switch op.Attr.Number {
		case 8:
			kept++
			if !strings.Contains(op.Name, "mlp.act") {
				t.Errorf("%s keeps a number: only gelu_new's multiplications do", op.Name)
			}
		case 0:
		default:
			t.Errorf("%s keeps %d bytes for its number, want 8 or none", op.Name, op.Attr.Number)
		}
	}
	if kept != 6 || scalars <= kept {
		t.Errorf("%d ops keep a number among %d scaling ops, want 6 among more", kept, scalars)
	}
}
