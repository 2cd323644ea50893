package predict

import (
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/train"
)

// NCCLBytes bounds the device memory NCCL's communicators hold on one rank,
// outside PyTorch's allocator: one communicator per process group that
// runs collectives, each bounded by profile.NCCLCommBytes. DDP, FSDP and
// ZeRO reduce over one group of the data-parallel ranks; FSDP's
// HYBRID_SHARD over two, one within a node (the shard group) and one
// across nodes (the replicate group; torch.distributed.fsdp's
// _init_intra_and_inter_node_groups); a tensor- or pipeline-parallel
// group adds one each. simple is NCCL_BUFFSIZE (0: NCCL's default).
func NCCLBytes(p train.Parallel, tp, pp, simple int64) int64 {
	var total int64
	if p.On() {
		if p.IsFSDP() && p.Sharding == train.HybridShard {
			intra := p.ShardRanks()
			total += profile.NCCLCommBytes(intra, simple)
			total += profile.NCCLCommBytes(p.GPUs/max(intra, 1), simple)
		} else {
			total += profile.NCCLCommBytes(p.GPUs, simple)
		}
	}
	if tp > 1 {
		total += profile.NCCLCommBytes(int(tp), simple)
	}
	if pp > 1 {
		total += profile.NCCLCommBytes(int(pp), simple)
	}
	return total
}
