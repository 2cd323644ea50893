package cli

import (
	"flag"
	"io"
	"regexp"
	"testing"
)

// The page's form starts from the command line's defaults: a user who
// changes nothing sees what 'batchfit estimate MODEL' prints.
func TestWebDefaultsAreTheCommandLines(t *testing.T) {
	page, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	js, err := webFiles.ReadFile("web/app.js")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var j jobFlags
	j.register(fs, "32") // estimate's, as runEstimate registers it
	// the first option of a select, or the one marked selected
	selected := func(id string) string {
		m := regexp.MustCompile(`(?s)<select id="` + id + `"[^>]*>(.*?)</select>`).FindSubmatch(page)
		if m == nil {
			t.Fatalf("no select #%s", id)
		}
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
	js2.register(sw, "1:256") // sweep's, as runSweep registers it
	if want := sw.Lookup("batch").DefValue; input("sweep") != want {
		t.Errorf("the page's chart sweeps %q; sweep's default is %q", input("sweep"), want)
	}
}
