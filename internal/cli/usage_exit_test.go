package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/live"
	"github.com/batchfit/batchfit/internal/server"
	"github.com/batchfit/batchfit/internal/servertest"

	"github.com/batchfit/batchfit/smi"
)

// Every usage error exits 2, even one found only past the flags (the
// planner's options, a size beyond the bounds) or one a command could
// have met after a failure (no message, no driver); 1 is for "does not
// fit" and failures.
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	noDriver := live.Hooks{OpenSMI: func() (smi.Reader, error) { return nil, smi.ErrNoDriver }}
	for _, c := range []struct {
		name string
		args []string
		want int
	}{
		// no message on standard input: the bad flag is still what is
		// reported
		{"oom bad margin, no message", []string{"oom", "--margin", "nope"}, 2},
		{"oom bad batch, no message", []string{"oom", "--model", "mlp", "--batch", "x"}, 2},
		{"oom good flags, no message", []string{"oom"}, 1},
		{"oom good margin, no message", []string{"oom", "--margin", "10%"}, 1},
		// on a machine without the driver the flags are checked first
		{"watch negative count, no driver", []string{"watch", "--count", "-1"}, 2},
		{"watch short interval, no driver", []string{"watch", "--interval", "1ns"}, 2},
		{"watch good flags, no driver", []string{"watch", "--count", "1"}, 1},
		// 10^14 samples over --batch 1 is an accumulation of 10^14, past
		// the 65,536 micro-batches a step
		{"plan global batch past the accumulation bound", []string{"plan", "mlp", "--gpu", "h100-80gb", "--global-batch", "100000000000000"}, 2},
		// the global batch is --batch 1 × 1: no micro-batch of 10^14 makes it
		{"plan minimum micro-batch above the global batch", []string{"plan", "mlp", "--gpu", "h100-80gb", "--min-micro-batch", "100000000000000"}, 2},
		// --batch 1 × --accumulate 2 makes 2 samples, not 10^14
		{"plan global batch the setup does not make", []string{"plan", "mlp", "--gpu", "h100-80gb", "--accumulate", "2", "--global-batch", "100000000000000"}, 2},
		// gpt2's c_attn weight is [3h, h] of float32: 3 × 99,999,999,936²
		// × 4 bytes ≈ 1.2·10^23, past the 2^56 bytes (64 PiB) batchfit
		// computes with
		{"estimate hidden past the size bound", []string{"estimate", "gpt2", "--hidden", "99999999936"}, 2},
		// the input ids alone are 10^15 × 1024 × 8 bytes
		{"estimate batch past the size bound", []string{"estimate", "gpt2", "--batch", "1000000000000000"}, 2},
		{"estimate freeze naming no module", []string{"estimate", "mlp", "--freeze", "no_such_module"}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, errs, code := runHooks(noDriver, c.args...)
			if code != c.want {
				t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.want, errs)
			}
		})
	}
}

// The server answers a usage error found past the request's fields 400,
// as it answers a bad field, not 422.
func TestServeUsageErrors400(t *testing.T) {
	t.Parallel()
	ts := testServer(t, server.Options{})
	for _, c := range []struct {
		name, path string
		body       map[string]any
		want       string
	}{
		{"freeze naming no module", "/api/estimate", map[string]any{"model": "mlp", "freeze": "no_such_module"}, "no_such_module"},
		// --batch 1 × --accumulate 2 makes 2 samples a step, not 8
		{"a global batch the setup does not make", "/api/plan", map[string]any{"model": "mlp", "gpu": "h100-80gb", "accumulate": 2, "global-batch": 8}, "not the global batch 8"},
		// a global batch of 8 leaves no micro-batch of 16
		{"a minimum micro-batch above the global batch", "/api/plan", map[string]any{"model": "mlp", "gpu": "h100-80gb", "global-batch": 8, "min-micro-batch": 16}, "at least 16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, b := servertest.PostJSON(t, ts.URL+c.path, c.body)
			var e server.APIError
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d: the error is not JSON: %.200s", res.StatusCode, b)
			}
			if res.StatusCode != 400 || !strings.Contains(e.Error, c.want) {
				t.Errorf("%d %q, want 400 and %q", res.StatusCode, e.Error, c.want)
			}
		})
	}
}
