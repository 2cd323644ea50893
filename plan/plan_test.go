package plan

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/train"
)

// blocks is a stack of Linear+GELU blocks with a classifier: activations
// grow with the batch, parameters with width and depth.
type blocks struct {
	layers int
	width  int64
}

func (s blocks) Name() string       { return "blocks" }
func (s blocks) DefaultSeq() int64  { return 0 }
func (s blocks) Dims() []models.Dim { return nil }
func (s blocks) Build(c models.Config) (*graph.Graph, error) {
	b := graph.NewBuilder("blocks")
	b.Adapters = c.Adapters
	x := b.Input("x", graph.Shape{c.Batch, s.width}, graph.F32)
	y := b.Target("y", graph.Shape{c.Batch}, graph.I64)
	for i := 0; i < s.layers; i++ {
		b.Block("block", func() {
			x = b.Linear("fc", x, s.width, true)
			x = b.Act(graph.GELU, "act", x, false)
		})
	}
	x = b.Linear("head", x, 10, true)
	b.CrossEntropy("loss", x, y)
	return b.Graph()
}

var testRates = gpu.Rates{FP32: 20e12, TF32: 150e12, FP16: 300e12, BF16: 300e12, Bandwidth: 2e12, Source: "test"}

func device(capacity int64) gpu.GPU {
	return gpu.GPU{Name: "test", Marketing: "test", Capacity: capacity, Major: 9, Rates: testRates}
}

func request(src predict.Source, batch int64, s train.Setup, capacity int64) predict.Request {
	return predict.Request{Source: src, Config: models.Config{Batch: batch}, GPU: device(capacity), Context: 0, Setup: s}
}

// needOf predicts a setup on an unbounded device: what it needs.
func needOf(t *testing.T, src predict.Source, batch int64, s train.Setup) int64 {
	t.Helper()
	res, err := predict.Run(context.Background(), request(src, batch, s, 1<<50))
	if err != nil {
		t.Fatal(err)
	}
	return res.DeviceTotal
}

// Only accumulation may move, and the device is sized between what a
// micro-batch of 1024 and one of 2048 need: of a global batch of 4096, the
// plan is accumulation 4, and nothing with a larger micro-batch.
func TestOnlyAccumulationFits(t *testing.T) {
	src := blocks{layers: 4, width: 512}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}}
	n16, n32 := needOf(t, src, 1024, s), needOf(t, src, 2048, s)
	if n32 <= n16 {
		t.Fatalf("need at 2048 (%d) not above need at 1024 (%d)", n32, n16)
	}
	ans, err := Run(context.Background(), Options{Base: request(src, 4096, s, n16+(n32-n16)/2), Levers: []Lever{Accumulate}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Base.Fits || len(ans.Best) != 1 || ans.Best[0].Accumulate != 4 || ans.Best[0].MicroBatch != 1024 {
		t.Fatalf("base fits %v; best %v", ans.Base.Fits, plansOf(ans))
	}
	if got := ans.Best[0].Changes; len(got) != 1 || !strings.HasPrefix(got[0], "accumulate 1 → 4") {
		t.Errorf("changes %q", got)
	}
}

// Only precision may move, and the device holds bf16-true's parameters,
// gradients and Adam state but not the float32 or mixed ones.
func TestOnlyBF16Fits(t *testing.T) {
	src := blocks{layers: 4, width: 2048}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.Adam}}
	var others int64 = 1 << 62
	for _, p := range []train.Precision{train.FP32, train.MixedBF16, train.Mixed16} {
		q := s
		q.Precision = p
		others = min(others, needOf(t, src, 8, q))
	}
	q := s
	q.Precision = train.TrueBF16
	bf := needOf(t, src, 8, q)
	if bf >= others {
		t.Fatalf("bf16-true needs %d, the others at least %d", bf, others)
	}
	ans, err := Run(context.Background(), Options{Base: request(src, 8, s, bf+(others-bf)/2), Levers: []Lever{Precision}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) != 1 || ans.Best[0].Precision != train.TrueBF16 {
		t.Fatalf("best %v", plansOf(ans))
	}
}

