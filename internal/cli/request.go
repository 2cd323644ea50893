package cli

import (
	"io"

	"github.com/batchfit/batchfit/predict"
	"github.com/batchfit/batchfit/validation"
)

// The GPU corpus's accuracy test predicts each case from its estimate
// command line through this package's flags (validation cannot import
// this package, which imports it).
func init() { validation.EstimateRequest = EstimateRequest }

// EstimateRequest turns the arguments of 'batchfit estimate' (without the
// word estimate) into the prediction request the command would run, by the
// same flag set and the same steps: a caller that predicts for a command
// line, such as the GPU corpus's accuracy test, gets exactly what the
// command predicts. Only the first batch size of a --batch list is kept.
// Bad arguments give the command's own errors; flag usage text is
// discarded.
func EstimateRequest(args []string) (predict.Request, error) {
	fs := newFlagSet("estimate", io.Discard, estimateUsage)
	j := jobFlags{inferOK: true}
	j.register(fs, "32")
	// estimate's own output flag, accepted so that any estimate command
	// line parses.
	fs.String("timeline", "", "")
	r, _, err := j.job(fs, "estimate", args)
	return r, err
}
