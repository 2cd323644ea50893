package train

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/trace"
)

// The seed MLP's parameters, as PyTorch registers them: per layer a
// weight [out, in] and a bias [out].
var mlpShapes = []graph.Shape{
	{1024, 784}, {1024},
	{1024, 1024}, {1024},
	{1024, 1024}, {1024},
	{1024, 1024}, {1024},
	{10, 1024}, {10},
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Per-rank static figures of the seed MLP on 4 ranks, fp32 Adam (two
// states), worked out from each library's layout:
//
//	Ψ = 3,962,890 elements.
//	DDP: everything whole, plus buckets holding every gradient once.
//	FSDP1: a flat parameter per unit, each tensor's share ceil(n/4).
//	FSDP2: dim-0 chunks: ceil(rows/4)·cols per weight, ceil(out/4) per bias.
//	ZeRO-1: parameters and gradients whole, the optimizer's flat fp32
//	partition ceil(Ψ/4) with its two states.
//	ZeRO-2: and the reduced gradient partition, ceil(Ψ/4).
//	ZeRO-3: and the parameters partitioned, except the tensors under the
//	persistence threshold (1e5 elements: the biases), kept whole.
func TestParallelStaticFigures(t *testing.T) {
	const n = 4
	var psi, fsdp1, fsdp2, zero3 int64
	for _, sh := range mlpShapes {
		e := sh.Numel()
		psi += e
		fsdp1 += ceilDiv(e, n)
		fsdp2 += ceilDiv(sh[0], n) * (e / sh[0])
		if e > 100_000 {
			zero3 += ceilDiv(e, n)
		} else {
			zero3 += e
		}
	}
	if psi != 3_962_890 {
		t.Fatalf("Ψ = %d", psi)
	}
	part := ceilDiv(psi, n)
	cases := []struct {
		strat                 Strategy
		params, grads, states int64
		buckets               int64
	}{
		{DDP, 4 * psi, 4 * psi, 8 * psi, 4 * psi},
		{FSDP, 4 * fsdp1, 4 * fsdp1, 8 * fsdp1, 0},
		{FSDP2, 4 * fsdp2, 4 * fsdp2, 8 * fsdp2, 0},
		{ZeRO1, 4 * psi, 4 * psi, 8 * part, 0},
		{ZeRO2, 4 * psi, 4 * part, 8 * part, 0},
		{ZeRO3, 4 * zero3, 4 * part, 8 * part, 4 * ZeROReduceBucket},
	}
	for _, c := range cases {
		t.Run(string(c.strat), func(t *testing.T) {
			g := mlp(t, 32, 784, 1024, 4, 10)
			_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: Adam, Impl: Foreach}, Parallel: Parallel{Strategy: c.strat, GPUs: n}})
			if err != nil {
				t.Fatal(err)
			}
			if sum.ParametersBytes != c.params {
				t.Errorf("parameters %d, want %d", sum.ParametersBytes, c.params)
			}
			if sum.GradientsBytes != c.grads {
				t.Errorf("gradients %d, want %d", sum.GradientsBytes, c.grads)
			}
			if sum.OptimizerStateBytes != c.states {
				t.Errorf("optimizer state %d, want %d", sum.OptimizerStateBytes, c.states)
			}
			if sum.GradBucketBytes != c.buckets {
				t.Errorf("gradient buckets %d, want %d", sum.GradBucketBytes, c.buckets)
			}
		})
	}
}