// Only checkpointing may move; the device holds every-second-block
// checkpointing and full checkpointing but not none. Both fit; every
// second block recomputes half as much and is the faster.
func TestEverySecondBlockFastest(t *testing.T) {
	src := blocks{layers: 8, width: 512}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}}
	at := func(c train.Checkpoint) int64 {
		q := s
		q.Checkpoint = c
		return needOf(t, src, 4096, q)
	}
	none, half, full := at(train.Checkpoint{}), at(train.Checkpoint{Every: 2}), at(train.FullCheckpoint)
	if !(full < half && half < none) {
		t.Fatalf("needs: none %d, every 2 %d, full %d", none, half, full)
	}
	ans, err := Run(context.Background(), Options{Base: request(src, 4096, s, half+(none-half)/2), Levers: []Lever{Checkpoint}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) != 2 || ans.Best[0].Checkpoint != (train.Checkpoint{Every: 2}) || ans.Best[1].Checkpoint != train.FullCheckpoint ||
		!(ans.Best[0].Seconds < ans.Best[1].Seconds) {
		t.Fatalf("best %v", plansOf(ans))
	}
}

// The branch and bound finds what an exhaustive search over every
// combination finds: the fastest fitting plan, and only plans that fit.
func TestMatchesExhaustiveSearch(t *testing.T) {
	src := blocks{layers: 6, width: 1024}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.AdamW, WeightDecay: 0.01}}
	const global = 256
	capacity := needOf(t, src, 64, s)
	o := Options{Base: request(src, global, s, capacity), Top: 3}
	ans, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 {
		t.Fatal("no plan fits")
	}
	best := 0.0
	for _, p := range []train.Precision{train.FP32, train.MixedBF16, train.Mixed16, train.TrueBF16} {
		for _, ck := range []train.Checkpoint{{}, {Every: 2}, train.FullCheckpoint} {
			for _, im := range []train.Impl{train.ForLoop, train.Foreach, train.Fused} {
				for _, exp := range []bool{false, true} {
					for a := int64(1); a <= global; a *= 2 {
						q := s
						q.Precision, q.Checkpoint, q.Optimizer.Impl, q.Accumulate = p, ck, im, int(a)
						r := request(src, global/a, q, capacity)
						r.Alloc.ExpandableSegments = exp
						res, err := predict.Run(context.Background(), r)
						if err != nil {
							t.Fatal(err)
						}
						if res.Fits && (best == 0 || res.Time.Seconds < best) {
							best = res.Time.Seconds
						}
					}
				}
			}
		}
	}
	if ans.Best[0].Seconds != best {
		t.Errorf("planner's best %g s, exhaustive %g s; plans %v", ans.Best[0].Seconds, best, plansOf(ans))
	}
	for _, p := range ans.Best {
		if !p.Fits || p.Result.DeviceTotal > capacity {
			t.Errorf("plan %v does not fit", p.Candidate)
		}
	}
	for i := 1; i < len(ans.Best); i++ {
		if ans.Best[i].Seconds < ans.Best[i-1].Seconds {
			t.Errorf("plans out of order: %v", plansOf(ans))
		}
	}
}

