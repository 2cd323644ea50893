package cost

import (
	"math"
	"testing"

	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/train"
)

// nvlink is an H100 SXM's link: 450 GB/s each way × 0.8 = 360 GB/s of
// bus bandwidth, 3.4 µs a ring step.
var nvlink = gpu.Link{Intra: 450e9, NVLink: true, Inter: 50e9}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9+1e-6*math.Abs(b) }

// The ring costs, worked from NCCL's formulas: S = 360 MB over a bus of
// 360 GB/s is 1 ms of transfer.
func TestRingSeconds(t *testing.T) {
	const S, bw, hop = 360e6, 360e9, 3.4e-6
	for _, c := range []struct {
		k    train.CollKind
		n    int
		want float64
	}{
		// all-reduce on 4: 2·3/4 · 1 ms + 8.4 µs + 6 steps × 3.4 µs
		{train.AllReduce, 4, 1.5e-3 + 8.4e-6 + 6*3.4e-6},
		// all-reduce on 8: 2·7/8 · 1 ms + 8.4 µs + 14 × 3.4 µs
		{train.AllReduce, 8, 1.75e-3 + 8.4e-6 + 14*3.4e-6},
		// all-gather on 8: 7/8 ms + 8.4 µs + 7 × 3.4 µs
		{train.AllGather, 8, 0.875e-3 + 8.4e-6 + 7*3.4e-6},
		// reduce-scatter on 4: 3/4 ms + 8.4 µs + 3 × 3.4 µs
		{train.ReduceScatter, 4, 0.75e-3 + 8.4e-6 + 3*3.4e-6},
		{train.AllReduce, 1, 0},
	} {
		if got := RingSeconds(c.k, S, c.n, bw, hop); !near(got, c.want) {
			t.Errorf("%s of 360 MB on %d: %g s, want %g", c.k, c.n, got, c.want)
		}
	}
}

func compute(fwd, bwd float64) Estimate {
	var e Estimate
	e.By[Forward], e.By[Backward] = fwd, bwd
	return e
}

// A small model: four blocks of 1M float32 parameters (4 MB each) and a
// root of 2M (8 MB): 24 MB of gradients in all.
func smallComms(r int) train.Comms {
	c := train.Comms{Ranks: r, Replicas: 1, Grads: 24e6, Params: 24e6}
	for i := 0; i < 4; i++ {
		c.Units = append(c.Units, train.UnitComm{Name: "block", Gather: 4e6, Reduce: 4e6, Weight: 1e6})
	}
	c.Units = append(c.Units, train.UnitComm{Name: "root", Gather: 8e6, Reduce: 8e6, Weight: 2e6, Root: true})
	return c
}

func TestDDPComm(t *testing.T) {
	// buckets in firing order: 1 MiB first, then 25 MiB caps; here two
	// buckets of 8 MB and 16 MB
	c := train.Comms{Buckets: []int64{8e6, 16e6}, Grads: 24e6}
	s := train.Setup{Accumulate: 1, Parallel: train.Parallel{Strategy: train.DDP, GPUs: 8, NodeGPUs: 8}}
	ar := func(b float64) float64 { return 2*7.0/8*b/360e9 + 8.4e-6 + 14*3.4e-6 }
	for _, bwd := range []float64{1e-6, 1e-4, 1} {
		got, err := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(bwd/2, bwd)})
		if err != nil {
			t.Fatal(err)
		}
		total := ar(8e6) + ar(16e6)
		if !near(got.Data, total) {
			t.Errorf("backward %g s: all-reduces %g s, want %g", bwd, got.Data, total)
		}
		// exposed lies between the last bucket (ready only when
		// backward ends) and everything
		if got.DataExposed > got.Data+1e-12 || got.DataExposed < ar(16e6)-1e-12 {
			t.Errorf("backward %g s: exposed %g s, want within [%g, %g]", bwd, got.DataExposed, ar(16e6), got.Data)
		}
		// the first bucket (a third of the gradients) is ready at a
		// third of backward; with a long backward it is hidden and only
		// the last one shows
		if bwd == 1 && !near(got.DataExposed, ar(16e6)) {
			t.Errorf("long backward: exposed %g s, want the last bucket's %g", got.DataExposed, ar(16e6))
		}
		// a backward shorter than the first all-reduce hides nothing
		// (the first is ready a third of the way in, then the two run
		// back to back: total + bwd/3 − bwd)
		if want := total - 2*bwd/3; bwd == 1e-6 && !near(got.DataExposed, want) {
			t.Errorf("short backward: exposed %g s, want %g", got.DataExposed, want)
		}
	}
}