// ZeRO's mixed precision is the paper's 2Ψ + 2Ψ + KΨ/N with K = 12 (the
// float32 master weights and Adam's two states): bf16 module, bf16
// gradients, and 12 bytes an element of the partition.
func TestZeROMixedPrecisionFormula(t *testing.T) {
	const n = 8
	psi := int64(3_962_890)
	part := ceilDiv(psi, n)
	for _, c := range []struct {
		strat         Strategy
		params, grads int64
	}{
		{ZeRO1, 2 * psi, 2 * psi},
		{ZeRO2, 2 * psi, 2 * part},
	} {
		g := mlp(t, 32, 784, 1024, 4, 10)
		_, sum, err := Simulate(g, Setup{Precision: MixedBF16, Optimizer: Optimizer{Kind: AdamW, Impl: Foreach}, Parallel: Parallel{Strategy: c.strat, GPUs: n}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.ParametersBytes != c.params || sum.GradientsBytes != c.grads || sum.OptimizerStateBytes != 12*part {
			t.Errorf("%s: parameters %d, gradients %d, state %d; want %d, %d, %d", c.strat,
				sum.ParametersBytes, sum.GradientsBytes, sum.OptimizerStateBytes, c.params, c.grads, 12*part)
		}
	}
}

// Shards times ranks cover the unsharded state, with less than one
// element of padding per tensor and rank.
func TestShardsCoverTheModel(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 8, 64} {
		for _, strat := range []Strategy{FSDP, FSDP2, ZeRO3} {
			g := mlp(t, 8, 784, 1024, 4, 10)
			sim, err := New(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: strat, GPUs: n, Persist: 1}})
			if err != nil {
				t.Fatal(err)
			}
			var whole, shards int64
			for _, ps := range sim.params {
				whole += ps.numel
				shards += ps.local * int64(n)
			}
			if n == 1 && strat == FSDP {
				// a world of one runs NO_SHARD
				if shards != whole {
					t.Errorf("%s on 1: %d, want %d", strat, shards, whole)
				}
				continue
			}
			slack := int64(len(sim.params)) * int64(n) * 1024 // FSDP2 pads whole rows of at most 1024 elements
			if shards < whole || shards >= whole+slack {
				t.Errorf("%s on %d ranks: shards·N = %d for %d elements", strat, n, shards, whole)
			}
		}
	}
}

// allGathers lists the sizes of the all-gather outputs and the most bytes
// gathered at once, in forward and in backward.
func allGathers(tr *trace.Trace) (sizes []int64, most [trace.NumPhases]int64) {
	live := map[int64]int64{}
	var cur int64
	for _, e := range tr.Events {
		switch e.Action {
		case trace.Alloc:
			if strings.HasSuffix(tr.SiteName(e.Site), ".all_gather") && e.Category == trace.Parameter {
				live[e.ID] = e.Size
				cur += e.Size
				sizes = append(sizes, e.Size)
				most[e.Phase] = max(most[e.Phase], cur)
			}
		case trace.Free:
			if sz, ok := live[e.ID]; ok {
				cur -= sz
				delete(live, e.ID)
			}
		}
	}
	return sizes, most
}

// FSDP1 FULL_SHARD on the MLP: each block is a unit, the head is the
// root's. The largest all-gather is the largest unit padded to the ranks;
// forward holds the root and one block; backward the root, the block
// being differentiated and the one BACKWARD_PRE prefetched.
func TestFSDPGatherBuffers(t *testing.T) {
	const n = 4
	g := mlp(t, 16, 784, 1024, 4, 10)
	tr, _, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: FSDP, GPUs: n}})
	if err != nil {
		t.Fatal(err)
	}
	unit := func(out, in int64) int64 { return 4 * n * (ceilDiv(out*in, n) + ceilDiv(out, n)) }
	big, first, root := unit(1024, 1024), unit(1024, 784), unit(10, 1024)
	sizes, most := allGathers(tr)
	var largest int64
	for _, s := range sizes {
		largest = max(largest, s)
	}
	if largest != big {
		t.Errorf("largest all-gather %d, want the largest unit %d", largest, big)
	}
	if want := root + big; most[trace.Forward] != want {
		t.Errorf("forward gathers at most %d, want root + one block = %d", most[trace.Forward], want)
	}
	if want := root + 2*big; most[trace.Backward] != want {
		t.Errorf("backward gathers at most %d, want root + two blocks = %d", most[trace.Backward], want)
	}
	_ = first
	// SHARD_GRAD_OP keeps every unit from forward to its backward.
	tr, _, err = Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: FSDP, GPUs: n, Sharding: ShardGradOp}})
	if err != nil {
		t.Fatal(err)
	}
	_, most = allGathers(tr)
	if want := root + first + 3*big; most[trace.Forward] != want {
		t.Errorf("grad-op forward gathers at most %d, want all units %d", most[trace.Forward], want)
	}
}

