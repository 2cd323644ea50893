package capture

import (
	"os"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/graph"
	"github.com/batchfit/batchfit/models"
	"github.com/batchfit/batchfit/profile"
	"github.com/batchfit/batchfit/trace"
	"github.com/batchfit/batchfit/train"
)

// withHeldClone is testdata/linear.bfgraph with a clone of the linear's
// output (tensor 10, [batch, 3] float32, storage 8) that nothing reads,
// made before relu_: what a ModelOutput keeps beside the loss, such as
// T5's past key and value states. freed is its freed_after, "" for none
// (alive when the recording ended).
func withHeldClone(t *testing.T, freed string) string {
	t.Helper()
	good, err := os.ReadFile("testdata/linear.bfgraph")
	if err != nil {
		t.Fatal(err)
	}
	if freed != "" {
		freed = `, "freed_after": ` + freed
	}
	s := string(good)
	for _, e := range []struct{ old, new string }{
		{`"requires_grad": false}], "ops": [`, `"requires_grad": false}, {"id": 10, "shape": [2, 3], "batch": [1, 0], "stride": [3, 1], "offset": 0, "dtype": "float32", "storage": 8, "storage_nbytes": 24, "storage_nbytes_batch": 12, "role": "activation", "requires_grad": true` + freed + `}], "ops": [`},
		{`{"aten": "aten::relu_"`, `{"aten": "aten::clone", "overload": "default", "args": [{"t": 5}], "out": [10], "module": "", "grad": true}, {"aten": "aten::relu_"`},
	} {
		if !strings.Contains(s, e.old) {
			t.Fatalf("the test file has no %q", e.old)
		}
		s = strings.Replace(s, e.old, e.new, 1)
	}
	return s
}

// An activation still alive when the recording ended is held by the
// forward's output, which the loop drops once it has the loss: it lives to
// the forward's end, after the loss, not to its last use. One freed during
// the recording (freed_after) goes as before. At batch 7, worked by hand
// (requested bytes, the CPU rules of 2.5):
//
//	parameters 15·4 = 60; batch: input 7·4·4 = 112, target 7·8 = 56;
//	the linear's output 7·3·4 = 84 (relu_ in place saves it), the
//	clone 84, log_softmax's result 84, the loss 4 and total_weight 4.
//
// Held: 60+168+84+84+84+4+4 = 488 at the loss. Freed at once: the clone
// is gone before log_softmax, and the peak is 488-84 = 404 at the loss.
func TestOutputHeldToForwardEnd(t *testing.T) {
	prof, err := profile.Lookup("2.5")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, freed string
		release     bool
		peak        int64
	}{
		{"held by the output", "", true, 488},
		{"freed after the clone", "2", false, 404},
	}
	for _, c := range cases {
		m, err := Read("held.bfgraph", strings.NewReader(withHeldClone(t, c.freed)))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		g, err := m.Build(models.Config{Batch: 7, CPU: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		last := g.Ops[len(g.Ops)-1]
		if got := last.Kind == graph.Release; got != c.release {
			t.Errorf("%s: the last op is %s, want a release: %v", c.name, last.Kind, c.release)
		}
		tr, _, err := train.Simulate(g, train.Setup{CPU: true, Profile: prof, Steps: 1, Optimizer: train.Optimizer{Kind: train.SGD}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		live, err := trace.LiveByStep(tr)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := live[0].Phases[trace.Forward].Peak; got != c.peak {
			t.Errorf("%s: forward peak %d bytes, want %d", c.name, got, c.peak)
		}
	}
}
