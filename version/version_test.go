package version

import (
	"regexp"
	"testing"
)

// The wheel's file name and metadata take the version as it is: it must be
// a plain MAJOR.MINOR.PATCH, which both PEP 440 and semantic versioning read
// the same way.
func TestVersionForm(t *testing.T) {
	if v := Version(); !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(v) {
		t.Fatalf("VERSION holds %q; want MAJOR.MINOR.PATCH", v)
	}
}
