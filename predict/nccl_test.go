package predict

import (
	"testing"

	"github.com/batchfit/batchfit/train"
)

// One communicator's bound is 64 channels × 5 connections × 9,633,792
// bytes (Simple 4 MiB + LL 512 KiB + LL128 4,915,200) = 3,082,813,440
// bytes; see profile.NCCLCommBytes.
func TestNCCLBytesByStrategy(t *testing.T) {
	const comm = 3082813440
	for _, c := range []struct {
		name   string
		p      train.Parallel
		tp, pp int64
		want   int64
	}{
		{"one GPU", train.Parallel{}, 1, 1, 0},
		{"DDP on 8 ranks: one communicator", train.Parallel{Strategy: train.DDP, GPUs: 8}, 1, 1, comm},
		{"FSDP full shard on 16: one", train.Parallel{Strategy: train.FSDP, GPUs: 16, NodeGPUs: 8, Sharding: train.FullShard}, 1, 1, comm},
		// intra-node group of 8 and inter-node group of 2
		{"FSDP hybrid on 2 nodes of 8: two", train.Parallel{Strategy: train.FSDP, GPUs: 16, NodeGPUs: 8, Sharding: train.HybridShard}, 1, 1, 2 * comm},
		// the replicate group has one rank and connects nothing
		{"FSDP hybrid on one node: one", train.Parallel{Strategy: train.FSDP, GPUs: 8, NodeGPUs: 8, Sharding: train.HybridShard}, 1, 1, comm},
		{"tensor and pipeline parallel groups add one each", train.Parallel{}, 2, 2, 2 * comm},
		{"DDP with tensor parallelism", train.Parallel{Strategy: train.DDP, GPUs: 4}, 2, 1, 2 * comm},
	} {
		if got := NCCLBytes(c.p, c.tp, c.pp, 0); got != c.want {
			t.Errorf("%s: NCCLBytes = %d, want %d", c.name, got, c.want)
		}
	}
}