// DDP's buckets: one of every gradient at construction, rebuilt in the
// second iteration in reverse registration order — the first closes once
// it reaches 1 MiB: head.bias 40 B + head.weight 40,960 B + layer 3's bias
// 4,096 B + weight 4,194,304 B = 4,239,400 B; the rest, 11,612,160 B, is
// under 25 MiB and makes the second.
func TestDDPBuckets(t *testing.T) {
	g := mlp(t, 16, 784, 1024, 4, 10)
	tr, _, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: DDP, GPUs: 2}})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]int64
	step := int32(-1)
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && tr.SiteName(e.Site) == "ddp.reducer" {
			if e.Step != step || len(got) == 0 {
				got = append(got, nil)
				step = e.Step
			}
			got[len(got)-1] = append(got[len(got)-1], e.Size)
		}
	}
	all := int64(4 * 3_962_890)
	want := [][]int64{{all}, {4_239_400, all - 4_239_400}}
	if len(got) != 2 || len(got[0]) != 1 || got[0][0] != want[0][0] || len(got[1]) != 2 || got[1][0] != want[1][0] || got[1][1] != want[1][1] {
		t.Errorf("buckets %v, want %v", got, want)
	}
	// gradient_as_bucket_view: .grad is the bucket's view, so no
	// gradient outlives backward beside the buckets
	_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: DDP, GPUs: 2, BucketView: true}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.GradientsBytes != 0 || sum.GradBucketBytes != all {
		t.Errorf("bucket view: gradients %d and buckets %d, want 0 and %d", sum.GradientsBytes, sum.GradBucketBytes, all)
	}
}

// The strategies change nothing about activations: the saved bytes of a
// step equal one GPU's.
func TestParallelActivationsUnchanged(t *testing.T) {
	g := mlp(t, 16, 784, 1024, 4, 10)
	_, one, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []Strategy{DDP, FSDP, FSDP2, ZeRO1, ZeRO2, ZeRO3} {
		_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: s, GPUs: 4}})
		if err != nil {
			t.Fatal(err)
		}
		if sum.ActivationsBytes != one.ActivationsBytes {
			t.Errorf("%s: activations %d, one GPU %d", s, sum.ActivationsBytes, one.ActivationsBytes)
		}
	}
}

// Offload leaves the sharded state on the host and counts it there.
func TestOffload(t *testing.T) {
	g := mlp(t, 16, 784, 1024, 4, 10)
	_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: Adam}, Parallel: Parallel{Strategy: FSDP, GPUs: 4, Offload: true}})
	if err != nil {
		t.Fatal(err)
	}
	var shard int64
	for _, sh := range mlpShapes {
		shard += ceilDiv(sh.Numel(), 4)
	}
	if sum.ParametersBytes != 0 || sum.GradientsBytes != 0 || sum.OptimizerStateBytes != 0 {
		t.Errorf("on the device: parameters %d, gradients %d, state %d; want none", sum.ParametersBytes, sum.GradientsBytes, sum.OptimizerStateBytes)
	}
	// host: the fp32 shards and Adam's two states (gradients are copied
	// to the host as they are reduced, not counted again)
	if want := 4*shard + 8*shard; sum.OffloadedBytes != want {
		t.Errorf("offloaded %d, want %d", sum.OffloadedBytes, want)
	}
}

