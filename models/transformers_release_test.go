package models

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// The float32 copies of the logits that the causal-LM loss makes, per
// release, for a tiny bfloat16 model: vocabulary V = 16, sequence L = 4.
// lm_head's logits are bf16 [B, 4, 16]; a float32 copy of them is
// B·4·16·4 B = 256·B B, the shifted copy logits[..., :-1, :].contiguous()
// B·3·16·4 B = 192·B B, and it is a view when B = 1 (a slice of the
// middle dimension of [1, 4, 16] is contiguous).
//
//   - Llama ≤ 4.45 (LlamaForCausalLM.forward: logits = logits.float(),
//     then the inline shift): B = 1: 256 B; B = 2: 512 + 384 = 896 B; the
//     output returns the float32 copy.
//   - Llama 4.46–4.48 (ForCausalLMLoss: logits.float(), then the shift):
//     the same bytes, but the output returns lm_head's bf16 logits.
//   - Llama 4.49 and the current code (ForCausalLMLoss pads the labels
//     instead): B = 1: 256 B; B = 2: 512 B.
//   - Mistral 4.47 (inline, logits.float() under labels): as Llama 4.45.
//   - GPT-2 4.47 (inline, no upcast): no float32 copy; the shift copies
//     bf16 logits. GPT-2 4.48 (ForCausalLMLoss before the pad): as Llama
//     4.46.
func TestCausalLMLossByRelease(t *testing.T) {
	llama := TransformerConfig{Arch: "llama", VocabSize: 16, Hidden: 8, Layers: 1, Heads: 2, Intermediate: 16,
		Activation: "silu", DType: graph.BF16}
	mistral := llama
	mistral.Arch = "mistral"
	gpt2 := TransformerConfig{Arch: "gpt2", VocabSize: 16, Hidden: 8, Layers: 1, Heads: 2, MaxPositions: 8,
		TieEmbeddings: true, Activation: "gelu_new", DType: graph.BF16}
	for _, tt := range []struct {
		name    string
		tc      TransformerConfig
		release string
		batch   int64
		f32     int64       // bytes of float32 [.., V] tensors the loss makes
		out     graph.DType // the logits the output returns
	}{
		{"llama 4.39 b1", llama, "4.39", 1, 256, graph.F32},
		{"llama 4.39 b2", llama, "4.39", 2, 896, graph.F32},
		{"llama 4.45.2 b2", llama, "4.45.2", 2, 896, graph.F32},
		{"llama 4.46 b1", llama, "4.46", 1, 256, graph.BF16},
		{"llama 4.46 b2", llama, "4.46", 2, 896, graph.BF16},
		{"llama 4.48 b2", llama, "4.48", 2, 896, graph.BF16},
		{"llama 4.49 b1", llama, "4.49", 1, 256, graph.BF16},
		{"llama 4.49 b2", llama, "4.49", 2, 512, graph.BF16},
		{"llama current b2", llama, "", 2, 512, graph.BF16},
		{"mistral 4.47 b2", mistral, "4.47", 2, 896, graph.F32},
		{"mistral 4.48 b2", mistral, "4.48", 2, 896, graph.BF16},
		{"gpt2 4.47 b2", gpt2, "4.47", 2, 0, graph.BF16},
		{"gpt2 4.48 b2", gpt2, "4.48", 2, 896, graph.BF16},
	} {
		g := hfBuild(t, tt.name, tt.tc, Config{Batch: tt.batch, Seq: 4, Transformers: tt.release})
		var f32 int64
		for _, op := range g.Ops {
			out := g.Tensor(op.Output)
			s := out.Shape
			if len(op.Name) > 5 && op.Name[:5] == "loss." && out.View == graph.None && out.DType == graph.F32 &&
				(op.Kind == graph.Cast || op.Kind == graph.Contiguous) && s[len(s)-1] == 16 {
				f32 += s.Numel() * 4
			}
		}
		if f32 != tt.f32 {
			t.Errorf("%s: the loss makes %d B of float32 logits, want %d", tt.name, f32, tt.f32)
		}
		if len(g.Returned) != 1 || g.Tensor(g.Returned[0]).DType != tt.out {
			t.Errorf("%s: the output returns %v, want one %s logits tensor", tt.name, g.Returned, tt.out)
		}
	}
}
