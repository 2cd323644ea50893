// Package solve answers questions over many predictions: memory across a
// range of batch sizes (Sweep), the largest batch that fits a GPU
// (MaxBatch), and the largest value of another dimension — depth, width,
// sequence length — with the batch fixed (MaxDim).
//
// A search tries only the values the model declares valid (models.Range,
// through predict.RangeOf): a transformer's width in multiples of its head
// size, its sequence up to a learned position table's size. When the
// model's own bound fits, the answer says that the bound, not memory,
// decided (Answer.Bound).
//
// The searches rely on memory rising with the searched dimension, which
// holds for every model here: more batch, layers, width or tokens only add
// tensors. (Near the boundary the allocator's rounding can make a value fit
// where a smaller one did not, as on a real GPU; the answer is then one
// such boundary.) They grow the bound at most eightfold, aiming at where
// the requested peak, extrapolated, meets the device's headroom; bracket
// the boundary in small steps around an aimed guess; and bisect. Each
// answer is a value that was simulated and fits, with the next value
// simulated and not fitting.
package solve
