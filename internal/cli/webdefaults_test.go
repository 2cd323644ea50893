package cli

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/job"
)

// The page's form starts from the command line's defaults: a user who
// changes nothing sees what 'batchfit estimate MODEL' prints.
func TestWebDefaultsAreTheCommandLines(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../server/web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	js, err := os.ReadFile("../server/web/app.js")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j jobFlags
	j.register(fs) // estimate's, as runEstimate registers it
	// the first option of a select, or the one marked selected; a select
	// of the table's choices starts at the field's default (app.js)
	selected := func(id string) string {
		m := regexp.MustCompile(`(?s)<select id="` + id + `"([^>]*)>(.*?)</select>`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no select #%s", id)
		}
		if strings.Contains(string(m[1]), "data-choices") {
			f, _ := job.Fields.Lookup(id)
			return f.DefaultFor("estimate")
		}
		m = m[1:]
		opts := regexp.MustCompile(`<option( value="([^"]*)")?( selected)?>([^<]*)</option>`).FindAllSubmatch(m[1], -1)
		pick := opts[0]
		for _, o := range opts {
			if len(o[3]) > 0 {
				pick = o
			}
		}
		if len(pick[1]) > 0 {
			return string(pick[2])
		}
		return string(pick[4])
	}
	input := func(id string) string {
		m := regexp.MustCompile(`<input id="` + id + `"[^>]*value="([^"]*)"`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no value on input #%s", id)
		}
		return string(m[1])
	}
	for _, c := range []struct{ flag, page string }{
		{"precision", selected("precision")},
		{"optimizer", selected("optimizer")},
		{"checkpoint", selected("checkpoint")},
		{"alloc-conf", selected("alloc-conf")},
		{"strategy", selected("strategy")},
		{"quant", selected("quant")},
		{"quant-via", selected("quant-via")},
		{"lora-impl", selected("lora-impl")},
		{"fsdp-wrap", selected("fsdp-wrap")},
		{"fsdp-load", selected("fsdp-load")},
		{"batch", input("batch")},
		{"accumulate", input("accumulate")},
		{"lora", input("lora")},
		{"gpus", input("gpus")},
	} {
		want := fs.Lookup(c.flag).DefValue
		if c.flag == "checkpoint" && want == "" {
			want = "none" // the flag's empty default is none (its help says so)
		}
		if c.page != want {
			t.Errorf("the page's %s starts at %q; the command line's default is %q", c.flag, c.page, want)
		}
	}
	if m := regexp.MustCompile(`gpu\.value = "([^"]+)"`).FindSubmatch(js); m == nil || string(m[1]) != fs.Lookup("gpu").DefValue {
		t.Errorf("the page's GPU starts at %q; the command line's default is %q", m, fs.Lookup("gpu").DefValue)
	}
	sw := flag.NewFlagSet("sweep", flag.ContinueOnError)
	var js2 jobFlags
	js2.register(sw) // sweep's, as runSweep registers it
	if want := sw.Lookup("batch").DefValue; input("sweep") != want {
		t.Errorf("the page's chart sweeps %q; sweep's default is %q", input("sweep"), want)
	}
}

// The page offers every choice estimate's flags list for the selects it
// has, so that no setting the command line takes is missing from the page,
// and each of its options is one the command line accepts.
func TestWebOffersEstimatesChoices(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../server/web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	// a select's options: its own, and for a select of the table's
	// choices those the page adds from /api/fields
	options := func(id string) []string {
		m := regexp.MustCompile(`(?s)<select id="` + id + `"([^>]*)>(.*?)</select>`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no select #%s", id)
		}
		var out []string
		if strings.Contains(string(m[1]), "data-choices") {
			f, _ := job.Fields.Lookup(id)
			out = append(out, f.Choices...)
		}
		m = m[1:]
		for _, o := range regexp.MustCompile(`<option[^>]*>([^<]*)</option>`).FindAllSubmatch(m[1], -1) {
			out = append(out, string(o[1]))
		}
		return out
	}
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	var j jobFlags
	j.register(fs)
	// the optimizers --optimizer takes: the table's choices, which its help lists
	listed := func(flagName string) []string {
		f, _ := job.Fields.Lookup(flagName)
		for _, c := range f.Choices {
			if !strings.Contains(fs.Lookup(flagName).Usage, c) {
				t.Errorf("--%s's help lacks %q", flagName, c)
			}
		}
		return f.Choices
	}
	have := strings.Join(options("optimizer"), " ") + " "
	for _, name := range listed("optimizer") {
		if !strings.Contains(have, name+" ") {
			t.Errorf("the page's optimizers lack %q, which --optimizer takes", name)
		}
	}
	// each option, with what it needs, is accepted by estimate
	for _, c := range []struct {
		id   string
		args func(v string) []string
	}{
		{"optimizer", func(v string) []string { return []string{"--optimizer", v} }},
		{"precision", func(v string) []string { return []string{"--precision", v} }},
		{"quant-via", func(v string) []string {
			return []string{"--quant", "nf4", "--lora", "8", "--lora-targets", "q_proj,v_proj", "--quant-via", v}
		}},
		{"lora-impl", func(v string) []string {
			return []string{"--lora", "8", "--lora-targets", "q_proj,v_proj", "--lora-impl", v}
		}},
		{"fsdp-wrap", func(v string) []string {
			// param is fully_shard's, the others FSDP1's
			st := "fsdp"
			if v == "param" {
				st = "fsdp2"
			}
			return []string{"--lora", "8", "--lora-targets", "q_proj,v_proj", "--gpus", "2", "--strategy", st, "--fsdp-wrap", v}
		}},
		{"fsdp-load", func(v string) []string {
			return []string{"--lora", "8", "--lora-targets", "q_proj,v_proj", "--gpus", "2", "--strategy", "fsdp", "--fsdp-load", v}
		}},
	} {
		for _, v := range options(c.id) {
			args := append([]string{"Llama-3.2-1B", "--batch", "1", "--seq", "64"}, c.args(v)...)
			if _, _, err := job.Parse("estimate", args, job.Options{Inference: true}); err != nil {
				t.Errorf("the page's %s option %q: %v", c.id, v, err)
			}
		}
	}
	// the checkboxes are estimate's boolean flags
	for _, id := range []string{"cudnn-benchmark", "no-sync", "no-autocast-cache", "keep-output"} {
		if !regexp.MustCompile(`<input id="` + id + `" name="` + id + `" type="checkbox"`).Match(page) {
			t.Errorf("the page has no checkbox #%s", id)
		}
		if fs.Lookup(id) == nil {
			t.Errorf("#%s is no flag of estimate", id)
		}
	}
}
