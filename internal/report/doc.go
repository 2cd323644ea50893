// Package report is what batchfit answers, apart from how it was asked:
// the views built from a prediction (predict.Result), a plan
// (plan.Answer), a sweep or search (solve), and a snapshot's analysis
// (snapshot.Analysis), and the two ways each is printed: the stable JSON
// of --json and the web API (the *JSON types, encoded by WriteJSON), and
// the text a person reads (the Write* functions), with the charts drawn
// from the same figures.
//
// It is a package of its own so that every face of batchfit prints an
// answer the same way: the command line (internal/cli) and the web server
// (internal/server) both build these views, and the browser tests hold
// the page's figures to FormatBytes, FormatSeconds and FormatRate digit
// for digit. A view is computed from results and holds no state; this
// package reads no flags, files or environment, and runs no prediction
// of its own beyond the comparison of a snapshot with one.
package report
