package validation

import "testing"

// An estimate command line is read by package job itself: no other
// package needs linking for a case to be predicted.
func TestEstimateRequestWithoutHook(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args  []string
		batch int64
		steps int
		err   bool
	}{
		{[]string{"mlp", "--batch", "4"}, 4, 3, false},
		{[]string{"mlp", "--batch", "64,8", "--steps", "2", "--timeline", "x.svg"}, 64, 2, false},
		{[]string{"mlp", "--batchsize", "4"}, 0, 0, true},
	} {
		r, err := EstimateRequest(c.args)
		if (err != nil) != c.err || err == nil && (r.Config.Batch != c.batch || r.Setup.Steps != c.steps) {
			t.Errorf("%q: batch %d, steps %d, %v", c.args, r.Config.Batch, r.Setup.Steps, err)
		}
	}
}
