// Package browser holds the web page's browser tests: they drive a
// headless chromium (chromedp) against the server of `batchfit serve`.
// It is a module of its own, as pprof keeps its browser tests, so that
// chromedp and its dependencies stay out of batchfit's go.mod; run them
// with `cd browser && go test ./...`.
package browser