// The smallest changes: when accumulation alone makes it fit, the first
// suggestion changes one lever.
func TestFewestChanges(t *testing.T) {
	src := blocks{layers: 4, width: 512}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.Adam}}
	n32, n64 := needOf(t, src, 2048, s), needOf(t, src, 4096, s)
	ans, err := Run(context.Background(), Options{Base: request(src, 4096, s, n32+(n64-n32)/2), Objective: FewestChanges, Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 || len(ans.Best[0].Changes) != 1 {
		t.Fatalf("suggestions %v", plansOf(ans))
	}
	for i := 1; i < len(ans.Best); i++ {
		if len(ans.Best[i].Changes) < len(ans.Best[i-1].Changes) {
			t.Errorf("suggestions out of order: %v", plansOf(ans))
		}
	}
	for _, p := range ans.Best {
		if p.Candidate == ans.Base.Candidate {
			t.Errorf("the current setup suggested")
		}
	}
}

func TestBadInput(t *testing.T) {
	src := blocks{layers: 2, width: 256}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}}
	if _, err := Run(context.Background(), Options{Base: request(src, 8, s, 1<<40), GlobalBatch: 8, MinMicroBatch: 16}); err == nil ||
		!strings.Contains(err.Error(), "global batch of 8") {
		t.Errorf("micro-batch above the global batch: %v", err)
	}
	if _, err := Run(context.Background(), Options{Base: request(src, 8, s, 1<<40), GlobalBatch: -4}); err == nil {
		t.Error("a negative global batch accepted")
	}
	acc := s
	acc.Accumulate = 2
	if _, err := Run(context.Background(), Options{Base: request(src, 8, acc, 1<<40), GlobalBatch: 7}); err == nil || !strings.Contains(err.Error(), "not the global batch 7") {
		t.Errorf("a global batch of 7 with accumulation 2: %v", err)
	}
	if _, err := ParseLevers("accumulate,precisoin"); err == nil || !strings.Contains(err.Error(), `did you mean precision`) {
		t.Errorf("unknown lever: %v", err)
	}
	// a device smaller than the parameters: nothing fits, and the answer
	// says how much would be needed
	ans, err := Run(context.Background(), Options{Base: request(src, 8, s, 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	params := int64(2 * (256*256 + 256))
	if len(ans.Best) != 0 || ans.Need < 2*2*params || ans.NeedFrom == "" {
		t.Errorf("nothing fits: best %v, need %d from %q", plansOf(ans), ans.Need, ans.NeedFrom)
	}
}

func plansOf(a *Answer) []string {
	var out []string
	for _, p := range a.Best {
		out = append(out, p.Candidate.String())
	}
	return out
}

// The static bound counts gradients and optimizer state for trainable
// parameters only: a job whose full fine-tuning state alone overflows the
// device still gets plans when it is LoRA, and no combination is ruled out
// for state it does not have.
func TestFrozenParametersInTheBound(t *testing.T) {
	// 8 blocks of 4096×4096: 537 MB of parameters, 2.1 GB with
	// gradients and Adam's two states
	src := blocks{layers: 8, width: 4096}
	s := train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.Adam, Impl: train.Foreach}, Accumulate: 1, Steps: 2}
	r := request(src, 8, s, 0)
	r.Config.Adapters = &graph.Adapters{Rank: 8, Alpha: 16, Targets: []string{"fc"}}
	need := needOf(t, src, 8, s) // full fine-tuning
	lora := func() int64 {
		q := r
		q.GPU = device(1 << 50)
		res, err := predict.Run(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return res.DeviceTotal
	}()
	if lora >= need {
		t.Fatalf("LoRA needs %d, full fine-tuning %d", lora, need)
	}
	// between the two: parameters + gradients + Adam state of every
	// parameter (4 copies) would not fit, LoRA's does
	r.GPU = device((lora + need) / 2)
	ans, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Accumulate}, Objective: Throughput, Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 {
		t.Fatalf("no plan for LoRA on a device of %d (it needs %d)", r.GPU.Capacity, lora)
	}
}

// On 8 GPUs, the sharding lever finds what DDP cannot: the device holds
// an eighth of a wide stack's parameters, gradients and Adam state (16
// bytes an element) but not all of them. Every plan that fits shards,
// and the tensor lever offers nothing for a model that does not split.
func TestShardingLever(t *testing.T) {
	src := blocks{layers: 8, width: 2048}
	psi := int64(8*(2048*2048+2048) + 2048*10 + 10)
	base := train.Setup{Optimizer: train.Optimizer{Kind: train.Adam, Impl: train.Foreach}, Parallel: train.Parallel{Strategy: train.DDP, GPUs: 8}}
	// NCCL's buffers (one communicator, the same for every strategy the
	// lever tries) come on top of what the test is about
	nccl := predict.NCCLBytes(base.Parallel, 0, 0, 0)
	ans, err := Run(context.Background(), Options{Base: request(src, 64, base, 8*psi+nccl), Levers: []Lever{Sharding, Accumulate}, Top: 20})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Base.Fits || len(ans.Best) == 0 || !ans.Untimed {
		t.Fatalf("base fits %v, %d plans, untimed %v: want DDP not to fit, sharded plans, no step times", ans.Base.Fits, len(ans.Best), ans.Untimed)
	}
	for _, p := range ans.Best {
		if p.Parallel.Strategy == train.DDP || p.Parallel.Strategy == train.ZeRO1 {
			t.Errorf("%s fits with %s, which keeps the whole parameters and gradients", describe(p.Candidate), p.Parallel.Strategy)
		}
		if p.TP > 1 {
			t.Errorf("%s: tensor parallelism for a model that does not split", describe(p.Candidate))
		}
		if !strings.Contains(strings.Join(p.Changes, "; "), "strategy ddp →") {
			t.Errorf("%s: changes %v do not name the strategy", describe(p.Candidate), p.Changes)
		}
	}
}

