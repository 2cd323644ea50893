package profile

import "testing"

// The expected bytes are worked from NCCL's constants (device.h, init.cc):
// Simple 1<<22 = 4,194,304; LL 8 lines × 512 threads × 8 steps × 16 bytes
// = 524,288; LL128 120 × 640 × 8 × 8 = 4,915,200; one connection
// 9,633,792 bytes; a communicator 64 channels × (1 ring + 3 children + 1
// parent) connections = 320 connections.
func TestNCCLBytes(t *testing.T) {
	if NCCLLLBuffSize != 524288 || NCCLLL128BuffSize != 4915200 || NCCLSimpleBuffSize != 4194304 {
		t.Fatalf("buffer sizes %d %d %d, want 524288 4915200 4194304", NCCLLLBuffSize, NCCLLL128BuffSize, NCCLSimpleBuffSize)
	}
	for _, c := range []struct {
		name   string
		ranks  int
		simple int64
		want   int64
	}{
		{"one rank connects nothing", 1, 0, 0},
		{"8 ranks, default", 8, 0, 320 * 9633792},                      // 3,082,813,440
		{"2 ranks, default", 2, 0, 3082813440},                         // the bound does not depend on the ranks
		{"NCCL_BUFFSIZE 1 MiB", 8, 1 << 20, 320 * (1048576 + 5439488)}, // 2,076,180,480
	} {
		if got := NCCLCommBytes(c.ranks, c.simple); got != c.want {
			t.Errorf("%s: NCCLCommBytes(%d, %d) = %d, want %d", c.name, c.ranks, c.simple, got, c.want)
		}
	}
}
