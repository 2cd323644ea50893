package train

// Sharded is which of a rank's model states a data-parallel strategy
// partitions over its ShardRanks: what a rank holds of each at rest is
// then its share, the rest is whole on every rank.
type Sharded struct {
	Params, Grads, State bool
}

// Shards says which model states p partitions, as the simulator lays them
// out: the parameters where they are gathered unit by unit (FSDP's
// sharding strategies but NO_SHARD, ZeRO-3), the gradients where they are
// reduce-scattered to a partition (those, and ZeRO-2), and the optimizer
// state wherever the parameters are sharded (it is made for the local
// shard) or DeepSpeed steps a flat fp32 partition (every ZeRO stage).
// DDP and one GPU shard nothing.
func (p Parallel) Shards() Sharded {
	return Sharded{Params: p.shardsParams(), Grads: p.shardsGrads(), State: p.shardsParams() || p.IsZeRO()}
}
