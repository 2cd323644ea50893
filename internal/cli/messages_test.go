package cli

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every command prints its help for -h and exits 0, run included (the
// top-level help sends people to 'batchfit <command> -h').
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, h := range []string{"-h", "--help"} {
			_, errs, code := run(n, h)
			if code != 0 || !strings.HasPrefix(errs, "usage: batchfit "+n) || !strings.Contains(errs, "\nFlags:\n") {
				t.Errorf("%s %s: exit %d, %q", n, h, code, firstLine(errs))
			}
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// Mistakes get one line that says what is wrong, names the nearest flag
// and points to -h; a path that is not there says not found.
func TestOneLineErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		code int
		want []string
		not  string
	}{
		{[]string{"estimate", "resnet50", "--bach", "4"}, 2, []string{"unknown flag --bach", "did you mean --batch?", "'batchfit estimate -h'"}, ""},
		{[]string{"sweep", "mlp", "--svgg", "x.svg"}, 2, []string{"did you mean --svg?"}, ""},
		{[]string{"run", "--modle", "mlp", "--", "true"}, 2, []string{"did you mean --mode or --model?", "'batchfit run -h'"}, ""},
		{[]string{"estimate", "mlp", "--batch"}, 2, []string{"flag needs an argument", "'batchfit estimate -h'"}, ""},
		{[]string{"estimate", "mlp", "--xyzzy"}, 2, []string{"unknown flag --xyzzy"}, "did you mean"},
		{[]string{"oom", "testdata/missing.txt"}, 1, []string{"testdata/missing.txt: file not found"}, "no CUDA out-of-memory message"},
		{[]string{"oom", "oops"}, 1, []string{"oops: file not found"}, ""},
		{[]string{"oom", "testdata"}, 1, []string{"testdata is a directory"}, "no CUDA out-of-memory message"},
		{[]string{"oom", "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 99999999999999999999 has a total capacity of 8.00 GiB of which 1.00 MiB is free."}, 1, []string{"GPU device index 99999999999999999999 is out of range"}, "strconv"},
		{[]string{"estimate", "mlp", "--gpu", "1e20GB"}, 2, []string{`gpu "1e20GB"`, "too large"}, "want B, KiB"},
		{[]string{"estimate", "mlp", "--gpu", "80PB"}, 2, []string{`unknown unit "PB"`, "GB, GiB"}, ""},
		{[]string{"snapshot", "testdata/missing.pickle"}, 1, []string{"testdata/missing.pickle: file not found"}, "reading snapshot"},
		{[]string{"estimate", "testdata/no-such-model/"}, 1, []string{"testdata/no-such-model/: not found"}, "unknown model"},
		{[]string{"estimate", "./Llama-3-8B"}, 1, []string{"not found"}, "unknown model"},
		{[]string{"estimate", "testdata/no-such.onnx"}, 1, []string{"not found"}, ""},
		{[]string{"estimate", "testdata/no-such/config.json"}, 1, []string{"not found"}, ""},
		{[]string{"estimate", "meta-llama/Llama-3-8B"}, 1, []string{"not found", "did you mean the zoo's Llama-3-8B?"}, ""},
		{[]string{"sweep", "missing.yml"}, 1, []string{"missing.yml: not found"}, ""},
	}
	for _, c := range cases {
		_, errs, code := run(c.args...)
		if n := strings.Count(strings.TrimSpace(errs), "\n"); n > 0 || code != c.code {
			t.Errorf("%v: exit %d, %d lines: %s", c.args, code, n+1, errs)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: %q does not say %q", c.args, errs, w)
			}
		}
		if c.not != "" && strings.Contains(errs, c.not) {
			t.Errorf("%v: %q says %q", c.args, errs, c.not)
		}
	}
}

// A flag the model or command cannot honour is refused in one line, not
// taken silently (the header then showed what was not built).
func TestRefusedCombinations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"estimate", "resnet50", "--layers", "5"}, "--layers: resnet50 cannot vary its depth"},
		{[]string{"estimate", "resnet50", "--hidden", "512"}, "--hidden: resnet50 cannot vary its width"},
		{[]string{"estimate", "resnet50", "--seq", "77"}, "--seq: resnet50 has no sequence"},
		{[]string{"sweep", "vit_b_16", "--seq", "77"}, "--seq: vit_b_16 has no sequence"},
		{[]string{"maxbatch", "testdata/one_linear.yaml", "--layers", "2"}, "cannot vary its depth"},
		{[]string{"estimate", "gpt2", "--image", "64"}, "--image: gpt2 takes no image"},
		{[]string{"estimate", "mlp", "--checkpointing", "--checkpoint", "none"}, "--checkpoint none turns it off"},
		{[]string{"estimate", "mlp", "--checkpointing", "--checkpoint", "off"}, "--checkpoint off turns it off"},
		{[]string{"sweep", "mlp", "--batch", "1:4", "--csv", "--json"}, "--csv and --json exclude each other"},
		{[]string{"estimate", "mlp", "--torch", "3.0"}, "no runtime profile for PyTorch 3.0"},
	}
	for _, c := range cases {
		out, errs, code := run(c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 || out != "" {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line saying %q", c.args, code, errs, c.want)
		}
	}
	// what the model does take still works
	for _, args := range [][]string{
		{"estimate", "mlp", "--layers", "2", "--hidden", "64", "--batch", "2"},
		{"estimate", "gpt2", "--seq", "128", "--layers", "2", "--batch", "1"},
		{"estimate", "resnet18", "--image", "64", "--batch", "1"},
		{"estimate", "mlp", "--checkpointing", "--checkpoint", "full", "--batch", "2"},
		{"estimate", "mlp", "--torch", "2.9", "--batch", "2"},
	} {
		if _, errs, code := run(args...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
}

// Input quoted in an error is clipped as the server clips it: 63 bytes
// of a 900,000-byte model_type, then how long it was, so the line stays
// short.
func TestLongInputErrorsClipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	long := strings.Repeat("x", 900000)
	if err := os.WriteFile(cfg, []byte(`{"model_type": "`+long+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// 64 bytes kept, the opening quote and 63 of the 900000 between
		// the quotes (serve.go, clipQuoted: maxQuoted-16).
		{[]string{"estimate", cfg}, `"` + strings.Repeat("x", 63) + `…" (900000 bytes)`},
		{[]string{long[:5000]}, `unknown command "` + strings.Repeat("x", 63) + `…" (5000 bytes)`},
	} {
		_, errs, code := run(c.args...)
		if code == 0 || !strings.Contains(errs, c.want) || len(errs) > 2000 {
			t.Errorf("%.40v: exit %d, %d bytes: %.300s, want %q", c.args, code, len(errs), errs, c.want)
		}
	}
}
