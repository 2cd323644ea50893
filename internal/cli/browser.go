package cli

import (
	"github.com/batchfit/batchfit/internal/server"
	"net/http"
)

// The web page's browser tests live in a module of their own (browser/),
// so that chromedp and its dependencies stay out of this module's go.mod.
// A test there cannot reach this package's unexported names: these are
// what it needs, and nothing else uses them (the ways the command line
// prints bytes, seconds and rates, which the page must match, are
// report.FormatBytes, report.FormatSeconds and report.FormatRate).

// NewLoopbackHandler is the server `batchfit serve` runs on the loopback,
// answering two requests at a time, each body at most maxUpload bytes.
func NewLoopbackHandler(maxUpload int64) http.Handler {
	return newServer(server.Options{MaxUpload: maxUpload, Workers: 2, Loopback: true})
}
