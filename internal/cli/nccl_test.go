package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// NCCL's buffers join the device total outside the allocator: one
// communicator for DDP, 64 channels × 5 connections × (Simple + LL 524,288
// + LL128 4,915,200 bytes) (profile/nccl.go). With NCCL_BUFFSIZE 1 MiB
// that is 320 × 6,488,064 = 2,076,180,480 bytes, by default 320 ×
// 9,633,792 = 3,082,813,440; on one GPU nothing.
func TestEstimateNCCLBuffers(t *testing.T) {
	t.Parallel()
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
		var got report.EstimateJSON
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

// An NCCL_BUFFSIZE that leaves nothing of the device is refused as NCCL's
// buffers, never as a CUDA context. One communicator holds 64 channels ×
// 5 connections × (Simple + LL 524,288 + LL128 4,915,200 bytes):
// at 1 GiB, 320 × 1,079,181,312 = 345,338,019,840 bytes = 321.62 GiB, more
// than an H100's 79.11 GiB; at 128 MiB, 320 × 139,657,216 = 44,690,309,120
// bytes (41.62 GiB) each, and HYBRID_SHARD's two communicators 83.24 GiB.
// 1 TiB is past NCCL's int. The context (500 MiB) is named apart.
func TestNCCLBuffsizeErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--gpus", "8", "--strategy", "ddp", "--nccl-buffsize", "1TiB"}, 2, "more than NCCL reads (an int: at most 2147483647 bytes"},
		{[]string{"--gpus", "8", "--strategy", "ddp", "--nccl-buffsize", "1GiB"}, 2, "one NCCL communicator's buffers take 321.62 GiB"},
		{[]string{"--gpus", "16", "--strategy", "fsdp", "--sharding", "hybrid", "--nccl-buffsize", "128MiB"}, 1, "NCCL's communicator buffers (83.24 GiB, NCCL_BUFFSIZE of 128.00 MiB per connection)"},
	} {
		args := append([]string{"estimate", "mlp", "--batch", "32", "--optimizer", "sgd"}, c.args...)
		_, errs, code := run(args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Contains(errs, ": the CUDA context") {
			t.Errorf("%v: exit %d: %s, want exit %d and %q", c.args, code, errs, c.code, c.want)
		}
	}
}
