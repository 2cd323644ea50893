// Package chart draws batchfit's charts as standalone SVG documents: memory
// over batch size, memory over the simulated training step, and a measured
// snapshot's replay. The command line writes them to files and the local
// web page shows the same documents, so there is one renderer.
//
// A Chart is data, not drawing instructions: axes with their scales, lines
// (on the left or the right axis), stacked areas, horizontal rules (a GPU's
// capacity), shaded bands (the phases of a step) and markers (the largest
// batch that fits, the peak). Render lays them out and writes SVG whose
// elements carry their meaning in class and data- attributes (data-name on
// a series, data-x and data-y on a point, data-value on a tick or rule), so
// that tests and scripts can read a chart's structure back without
// measuring pixels.
//
// The output depends only on the Chart: no clock, no randomness, map
// iteration never reaches the document, and numbers are printed with a
// fixed precision, so golden files compare byte for byte.
package chart
