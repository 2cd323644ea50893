package predict

import (
	"context"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/alloc"
	"github.com/batchfit/batchfit/gpu"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/train"
)

// A margin makes the replay run on the GPU less the margin, but the
// out-of-memory message still quotes the GPU's own total capacity (what
// cudaMemGetInfo reports on the real device: the catalog's 14.55 GiB for
// a T4) and says how much of it the margin holds back. gpt2 at batch 64,
// seq 1024 in fp32 saves far more than a T4 holds (its logits alone are
// 64 × 1024 × 50257 × 4 bytes = 12.3 GiB, twice over with their
// gradient), so it runs out of memory with any margin.
func TestOOMMessageQuotesTheRealCapacity(t *testing.T) {
	dev, err := gpu.Lookup("t4")
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.Lookup("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	total := alloc.FormatSize(dev.Capacity)
	for _, tc := range []struct {
		margin int64
		want   string
	}{
		{0, "has a total capacity of " + total + " of which "},
		{2 << 30, "has a total capacity of " + total + ", of which the margin holds back 2.00 GiB and "},
		{1536 << 20, "has a total capacity of " + total + ", of which the margin holds back 1.50 GiB and "},
	} {
		req := Request{Source: Zoo{M: m}, Config: models.Config{Batch: 64, Seq: 1024}, GPU: dev, Context: -1, Margin: tc.margin,
			Setup: train.Setup{Optimizer: train.Optimizer{Kind: train.AdamW}}}
		res, err := Run(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Timeline.OOM == nil {
			t.Fatalf("margin %d: no out-of-memory error: %s", tc.margin, res.Decider)
		}
		for what, s := range map[string]string{"message": res.Timeline.OOM.Error(), "verdict": res.Decider} {
			if !strings.Contains(s, tc.want) {
				t.Errorf("margin %d: the %s does not quote the GPU's own capacity:\n%s\nwant %q", tc.margin, what, s, tc.want)
			}
		}
		// what the margin holds back is not free: the free figure is
		// what the smaller device had left
		if o := res.Timeline.OOM; o.DeviceFree > dev.Capacity-tc.margin-o.Reserved {
			t.Errorf("margin %d: %d bytes free, more than the %d the device less the margin and the reserved leaves", tc.margin, o.DeviceFree, dev.Capacity-tc.margin-o.Reserved)
		}
	}
}
