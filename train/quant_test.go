package train

import (
	"slices"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/trace"
)

// quantGraph is x [rows, 128] → fc1 Linear(128 → 64) → fc2 Linear(64 →
// 64) → head Linear(64 → 10) → cross-entropy, with fc1 and fc2 quantized
// in q's format and LoRA (r = 2) on both; head stays unquantized.
func quantGraph(t *testing.T, rows int64, q graph.Quant) *graph.Graph {
	return quantGraphOf(t, graph.Shape{rows}, q)
}

// quantGraphOf is quantGraph on x [lead..., 128].
func quantGraphOf(t *testing.T, lead graph.Shape, q graph.Quant) *graph.Graph {
	t.Helper()
	b := graph.NewBuilder("q")
	q.Skip = []string{"head"}
	b.Quant = &q
	b.Adapters = &graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"fc1", "fc2"}}
	x := b.Input("x", append(lead.Clone(), 128), graph.F32)
	y := b.Target("y", lead.Clone(), graph.I64)
	h := b.Linear("fc1", x, 64, true)
	h = b.Linear("fc2", h, 64, true)
	b.CrossEntropy("loss", b.Linear("head", h, 10, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// transients lists the sizes of the transient allocations made at op
// site in phase, in order.
func transients(tr *trace.Trace, phase trace.Phase, site string) []int64 {
	return allocs(tr, phase, site, trace.Transient)
}

// allocs lists the sizes of the allocations of category cat made at op
// site in phase, in order.
func allocs(tr *trace.Trace, phase trace.Phase, site string, cat trace.Category) []int64 {
	var out []int64
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && e.Phase == phase && e.Category == cat && e.Site >= 0 && tr.Sites[e.Site] == site {
			out = append(out, e.Size)
		}
	}
	return out
}

func has(sizes []int64, n int64) bool {
	for _, s := range sizes {
		if s == n {
			return true
		}
	}
	return false
}

// QLoRA on two NF4 layers under bf16-true with compute dtype bfloat16 and
// double quantization, worked out from bitsandbytes 0.49:
//
//   - stored: fc1 [64, 128] (n = 8192): 4096 packed + 64 code + 4 offset +
//     128 uint8 absmax + 4 nested absmax + 1024 nested code = 5320 B; fc2
//     [64, 64] (n = 4096): 2048 + 64 + 4 + 64 + 4 + 1024 = 3208 B.
//   - forward: each layer dequantizes its whole weight in bfloat16 (fc1
//     8192·2 = 16384 B, fc2 4096·2 = 8192 B), after the float32 absmax
//     (128·4 = 512 B, 64·4 = 256 B).
//   - backward: only fc2's input needs a gradient (fc1's input is the
//     batch), so only fc2 dequantizes again (8192 B).
//   - gradients and Adam state: the adapters alone, 2·128 + 64·2 + 2·64 +
//     64·2 = 640 elements, float32 as PEFT keeps them on a quantized
//     base: 2560 B of gradients, 5120 B of state.
//   - PEFT's casts outside autocast: fc2's adapter gets x [8, 64] as
//     float32 (2048 B) and its output goes back to bf16 (1024 B); the
//     4-bit base result is cloned (1024 B).
func TestQLoRANF4(t *testing.T) {
	q := graph.Quant{Format: graph.NF4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16}
	g := quantGraph(t, 8, q)
	tr, sum, err := Simulate(g, Setup{Precision: TrueBF16, Steps: 2, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if sum.QuantizedBytes != 5320+3208 || sum.QuantizedParamCount != 8192+4096 {
		t.Errorf("quantized %d bytes of %d elements, want 8528 of 12288", sum.QuantizedBytes, sum.QuantizedParamCount)
	}
	if sum.GradientsBytes != 2560 || sum.OptimizerStateBytes != 5120 || sum.TrainableParamCount != 640 {
		t.Errorf("trainable %d, gradients %d, state %d; want 640, 2560, 5120", sum.TrainableParamCount, sum.GradientsBytes, sum.OptimizerStateBytes)
	}
	for site, want := range map[string]int64{"fc2.cast_input": 2048, "fc2.cast_output": 1024, "fc2.clone": 1024} {
		// one in each of the two steps
		if got := allocs(tr, trace.Forward, site, trace.Activation); len(got) != 2 || got[0] != want || got[1] != want {
			t.Errorf("%s: forward allocations %v, want [%d %d]", site, got, want, want)
		}
	}
	// loading: the bf16 weight lands whole (16384 B), then the float32
	// absmax (512 B) and _absmax - offset (512 B) are temporaries
	if got := transients(tr, trace.Setup, "fc1.weight"); len(got) != 3 || got[0] != 16384 || got[1] != 512 || got[2] != 512 {
		t.Errorf("fc1 loading transients %v, want [16384 512 512]", got)
	}
	for _, c := range []struct {
		phase trace.Phase
		site  string
		n     int64
		want  bool
	}{
		{trace.Forward, "fc1", 16384, true},
		{trace.Forward, "fc1", 512, true},
		{trace.Forward, "fc2", 8192, true},
		{trace.Forward, "fc2", 256, true},
		{trace.Backward, "fc2", 8192, true},
		{trace.Backward, "fc1", 16384, false},
	} {
		if got := transients(tr, c.phase, c.site); has(got, c.n) != c.want {
			t.Errorf("%s %s: transients %v; %d B present = %v, want %v", c.phase, c.site, got, c.n, !c.want, c.want)
		}
	}
}

// One row that needs no gradient takes gemv_4bit: fc1 (its input is the
// batch) dequantizes nothing; fc2's input needs a gradient and still
// dequantizes (8192 B, fp4 without double quantization: no absmax
// temporary).
func TestQuant4bitGemv(t *testing.T) {
	q := graph.Quant{Format: graph.FP4, BlockSize: 64, Compute: graph.BF16}
	tr, _, err := Simulate(quantGraph(t, 1, q), Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got := transients(tr, trace.Forward, "fc1"); len(got) != 0 {
		t.Errorf("fc1 forward transients %v, want none (gemv_4bit)", got)
	}
	if got := transients(tr, trace.Forward, "fc2"); len(got) != 1 || got[0] != 8192 {
		t.Errorf("fc2 forward transients %v, want [8192]", got)
	}
}

// With compute dtype float32 under bf16-true (BitsAndBytesConfig's default
// bnb_4bit_compute_dtype), Linear4bit copies x to float32 (8 rows · 64 ·
// 4 = 2048 B for fc2), dequantizes in bfloat16 (the weight's dtype when
// quantized, 8192 B) and copies that to float32 (16384 B); the float32
// result (8·64·4 = 2048 B) is a temporary beside the bf16 output. In
// backward the incoming bf16 gradient is copied to float32 (2048 B), the
// weight dequantized twice over again (8192 B, 16384 B), grad_A made in
// float32 (2048 B) and copied back to bf16 (1024 B).
func TestQuantComputeFloat32(t *testing.T) {
	q := graph.Quant{Format: graph.NF4, BlockSize: 64, Compute: graph.F32}
	tr, _, err := Simulate(quantGraph(t, 8, q), Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transients(tr, trace.Forward, "fc2"), []int64{2048, 8192, 16384, 2048}; !slices.Equal(got, want) {
		t.Errorf("fc2 forward transients %v, want %v", got, want)
	}
	if got, want := transients(tr, trace.Backward, "fc2"), []int64{2048, 8192, 16384, 2048, 1024}; !slices.Equal(got, want) {
		t.Errorf("fc2 backward transients %v, want %v", got, want)
	}
}

// LLM.int8 under 16-true: CB int8 8192 B + SCB 256 B for fc1; forward
// quantizes A (fp16 already: no copy; SCA 8·4 = 32 B, CA 8·64 = 512 B
// for fc2) and makes the int32 product (8·64·4 = 2048 B); MatMul8bitLt
// saves A. Backward: CB in fp16 (4096·2 = 8192 B), the SCB row factor
// (64·4 = 256 B), grad_A (8·64·2 = 1024 B).
func TestQuantInt8(t *testing.T) {
	q := graph.Quant{Format: graph.Int8, Compute: graph.F16}
	tr, sum, err := Simulate(quantGraph(t, 8, q), Setup{Precision: True16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(8192 + 256 + 4096 + 256); sum.QuantizedBytes != want {
		t.Errorf("stored %d B, want %d", sum.QuantizedBytes, want)
	}
	if got, want := transients(tr, trace.Forward, "fc2"), []int64{32, 512, 2048}; !slices.Equal(got, want) {
		t.Errorf("fc2 forward transients %v, want %v", got, want)
	}
	if got, want := transients(tr, trace.Backward, "fc2"), []int64{8192, 256, 1024}; !slices.Equal(got, want) {
		t.Errorf("fc2 backward transients %v, want %v", got, want)
	}
}

// auto-gptq's torch path under 16-true, fc2 [64, 64] (n = 4096) with group
// 64 (one group) on x [8, 64]: the zeros unpacked (int32 1·64·4 = 256 B,
// int8 64 B), the codes (int32 4096·4 = 16384 B, int8 4096 B twice), the
// int64 g_idx for each gather (64·8 = 512 B), scales[g_idx] (8192 B),
// zeros[g_idx] (4096 B), the difference (4096 B) and the float16 weight
// (8192 B), which matmul saves for x's gradient: fc2's saved bytes are
// 8192. fc1's input is the batch, so nothing is saved there. Backward:
// grad_x = grad @ weights.T, 8·64·2 = 1024 B.
func TestQuantGPTQ(t *testing.T) {
	q := graph.Quant{Format: graph.GPTQ, Bits: 4, GroupSize: 64, Compute: graph.F16, Prequantized: true}
	tr, sum, err := Simulate(quantGraph(t, 8, q), Setup{Precision: True16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transients(tr, trace.Forward, "fc2"), []int64{256, 64, 16384, 4096, 4096, 512, 8192, 512, 4096, 4096, 8192}; !slices.Equal(got, want) {
		t.Errorf("fc2 forward transients %v, want %v", got, want)
	}
	if got, want := transients(tr, trace.Backward, "fc2"), []int64{1024}; !slices.Equal(got, want) {
		t.Errorf("fc2 backward transients %v, want %v", got, want)
	}
	saved := map[string]int64{}
	for _, o := range sum.SavedByOp {
		saved[o.Op] = o.Bytes
	}
	if saved["fc2"] != 8192 || saved["fc1"] != 0 {
		t.Errorf("saved by fc1 %d, fc2 %d; want 0 and 8192", saved["fc1"], saved["fc2"])
	}
}

// autoawq's WQLinearMMFunction on x [2, 8, 64] for fc2 [64, 64]: 2·8 = 16
// < 1024, so forward takes the fused kernel (no dequantized weight);
// backward dequantizes (4096·2 = 8192 B), repeats it for the batch of 2
// (16384 B) and makes grad_input (16·64·2 = 2048 B). Under bf16-true,
// forward copies x to float16 (2048 B, saved) and the float16 result
// (2048 B) is a temporary beside the bf16 output.
func TestQuantAWQ(t *testing.T) {
	q := graph.Quant{Format: graph.AWQ, Bits: 4, GroupSize: 64, Compute: graph.F16, Prequantized: true}
	g := quantGraphOf(t, graph.Shape{2, 8}, q)
	tr, _, err := Simulate(g, Setup{Precision: True16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got := transients(tr, trace.Forward, "fc2"); len(got) != 0 {
		t.Errorf("fc2 forward transients %v, want none", got)
	}
	if got, want := transients(tr, trace.Backward, "fc2"), []int64{8192, 16384, 2048}; !slices.Equal(got, want) {
		t.Errorf("fc2 backward transients %v, want %v", got, want)
	}
	tr, _, err = Simulate(g, Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transients(tr, trace.Forward, "fc2"), []int64{2048, 2048}; !slices.Equal(got, want) {
		t.Errorf("bf16-true: fc2 forward transients %v, want %v", got, want)
	}
}

// A compute dtype that follows the precision (the command line's default)
// is the precision's in whatever precision the job is simulated (a plan
// changes it): under bf16-true fc2 computes in bfloat16 although Compute
// says float32, so its forward has only the dequantized bf16 weight (4096
// · 2 = 8192 B) and no float32 copies.
func TestQuantComputeFollowsPrecision(t *testing.T) {
	q := graph.Quant{Format: graph.NF4, BlockSize: 64, Compute: graph.F32, ComputeFollowsPrecision: true}
	tr, _, err := Simulate(quantGraph(t, 8, q), Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := transients(tr, trace.Forward, "fc2"), []int64{8192}; !slices.Equal(got, want) {
		t.Errorf("fc2 forward transients %v, want %v", got, want)
	}
}

// bitsandbytes before 0.43.2 kept MatMul4Bit's input A for backward
// (ctx.tensors = (A, B); bitsandbytes#1270 dropped it). In the QLoRA graph
// only fc2's input needs a gradient — fc1's is the batch — and nothing
// else keeps that bf16 [8, 64] tensor (the adapter keeps its float32
// copy), so the older release saves 8·64·2 = 1024 bytes more.
func TestQuant4bitKeepsInputBefore0432(t *testing.T) {
	saved := func(keep bool) int64 {
		q := graph.Quant{Format: graph.NF4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16, KeepsInput: keep}
		_, sum, err := Simulate(quantGraph(t, 8, q), Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}})
		if err != nil {
			t.Fatal(err)
		}
		return sum.ActivationsBytes
	}
	if d := saved(true) - saved(false); d != 1024 {
		t.Errorf("the older release saves %d bytes more, want 1024", d)
	}
}

// A weight quantized from a float16 copy (bitsandbytes before 0.43.0,
// Lightning Fabric's BitsandbytesPrecision) has QuantState.dtype float16,
// so under bf16-true each dequantize_4bit gives a float16 weight that
// .to(A.dtype) copies to bfloat16: for fc2 (n = 4096, no double
// quantization) 4096·2 = 8192 B in float16, then 8192 B in bfloat16, in
// forward and again in backward, where the quantizer that keeps the
// model's dtype makes the bfloat16 one alone. On load the weight lands as
// the float16 copy: under 32-true fc1 (n = 8192) lands in 16384 B instead
// of 32768 B.
func TestQuant4bitHalfState(t *testing.T) {
	for _, c := range []struct {
		half     bool
		prec     Precision
		fwd, bwd []int64
		load     int64
	}{
		{false, TrueBF16, []int64{8192}, []int64{8192}, 16384},
		{true, TrueBF16, []int64{8192, 8192}, []int64{8192, 8192}, 16384},
		{false, FP32, nil, nil, 32768},
		{true, FP32, nil, nil, 16384},
	} {
		q := graph.Quant{Format: graph.NF4, BlockSize: 64, Compute: graph.BF16, HalfState: c.half}
		tr, _, err := Simulate(quantGraph(t, 8, q), Setup{Precision: c.prec, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
		if err != nil {
			t.Fatal(err)
		}
		if c.fwd != nil {
			if got := transients(tr, trace.Forward, "fc2"); !slices.Equal(got, c.fwd) {
				t.Errorf("half %v: fc2 forward transients %v, want %v", c.half, got, c.fwd)
			}
		}
		if c.bwd != nil {
			// backward also copies the incoming gradient and makes grad_A;
			// the dequantized copies come first
			if got := transients(tr, trace.Backward, "fc2"); len(got) < len(c.bwd) || !slices.Equal(got[:len(c.bwd)], c.bwd) {
				t.Errorf("half %v: fc2 backward transients %v, want %v first", c.half, got, c.bwd)
			}
		}
		if got := transients(tr, trace.Setup, "fc1.weight"); len(got) == 0 || got[0] != c.load {
			t.Errorf("half %v %v: fc1 lands as %v, want %d first", c.half, c.prec, got, c.load)
		}
	}
}

// torchao v0.1's NF4Tensor as torchtune builds it (Quant.Torchao), on x
// [8, 256] → fc Linear(256 → 64), quantized, with LoRA, → head (kept):
// n = 16384, b = n/64 = 256 absmaxes, s = b/256 = 1 scaler block.
//
//   - stored: nf4 table 16·2 = 32, scaler_mean 2, quantization_factor
//     (the whole 256 / (2·absmax) over b) 2b = 512, quantized scalers b =
//     256, codes n/2 = 8192: 8994 bytes.
//   - building it (bf16-true): the bf16 weight 2n = 32768; absmax over n
//     (abs 32768, values 2b = 512, indices 8b = 2048); scalers - mean 512;
//     absmax over b per 256 (abs 512, values 2, indices 8); 2·absmax 512;
//     scaler_blocks · factor, round, clamp (512 each); absmax over n again
//     (32768, 512, 2048); blocks / scales 32768; value - nf4 and its abs
//     (32n = 524288 each); min's values 2n = 32768 and indices 8n =
//     131072; the shift and the or of the int64 halves (n/2 int64 each,
//     4n = 65536).
//   - each use (fc's forward; its input is the batch, so no backward
//     dequantization): two uint8 halves (n/2 = 8192) each made int64
//     (65536), two bf16 look-ups (16384 each), the scalers (2b = 512,
//     twice), two flattened scaler copies and products (16384 each), the
//     stacked weight 2n = 32768.
func TestQuantTorchaoNF4(t *testing.T) {
	b := graph.NewBuilder("q")
	b.Quant = &graph.Quant{Format: graph.NF4, BlockSize: 64, DoubleQuant: true, Compute: graph.BF16, Torchao: true, Skip: []string{"head"}}
	b.Adapters = &graph.Adapters{Rank: 2, Alpha: 4, Targets: []string{"fc"}, Native: true}
	x := b.Input("x", graph.Shape{8, 256}, graph.F32)
	y := b.Target("y", graph.Shape{8}, graph.I64)
	b.CrossEntropy("loss", b.Linear("head", b.Linear("fc", x, 64, false), 10, true), y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := Simulate(g, Setup{Precision: TrueBF16, Steps: 1, Optimizer: Optimizer{Kind: Adam}, Profile: mustProfile(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	if sum.QuantizedBytes != 8994 {
		t.Errorf("quantized %d bytes, want 8994", sum.QuantizedBytes)
	}
	wantSetup := []int64{32768, 32768, 512, 2048, 512, 512, 2, 8, 512, 512, 512, 512,
		32768, 512, 2048, 32768, 524288, 524288, 32768, 131072, 65536, 65536}
	if got := transients(tr, trace.Setup, "fc.weight"); !slices.Equal(got, wantSetup) {
		t.Errorf("building fc: transients %v, want %v", got, wantSetup)
	}
	wantFwd := []int64{8192, 65536, 8192, 65536, 16384, 16384, 512, 512, 16384, 16384, 16384, 16384, 32768}
	if got := transients(tr, trace.Forward, "fc"); !slices.Equal(got, wantFwd) {
		t.Errorf("fc forward: transients %v, want %v", got, wantFwd)
	}
}
