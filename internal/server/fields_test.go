package server_test

import (
	"bytes"
	"io"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/batchfit/batchfit/internal/cli"
	"github.com/batchfit/batchfit/internal/server"
)

// The fields each endpoint lists as its command's own are the flags the
// command defines besides the job's (its help), less the server's own:
// the list the server decodes by stays the command's.
func TestEndpointOwnFields(t *testing.T) {
	t.Parallel()
	for cmd, accepted := range server.EndpointFields() {
		var help bytes.Buffer
		cli.RunWith([]string{cmd, "-h"}, io.Discard, &help, cli.Options{Stdin: strings.NewReader("")})
		var defined []string
		for _, line := range strings.Split(help.String(), "\n") {
			if f, ok := strings.CutPrefix(line, "  -"); ok {
				name, _, _ := strings.Cut(f, " ")
				if !server.Reserved[name] {
					defined = append(defined, name)
				}
			}
		}
		sort.Strings(defined)
		if got := accepted; !slices.Equal(got, defined) {
			t.Errorf("%s: the server takes %v; the command defines %v", cmd, got, defined)
		}
	}
}