// FSDP's full shard on 4 ranks: the all-gathers move 3/4 of each unit
// forward and again backward (the root not resharded), the
// reduce-scatters 3/4 of each: forward 24 MB, backward 16 MB gathered, 24
// MB reduced. With compute far longer than any collective, what shows is
// what nothing can hide: in forward the root's gather and the first
// block's (the compute waits for both), in backward the first block's
// reduce-scatter and the root's, which start when backward ends (the
// root's embedding gradients come last, and their backward is taken as
// the head's, before the blocks').
func TestFSDPComm(t *testing.T) {
	c := smallComms(4)
	s := train.Setup{Accumulate: 2, Parallel: train.Parallel{Strategy: train.FSDP, Sharding: train.FullShard, GPUs: 4, NodeGPUs: 8}}
	lat := 8.4e-6 + 3*3.4e-6
	ag := func(b float64) float64 { return 0.75*b/360e9 + lat }
	// forward gathers, backward gathers, reduce-scatters (which cost as
	// much as a gather of the same bytes)
	total := (4*ag(4e6) + ag(8e6)) + 4*ag(4e6) + (4*ag(4e6) + ag(8e6))
	got, err := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(2, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.Data, 2*total) {
		t.Errorf("two micro-batches: %g s of collectives, want %g", got.Data, 2*total)
	}
	if want := 2 * (ag(8e6) + ag(4e6) + ag(4e6) + ag(8e6)); !near(got.DataExposed, want) {
		t.Errorf("exposed %g s, want %g", got.DataExposed, want)
	}
	if !near(got.LastBucket, ag(8e6)) || got.DataExposed < got.LastBucket {
		t.Errorf("last %g s, exposed %g: want the root's reduce-scatter %g, and no more than exposed", got.LastBucket, got.DataExposed, ag(8e6))
	}
	// SHARD_GRAD_OP keeps the gathered parameters to backward: no
	// second gather
	s.Parallel.Sharding = train.ShardGradOp
	g2, _ := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(2, 4)})
	if want := 2 * (total - 4*ag(4e6)); !near(g2.Data, want) {
		t.Errorf("grad-op: %g s, want %g", g2.Data, want)
	}
	// with no compute to hide under, everything is exposed
	s.Parallel.Sharding = train.FullShard
	g3, _ := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(0, 0)})
	if !near(g3.DataExposed, g3.Data) {
		t.Errorf("no compute: exposed %g of %g", g3.DataExposed, g3.Data)
	}
}

// ZeRO-2 on 8 ranks, defaults: the 24 MB of gradients reduce-scattered
// (one bucket: 5e8 elements hold them) every micro-batch, the 24 MB of
// parameters all-gathered after the step, all on the compute stream.
// ZeRO-1 reduces once per step.
func TestZeROComm(t *testing.T) {
	c := train.Comms{Grads: 24e6, Params: 24e6, ReduceBucket: 1e9, GatherBucket: 1e9, Ranks: 8, Replicas: 1}
	one := 7.0/8*24e6/360e9 + 8.4e-6 + 7*3.4e-6
	for _, z := range []struct {
		s    train.Strategy
		want float64
	}{{train.ZeRO2, 3*one + one}, {train.ZeRO1, one + one}} {
		s := train.Setup{Accumulate: 3, Parallel: train.Parallel{Strategy: z.s, GPUs: 8, NodeGPUs: 8}}
		got, err := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(1, 2)})
		if err != nil {
			t.Fatal(err)
		}
		if !near(got.Data, z.want) || !near(got.DataExposed, z.want) {
			t.Errorf("%s: %g s, exposed %g, want %g both", z.s, got.Data, got.DataExposed, z.want)
		}
	}
}

