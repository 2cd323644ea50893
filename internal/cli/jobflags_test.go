package cli

import (
	"strings"
	"testing"
)

// The job's flags answer a mistake with what was meant: an abbreviation
// gets the flag it stands for, a batch size written as a float how to
// write it, and --weight-decay's help its real defaults, no sentinel.
func TestJobFlagMessages(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		code int
		want string
		not  string
	}{
		{[]string{"estimate", "mlp", "--bs", "8"}, 2, "unknown flag --bs; did you mean --batch", ""},
		{[]string{"estimate", "mlp", "--batch", "1e9"}, 2, `batch size "1e9" must be an integer written in digits, e.g. 1000000000`, ""},
		{[]string{"estimate", "-h"}, 0, "AdamW 0.01)", "AdamW 0.01) (default -1)"},
	} {
		out, errs, code := run(c.args...)
		all := out + errs
		if code != c.code || !strings.Contains(all, c.want) || c.not != "" && strings.Contains(all, c.not) {
			t.Errorf("%q: exit %d, want %d with %q and without %q:\n%s", c.args, code, c.code, c.want, c.not, all)
		}
	}
}
