package models

import (
	"strings"
	"testing"
)

// Llama-3-8B over 4 tensor-parallel ranks, worked out from Megatron's
// splits (hidden 4096, 32 heads of 128, 8 kv heads, intermediate 14336,
// vocab 128256): per layer q 4096·1024, k and v 4096·256, o 1024·4096,
// gate, up and down 4096·3584, and the two norms' 4096 each, replicated:
// 54,534,144; the embedding and the head 32,064·4096 each; the final norm
// 4096. Over 4 pipeline stages of 8 layers, the first holds the embedding,
// the last the final norm and the head.
func TestTensorAndPipelineParallelCounts(t *testing.T) {
	m := hfZooEntry(t, "Llama-3-8B")
	const layer = 4096*1024 + 2*4096*256 + 1024*4096 + 3*4096*3584 + 2*4096
	const vocab = 32064 * 4096
	cases := []struct {
		c    Config
		want int64
	}{
		{Config{Batch: 1, Seq: 16, TP: 4}, 32*layer + 2*vocab + 4096},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 4, Stage: 0}, 8*layer + vocab},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 4, Stage: 1}, 8 * layer},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 4, Stage: 3}, 8*layer + 4096 + vocab},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 3, Stage: 0}, 11*layer + vocab},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 3, Stage: 2}, 10*layer + 4096 + vocab},
		{Config{Batch: 1, Seq: 16, TP: 4, PP: 2, Stage: 1, StageLayers: []int64{20, 12}}, 12*layer + 4096 + vocab},
	}
	for _, c := range cases {
		g := hfBuild(t, m.name, m.tc, c.c)
		if got := g.ParamCount(); got != c.want {
			t.Errorf("%+v: %d parameters, want %d", c.c, got, c.want)
		}
		// a later stage starts from received hidden states that require
		// grad; an earlier one ends in what it sends
		if c.c.PP > 1 {
			in := g.Tensor(g.Inputs[0])
			if (c.c.Stage > 0) != (in.RequiresGrad && in.Shape.Numel() == 16*4096) {
				t.Errorf("%+v: first input %s %v requires grad %v", c.c, in.Name, in.Shape, in.RequiresGrad)
			}
			if last := c.c.Stage == c.c.PP-1; last != (g.Tensor(g.Loss).Shape.Numel() == 1) {
				t.Errorf("%+v: backward starts from %v", c.c, g.Tensor(g.Loss).Shape)
			}
		}
	}
}

func TestModelParallelErrors(t *testing.T) {
	llama := hfZooEntry(t, "Llama-3-8B")
	gpt2 := hfZooEntry(t, "gpt2")
	for _, c := range []struct {
		m    hfModel
		c    Config
		want string
	}{
		{llama, Config{Batch: 1, Seq: 8, TP: 3}, "does not divide 32 attention heads"},
		{llama, Config{Batch: 1, Seq: 8, TP: 16}, "key/value heads"},
		{gpt2, Config{Batch: 1, Seq: 8, TP: 2}, "Llama family"},
		{llama, Config{Batch: 1, Seq: 8, PP: 4, Stage: 4}, "outside"},
		{llama, Config{Batch: 1, Seq: 8, PP: 2, StageLayers: []int64{10, 10}}, "add up to 20"},
		{llama, Config{Batch: 1, Seq: 8, PP: 2, StageLayers: []int64{32}}, "1 stage sizes given for 2"},
		{llama, Config{Batch: 1, Seq: 8, PP: 64}, "64 pipeline stages for 32 layers"},
		// a stage of no layers, as the even split refuses more stages
		// than layers: every stage holds at least one
		{llama, Config{Batch: 1, Seq: 8, PP: 2, StageLayers: []int64{0, 32}}, "stage 0 has 0 layers"},
		{llama, Config{Batch: 1, Seq: 8, PP: 4, Stage: 3, StageLayers: []int64{16, 16, 0, 0}}, "stage 2 has 0 layers"},
	} {
		_, err := BuildTransformer(c.m.name, c.m.tc, c.c)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.c, err, c.want)
		}
	}
}