// The tensor lever splits a Llama across ranks where the job already runs
// on several GPUs, and only there.
func TestTensorLever(t *testing.T) {
	m, err := models.Lookup("Llama-3.2-1B")
	if err != nil {
		t.Fatal(err)
	}
	src := predict.Zoo{M: m}
	s := train.Setup{Precision: train.TrueBF16, Optimizer: train.Optimizer{Kind: train.AdamW, Impl: train.Foreach}}
	r := request(src, 4, s, 12<<30)
	r.Config.Seq = 1024
	one, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Tensor}})
	if err == nil {
		for _, p := range append(one.Best, one.Evaluated...) {
			if p.TP > 1 {
				t.Errorf("one GPU: a plan with tensor parallelism %d", p.TP)
			}
		}
	}
	r.Setup.Parallel = train.Parallel{Strategy: train.DDP, GPUs: 2}
	two, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Tensor}, Top: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range two.Best {
		found = found || p.TP > 1 && p.SP
	}
	if two.Base.Fits || !found {
		t.Errorf("2 GPUs, 12 GiB: base fits %v, a tensor-parallel plan %v; want it not to fit and tensor parallelism to", two.Base.Fits, found)
	}
}

// The pipeline lever splits the layers into stages, the accumulation's
// micro-batches running 1F1B, where the job is already on several GPUs.
func TestPipelineLever(t *testing.T) {
	m, err := models.Lookup("Llama-3.2-1B")
	if err != nil {
		t.Fatal(err)
	}
	s := train.Setup{Precision: train.TrueBF16, Optimizer: train.Optimizer{Kind: train.AdamW, Impl: train.Foreach}, Checkpoint: train.FullCheckpoint,
		Parallel: train.Parallel{Strategy: train.DDP, GPUs: 2}}
	// NCCL's buffers come on top of what the test is about: the
	// pipelined plans' two communicators (data and pipeline groups)
	nccl := predict.NCCLBytes(s.Parallel, 0, 2, 0)
	r := request(predict.Zoo{M: m}, 8, s, 12<<30+nccl)
	r.Config.Seq = 1024
	ans, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Pipeline, Accumulate}, Top: 10})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ans.Best {
		if p.PP > 1 {
			found = true
			if len(p.Result.Stages) != int(p.PP) {
				t.Errorf("%s: %d stages predicted", describe(p.Candidate), len(p.Result.Stages))
			}
		}
	}
	if ans.Base.Fits || !found {
		t.Errorf("base fits %v, a pipelined plan %v: want it not to fit, and a pipeline to", ans.Base.Fits, found)
	}
}

