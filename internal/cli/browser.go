package cli

import "net/http"

// The web page's browser tests live in a module of their own (browser/),
// so that chromedp and its dependencies stay out of this module's go.mod.
// A test there cannot reach this package's unexported names: these are
// what it needs, and nothing else uses them.

// NewLoopbackHandler is the server `batchfit serve` runs on the loopback,
// answering two requests at a time, each body at most maxUpload bytes.
func NewLoopbackHandler(maxUpload int64) http.Handler {
	return newServer(serveOptions{maxUpload: maxUpload, workers: 2, loopback: true})
}

// FormatBytes, FormatSeconds and FormatRate are how the command line
// prints bytes, seconds and samples a second: the page must print them
// the same way, digit for digit.
func FormatBytes(n int64) string     { return fmtBytes(n) }
func FormatSeconds(s float64) string { return fmtSeconds(s) }
func FormatRate(r float64) string    { return fmtRate(r) }
