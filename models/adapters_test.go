package models

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
)

// PEFT's LoRA layers are lora_A [r, in] and lora_B [out, r]: for
// Llama-2-7b with r = 8 on q_proj and v_proj (4096 → 4096 each) that is
// 8·(4096+4096)·2 per layer, 32 layers, 4,194,304 parameters, beside the
// checkpoint's 6,738,415,616: PEFT's print_trainable_parameters gives
// "trainable params: 4,194,304 || all params: 6,742,609,920". GPT-2's
// c_attn (768 → 2304) with r = 16 on 12 layers adds 589,824.
func TestLoRAParameterCounts(t *testing.T) {
	for _, c := range []struct {
		model            string
		a                graph.Adapters
		trainable, total int64
	}{
		{"Llama-2-7b", graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}, 4_194_304, 6_742_609_920},
		{"gpt2", graph.Adapters{Rank: 16, Alpha: 32, Targets: []string{"c_attn"}}, 589_824, 124_439_808 + 589_824},
		// every Linear of Llama-3-8B's 32 layers: q, o 4096→4096; k, v
		// 4096→1024; gate, up 4096→14336; down 14336→4096
		{"Llama-3-8B", graph.Adapters{Rank: 16, Alpha: 32, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
			32 * 16 * (2*(4096+4096) + 2*(4096+1024) + 3*(4096+14336)), 8_030_261_248 + 32*16*(2*(4096+4096)+2*(4096+1024)+3*(4096+14336))},
	} {
		m, err := Lookup(c.model)
		if err != nil {
			t.Fatal(err)
		}
		a := c.a
		g, err := m.Build(Config{Batch: 1, Seq: 16, Adapters: &a})
		if err != nil {
			t.Fatal(err)
		}
		var trainable int64
		for _, id := range g.Params() {
			if g.Tensor(id).RequiresGrad {
				trainable += g.Tensor(id).Shape.Numel()
			}
		}
		if trainable != c.trainable || g.ParamCount() != c.total {
			t.Errorf("%s: trainable %d of %d, want %d of %d", c.model, trainable, g.ParamCount(), c.trainable, c.total)
		}
	}
}

// Lightning Fabric's BitsandbytesPrecision quantizes every nn.Linear, the
// output head too (graph.Quant.Head); transformers keeps it. A head tied
// to the embedding (Llama-3.2-1B, gemma-2b) is the embedding's parameter
// and stays as it is. Llama-2-7b's lm_head is [32000, 4096]: with it its
// quantized elements grow from the layers' 6,476,005,376 (32 · (4 ·
// 4096² + 3 · 4096 · 11008)) by 131,072,000.
func TestQuantizedHead(t *testing.T) {
	for _, c := range []struct {
		model string
		head  bool
		want  int64
	}{
		{"Llama-2-7b", false, 6_476_005_376},
		{"Llama-2-7b", true, 6_476_005_376 + 131_072_000},
		{"Llama-3.2-1B", false, 16 * (2*2048*2048 + 2*2048*512 + 3*2048*8192)},
		{"Llama-3.2-1B", true, 16 * (2*2048*2048 + 2*2048*512 + 3*2048*8192)},
	} {
		m, err := Lookup(c.model)
		if err != nil {
			t.Fatal(err)
		}
		q := graph.Quant{Format: graph.NF4, BlockSize: 64, Compute: graph.BF16, Head: c.head}
		a := graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "v_proj"}}
		g, err := m.Build(Config{Batch: 1, Seq: 16, Adapters: &a, Quant: &q})
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, id := range g.Params() {
			if p := g.Tensor(id); p.Quant != nil {
				n += p.Shape.Numel()
			}
		}
		if n != c.want {
			t.Errorf("%s head %v: %d quantized elements, want %d", c.model, c.head, n, c.want)
		}
	}
}