// Tensor parallelism of 4 without sequence parallelism: per block one
// all-reduce forward and one backward of the 8 MB residual stream, on the
// critical path, over NVLink (4 ranks fit a node of 8); with a pipeline
// of 4 stages over 8 micro-batches the bubble is 3 micro-batches' time:
// (p−1)/(m+p−1) = 3/11 of the step. The pipeline spans 16 GPUs, so its
// sends go over the network: 50 GB/s × 0.8, 14 µs a hop.
func TestTensorAndPipelineComm(t *testing.T) {
	c := train.Comms{Model: []train.ModelComm{
		{Fwd: train.AllReduce, FwdOn: true, Bytes: 8e6, Region: -1},
		{Back: train.AllReduce, BackOn: true, Bytes: 8e6, Region: -1},
	}, Boundary: 8e6}
	s := train.Setup{Accumulate: 8, Parallel: train.Parallel{Strategy: train.Single, GPUs: 1, NodeGPUs: 8}}
	ar := 2*3.0/4*8e6/360e9 + 8.4e-6 + 6*3.4e-6
	send := 8.4e-6 + 14e-6 + 8e6/40e9
	got, err := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, TP: 4, PP: 4, Compute: compute(8*0.01, 8*0.02)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.Tensor, 8*2*ar) {
		t.Errorf("tensor-parallel %g s, want %g", got.Tensor, 8*2*ar)
	}
	if !near(got.Pipeline, 2*8*send) {
		t.Errorf("pipeline sends %g s, want %g", got.Pipeline, 2*8*send)
	}
	perMicro := 0.03 + 2*ar + 2*send
	if !near(got.Bubble, 3*perMicro) {
		t.Errorf("bubble %g s, want %g", got.Bubble, 3*perMicro)
	}
	step := compute(8*0.01, 8*0.02)
	step.Seconds = 0.24
	if w := step.WithComm(got); !near(w.Seconds, 0.24+got.Tensor+got.Pipeline+got.Bubble) {
		t.Errorf("step %g s", w.Seconds)
	}
	if frac := got.Bubble / (8*perMicro + got.Bubble); !near(frac, 3.0/11) {
		t.Errorf("bubble fraction %g, want 3/11", frac)
	}
}

// Ranks beyond a node run over the network.
func TestLinkChoice(t *testing.T) {
	in := CommInput{Link: nvlink, Setup: train.Setup{Parallel: train.Parallel{Strategy: train.DDP, GPUs: 16, NodeGPUs: 8}}, TP: 1, PP: 1}
	dp, mp, _, _, _ := links(in)
	if !near(dp.bw, 40e9) || !near(mp.bw, 360e9) {
		t.Errorf("16 GPUs: data-parallel %g B/s, model %g; want 50 GB/s × 0.8 and NVLink's 360 GB/s", dp.bw, mp.bw)
	}
	if _, err := Communication(CommInput{Setup: in.Setup}); err == nil {
		t.Error("no error for a GPU without a known link")
	}
}

// Sharded optimizer state: each rank steps its shard, 1/8 of the step on
// 8 ranks under ZeRO or FSDP's full shard; DDP and offload keep it whole
// (offload's step runs on the host, untimed: the device's stands in).
func TestOptimizerShare(t *testing.T) {
	e := compute(1, 2)
	e.By[Optimizer] = 0.8
	e.Seconds = 3.8
	for _, c := range []struct {
		p    train.Parallel
		want float64
	}{
		{train.Parallel{Strategy: train.ZeRO1, GPUs: 8, NodeGPUs: 8}, 0.1},
		{train.Parallel{Strategy: train.FSDP, Sharding: train.FullShard, GPUs: 8, NodeGPUs: 8}, 0.1},
		{train.Parallel{Strategy: train.FSDP, Sharding: train.HybridShard, GPUs: 16, NodeGPUs: 4}, 0.2},
		{train.Parallel{Strategy: train.DDP, GPUs: 8, NodeGPUs: 8}, 0.8},
		{train.Parallel{Strategy: train.FSDP, Sharding: train.FullShard, GPUs: 8, NodeGPUs: 8, Offload: true}, 0.8},
	} {
		got, err := Communication(CommInput{Comms: train.Comms{Ranks: c.p.ShardRanks(), Replicas: 1}, Setup: train.Setup{Accumulate: 1, Parallel: c.p}, Link: nvlink, Compute: e})
		if err != nil {
			t.Fatal(err)
		}
		w := e.WithComm(got)
		if !near(w.By[Optimizer], c.want) || !near(w.Seconds, 3.8-0.8+c.want+got.Exposed+got.Bubble) {
			t.Errorf("%s: optimizer %g s, step %g; want %g", c.p, w.By[Optimizer], w.Seconds, c.want)
		}
	}
}

