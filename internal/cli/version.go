package cli

import (
	"fmt"

	"github.com/batchfit/batchfit/version"
)

// runVersion prints the release the binary was built from: the same
// string the Python package reports as batchfit.__version__.
func runVersion(e *env, args []string) error {
	if len(args) > 0 && args[0] != "-h" && args[0] != "--help" {
		return usagef("version takes no arguments, got %q", args[0])
	}
	_, err := fmt.Fprintf(e.stdout, "batchfit %s\n", version.Version())
	return err
}
