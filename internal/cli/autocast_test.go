package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"
)

// --no-autocast-cache and --autocast-around-loop reach the eval
// simulation: without the cache the weight copies go with each op (a
// lower peak than one copy per weight kept to the forward's end); with
// the region around the loop the copies of the first forward stay, so the
// later forwards peak higher. The web API takes them as fields and answers
// as the command line does; without autocast, or for training or
// generation, they are refused.
func TestAutocastFlags(t *testing.T) {
	t.Parallel()
	peak := func(args ...string) int64 {
		t.Helper()
		var res struct {
			Peak int64 `json:"peak_allocated_bytes"`
		}
		out := cli(t, append([]string{"estimate", "mlp", "--batch", "64", "--mode", "eval", "--precision", "bf16-mixed", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.Peak <= 0 {
			t.Fatalf("%v: %v, %s", args, err, out)
		}
		return res.Peak
	}
	on, off, loop := peak(), peak("--no-autocast-cache"), peak("--autocast-around-loop")
	if off >= on {
		t.Errorf("peak without the cache %d, with it %d: want lower", off, on)
	}
	if loop <= on {
		t.Errorf("peak with autocast around the loop %d, around each forward %d: want higher", loop, on)
	}

	ts := testServer(t, server.Options{})
	want := cli(t, "estimate", "mlp", "--batch", "64", "--mode", "eval", "--precision", "bf16-mixed", "--no-autocast-cache", "--json")
	res, body := servertest.PostJSON(t, ts.URL+"/api/estimate", map[string]any{"model": "mlp", "batch": 64, "mode": "eval", "precision": "bf16-mixed", "no-autocast-cache": true})
	if res.StatusCode != 200 || string(body) != want {
		t.Errorf("the API's answer (%d) differs from the command line's:\n%s", res.StatusCode, lineDiff("command line", want, "API", string(body)))
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "eval", "--no-autocast-cache"}, "are for the mixed precisions"},
		{[]string{"--mode", "eval", "--precision", "bf16-true", "--autocast-around-loop"}, "are for the mixed precisions"},
		{[]string{"--precision", "bf16-mixed", "--autocast-around-loop"}, "is for --mode eval"},
	} {
		_, errs, code := run(append([]string{"estimate", "mlp", "--batch", "8"}, c.args...)...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", c.args, code, c.want, errs)
		}
	}
}
