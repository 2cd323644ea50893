package predict

import (
	"context"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// Tensor parallelism's collectives on Llama-3.2-1B (16 layers, hidden
// 2048), one sequence of 256 in bfloat16: every one moves the residual
// stream, 256 × 2048 × 2 = 1 MiB. Without sequence parallelism each layer
// all-reduces the o_proj and down_proj outputs in forward and the
// attention's and the MLP's inputs in backward, and the embedding's output
// and the head's input once each: 16 × 4 + 2 = 66. With it, the same
// places gather and reduce-scatter instead: 66 again, each gather also
// in backward.
func TestTensorParallelCollectives(t *testing.T) {
	m, err := models.Lookup("Llama-3.2-1B")
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range []bool{false, true} {
		c := models.Config{Batch: 1, Seq: 256, TP: 2, SP: sp}
		g, err := Zoo{M: m}.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(context.Background(), Request{Source: Zoo{M: m}, Config: c, GPU: h100(t), Context: -1,
			Setup: train.Setup{Precision: train.TrueBF16, Optimizer: train.Optimizer{Kind: train.AdamW}, Parallel: train.Parallel{Strategy: train.DDP, GPUs: 2}}})
		if err != nil {
			t.Fatal(err)
		}
		cm := train.Collectives(g, res.Setup, res.Summary.Ops, 2, sp, 1)
		if len(cm.Model) != 66 {
			t.Errorf("sp %v: %d collectives, want 66", sp, len(cm.Model))
		}
		var gathers int
		for _, x := range cm.Model {
			if x.Bytes != 1<<20 {
				t.Errorf("sp %v: a collective of %d bytes, want 1 MiB", sp, x.Bytes)
				break
			}
			if x.Twice {
				gathers++
			}
		}
		if want := map[bool]int{false: 0, true: 33}[sp]; gathers != want {
			t.Errorf("sp %v: %d gathers again in backward, want %d", sp, gathers, want)
		}
	}
}

// Under data parallelism a step time is predicted, with its
// communication, when the GPU's link is known; on a GPU without one (no
// catalog entry) there is none.
func TestTimedUnderParallelism(t *testing.T) {
	m, err := models.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	r := Request{Source: Zoo{M: m}, Config: models.Config{Batch: 2, Seq: 256}, GPU: h100(t), Context: -1,
		Setup: train.Setup{Precision: train.MixedBF16, Optimizer: train.Optimizer{Kind: train.AdamW}, Parallel: train.Parallel{Strategy: train.FSDP, GPUs: 8}}}
	res, err := Run(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Time == nil || res.Comm == nil || res.Comm.Exposed <= 0 || res.Comm.Exposed > res.Comm.Seconds {
		t.Fatalf("time %v, comm %+v: want a step time with 0 < exposed ≤ communication", res.Time, res.Comm)
	}
	r.GPU.Link = gpu.Link{}
	if r.Timed() {
		t.Error("timed under FSDP on a GPU with no known link")
	}
}

func h100(t *testing.T) gpu.GPU {
	g, err := gpu.Lookup("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	return g
}