// Without step times (data parallelism) the plans are ranked by the fewest
// changes, and a job that fits as it is comes first, unchanged, rather
// than "nothing fits".
func TestUntimedKeepsAFittingJob(t *testing.T) {
	src := blocks{layers: 2, width: 256}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}, Parallel: train.Parallel{Strategy: train.DDP, GPUs: 4}}
	ans, err := Run(context.Background(), Options{Base: request(src, 64, s, 1<<40), Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	if !ans.Untimed || !ans.Base.Fits || len(ans.Best) == 0 || ans.Best[0].Candidate != ans.Base.Candidate || len(ans.Best[0].Changes) != 0 {
		t.Fatalf("untimed %v, base fits %v, %d plans; want the job itself first", ans.Untimed, ans.Base.Fits, len(ans.Best))
	}
}

// The planner's work is bounded: with a budget of predictions smaller
// than the search needs, it stops, says so, and has spent no more than
// the budget beyond the simulations every plan needs (the current setup
// and one per precision for the op records).
func TestBudgetStopsTheSearch(t *testing.T) {
	src := blocks{layers: 4, width: 512}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.Adam}}
	n16, n32 := needOf(t, src, 1024, s), needOf(t, src, 2048, s)
	o := Options{Base: request(src, 4096, s, n16+(n32-n16)/2), Top: 5}
	full, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if full.Stopped || full.Simulations != len(full.Evaluated) || full.Simulations > DefaultMaxPredictions {
		t.Fatalf("unbounded: stopped %v after %d simulations of %d plans", full.Stopped, full.Simulations, len(full.Evaluated))
	}
	// the current setup and the four precisions' op records: five
	// simulations before any search
	const before = 5
	if full.Simulations <= before+3 {
		t.Fatalf("the full search took %d simulations: too few to cut", full.Simulations)
	}
	o.MaxPredictions = before + 3
	cut, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !cut.Stopped || cut.Spent() > float64(o.MaxPredictions) || cut.Simulations < before {
		t.Errorf("budget %d: stopped %v after %d simulations (%g of the budget)", o.MaxPredictions, cut.Stopped, cut.Simulations, cut.Spent())
	}
}

// A screened simulation costs the budget a fraction of a full one. Of
// Llama-3-70B at seq 8192 under FSDP on 8 H100s (global batch 8), most
// combinations on 8 GPUs cannot fit and are screened out: in 32-true with
// AdamW, parameters, gradients and two moments are 16 bytes an element,
// 70.6e9 × 16 / 8 = 141 GB a rank, more than the 84.9 GB (79.1 GiB)
// device; in bf16-true 8 bytes, 70.6 GB, which with the 10 % margin
// (8.5 GB) leaves under 6 GB for the gathered layers and the activations
// of an 8192-token sequence (full checkpointing alone keeps 80 block
// inputs of 8192 × 8192 × 2 bytes, 10.7 GB). Only CPU offload fits on 8
// GPUs: the plan that keeps the job's GPUs. The search visits those 8-GPU
// combinations first; charged as full simulations they spent the default
// budget of 256 before any tensor-parallel layout. Charged as screened,
// the whole search runs within it and finds tensor-parallel plans.
func TestScreenedSimulationsSpendLess(t *testing.T) {
	m, err := models.Lookup("Llama-3-70B")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gpu.Lookup("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Base: predict.Request{Source: predict.Zoo{M: m}, Config: models.Config{Batch: 1, Seq: 8192}, GPU: g, Context: -1,
		Setup: train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.AdamW, WeightDecay: 0.01},
			Parallel: train.Parallel{Strategy: train.FSDP, GPUs: 8}}},
		GlobalBatch: 8, Margin: g.Capacity / 10}
	ans, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Spent() > DefaultMaxPredictions || ans.ScreenedSimulations == 0 {
		t.Errorf("spent %g of %d, %d of %d simulations screened", ans.Spent(), DefaultMaxPredictions, ans.ScreenedSimulations, ans.Simulations)
	}
	if ans.Stopped {
		t.Errorf("stopped after %d simulations (%g of the budget)", ans.Simulations, ans.Spent())
	}
	same := ans.SameGPUs
	if same == nil || same.GPUs() != 8 || !same.Parallel.Offload {
		t.Errorf("the plan on the job's 8 GPUs: %+v, want one with CPU offload", same)
	}
	tp := false
	for _, p := range ans.Best {
		tp = tp || p.TP > 1
	}
	if !tp {
		t.Errorf("no tensor-parallel plan among %d", len(ans.Best))
	}
}