// HYBRID_SHARD on 16 GPUs, nodes of 8: the gathers and reduce-scatters
// stay within the node (NVLink, 7/8 of each unit), and each reduced shard
// (an eighth of the unit) is all-reduced with the other node's over the
// network: 2·1/2 · S/8 at 40 GB/s, 14 µs a step, 2 steps.
func TestHybridShardComm(t *testing.T) {
	c := smallComms(8)
	c.Replicas = 2
	s := train.Setup{Accumulate: 1, Parallel: train.Parallel{Strategy: train.FSDP, Sharding: train.HybridShard, GPUs: 16, NodeGPUs: 8}}
	ag := func(b float64) float64 { return 7.0/8*b/360e9 + 8.4e-6 + 7*3.4e-6 }
	ar := func(b float64) float64 { return b/8/40e9 + 8.4e-6 + 2*14e-6 }
	want := (4*ag(4e6) + ag(8e6)) + 4*ag(4e6) + (4*ag(4e6) + ag(8e6)) + 4*ar(4e6) + ar(8e6)
	got, err := Communication(CommInput{Comms: c, Setup: s, Link: nvlink, Compute: compute(2, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(got.Data, want) {
		t.Errorf("hybrid: %g s, want %g", got.Data, want)
	}
}

// TestAllReduceMatchesNCCLTests holds the ring's time for an all-reduce of
// 8 GiB (nccl-tests' largest size, all_reduce_perf -e 8G) over the GPUs
// of one node to the bus bandwidth nccl-tests reports there (Alaya NeW,
// "NCCL-tests in practice", 2026: busbw at large sizes). nccl-tests
// defines busbw = algbw · 2(n−1)/n with algbw = S / t, so the published
// time is t = S · 2(n−1)/n / busbw; the middle of each published range is
// taken, and the prediction must be within 20 % of it.
func TestAllReduceMatchesNCCLTests(t *testing.T) {
	const S = 8 << 30
	for _, c := range []struct {
		system   string
		gpu      string
		n        int
		lo, hi   float64 // published busbw, GB/s
		wantLong bool    // a known miss: listed until the model holds it
	}{
		// ring over NVLink 3: 300 GB/s each way × 0.8 = 240 GB/s, in
		// the published 230–250
		{"8x A100 SXM4", "a100-80gb", 8, 230, 250, false},
		// ring over PCIe Gen5 x16: 64 GB/s × 0.6 = 38.4 GB/s, in 35–45
		{"8x H100 PCIe", "h100-pcie", 8, 35, 45, false},
		// NVSwitch 3 reduces in the switch: NCCL runs NVLS, 476 GB/s
		// by its model (TestNVLSSeconds), in the published 460–480; the
		// ring's 360 erred long by 31 % and the row was a known miss
		{"8x H100 SXM5", "h100-80gb", 8, 460, 480, false},
	} {
		g, err := gpu.Lookup(c.gpu)
		if err != nil {
			t.Fatal(err)
		}
		in := CommInput{Setup: train.Setup{Parallel: train.Parallel{GPUs: c.n, NodeGPUs: 8}}, Link: g.Link}
		dp, _, _, _, _ := links(in)
		got := dp.ring(train.AllReduce, S, c.n)
		f := 2 * float64(c.n-1) / float64(c.n)
		pub := S * f / ((c.lo + c.hi) / 2 * 1e9)
		e := (got - pub) / pub
		t.Logf("%s: all-reduce of 8 GiB %.1f ms predicted, %.1f ms published (busbw %.0f–%.0f GB/s): %+.1f %%", c.system, 1e3*got, 1e3*pub, c.lo, c.hi, 100*e)
		switch {
		case c.wantLong && e <= 0.2:
			t.Errorf("%s: %+.1f %%, listed as a known miss: take it off the list", c.system, 100*e)
		case !c.wantLong && math.Abs(e) > 0.2:
			t.Errorf("%s: all-reduce %+.1f %% off the published bus bandwidth, more than 20 %%", c.system, 100*e)
		}
	}
}

// NVLS by NCCL's model (v2.28.3-1), worked by hand for 8 H100 SXM on one
// NVSwitch. Each GPU's switch link is 18 NVLinks × 20.6 GB/s = 370.8 GB/s
// (ncclTopoNVLinkBw). The search starts at 50 GB/s (60 × 8 channels passes
// 370.8 · 8/7 = 423.8) and takes the first speed whose 8 channels fit, a
// GPU's link carrying 9 of them: 50 × 9 = 450 does not, 40 × 9 = 360 does:
// bwIntra 40. The second pass raises bwInter to 60, the array's top (still
// below 2 × 40). An all-reduce's channel: 40 × 0.85 × 7/8 × 2 = 59.5 GB/s,
// under 60: bus bandwidth 8 × 59.5 = 476 GB/s; 8 GiB take
// 25 µs + 1.75 · 8 GiB / 476 GB/s = 31.606 ms, against the ring's
// 8.4 + 14 × 3.4 µs + 1.75 · 8 GiB / 360 GB/s = 41.811 ms: NVLS. A
// reduce-scatter's channel is 40 × 0.85 × 7/8 × 7/8 = 26.03 GB/s, 208.25
// GB/s in all, used as the algorithm bandwidth: 360 MB take 1.754 ms by
// NVLS against the ring's 0.907 ms, so the ring stays.
func TestNVLSSeconds(t *testing.T) {
	g, err := gpu.Lookup("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	const S = 8 << 30
	if bw := NVLSBusBandwidth(g.Link, train.AllReduce, 8); !near(bw, 476e9) {
		t.Errorf("all-reduce bus bandwidth %g, want 476 GB/s", bw)
	}
	want := 25e-6 + 1.75*S/476e9
	if got := NVLSSeconds(g.Link, train.AllReduce, S, 8); !near(got, want) {
		t.Errorf("NVLS all-reduce of 8 GiB %g s, want %g", got, want)
	}
	in := CommInput{Setup: train.Setup{Parallel: train.Parallel{GPUs: 8, NodeGPUs: 8}}, Link: g.Link}
	dp, _, _, _, _ := links(in)
	if got := dp.ring(train.AllReduce, S, 8); !near(got, want) {
		t.Errorf("all-reduce of 8 GiB on 8 H100 SXM %g s, want NVLS's %g", got, want)
	}
	if bw := NVLSBusBandwidth(g.Link, train.ReduceScatter, 8); !near(bw, 208.25e9) {
		t.Errorf("reduce-scatter bandwidth %g, want 208.25 GB/s", bw)
	}
	ring := 0.875*360e6/360e9 + 8.4e-6 + 7*3.4e-6
	if got := dp.ring(train.ReduceScatter, 360e6, 8); !near(got, ring) {
		t.Errorf("reduce-scatter of 360 MB %g s, want the ring's %g", got, ring)
	}
	// 4 GPUs: 60 GB/s fits 5 × 60 = 300 ≤ 370.8, bwInter stays 60 (the
	// top), and 60 × 0.85 × 3/4 × 2 = 76.5 is cut to 60: 240 GB/s, under
	// the ring's 360, so an all-reduce of 8 MB stays on the ring
	// (62.1 µs against 75 µs)
	if bw := NVLSBusBandwidth(g.Link, train.AllReduce, 4); !near(bw, 240e9) {
		t.Errorf("4 GPUs: %g, want 240 GB/s", bw)
	}
	ring4 := 1.5*8e6/360e9 + 8.4e-6 + 6*3.4e-6
	if got := dp.ring(train.AllReduce, 8e6, 4); !near(got, ring4) {
		t.Errorf("4 GPUs, 8 MB: %g s, want the ring's %g", got, ring4)
	}
	// B200: 18 × 40.1 = 721.8 GB/s, 80 × 9 = 720 fits, bwInter 90;
	// 80 × 0.74 × 7/8 × 2 = 103.6 is cut to 90: 720 GB/s
	b, _ := gpu.Lookup("b200")
	if bw := NVLSBusBandwidth(b.Link, train.AllReduce, 8); !near(bw, 720e9) {
		t.Errorf("8 B200: %g, want 720 GB/s", bw)
	}
	// none on two GPUs (ncclNvlsInit), before Hopper, over PCIe, or
	// across nodes
	a, _ := gpu.Lookup("a100-80gb")
	p, _ := gpu.Lookup("h100-pcie")
	for _, c := range []struct {
		name string
		l    gpu.Link
		n    int
	}{{"2 H100 SXM", g.Link, 2}, {"8 A100", a.Link, 8}, {"8 H100 PCIe", p.Link, 8}} {
		if v := NVLSSeconds(c.l, train.AllReduce, S, c.n); v != 0 {
			t.Errorf("%s: NVLS %g s, want none", c.name, v)
		}
	}
	in.Setup.Parallel.GPUs = 16
	if dp, _, _, _, _ := links(in); dp.nvls != nil {
		t.Error("16 GPUs over two nodes: NVLS taken across the network")
	}
}