func TestParallelErrors(t *testing.T) {
	for _, c := range []struct {
		p    Parallel
		want string
	}{
		{Parallel{Strategy: "fsdp3"}, "unknown strategy"},
		{Parallel{Strategy: Single, GPUs: 2}, "one GPU"},
		{Parallel{Strategy: DDP, GPUs: -1}, "gpus must be"},
		{Parallel{Strategy: DDP, Sharding: ShardGradOp}, "FSDP's"},
		{Parallel{Strategy: FSDP2, Sharding: NoShard}, "always shards"},
		{Parallel{Strategy: DDP, Offload: true}, "offload"},
		{Parallel{Strategy: ZeRO2, OffloadParams: true}, "zero3"},
		{Parallel{Strategy: FSDP, BucketView: true}, "DDP's"},
		{Parallel{Strategy: DDP, BucketMB: -1}, "bucket size"},
		{Parallel{Strategy: FSDP2, NoSync: true}, "FSDP1"},
		{Parallel{Strategy: DDP, NoSync: true}, "FSDP1"},
		// dist.new_subgroups: 16 ranks do not split into groups of 3
		{Parallel{Strategy: FSDP, GPUs: 16, NodeGPUs: 3, Sharding: HybridShard}, "do not divide 16"},
	} {
		_, err := (Setup{Parallel: c.p}).Normalize()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.p, err, c.want)
		}
	}
	if _, err := ParseStrategy("DeepSpeed_Stage_3"); err != nil {
		t.Error(err)
	}
	// torch.optim refuses a negative momentum or weight decay; NaN and
	// ±Inf are no values at all
	nan, inf := math.NaN(), math.Inf(1)
	for _, o := range []Optimizer{{Kind: SGD, Momentum: nan}, {Kind: SGD, Momentum: inf}, {Kind: SGD, Momentum: -0.5},
		{Kind: AdamW, WeightDecay: nan}, {Kind: AdamW, WeightDecay: -1}, {Kind: AdamW, WeightDecay: -inf}} {
		if _, err := (Setup{Optimizer: o}).Normalize(); err == nil {
			t.Errorf("%+v: want an error", o)
		}
	}
}

// stageMLP is one pipeline stage of an MLP: it receives [B, H] hidden
// states, runs Linear(H, H) and ReLU, and sends the result on.
func stageMLP(t testing.TB, batch, h int64) *graph.Graph {
	b := graph.NewBuilder("stage")
	x := b.Received("hidden", graph.Shape{batch, h})
	b.Block("layer", func() {
		x = b.Linear("linear", x, h, true)
		x = b.Act(graph.ReLU, "relu", x, false)
	})
	b.Output(x)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// 1F1B keeps p−s micro-batches in flight on stage s: each holds what it
// received (kept by the Linear for its weight's gradient) and the ReLU's
// output (saved by the ReLU, so not freed when sent), B·H·4 bytes each.
// With 8 micro-batches over 4 stages, stage 0 peaks at 4 of them, stage 3
// at 1; at the peak the forward in progress also holds its Linear's output
// until the ReLU has made its own (one more B·H·4).
func TestPipelineInFlight(t *testing.T) {
	const B, H, p, m = 16, 256, 4, 8
	one := int64(B * H * 4)
	for s := 0; s < p; s++ {
		g := stageMLP(t, B, H)
		tr, _, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Accumulate: m, Stages: p, Stage: s})
		if err != nil {
			t.Fatal(err)
		}
		var cur, most int64
		live := map[int64]trace.Event{}
		for _, e := range tr.Events {
			switch e.Action {
			case trace.Alloc:
				live[e.ID] = e
				if e.Category == trace.Activation || e.Category == trace.Batch {
					cur += e.Size
					most = max(most, cur)
				}
			case trace.Free:
				if a := live[e.ID]; a.Category == trace.Activation || a.Category == trace.Batch {
					cur -= a.Size
				}
				delete(live, e.ID)
			}
		}
		if want := int64(p-s)*2*one + one; most != want {
			t.Errorf("stage %d: at most %d bytes of received inputs and activations, want %d micro-batches' worth (%d)", s, most, p-s, want)
		}
	}
}

// The batch data a pipeline stage reports is one micro-batch's, as
// without a pipeline, however many micro-batches the step runs: what the
// stage received, B·H·4 bytes.
func TestPipelineBatchDataIsOneMicroBatch(t *testing.T) {
	const B, H = 16, 256
	for _, m := range []int{1, 4, 33} {
		g := stageMLP(t, B, H)
		_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Accumulate: m, Stages: 2, Stage: 1})
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(B * H * 4); sum.BatchDataBytes != want {
			t.Errorf("accumulate %d: batch data %d bytes, want %d", m, sum.BatchDataBytes, want)
		}
	}
}

