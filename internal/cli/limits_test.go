package cli

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batchfit/batchfit/job"
)

// The sizes and the work a user asks for are bounded on the command line
// as on the server: each refused at once, in one line naming the flag.
func TestBoundsRefuseAtOnce(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		// issue 23, item 9: grew past 8 GB in 69 s
		{[]string{"estimate", "mlp", "--layers", "1000000"}, 2, "--layers 1000000: at most 4096"},
		// a depth within the flag's bound whose graph is too large: still
		// a value batchfit cannot take, so a usage error
		{[]string{"estimate", "gpt2", "--layers", "4000"}, 2, "more than 65536 ops"},
		{[]string{"estimate", "gpt2", "--accumulate", "10000000"}, 2, "--accumulate 10000000: at most 65536"},
		{[]string{"estimate", "Llama-3.2-1B", "--mode", "generate", "--new-tokens", "1000000"}, 2, "--new-tokens 1000000: at most 32768"},
		{[]string{"plan", "gpt2", "--gpu", "t4", "--global-batch", "9223372036854775807", "--max-accumulate", "9223372036854775807"}, 2, "--max-accumulate 9223372036854775807: at most 65536"},
		// issue 23, item 2: "fits: yes" and negative samples/s
		{[]string{"estimate", "resnet50", "--batch", "4611686018427387904"}, 2, "x: shape [4611686018427387904, 3, 224, 224] of float32 is more than the 64 PiB"},
		// and negative activations
		{[]string{"estimate", "resnet50", "--batch", "200000000000"}, 2, "x: shape [200000000000, 3, 224, 224] of float32 is more than the 64 PiB"},
		{[]string{"estimate", "resnet50", "--batch", "2000000000"}, 2, "resnet50: its tensors come to more than the 64 PiB"},
		{[]string{"estimate", "mlp", "--hidden", "4294967296"}, 2, "shape [4294967296, 4294967296] of float32 is more than the 64 PiB"},
		{[]string{"estimate", "Llama-3.2-1B", "--seq", "4611686018427387904"}, 2, "more than the 64 PiB"},
		{[]string{"estimate", "gpt2", "--batch", "1099511627776", "--accumulate", "65536"}, 2, "more than the 64 PiB"},
	} {
		start := time.Now()
		_, errs, code := run(c.args...)
		if code != c.code || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%s: exit %d, %q; want %d and %q in one line", strings.Join(c.args, " "), code, errs, c.code, c.want)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %s", strings.Join(c.args, " "), d)
		}
	}
}

// A range that would step past int64's largest value ends there, rather
// than wrapping to negative batch sizes.
func TestBatchRangeDoesNotWrap(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"4611686018427387904:9223372036854775807",
		"9223372036854775000:9223372036854775807:1000",
		"1:9223372036854775807",
	} {
		b, err := parseBatches(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		if slices.ContainsFunc(b, func(n int64) bool { return n <= 0 }) || !slices.IsSorted(b) {
			t.Errorf("%s: %v", s, b)
		}
	}
	if b, _ := parseBatches("9223372036854775000:9223372036854775807:1000"); len(b) != 1 || b[0] != 9223372036854775000 {
		t.Errorf("one step from the top: %v", b)
	}
	if b, _ := parseBatches("1:9223372036854775807"); len(b) != 63 || b[62] != 1<<62 || b[62] > math.MaxInt64 {
		t.Errorf("powers of two up to 2^62: %d values", len(b))
	}
}

// The server's bounds are within the command line's: a request can never
// ask for more than the library answers.
func TestWebBoundsWithinCLI(t *testing.T) {
	t.Parallel()
	for name, b := range job.Bounds {
		if b.Web <= 0 || (b.CLI > 0 && b.Web > b.CLI) {
			t.Errorf("%s: web %d, command line %d", name, b.Web, b.CLI)
		}
	}
}
