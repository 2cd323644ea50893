package job

import (
	"bytes"
	"flag"
	"io"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/train"
)

// Every field of the table is a flag of every command that takes it,
// with the table's default and help, and every field of Job has an
// entry: a field added to Job without one is neither a flag nor on the
// page.
func TestTableDrivesFlags(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"estimate", "sweep", "maxbatch", "plan", "oom", "snapshot", "run"} {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		var j Job
		Register(fs, &j, cmd)
		for _, f := range Fields.For(cmd) {
			fl := fs.Lookup(f.Name)
			if fl == nil {
				t.Errorf("%s: field %s has no flag", cmd, f.Name)
				continue
			}
			if fl.Usage != f.Help || f.Help == "" {
				t.Errorf("%s --%s: help %q, table %q", cmd, f.Name, fl.Usage, f.Help)
			}
			want := f.DefaultFor(cmd)
			if f.Kind == Duration && want == "0s" || f.Kind == Int && want == "" || f.Kind == Float && want == "" && f.Name != "weight-decay" || f.Kind == Bool && want == "" {
				want = map[Kind]string{Duration: "0s", Int: "0", Float: "0", Bool: "false"}[f.Kind]
			}
			if f.Kind == Float && want != "" {
				x, _ := strconv.ParseFloat(want, 64)
				want = strconv.FormatFloat(x, 'g', -1, 64) // as the flag package writes it
			}
			if fl.DefValue != want {
				t.Errorf("%s --%s: default %q, table %q", cmd, f.Name, fl.DefValue, want)
			}
		}
	}
	named := map[string]bool{}
	for _, f := range Fields {
		named[f.Name] = true
	}
	for i := range jobType.NumField() {
		tag, _, _ := strings.Cut(jobType.Field(i).Tag.Get("json"), ",")
		if !named[tag] {
			t.Errorf("Job.%s (%q) has no entry in Fields", jobType.Field(i).Name, tag)
		}
	}
}

// The defaults of a command are its flags' (worked from the help: 32 for
// estimate's batch, 1:256 for sweep's, adam, 3 steps, stage -1) and the
// unset ones stay unset.
func TestNew(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cmd   string
		batch string
	}{{"estimate", "32"}, {"sweep", "1:256"}, {"maxbatch", "1"}, {"run", ""}} {
		j := New(c.cmd)
		if j.Batch != c.batch || j.Optimizer != "adam" || j.Steps != 3 || j.Stage != -1 || j.LoRAAlpha != 8 || j.GPU != "h100-80gb" {
			t.Errorf("New(%q) = %+v", c.cmd, j)
		}
		if j.WeightDecay != nil || j.Checkpoint != "" {
			t.Errorf("New(%q): weight decay %v, checkpoint %q: want both unset", c.cmd, j.WeightDecay, j.Checkpoint)
		}
	}
}

// --weight-decay's help gives its real defaults and no sentinel: its
// unset state is no value, not -1.
func TestWeightDecayHelp(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	var j Job
	Register(fs, &j, "estimate")
	fs.PrintDefaults()
	_, after, _ := strings.Cut(help.String(), "-weight-decay")
	line, _, _ := strings.Cut(after, "\n  -")
	if !strings.Contains(line, "AdamW 0.01") || strings.Contains(line, "(default -1)") || strings.Contains(line, "(default ") {
		t.Errorf("--weight-decay's help: %q", line)
	}
	for _, c := range []struct {
		args []string
		wd   float64
	}{
		{[]string{"mlp"}, 0},
		{[]string{"mlp", "--optimizer", "adamw"}, 0.01},
		{[]string{"mlp", "--optimizer", "adamw", "--weight-decay", "0"}, 0},
		{[]string{"mlp", "--weight-decay", "0.1"}, 0.1},
	} {
		r, _, err := Parse("estimate", c.args, Options{})
		if err != nil || r.Setup.Optimizer.WeightDecay != c.wd {
			t.Errorf("%q: weight decay %v (%v), want %v", c.args, r.Setup.Optimizer.WeightDecay, err, c.wd)
		}
	}
}