// Sequence parallelism, Megatron's way: a Linear fed by an all-gather
// keeps the shard it was given ([B, L/2, H], not the gathered [B, L, H])
// and gathers it again in its backward, a transient of the gathered size.
func TestSequenceParallelSavesTheShard(t *testing.T) {
	const B, L, H, tp = 3, 64, 128, 2
	b := graph.NewBuilder("sp")
	x := b.Input("x", graph.Shape{B, L / tp, H}, graph.F32)
	y := b.Target("y", graph.Shape{B, L / tp, H}, graph.F32)
	h := b.Linear("pre", x, H, false)
	h = b.AllGather("gather", h, 1, tp)
	h = b.Linear("col", h, H, false)
	h = b.ReduceScatter("scatter", h, 1, tp)
	b.MSELoss("loss", h, y)
	g, err := b.Graph()
	if err != nil {
		t.Fatal(err)
	}
	tr, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: SGD}, Steps: 1, CPU: true})
	if err != nil {
		t.Fatal(err)
	}
	shard, whole := int64(B*L/tp*H*4), int64(B*L*H*4)
	for _, s := range sum.SavedByOp {
		if s.Op == "col" && s.Bytes != shard {
			t.Errorf("col saves %d bytes, want the shard's %d", s.Bytes, shard)
		}
	}
	// col's backward allocates two tensors of the gathered size: its
	// input gathered again, and its input's gradient
	n := 0
	for _, e := range tr.Events {
		if e.Action == trace.Alloc && e.Phase == trace.Backward && tr.SiteName(e.Site) == "col" && e.Size == whole {
			n++
		}
	}
	if n != 2 {
		t.Errorf("col's backward allocates %d tensors of %d bytes, want 2 (the input gathered again and its gradient)", n, whole)
	}
}

// Korthikanti et al. (2022): with tensor and sequence parallelism of
// degree t every activation a layer keeps is divided by t. Op by op, a
// Llama's saved bytes on one of 4 ranks are a quarter of the unsplit
// model's — except the rotary tables, which cover the whole sequence the
// attention sees, and the loss's per-position figures, which every rank of
// a vocabulary-parallel loss holds whole, and cuDNN attention's dropout
// seed and offset (two 8-byte tensors a call, _cudnn_attention_forward),
// which every rank holds for its own call.
func TestSequenceParallelDividesActivations(t *testing.T) {
	m, err := models.Lookup("Llama-3.2-1B")
	if err != nil {
		t.Fatal(err)
	}
	saved := func(c models.Config) map[string]int64 {
		g, err := m.Build(c)
		if err != nil {
			t.Fatal(err)
		}
		_, sum, err := Simulate(g, Setup{Precision: TrueBF16, Optimizer: Optimizer{Kind: SGD}, Steps: 1})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, s := range sum.SavedByOp {
			out[s.Op] += s.Bytes
		}
		return out
	}
	whole := saved(models.Config{Batch: 2, Seq: 512, Layers: 2})
	split := saved(models.Config{Batch: 2, Seq: 512, Layers: 2, TP: 4, SP: true})
	for op, b := range whole {
		if strings.Contains(op, "_mul_cos") || strings.Contains(op, "_mul_sin") || op == "loss.cross_entropy" {
			continue
		}
		var seeds int64
		if strings.HasSuffix(op, ".sdpa") {
			seeds = 16
		}
		if (split[op]-seeds)*4 != b-seeds {
			t.Errorf("%s saves %d bytes on one of 4 ranks, %d on one GPU", op, split[op], b)
		}
	}
}

