package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/report"
)

// The exit status says whether it fits, so that `batchfit estimate … &&
// launch` launches only a job that fits: 1 for every "does not fit", 2 for
// every usage error. mlp --hidden 16384 holds 784·16384 + 3·16384² +
// 16384·10 ≈ 818 M parameters, 3.0 GiB in float32: more than a 1 GiB GPU
// at any batch.
func TestExitStatusSaysWhetherItFits(t *testing.T) {
	t.Parallel()
	big := []string{"mlp", "--hidden", "16384", "--gpu", "1GiB"}
	cases := []struct {
		args []string
		want int
	}{
		{append([]string{"estimate", "--batch", "32"}, big...), 1},
		{append([]string{"estimate", "--batch", "32,64"}, big...), 1},
		// no batch of the sweep fits, and batch 1 is not among them
		{append([]string{"sweep", "--batch", "2:4"}, big...), 1},
		{append([]string{"maxbatch"}, big...), 1},
		{[]string{"estimate", "mlp", "--batch", "32", "--gpu", "t4"}, 0},
		// adapters naming a module mlp does not have are the flags' fault
		{[]string{"estimate", "mlp", "--freeze", "nosuch", "--gpu", "t4"}, 2},
		{[]string{"estimate", "mlp", "--lora", "8", "--lora-targets", "nosuch", "--gpu", "t4"}, 2},
	}
	for _, c := range cases {
		if _, errs, code := run(c.args...); code != c.want {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.want, errs)
		}
	}
}

func TestFmtSeconds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		s    float64
		want string
	}{
		{54984, "15.3 h"}, // 54984 / 3600 = 15.27
		{3600, "1.0 h"},
		{90, "1.5 min"},
		{59.9, "59.9 s"},
		{4.215, "4.21 s"}, // 4.215 is stored a little below: %.2f rounds down
		{0.0042, "4.2 ms"},
		{0.0000042, "4 µs"},
	}
	for _, c := range cases {
		if got := report.FormatSeconds(c.s); got != c.want {
			t.Errorf("fmtSeconds(%v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestHelpAndOutputWording(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   []string
		code   int
		stream string // "out" or "err"
		has    []string
		hasNot []string
	}{
		{"capture's flags once", []string{"capture", "-h"}, 0, "err", []string{"\nFlags:\n"}, []string{"Flags:\n\nFlags:"}},
		// gpt2 at batch 1 and seq 1024 needs more than 3500 MiB; the
		// suggestions keep 1 sample per step
		{"one sample per step", []string{"estimate", "gpt2", "--seq", "1024", "--batch", "1", "--gpu", "3500MiB", "--like", "t4"}, 1, "out",
			[]string{"(same 1 sample per optimizer step;"}, []string{"same 1 samples per"}},
		{"the spec's name in the header", []string{"estimate", "../../examples/tinygpt.yaml", "--batch", "1", "--seq", "16", "--gpu", "t4"}, 0, "out",
			[]string{"tinygpt · batch 1 · seq 16"}, []string{"examples/tinygpt.yaml ·"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errs, code := run(c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d: %s", code, c.code, errs)
			}
			got := out
			if c.stream == "err" {
				got = errs
			}
			for _, s := range c.has {
				if !strings.Contains(got, s) {
					t.Errorf("no %q in\n%s", s, got)
				}
			}
			for _, s := range c.hasNot {
				if strings.Contains(got, s) {
					t.Errorf("%q in\n%s", s, got)
				}
			}
		})
	}
}

// A row that runs out of memory trains no samples: no samples/s. resnet50
// at batch 256 saves 20 GiB of activations, more than a T4's 15 GiB; at
// batch 1 it fits.
func TestSweepNoThroughputOutOfMemory(t *testing.T) {
	t.Parallel()
	out, errs, code := run("sweep", "resnet50", "--batch", "1,256", "--gpu", "t4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// batch, saved activations, allocated, reserved, device total, fits,
	// needs at least, step time, samples/s, bound
	oom := regexp.MustCompile(`(?m)^ +256 +\S+ GiB +\S+ GiB +\S+ GiB +\S+ GiB +no: OOM\* +\S+ GiB +\S+ s +- +\S+ (s|ms)$`)
	fits := regexp.MustCompile(`(?m)^ +1 +\S+ MiB +\S+ MiB +\S+ MiB +\S+ [MG]iB +yes +- +\S+ ms +[0-9,.]+ +\S+ ms$`)
	if !oom.MatchString(out) || !fits.MatchString(out) {
		t.Errorf("the out-of-memory row shows a throughput, or the row that fits none:\n%s", out)
	}
}

// cliExit is the output of a command that must end with status code: an
// answer that does not fit is printed, then exits 1.
func cliExit(t testing.TB, code int, args ...string) string {
	t.Helper()
	out, errs, got := run(args...)
	if got != code {
		t.Fatalf("batchfit %s: exit %d, want %d: %s", strings.Join(args, " "), got, code, errs)
	}
	return out
}
