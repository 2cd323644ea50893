package train

import (
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
)

// A 2-block MLP (784 → 64 → 64 → 10) with LoRA r = 2 on both blocks'
// Linears, in bfloat16 on 2 GPUs. Per block:
//
//	block 0: weight 64·784 = 50,176, bias 64, lora_A 2·784 = 1,568, lora_B 64·2 = 128
//	block 1: weight 64·64 = 4,096, bias 64, lora_A 2·64 = 128, lora_B 128
//	root:    head 10·64 = 640, bias 10 (frozen, no adapter)
//
// Each rank keeps ceil(n/2) of every parameter (all even here). The
// sharded gradients, two bytes an element, are:
//   - block (use_orig_params=True, one flat parameter per block that
//     requires grad because its adapters do): the whole flat shard of
//     each block, (50,176+64+1,568+128)/2 + (4,096+64+128+128)/2 =
//     25,968 + 2,208 = 28,176 elements = 56,352 bytes; the root's flat
//     parameter is all frozen and gets none;
//   - lora (PEFT's policy, adapters in units of their own) and param
//     (fully_shard): the adapters only, (1,568+128+128+128)/2 = 976
//     elements = 1,952 bytes.
func TestFSDPWrapGradients(t *testing.T) {
	prof, _ := profile.Lookup("")
	a := &graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}}
	g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 64, Adapters: a})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		strategy Strategy
		wrap     Wrap
		grads    int64
	}{
		{FSDP, WrapBlock, 56_352},
		{FSDP, "", 56_352}, // FSDP1's default is the block policy
		{FSDP, WrapLoRA, 1_952},
		{FSDP2, WrapParam, 1_952},
	} {
		_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Precision: TrueBF16, Optimizer: Optimizer{Kind: Adam, Impl: Foreach},
			Parallel: Parallel{Strategy: c.strategy, GPUs: 2, Wrap: c.wrap}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.GradientsBytes != c.grads {
			t.Errorf("%s --fsdp-wrap %q: sharded gradients %d bytes, want %d", c.strategy, c.wrap, sum.GradientsBytes, c.grads)
		}
	}
}

func TestFSDPWrapRefused(t *testing.T) {
	for _, c := range []struct {
		p    Parallel
		want string
	}{
		{Parallel{Strategy: FSDP, GPUs: 2, Wrap: WrapParam}, "fsdp2"},
		{Parallel{Strategy: FSDP2, GPUs: 2, Wrap: WrapLoRA}, "param"},
		{Parallel{Strategy: DDP, GPUs: 2, Wrap: WrapBlock}, "FSDP's"},
		{Parallel{Strategy: FSDP, GPUs: 2, Wrap: "module"}, "unknown"},
	} {
		_, err := c.p.normalize()
		if err == nil || !contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one that says %q", c.p, err, c.want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// FSDP-QLoRA on the same MLP, nf4 in blocks of 64 without double
// quantization, codes stored as bfloat16 (bnb_4bit_quant_storage), PEFT
// before 0.12 (adapters take the float storage's dtype, bfloat16), PEFT's
// wrap policy. Each Linear's codes are n/2 bytes = n/4 bfloat16 elements,
// sharded like a weight; its absmax (one float32 per 64) and 16-entry
// float32 quant map stay whole on each rank:
//
//	block 0 flat shard: bias 32 + lora_A 784 + lora_B 64 + codes 50,176/4/2 = 6,272 → 7,152 elements = 14,304 B
//	         state:     absmax 784·4 = 3,136 + quant map 64 = 3,200 B
//	block 1 flat shard: bias 32 + 64 + 64 + codes 4,096/4/2 = 512 → 672 elements = 1,344 B
//	         state:     absmax 64·4 = 256 + 64 = 320 B
//	root (the MLP's head is a plain Linear, quantized too: only an
//	lm_head is kept): bias 5 + codes 640/4/2 = 80 → 85 elements = 170 B
//	         state:     absmax 10·4 = 40 + 64 = 104 B
//
// 14,304 + 3,200 + 1,344 + 320 + 170 + 104 = 19,442 bytes of parameters,
// where one GPU would hold 25,088 + 2,048 + 320 codes bytes alone.
func TestFSDPQLoRAShardsTheCodes(t *testing.T) {
	prof, _ := profile.Lookup("")
	a := &graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}}
	q := &graph.Quant{Format: graph.NF4, Bits: 4, BlockSize: 64, Compute: graph.BF16, FloatStorage: true}
	g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 64, Adapters: a, Quant: q})
	if err != nil {
		t.Fatal(err)
	}
	_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Precision: TrueBF16, Optimizer: Optimizer{Kind: Adam, Impl: Foreach},
		Parallel: Parallel{Strategy: FSDP, GPUs: 2, Wrap: WrapLoRA}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ParametersBytes != 19_442 {
		t.Errorf("parameters %d bytes, want 19,442", sum.ParametersBytes)
	}
	// uint8 storage cannot be flattened with the float weights
	q2 := *q
	q2.FloatStorage = false
	g2, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 64, Adapters: a, Quant: &q2})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Simulate(g2, Setup{Profile: prof, Steps: 1, Precision: TrueBF16, Parallel: Parallel{Strategy: FSDP, GPUs: 2, Wrap: WrapLoRA}}); err == nil || !contains(err.Error(), "quant_storage") {
		t.Errorf("uint8 codes under FSDP: error %v, want one about bnb_4bit_quant_storage", err)
	}
}

// PEFT's autocast_adapter_dtype (0.12 and later) keeps the adapters
// float32 on a bfloat16 base: on the MLP above (1,952 adapter elements)
// their gradients are 1,952·4 = 7,808 bytes and Adam's two states
// 2·7,808 = 15,616; before 0.12 (and LitGPT's and torchtune's own
// adapters) they are bfloat16: 3,904 and 7,808.
func TestPeftFloat32Adapters(t *testing.T) {
	prof, _ := profile.Lookup("")
	for _, c := range []struct {
		a            graph.Adapters
		grads, state int64
	}{
		{graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}, Float32: true}, 7_808, 15_616},
		{graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}}, 3_904, 7_808},
		{graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"linear"}, Float32: true, Native: true}, 3_904, 7_808},
	} {
		g, _, err := models.Build("mlp", models.Config{Batch: 4, Layers: 2, Hidden: 64, Adapters: &c.a})
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{Profile: prof, Steps: 2, Precision: TrueBF16, Optimizer: Optimizer{Kind: Adam, Impl: Foreach}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.GradientsBytes != c.grads || sum.OptimizerStateBytes != c.state {
			t.Errorf("%+v: gradients %d, state %d; want %d, %d", c.a, sum.GradientsBytes, sum.OptimizerStateBytes, c.grads, c.state)
		}
	}
}