// Strategy and sharding names never panic, and what they accept reads
// back as itself.
func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{"fsdp", "ZeRO-3", "deepspeed_stage_2", "", "grad-op", "HYBRID_SHARD", "fully_shard"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if st, err := ParseStrategy(s); err == nil {
			if back, err := ParseStrategy(string(st)); err != nil || back != st {
				t.Errorf("%q → %q → %q, %v", s, st, back, err)
			}
		}
		if sh, err := ParseSharding(s); err == nil {
			if back, err := ParseSharding(string(sh)); err != nil || back != sh {
				t.Errorf("%q → %q → %q, %v", s, sh, back, err)
			}
		}
	})
}

// FSDP1 with LoRA: each block's unit holds the frozen base Linear and its
// trainable adapters, so (use_orig_params=True) the base weights are views
// of a flat parameter that requires grad — "gradient memory ... equivalent
// to not freezing those parameters". On 4 ranks the sharded gradients are
// every block parameter's share, base and adapters, while Adam's state is
// the adapters' alone; the head, frozen in a unit of its own, stays
// without gradient. Seed MLP, r = 8: each hidden block holds its Linear
// (out·in + out) and lora_A [8, in], lora_B [out, 8].
func TestFSDPMixedUnitsGradients(t *testing.T) {
	m, err := models.Lookup("mlp")
	if err != nil {
		t.Fatal(err)
	}
	g, err := m.Build(models.Config{Batch: 16, Adapters: &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"linear"}}})
	if err != nil {
		t.Fatal(err)
	}
	if n := g.UnfreezeMixedUnits(); n != 8 {
		t.Fatalf("%d parameters unfrozen, want the 4 blocks' weights and biases", n)
	}
	_, sum, err := Simulate(g, Setup{Optimizer: Optimizer{Kind: Adam, Impl: Foreach}, Parallel: Parallel{Strategy: FSDP, GPUs: 4}})
	if err != nil {
		t.Fatal(err)
	}
	var grads, lora int64
	for _, io := range [][2]int64{{784, 1024}, {1024, 1024}, {1024, 1024}, {1024, 1024}} {
		in, out := io[0], io[1]
		for _, n := range []int64{out * in, out, 8 * in, out * 8} {
			grads += ceilDiv(n, 4)
		}
		lora += ceilDiv(8*in, 4) + ceilDiv(out*8, 4)
	}
	if sum.GradientsBytes != 4*grads || sum.OptimizerStateBytes != 8*lora {
		t.Errorf("gradients %d and state %d, want %d (every block parameter's share) and %d (the adapters')",
			sum.GradientsBytes, sum.OptimizerStateBytes, 4*grads, 8*lora)
	}
	if want := int64(8*784 + 1024*8 + 3*(8*1024+1024*8)); sum.TrainableParamCount != want {
		t.Errorf("trainable %d, want the adapters' %d", sum.TrainableParamCount, want)
	}
}

