// Package solve answers questions over many predictions: memory across a
// range of batch sizes (Sweep), the largest batch that fits a GPU
// (MaxBatch), and the largest value of another dimension — depth, width,
// sequence length — with the batch fixed (MaxDim).
//
// The searches rely on memory being monotone in the searched dimension,
// which holds for every model here: more batch, layers, width or tokens
// only add tensors. They grow the bound by doubling until a value does not
// fit, then bisect, so each answer is a value that was simulated and fits,
// with the next value simulated and not fitting.
package solve
