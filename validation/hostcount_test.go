package validation_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/validation"
)

// TestLaunchCounts holds what batchfit counts a step issuing against what
// the profiler counted on the H200 (testdata/throughput/own-h200-launch.csv,
// validation/steptime_gpu.py --count): the forward's ops called from Python
// (top-level aten ops) and the nodes autograd's engine runs (AccumulateGrad
// included), which the 2.x host charges one by one (cost.Torch2Host). The
// rows are convolutional models whose graphs are torchvision's module by
// module. The expected counts are the profiler's, read from each row's
// notes; the tolerance is two (the profiled channels-last step runs one
// more node than the NCHW one, and the graph counts neither's input
// conversion). Device kernels are logged, not held: the NCHW transposes
// cuDNN runs around tensor-core convolutions are timed per convolution
// (cost.timer.transposes), more of them than the profiler sees.
func TestLaunchCounts(t *testing.T) {
	rows, err := validation.LoadThroughput("../testdata/throughput/own-h200-launch.csv")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{
		"own-h200-resnet18-nchw-16-mixed-b1":     true,
		"own-h200-resnet50-nchw-16-mixed-b1":     true,
		"own-h200-resnet50-nhwc-16-mixed-b1":     true,
		"own-h200-resnet101-nchw-16-mixed-b1":    true,
		"own-h200-densenet121-nchw-16-mixed-b1":  true,
		"own-h200-mobilenet_v2-nchw-16-mixed-b1": true,
	}
	re := regexp.MustCompile(`(\d+) device kernels.*?(\d+) launch calls, (\d+) top-level aten ops, (\d+) autograd nodes`)
	seen := 0
	for _, r := range rows {
		m := re.FindStringSubmatch(r.Notes)
		if m == nil {
			t.Errorf("row %s: no profiled counts in its notes", r.ID)
			continue
		}
		var want [4]int64
		for i := range want {
			want[i], _ = strconv.ParseInt(m[i+1], 10, 64)
		}
		req, err := validation.ThroughputRequest(r)
		if err != nil {
			t.Fatalf("row %s: %v", r.ID, err)
		}
		res, err := predict.Run(context.Background(), req)
		if err != nil {
			t.Fatalf("row %s: %v", r.ID, err)
		}
		e := res.Time
		t.Logf("%-44s kernels %5d (profiled %5d), ops %4d (%4d), nodes %4d (%4d)", r.ID, e.Kernels, want[0], e.Ops, want[2], e.Nodes, want[3])
		if !held[r.ID] {
			continue
		}
		seen++
		if d := e.Ops - want[2]; d < -2 || d > 2 {
			t.Errorf("row %s: %d forward ops, the profiler counted %d", r.ID, e.Ops, want[2])
		}
		if d := e.Nodes - want[3]; d < -2 || d > 2 {
			t.Errorf("row %s: %d autograd nodes, the profiler counted %d", r.ID, e.Nodes, want[3])
		}
	}
	if seen != len(held) {
		t.Errorf("%d of the %d held rows found", seen, len(held))
	}
}
