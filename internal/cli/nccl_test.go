package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// NCCL's buffers join the device total outside the allocator: one
// communicator for DDP, 64 channels × 5 connections × (Simple + LL 524,288
// + LL128 4,915,200 bytes) (profile/nccl.go). With NCCL_BUFFSIZE 1 MiB
// that is 320 × 6,488,064 = 2,076,180,480 bytes, by default 320 ×
// 9,633,792 = 3,082,813,440; on one GPU nothing.
func TestEstimateNCCLBuffers(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int64
	}{
		{[]string{"--gpus", "8", "--strategy", "ddp"}, 3082813440},
		{[]string{"--gpus", "8", "--strategy", "ddp", "--nccl-buffsize", "1MiB"}, 2076180480},
		{[]string{"--gpus", "16", "--strategy", "fsdp", "--sharding", "hybrid"}, 2 * 3082813440},
		{nil, 0},
	} {
		args := append([]string{"estimate", "mlp", "--batch", "32", "--optimizer", "sgd", "--json"}, c.args...)
		out, errs, code := run(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		var got EstimateJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatal(err)
		}
		if got.NCCLBuffersBytes != c.want {
			t.Errorf("%v: nccl_buffers_bytes %d, want %d", c.args, got.NCCLBuffersBytes, c.want)
		}
		if got.DeviceTotalBytes != got.PeakReservedBytes+got.ContextBytes || got.ContextBytes < c.want {
			t.Errorf("%v: device total %d, peak reserved %d + context %d (NCCL %d inside): want their sum", c.args, got.DeviceTotalBytes, got.PeakReservedBytes, got.ContextBytes, c.want)
		}
	}
	out, _, _ := run("estimate", "mlp", "--batch", "32", "--gpus", "8", "--strategy", "ddp")
	if !strings.Contains(out, "NCCL buffers") || !strings.Contains(out, "upper bound from NCCL's source constants") {
		t.Errorf("no NCCL buffers line or note in:\n%s", out)
	}
	for _, bad := range []string{"0", "-1MiB", "lots"} {
		if _, errs, code := run("estimate", "mlp", "--gpus", "2", "--nccl-buffsize", bad); code != 2 || !strings.Contains(errs, "--nccl-buffsize") {
			t.Errorf("--nccl-buffsize %s: exit %d, %q; want 2 naming the flag", bad, code, errs)
		}
	}
}
