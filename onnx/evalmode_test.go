package onnx_test

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/onnx"
)

// convbn (validation/onnx/export.py) exported both ways. In eval mode the
// exporter folds each BatchNorm into its convolution: the folded net has
// 87,066 (the module, testdata/onnx/torch-cpu.json) − the BatchNorms'
// weights and biases 2·16 + 2·32 = 96 + the convolutions' new biases 16 +
// 32 = 87,018 parameters, and at batch 1 saves what the module saves,
// 491,948 bytes, less the BatchNorms' inputs (16·32·32·4 = 65,536 and
// 32·32·32·4 = 131,072) and their saved mean and inverse std (2·16·4 +
// 2·32·4 = 384): 294,956 bytes. Only the eval-mode file says so;
// simpleconv's convolutions have biases of their own (0.bias, 3.bias) and
// no note.
func TestEvalModeExport(t *testing.T) {
	exp := readMeasured(t, "../testdata/onnx/torch-cpu.json")
	for _, c := range []struct {
		path   string
		note   bool
		params int64
		saved  int64 // at batch 1
	}{
		{"../testdata/onnx/eval/convbn.onnx", true, 87_018, 294_956},
		{"../testdata/onnx/convbn.onnx", false, 87_066, 491_948},
		{"../testdata/onnx/simpleconv.onnx", false, 0, 0},
		{"../testdata/onnx/resnet18.onnx", false, 0, 0},
	} {
		m, err := onnx.Load(c.path)
		if err != nil {
			t.Fatal(err)
		}
		notes := strings.Join(m.Notes(), "\n")
		want := "exported in eval mode: torch.onnx.export folded each BatchNorm into the convolution before it (2 convolutions"
		if got := strings.Contains(notes, want); got != c.note {
			t.Errorf("%s: notes %q; want the eval-mode note: %v", c.path, notes, c.note)
		}
		if c.note && !strings.Contains(notes, "training=torch.onnx.TrainingMode.TRAINING") {
			t.Errorf("%s: notes %q do not say how to export for training", c.path, notes)
		}
		if c.params == 0 {
			continue
		}
		g, err := m.Build(models.Config{Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := g.ParamCount(); got != c.params {
			t.Errorf("%s: %d parameters, want %d", c.path, got, c.params)
		}
		if got := simulate(t, g, exp.Torch).ActivationsBytes; !within(got, c.saved, 0.01) {
			t.Errorf("%s: saved %d bytes, want %d", c.path, got, c.saved)
		}
	}
}
