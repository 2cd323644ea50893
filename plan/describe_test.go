package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/train"
)

// A move to bf16-true or 16-true says in its own description that it
// changes the numerics (the weights kept in 16 bits, no float32 master
// copy), so every output that lists the change says it; a move to a
// -mixed precision, whose master weights stay float32, does not.
func TestPrecisionChangeWarns(t *testing.T) {
	cases := []struct {
		from, to train.Precision
		warns    bool
	}{
		{train.FP32, train.TrueBF16, true},
		{train.MixedBF16, train.True16, true},
		{train.FP32, train.MixedBF16, false},
		{train.FP32, train.Mixed16, false},
		{train.TrueBF16, train.True16, false}, // both already 16-bit weights
	}
	for _, c := range cases {
		pl := &planner{base: Candidate{Precision: c.from}}
		got := pl.changes(Candidate{Precision: c.to})
		if len(got) != 1 || !strings.HasPrefix(got[0], fmt.Sprintf("precision %s → %s", c.from, c.to)) {
			t.Fatalf("%s → %s: changes %q", c.from, c.to, got)
		}
		if warns := strings.Contains(got[0], NumericsWarning); warns != c.warns {
			t.Errorf("%s → %s: %q warns %v, want %v", c.from, c.to, got[0], warns, c.warns)
		}
	}
}
