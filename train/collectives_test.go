package train

import (
	"slices"
	"testing"
)

// The collectives the step-time model times are the buffers the
// simulation allocates: FSDP's units gather what the trace's all_gather
// allocations hold, in the same order (the root first, then each block),
// and DDP's buckets are the reducer's rebuilt ones (TestDDPBuckets works
// them out: 4,239,400 B, then the rest of the 15,851,560 B).
func TestCollectivesMatchTrace(t *testing.T) {
	const n = 4
	g := mlp(t, 16, 784, 1024, 4, 10)
	s, err := Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: FSDP, GPUs: n}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	tr, _, err := Simulate(g, s)
	if err != nil {
		t.Fatal(err)
	}
	c := Collectives(g, s, nil, 1, false, 1)
	sizes, _ := allGathers(tr)
	// units: the four blocks, then the root; forward gathers the root
	// first (its pre-forward hook)
	unit := func(out, in int64) int64 { return 4 * n * (ceilDiv(out*in, n) + ceilDiv(out, n)) }
	want := []int64{unit(1024, 784), unit(1024, 1024), unit(1024, 1024), unit(1024, 1024), unit(10, 1024)}
	var got []int64
	for _, u := range c.Units {
		got = append(got, u.Gather)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("unit gathers %v, want %v", got, want)
	}
	fwd := append([]int64{want[4]}, want[:4]...)
	if len(sizes) < len(fwd) || !slices.Equal(sizes[:len(fwd)], fwd) {
		t.Errorf("the trace's first all-gathers %v, want %v", sizes[:min(len(sizes), len(fwd))], fwd)
	}
	for i, u := range c.Units {
		if u.Reduce != u.Gather {
			t.Errorf("unit %d: reduce-scatter %d, want the flat parameter's %d", i, u.Reduce, u.Gather)
		}
	}
	// NO_SHARD: one all-reduce per unit, the last block first, the root
	// (the head's 10×1024 + 10 float32) last
	s, _ = Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: FSDP, Sharding: NoShard, GPUs: 4}}.Normalize()
	c = Collectives(g, s, nil, 1, false, 1)
	block := int64(4 * (1024*1024 + 1024))
	if wantB := []int64{block, block, block, 4 * (784*1024 + 1024), 4 * (10*1024 + 10)}; !slices.Equal(c.Buckets, wantB) || c.Units != nil {
		t.Errorf("no-shard buckets %v (units %v), want %v", c.Buckets, c.Units, wantB)
	}
	// DDP
	s, _ = Setup{Optimizer: Optimizer{Kind: SGD}, Parallel: Parallel{Strategy: DDP, GPUs: 2}}.Normalize()
	c = Collectives(g, s, nil, 1, false, 1)
	all := int64(4 * 3_962_890)
	if !slices.Equal(c.Buckets, []int64{4_239_400, all - 4_239_400}) || c.Grads != all {
		t.Errorf("buckets %v, gradients %d; want [4239400 %d] and %d", c.Buckets, c.Grads, all-4_239_400, all)
	}
}
