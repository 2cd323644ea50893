// Package version is batchfit's release number, kept in one file (VERSION
// beside this one) that the binary embeds and the Python wheel's build
// reads, so `batchfit version` and `batchfit.__version__` cannot disagree.
package version

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var raw string

// Version is the release, e.g. "0.4.0" (PEP 440 and semantic versioning
// agree on this form).
func Version() string { return strings.TrimSpace(raw) }
