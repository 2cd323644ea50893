package server

import "github.com/batchfit/batchfit/job"

// The tests of package server_test, which run the command line's own
// commands through the server (and so import internal/cli, which imports
// this package), reach these names.

// EndpointFields are, by command, the fields a request to its endpoints
// may set.
func EndpointFields() map[string][]string {
	out := map[string][]string{}
	for _, ep := range endpoints {
		out[ep.cmd] = acceptedFields(job.Fields, ep)
	}
	return out
}

// Reserved are the fields no request may set.
var Reserved = reserved