// The environment reaches a request only through the Env given: with
// PYTORCH_CUDA_ALLOC_CONF set in the process, a request without an Env
// has the default allocator, and one with EnvFrom(os.Getenv) the
// variable's; a flag given wins over both.
func TestEnvInjected(t *testing.T) {
	t.Setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
	t.Setenv("PYTORCH_ALLOC_CONF", "")
	t.Setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
	for _, c := range []struct {
		name       string
		args       []string
		env        Env
		expandable bool
		cublas     string
	}{
		{"no env", []string{"mlp"}, nil, false, ""},
		{"empty env", []string{"mlp"}, Env{}, false, ""},
		{"the process'", []string{"mlp"}, EnvFrom(os.Getenv), true, ":4096:8"},
		{"flag over env", []string{"mlp", "--alloc-conf", "expandable_segments:False", "--cublas-workspace-config", ":16:8"}, EnvFrom(os.Getenv), false, ":16:8"},
	} {
		r, _, err := Parse("estimate", c.args, Options{Env: c.env})
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if r.Alloc.ExpandableSegments != c.expandable || r.Setup.CublasWorkspaceConfig != c.cublas {
			t.Errorf("%s: expandable segments %v, cuBLAS %q; want %v, %q", c.name, r.Alloc.ExpandableSegments, r.Setup.CublasWorkspaceConfig, c.expandable, c.cublas)
		}
	}
	// PYTORCH_ALLOC_CONF, the newer name, is read where the older is not set
	env := EnvFrom(func(k string) string { return map[string]string{"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}[k] })
	if env["alloc-conf"] != "max_split_size_mb:128" || len(env) != 1 {
		t.Errorf("EnvFrom = %v", env)
	}
}

// An optimizer added to the table of choices shows in the flags' help and
// is a value the table accepts; one not in it is refused with the list.
func TestExtraOptimizer(t *testing.T) {
	t.Parallel()
	c := DefaultChoices()
	c.Optimizers = append(c.Optimizers, "lion")
	tab := NewTable(c)
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	var help bytes.Buffer
	fs.SetOutput(&help)
	var j Job
	tab.Register(fs, &j, "estimate")
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "paged_adamw or lion") {
		t.Errorf("help lacks the added optimizer:\n%s", help.String())
	}
	f, _ := tab.Lookup("optimizer")
	for _, c := range []struct {
		v  string
		ok bool
	}{{"lion", true}, {"AdamW", true}, {"PagedAdamW8bit", true}, {"lamb", false}} {
		if err := f.Check(c.v); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok %v", c.v, err, c.ok)
		}
	}
	if f, _ := Fields.Lookup("optimizer"); f.Check("lion") == nil {
		t.Errorf("the default table accepts lion")
	}
	// the default table's choices are train's table, in its order
	if f, _ := Fields.Lookup("optimizer"); !reflect.DeepEqual(f.Choices, train.OptimizerNames()) || len(f.Choices) != len(train.Optimizers) {
		t.Errorf("optimizer choices %v", f.Choices)
	}
}

// Each field's value is checked for its kind and choices, aliases of the
// owning package accepted.
func TestFieldCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		field, v string
		ok       bool
	}{
		{"precision", "bf16-mixed", true},
		{"precision", "bf16", true}, // Lightning's alias
		{"precision", "fp16", false},
		{"seq", "128", true},
		{"seq", "12x", false},
		{"lora-alpha", "16.5", true},
		{"lora-alpha", "high", false},
		{"empty-cache", "true", true},
		{"empty-cache", "yes", false},
		{"loop-overhead", "8ms", true},
		{"loop-overhead", "8", false},
		{"cache", "static", true},
		{"cache", "paged", false},
		{"checkpoint", "every-2+attention", true},
		{"checkpoint", "some", false},
	} {
		f, ok := Fields.Lookup(c.field)
		if !ok {
			t.Fatalf("no field %s", c.field)
		}
		if err := f.Check(c.v); (err == nil) != c.ok {
			t.Errorf("%s %q: %v, want ok %v", c.field, c.v, err, c.ok)
		}
	}
}

// An unknown flag is answered with the one meant: an abbreviation, another
// tool's name for it, or a typo.
func TestNearestFlag(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j Job
	Register(fs, &j, "estimate")
	for _, c := range []struct{ typed, want string }{
		{"bs", "batch"},
		{"batch-size", "batch"},
		{"bat", "batch"},
		{"optimiser", "optimizer"},
		{"precison", "precision"},
		{"grad-accum", "accumulate"},
	} {
		_, err := ParseArgs(fs, []string{"mlp", "--" + c.typed, "8"})
		if err == nil || !strings.Contains(err.Error(), "did you mean --"+c.want) || !IsUsage(err) {
			t.Errorf("--%s: %v; want a suggestion of --%s", c.typed, err, c.want)
		}
	}
}

// A batch size is a positive integer in digits; one written as a float
// is told how to write it.
func TestParseBatchesMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"1e9", `batch size "1e9" must be an integer written in digits, e.g. 1000000000`},
		{"64.0", `batch size "64.0" must be an integer written in digits, e.g. 64`},
		{"0", `batch size "0" is not a positive integer`},
		{"-3", `batch size "-3" is not a positive integer`},
		{"abc", `batch size "abc" is not a positive integer`},
		{"2.5", `batch size "2.5" is not a positive integer`},
		{"1:1e3", `--batch "1:1e3": "1e3" must be an integer written in digits, e.g. 1000`},
	} {
		_, err := ParseBatches(c.in)
		if err == nil || err.Error() != c.want {
			t.Errorf("ParseBatches(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}

// Sources: a web request or a recording names zoo models only; a path is
// refused without being opened.
func TestSources(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		model   string
		sources Sources
		ok      bool
	}{
		{"mlp", ZooOnly, true},
		{"../examples/mlp.yaml", ZooOnly, false},
		{"../examples/mlp.yaml", Paths, true},
		{"/dev/zero", ZooOnly, false},
	} {
		_, err := Open(c.model, c.sources)
		if (err == nil) != c.ok {
			t.Errorf("Open(%q, %v) = %v, want ok %v", c.model, c.sources, err, c.ok)
		}
	}
}
