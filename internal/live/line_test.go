package live

import (
	"strings"
	"testing"

	"github.com/batchfit/batchfit/record"
)

// A step line names the optimizer without a 0-based number beside the
// 1-based step; a second optimizer is numbered from 1.
func TestStepLine(t *testing.T) {
	cases := []struct {
		r    record.Record
		want string
	}{
		{record.Record{Step: 1, OptimizerClass: "Adam"}, "step 1 (Adam)"},
		{record.Record{Step: 3, Optimizer: 1, OptimizerClass: "SGD"}, "step 3 (SGD, optimizer #2)"},
		{record.Record{Step: 2, Optimizer: 2}, "step 2 (optimizer #3)"},
		{record.Record{Step: 4}, "step 4"},
	}
	for _, c := range cases {
		if got := stepLine(&c.r); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

func TestRunSummarySteps(t *testing.T) {
	for _, c := range []struct {
		steps int
		want  string
	}{{1, "batchfit: 1 optimizer step recorded;"}, {5, "batchfit: 5 optimizer steps recorded;"}} {
		var b strings.Builder
		writeRunSummary(&b, record.Summary{Started: true, Steps: c.steps}, &record.Result{})
		if !strings.HasPrefix(b.String(), c.want) {
			t.Errorf("%d steps: %q, want it to start %q", c.steps, b.String(), c.want)
		}
	}
}
