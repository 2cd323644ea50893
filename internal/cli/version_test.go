package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/version"
)

func TestVersionCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := Run(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if want := "batchfit " + version.Version() + "\n"; out.String() != want {
			t.Errorf("%v printed %q, want %q", args, out.String(), want)
		}
	}
	var out, errb bytes.Buffer
	if code := Run([]string{"version", "extra"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "no arguments") {
		t.Errorf("version extra: exit %d, %q; want a usage error (2)", code, errb.String())
	}
}
