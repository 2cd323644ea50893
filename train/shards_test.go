package train

import "testing"

// What each strategy partitions, from the papers and the libraries: ZeRO
// stage 1 the optimizer state, stage 2 the gradients too, stage 3 the
// parameters as well (Rajbhandari et al. 2020, §5); FSDP's FULL_SHARD,
// SHARD_GRAD_OP and HYBRID_SHARD keep only the local shard of the flat
// parameter, of its gradient and of the state made for it, NO_SHARD
// nothing, as DDP.
func TestShards(t *testing.T) {
	cases := []struct {
		p    Parallel
		want Sharded
	}{
		{Parallel{Strategy: Single, GPUs: 1}, Sharded{}},
		{Parallel{Strategy: DDP, GPUs: 8}, Sharded{}},
		{Parallel{Strategy: ZeRO1, GPUs: 8}, Sharded{State: true}},
		{Parallel{Strategy: ZeRO2, GPUs: 8}, Sharded{Grads: true, State: true}},
		{Parallel{Strategy: ZeRO3, GPUs: 8}, Sharded{Params: true, Grads: true, State: true}},
		{Parallel{Strategy: FSDP, Sharding: FullShard, GPUs: 8}, Sharded{Params: true, Grads: true, State: true}},
		{Parallel{Strategy: FSDP, Sharding: ShardGradOp, GPUs: 8}, Sharded{Params: true, Grads: true, State: true}},
		{Parallel{Strategy: FSDP, Sharding: HybridShard, GPUs: 16, NodeGPUs: 8}, Sharded{Params: true, Grads: true, State: true}},
		{Parallel{Strategy: FSDP, Sharding: NoShard, GPUs: 8}, Sharded{}},
		{Parallel{Strategy: FSDP2, Sharding: FullShard, GPUs: 8}, Sharded{Params: true, Grads: true, State: true}},
	}
	for _, c := range cases {
		if got := c.p.Shards(); got != c.want {
			t.Errorf("%s: Shards() = %+v, want %+v", c.p.Name(), got, c.want)
		}
	}
}

// Only torch.optim's optimizers choose among for-loop, foreach and fused.
func TestSingleImplementation(t *testing.T) {
	cases := []struct {
		o      Optimizer
		impl   Impl
		single bool
	}{
		{Optimizer{Kind: AdamW, Impl: Fused}, ImplDefault, false},
		{Optimizer{Kind: SGD, Impl: Foreach}, ImplDefault, false},
		{Optimizer{Kind: Adafactor}, ForLoop, true},
		{Optimizer{Kind: AdamW, Bits8: true}, ImplDefault, true},
		{Optimizer{Kind: Adam, Bits8: true, Paged: true}, ImplDefault, true},
		{Optimizer{Kind: AdamW, Paged: true}, ImplDefault, true},
	}
	for _, c := range cases {
		impl, single := SingleImplementation(c.o)
		if impl != c.impl || single != c.single {
			t.Errorf("%s: SingleImplementation = %q, %v; want %q, %v", c.o.Name(), impl, single, c.impl, c.single)
		}
	}
}