// Under no_sync an accumulating micro-batch keeps every unit's unsharded
// gradient: between the first micro-batch's backward and the second's
// forward the rank holds the whole model's gradients, 4·Ψ bytes in fp32
// (Ψ = 3,962,890 for the seed MLP), where a syncing micro-batch has
// reduce-scattered them to the shards, 4·Σ ceil(nᵢ/4) on 4 ranks. Only the
// last micro-batch reduces, so the step ends with the same sharded
// gradients either way; and the steady micro-batches repeated equal those
// simulated one by one.
func TestFSDPNoSyncKeepsFullGradients(t *testing.T) {
	const n = 4
	g := mlp(t, 16, 784, 1024, 4, 10)
	var psi, shards int64
	for _, s := range mlpShapes {
		psi += s.Numel()
		shards += ceilDiv(s.Numel(), n)
	}
	if psi != 3_962_890 {
		t.Fatalf("Ψ = %d, want 3,962,890", psi)
	}
	// liveAtSecondForward is the bytes allocated when the second
	// micro-batch's forward begins.
	liveAtSecondForward := func(tr *trace.Trace) int64 {
		live := map[int64]int64{}
		var cur int64
		back := false
		for _, e := range tr.Events {
			if e.Phase == trace.Backward {
				back = true
			}
			if back && e.Phase == trace.Forward {
				return cur
			}
			switch e.Action {
			case trace.Alloc:
				live[e.ID] = e.Size
				cur += e.Size
			case trace.Free:
				cur -= live[e.ID]
				delete(live, e.ID)
			}
		}
		t.Fatal("no second forward")
		return 0
	}
	run := func(noSync bool) (*trace.Trace, Summary) {
		tr, sum, err := Simulate(g, Setup{Accumulate: 3, Optimizer: Optimizer{Kind: SGD},
			Parallel: Parallel{Strategy: FSDP, GPUs: n, NoSync: noSync}})
		if err != nil {
			t.Fatal(err)
		}
		return tr, sum
	}
	syncTr, syncSum := run(false)
	noTr, noSum := run(true)
	if got, want := liveAtSecondForward(noTr)-liveAtSecondForward(syncTr), 4*psi-4*shards; got != want {
		t.Errorf("no_sync holds %d bytes more before the second micro-batch, want 4·Ψ − 4·Σ ceil(nᵢ/4) = %d", got, want)
	}
	if noSum.GradientsBytes != syncSum.GradientsBytes || noSum.GradientsBytes != 4*shards {
		t.Errorf("gradients after the step %d (no_sync) and %d, want the shards' %d", noSum.GradientsBytes, syncSum.GradientsBytes, 4*shards)
	}
	if noSum.PeakRequested <= syncSum.PeakRequested {
		t.Errorf("no_sync peak %d, want above the syncing peak %d", noSum.PeakRequested, syncSum.PeakRequested)
	}

	// SHARD_GRAD_OP inside no_sync keeps the gathered parameters from
	// one micro-batch to the next: of a step's 3 micro-batches only the
	// first gathers its 5 units (4 blocks and the root), where syncing
	// ones gather them in each, 15 a step; over 3 steps 15 and 45.
	for _, c := range []struct {
		noSync bool
		want   int
	}{{false, 45}, {true, 15}} {
		tr, _, err := Simulate(g, Setup{Steps: 3, Accumulate: 3, Optimizer: Optimizer{Kind: SGD},
			Parallel: Parallel{Strategy: FSDP, GPUs: n, Sharding: ShardGradOp, NoSync: c.noSync}})
		if err != nil {
			t.Fatal(err)
		}
		if sizes, _ := allGathers(tr); len(sizes) != c.want {
			t.Errorf("grad-op, no_sync %v: %d all-gathers in the step, want %d", c.noSync, len(sizes), c.want)
		}
	}

	for _, sh := range []Sharding{FullShard, ShardGradOp} {
		checkNoSyncRepeats(t, g, Setup{Steps: 2, Accumulate: 7, Optimizer: Optimizer{Kind: AdamW, Impl: Foreach}, Checkpoint: FullCheckpoint,
			Parallel: Parallel{Strategy: FSDP, GPUs: n, Sharding: sh, NoSync: true}})
	}
}

// checkNoSyncRepeats checks that the steady micro-batches repeated equal
// those simulated one by one.
func checkNoSyncRepeats(t *testing.T, g *graph.Graph, s Setup) {
	t.Helper()
	defer func(old bool) { repeatMicroBatches = old }(repeatMicroBatches)
	repeatMicroBatches = true
	sim, err := New(g, s)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < s.Steps; i++ {
		if err := sim.Step(g); err != nil {
			t.Fatal(err)
		}
	}
	if len(sim.CompactTrace().Repeats) == 0 {
		t.Error("no micro-batch was repeated")
	}
	fsum := sim.Summary()
	fastEv := slices.Clone(sim.Trace().Events)
	repeatMicroBatches = false
	full, sum, err := Simulate(g, s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fastEv, full.Events) || fsum.PeakRequested != sum.PeakRequested {
		t.Errorf("sharding %s: repeated micro-batches under no_sync differ from simulated ones (%d and %d events, peaks %d and %d)",
			s.Parallel.Sharding, len(fastEv), len(full.Events), fsum.PeakRequested, sum.PeakRequested)
	}
}
