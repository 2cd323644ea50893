package predict

import (
	"context"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// BenchmarkGenerate8B is a whole prediction (simulation and allocator
// replay) of generating with Llama-3-8B: batch 8, a 512-token prompt.
func BenchmarkGenerate8B(b *testing.B) {
	m, err := models.Lookup("Llama-3-8B")
	if err != nil {
		b.Fatal(err)
	}
	g, _ := gpu.Lookup("h100-80gb")
	for _, c := range []struct {
		name   string
		tokens int64
		static bool
	}{{"dynamic-256", 256, false}, {"dynamic-2048", 2048, false}, {"dynamic-4096", 4096, false}, {"static-2048", 2048, true}, {"static-8192", 8192, true}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				_, err := Run(context.Background(), Request{Source: Zoo{M: m}, Config: models.Config{Batch: 8, Seq: 512}, GPU: g, Context: -1,
					Setup: train.Setup{Precision: train.TrueBF16}, Infer: &Inference{Mode: ModeGenerate, NewTokens: c.tokens, Static: c.static}})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
