package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/version"
)

const versionUsage = `usage: batchfit version

Prints the release this binary was built from (version/VERSION), the same
string the Python package reports as batchfit.__version__. 'batchfit
--version' is the same.
`

// runVersion prints the release the binary was built from.
func runVersion(e *env, args []string) error {
	fs := newFlagSet("version", e.stderr, versionUsage)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("version takes no arguments, got %q", pos[0])
	}
	_, err = fmt.Fprintf(e.stdout, "batchfit %s\n", version.Version())
	return err
}
