package train

import "testing"

// The staging buffer and semaphores of CUDA's row sum, worked by hand
// through Reduce.cuh's setReduceConfig on 132 SMs of 2048 threads (an H200)
// and held to the sizes its recordings show (testdata/measured/snapshots).
// For [4096, 1024] float: output_vec_size 4, block 32×4 (128 threads),
// grid.x = 1024/4/32 = 8, 1024 values per thread after the block's split,
// ctas_per_output = max(min(ceil(2112/8), ceil(1024/16)), ceil(1024/256))
// = 64: 4 × 1024 × 64 × 32 × 4 bytes and 4 × 8.
func TestSumRowsScratch(t *testing.T) {
	for _, c := range []struct {
		name              string
		rows, cols        int64
		buffer, sem       int64
		sms, threadsPerSM int64
	}{
		{"mlp b4096 hidden bias", 4096, 1024, 33554432, 32, 132, 2048},          // recorded: 32 MiB and 32 B
		{"vit b16 fp32 out_proj bias", 16 * 197, 768, 19660800, 24, 132, 2048},  // 18.75 MiB, 24 B
		{"vit b16 fp32 mlp.0 bias", 16 * 197, 3072, 78643200, 96, 132, 2048},    // 75 MiB, 96 B
		{"vit b16 fp32 in_proj bias", 16 * 197, 2304, 58982400, 72, 132, 2048},  // 56.25 MiB, 72 B
		{"vit b64 bf16 in_proj bias", 64 * 197, 2304, 139198464, 72, 132, 2048}, // 132.75 MiB, 72 B
		{"vit b64 bf16 mlp.0 bias", 64 * 197, 3072, 138412032, 96, 132, 2048},   // 132 MiB, 96 B
		{"mlp b64: one block per output", 64, 1024, 0, 0, 132, 2048},            // recorded: none
		{"vit head bias, 16 rows", 16, 1000, 0, 0, 132, 2048},                   // recorded: none
		{"one row", 1, 4096, 0, 0, 132, 2048},                                   // no reduction
		// on 108 SMs (an A100) the target grid is 1728: ctas =
		// min(ceil(1728/8), 64) = 64, the same buffer
		{"mlp b4096 on 108 SMs", 4096, 1024, 33554432, 32, 108, 2048},
		// 1536 threads per SM, 84 SMs: target 1008, ctas =
		// min(ceil(1008/8)=126, 64) = 64
		{"mlp b4096 on an RTX A6000", 4096, 1024, 33554432, 32, 84, 1536},
		// 1000 outputs: vec 4 (1000 % 4 = 0), dim0 250 → 128, block
		// 32×4, grid.x = ceil(250/32) = 8, vpt = 2048/4 = 512, ctas =
		// max(min(264, 32), 2) = 32: 4 × 1000 × 32 × 128
		{"2048 rows of 1000", 2048, 1000, 16384000, 32, 132, 2048},
	} {
		buf, sem := sumRowsScratch(c.rows, c.cols, 4, c.sms, c.threadsPerSM)
		if buf != c.buffer || sem != c.sem {
			t.Errorf("%s: buffer %d, semaphores %d; want %d, %d", c.name, buf, sem, c.buffer, c.sem)
		}
	}
}

func TestLastPow2(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{{0, 1}, {1, 1}, {2, 2}, {3, 2}, {192, 128}, {1024, 1024}, {3152, 2048}} {
		if got := lastPow2(c.n); got != c.want {
			t.Errorf("lastPow2(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}
