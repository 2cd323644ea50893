package validation_test

import (
	"math"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/validation"
)

// maxScalingErr bounds the error of a published scaling point: the
// throughput per GPU of one run at two GPU counts, predicted over
// measured as a ratio, so that what the two rows share (the GPU, the
// kernels) cancels and the communication is what is held.
const maxScalingErr = 0.20

// withoutGPUs is a row's command line without its --gpus value: rows
// equal but for it are one run at two scales.
func withoutGPUs(args []string) string {
	var out []string
	for i := 0; i < len(args); i++ {
		if strings.TrimLeft(args[i], "-") == "gpus" {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return strings.Join(out, " ")
}

// gpus is a command line's --gpus value.
func gpus(args []string) string {
	for i, a := range args {
		if strings.TrimLeft(a, "-") == "gpus" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// TestThroughputScaling predicts every pair of rows of the calibration
// set that ran one command line on two GPU counts (torchtitan's Llama 3.1
// 8B on 8 and 128 H100s: 5,762 and 5,605 tokens/s per GPU, 0.973 of it)
// and holds the predicted ratio of the throughputs per GPU within
// maxScalingErr of the published one.
func TestThroughputScaling(t *testing.T) {
	if testing.Short() {
		t.Skip("predicts multi-GPU rows of the calibration set")
	}
	rows := loadThroughputSets(t)
	by := map[string][]validation.ThroughputRow{}
	for _, r := range rows {
		if k := withoutGPUs(r.Args); k != strings.Join(r.Args, " ") {
			by[r.Source+"|"+r.Software+"|"+k] = append(by[r.Source+"|"+r.Software+"|"+k], r)
		}
	}
	n := 0
	for _, rs := range by {
		if len(rs) != 2 {
			continue
		}
		a, b := rs[0], rs[1]
		if gpus(a.Args) == gpus(b.Args) {
			continue
		}
		pa, err := validation.PredictThroughput(a)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := validation.PredictThroughput(b)
		if err != nil {
			t.Fatal(err)
		}
		meas := b.SamplesPerSecond() / a.SamplesPerSecond()
		pred := pb / pa
		e := pred/meas - 1
		n++
		t.Logf("%s → %s: per GPU ×%.3f published, ×%.3f predicted (%+.1f %%)", a.ID, b.ID, meas, pred, 100*e)
		if math.Abs(e) > maxScalingErr {
			t.Errorf("%s → %s: scaling %+.1f %% off the published, more than %.0f %%", a.ID, b.ID, 100*e, 100*maxScalingErr)
		}
	}
	if n == 0 {
		t.Error("no scaling pair in the calibration set")
	}
}