// The planner's static bound reads the optimizer's one table
// (train.OptimizerStates): it equals the simulated parameters, gradients
// and state where every parameter keeps the same per-element state
// (torch.optim's, whatever the parameter's size), and stays below them
// where small or factored parameters keep more (bitsandbytes' float32
// states under 4096 elements and its block constants, Adafactor's
// factors).
func TestStaticBoundReadsTheOptimizerTable(t *testing.T) {
	src := blocks{layers: 2, width: 256} // 2·(256·256+256) + 256·10+10 elements
	for _, c := range []struct {
		o     train.Optimizer
		p     train.Precision
		exact bool
		floor int64 // state bytes per element: the table's, for a large matrix on the device
	}{
		{train.Optimizer{Kind: train.SGD}, train.FP32, true, 0},
		{train.Optimizer{Kind: train.SGD, Momentum: 0.9}, train.FP32, true, 4},
		{train.Optimizer{Kind: train.Adam}, train.FP32, true, 8},
		{train.Optimizer{Kind: train.AdamW}, train.TrueBF16, true, 4},
		{train.Optimizer{Kind: train.Adam, AMSGrad: true}, train.FP32, true, 12},
		// two uint8 states
		{train.Optimizer{Kind: train.AdamW, Bits8: true}, train.TrueBF16, false, 2},
		// paged: in unified memory, not on the device
		{train.Optimizer{Kind: train.AdamW, Bits8: true, Paged: true}, train.TrueBF16, false, 0},
		// factored: no per-element state
		{train.Optimizer{Kind: train.Adafactor}, train.TrueBF16, false, 0},
	} {
		s := train.Setup{Precision: c.p, Optimizer: c.o, Steps: 2}
		r := request(src, 4, s, 1<<50)
		res, err := predict.Run(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		sum := res.Summary
		sim := sum.ParametersBytes + sum.GradientsBytes + sum.OptimizerStateBytes
		g, err := src.Build(models.Config{Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		n := g.ParamCount()
		pl := &planner{o: Options{Base: r}}
		bound := pl.staticBytes(c.p, train.Parallel{}, tensorOpt{}, c.o, paramCounts{params: n, trainable: n})
		pe := c.p.ParamDType().Size()
		if want := 2*pe*n + c.floor*n; bound != want {
			t.Errorf("%s, %s: static bound %d, want parameters and gradients %d and state %d", c.o.Name(), c.p, bound, 2*pe*n, c.floor*n)
		}
		if bound > sim || c.exact && bound != sim {
			t.Errorf("%s, %s: static bound %d, simulated parameters, gradients and state %d", c.o.Name(), c.p, bound, sim)
		}
	}
}

// The current setup is the job as given: its micro-batch (--batch) and
// accumulation, on every data-parallel rank. The global batch counts the
// samples of a step over all ranks: micro-batch 8 × accumulation 2 on 4
// DDP ranks is 64, of which a rank takes 16.
func TestCurrentSetupAndGlobalBatch(t *testing.T) {
	src := blocks{layers: 2, width: 256}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.SGD}, Accumulate: 2}
	ans, err := Run(context.Background(), Options{Base: request(src, 8, s, 1<<40), Levers: []Lever{Accumulate}})
	if err != nil {
		t.Fatal(err)
	}
	if b := ans.Base; b.MicroBatch != 8 || b.Accumulate != 2 || ans.GlobalBatch != 16 || ans.RankBatch != 16 || ans.Ranks != 1 {
		t.Errorf("one GPU: current %d × %d, global %d, a rank %d of %d", b.MicroBatch, b.Accumulate, ans.GlobalBatch, ans.RankBatch, ans.Ranks)
	}
	ddp := s
	ddp.Parallel = train.Parallel{Strategy: train.DDP, GPUs: 4}
	ans, err = Run(context.Background(), Options{Base: request(src, 8, ddp, 1<<40), Levers: []Lever{Accumulate}})
	if err != nil {
		t.Fatal(err)
	}
	if b := ans.Base; b.MicroBatch != 8 || b.Accumulate != 2 || ans.GlobalBatch != 64 || ans.RankBatch != 16 || ans.Ranks != 4 {
		t.Errorf("4 ranks: current %d × %d, global %d, a rank %d of %d", b.MicroBatch, b.Accumulate, ans.GlobalBatch, ans.RankBatch, ans.Ranks)
	}
	for _, p := range ans.Best {
		if p.MicroBatch*int64(p.Accumulate)*4 != 64 {
			t.Errorf("plan %s does not keep the global batch 64 over 4 ranks", p.Candidate)
		}
	}
	// a global batch the current setup does not make is refused, as one
	// that does not split over the ranks
	if _, err := Run(context.Background(), Options{Base: request(src, 8, ddp, 1<<40), GlobalBatch: 128}); err == nil || !strings.Contains(err.Error(), "makes 64 samples a step") {
		t.Errorf("global 128 from 8 × 2 × 4: %v", err)
	}
	if _, err := Run(context.Background(), Options{Base: request(src, 8, ddp, 1<<40), GlobalBatch: 66}); err == nil || !strings.Contains(err.Error(), "4 data-parallel ranks") {
		t.Errorf("global 66 over 4 ranks: %v", err)
	}
}

// When nothing that keeps the job's training fits, the optimizer-kind
// lever offers bitsandbytes' 8-bit Adam: on a stack of 4096² matrices,
// full Adam keeps 16 bytes an element (weight, gradient, two float32
// moments), 8-bit Adam 10 and a little (two uint8 states and one float32
// absmax a 2048-element block each, train.OptimizerStates). A device of
// 13 bytes an element fits the second alone; the plan says it changes how
// the model is optimised.
func TestOptimizerKindLever(t *testing.T) {
	src := blocks{layers: 4, width: 4096}
	s := train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.AdamW, Impl: train.Foreach}, Accumulate: 1, Steps: 2}
	g, err := src.Build(models.Config{Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	n := g.ParamCount()
	r := request(src, 4, s, 13*n)
	ans, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Accumulate, OptimizerKind}, Top: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 {
		t.Fatalf("no plan on %d bytes for %d elements", r.GPU.Capacity, n)
	}
	for _, p := range ans.Best {
		if p.Optim != "adamw8bit" && p.Optim != "paged_adamw8bit" && p.Optim != "adafactor" || !p.ChangesResults() {
			t.Errorf("plan %s: want an 8-bit, paged or Adafactor optimizer, marked as changing results", p.Candidate)
		}
		if !slices.ContainsFunc(p.Changes, func(c string) bool { return strings.Contains(c, "changes how it is optimised") }) {
			t.Errorf("plan %s does not say it changes how the model is optimised: %v", p.Candidate, p.Changes)
		}
	}
	// without the lever, nothing fits
	ans, err = Run(context.Background(), Options{Base: r, Levers: []Lever{Accumulate}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) != 0 {
		t.Errorf("without the optimizer-kind lever: %v", plansOf(ans))
	}
}

// LoRA and QLoRA are offered for a transformer (PEFT's default targets
// for GPT-2, c_attn) and ranked after every plan that trains what the job
// trains; on a device that holds the full fine-tuning, the plans that
// change nothing of what is trained come first.
func TestLoRALeverRanksLast(t *testing.T) {
	m, err := models.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	s := train.Setup{Precision: train.FP32, Optimizer: train.Optimizer{Kind: train.AdamW}, Accumulate: 1, Steps: 2}
	r := request(predict.Zoo{M: m}, 4, s, 1<<50)
	r.Config.Seq, r.Config.Layers = 64, 2
	base, err := predict.Run(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	// a device that holds the job as it is: every lever may move
	r.GPU = device(2 * base.DeviceTotal)
	ans, err := Run(context.Background(), Options{Base: r, Top: 50, Objective: Throughput})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 || ans.Best[0].ChangesResults() {
		t.Fatalf("plans %v: want one that trains as the job does first", plansOf(ans))
	}
	seenChange := false
	for _, p := range ans.Best {
		if seenChange && p.resultChanges() == 0 {
			t.Errorf("plan %s ranks after one that changes what is trained", p.Candidate)
		}
		seenChange = seenChange || p.ChangesResults()
	}
	// a device below the full fine-tuning's parameters, gradients and
	// AdamW state (16 bytes a parameter) but above LoRA's: only LoRA or
	// QLoRA plans fit
	g, err := r.Source.Build(r.Config)
	if err != nil {
		t.Fatal(err)
	}
	r.GPU = device(12 * g.ParamCount())
	ans, err = Run(context.Background(), Options{Base: r, Levers: []Lever{Accumulate, LoRA}, Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Best) == 0 {
		t.Fatalf("no LoRA plan on %d bytes", r.GPU.Capacity)
	}
	for _, p := range ans.Best {
		if p.Tune == FullTune || !slices.ContainsFunc(p.Changes, func(c string) bool {
			return strings.Contains(c, "on c_attn") && strings.Contains(c, "changes what is trained")
		}) {
			t.Errorf("plan %s: %v; want LoRA on c_attn, said to change what is trained", p.Candidate, p.Changes)
		}
	}
}

// Under parallelism the plans are ranked by step time with communication,
// and the fastest may change more. Four 4096-wide layers, Ψ ≈ 67.2M
// parameters, on 8 GPUs over a 16 GB/s PCIe link (9.6 GB/s at the ring's
// share), at a micro-batch of 8: the compute is about 3.2 GFLOP, a fraction
// of a millisecond, so the collectives decide. DDP all-reduces the float32
// gradients, 2·7/8 · 4Ψ bytes ≈ 49 ms; 16-mixed alone keeps them float32
// (autocast leaves parameters and gradients float32), and ZeRO-2 alone
// reduce-scatters 7/8 · 4Ψ and all-gathers 7/8 · 4Ψ, the same 49 ms; ZeRO-2
// under 16-mixed casts the module to float16 (DeepSpeed's fp16 mode), so
// both move 2Ψ bytes: about 24 ms, two changes faster than any one. (A
// compute capability 7 GPU: no bfloat16 to offer a one-change 16-bit
// plan.)
func TestPlansRankedByTimeUnderParallelism(t *testing.T) {
	src := blocks{layers: 4, width: 4096}
	s := train.Setup{Optimizer: train.Optimizer{Kind: train.Adam, Impl: train.Foreach}, Parallel: train.Parallel{Strategy: train.DDP, GPUs: 8}}
	r := request(src, 8, s, 1<<40)
	r.GPU.Major = 7
	r.GPU.Link = gpu.Link{Intra: 16e9, Host: 16e9, Source: "test"}
	ans, err := Run(context.Background(), Options{Base: r, Levers: []Lever{Sharding, Precision}, Top: 20})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Untimed || len(ans.Best) < 3 {
		t.Fatalf("untimed %v, %d plans: want plans ranked by time", ans.Untimed, len(ans.Best))
	}
	for i := 1; i < len(ans.Best); i++ {
		if ans.Best[i].Seconds < ans.Best[i-1].Seconds {
			t.Errorf("plan %d (%s, %.1f ms) after plan %d (%.1f ms)", i, describe(ans.Best[i].Candidate), 1e3*ans.Best[i].Seconds, i-1, 1e3*ans.Best[i-1].Seconds)
		}
	}
	best := ans.Best[0]
	if best.Parallel.Strategy == train.DDP || best.Precision != train.Mixed16 || len(best.Changes) < 2 {
		t.Errorf("fastest %s (%v), want a ZeRO stage under 16-mixed", describe(best.Candidate), best.Changes)
	}
	var slowerFewer bool
	for _, p := range ans.Best[1:] {
		slowerFewer = slowerFewer || len(p.Changes) < len(best.Changes) && p.Seconds > 1.5*best.Seconds
	}
	if !slowerFewer {
		t.Error("no plan with fewer changes and a slower step after the fastest")
	}
	// the same job on a GPU whose link is not known: by the fewest changes
	r.GPU.Link = gpu.Link{}
	ans, err = Run(context.Background(), Options{Base: r, Levers: []Lever{Sharding, Precision}, Top: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !ans.Untimed || len(ans.Best) == 0 || len(ans.Best[0].Changes) != 0 {
		t.Errorf("no link: untimed %v, first plan %v; want the job as it is first", ans.Untimed, ans.Best)
	}
}
