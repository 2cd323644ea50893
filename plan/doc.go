// Package plan answers "what do I change so that it fits, and which change
// costs the least speed?". It enumerates the levers practitioners reach
// for — gradient accumulation (a smaller micro-batch, the same samples per
// optimizer step), precision, activation checkpointing, the optimizer's
// implementation and the allocator's expandable segments — predicts the
// memory of each combination through the whole pipeline (simulator and
// allocator, package predict) and its step time (package cost), and keeps
// the combinations that fit the GPU with a margin, ranked by samples a
// second per GPU (the fewest GPU-seconds a step, the global batch being
// the same for every plan) or by how little they change. The best plan on
// the job's own GPUs is kept apart (Answer.SameGPUs) and its combinations
// searched first, so that the answer always has it.
//
// The search is a branch and bound over the lever combinations. Two facts
// make it cheap:
//
//   - Within one combination, memory falls as accumulation rises (each
//     micro-batch is smaller), so the smallest accumulation that fits is
//     found by bisection over the allowed values;
//   - under the step-time model, time never falls as accumulation rises:
//     a kernel's time is the larger of work proportional to the
//     micro-batch and a fixed floor, and a·max(w/a, f) = max(w, a·f).
//     The fastest plan of a combination is therefore its smallest
//     accumulation that fits, and the time at its smallest allowed
//     accumulation bounds everything it can offer.
//
// Combinations are visited in the order of that bound; once enough plans
// fit, a combination whose bound is not better than the last of them is
// not simulated at all. Combinations whose parameters, gradients and
// optimizer state alone exceed the device — a bound that holds at every
// optimizer step, when all three are alive — are ruled out before any
// simulation. Expandable segments change only what the allocator reserves,
// not the time, so they are tried only where they let a combination run a
// larger micro-batch than it could without them.
//
// The first fact is the one the largest-batch search (package solve) rests
// on too, and like it holds for the requested and allocated bytes but only
// nearly for what the allocator reserves: near the boundary, fragmentation
// can make a micro-batch fail where a larger one fits. The bisection then
// settles on one boundary, which fits, and may miss a faster plan beyond a
// failing value; every plan it reports was simulated and fits.
//
// What each combination costs is kept small. Its step times come from the
// op records of one simulated micro-batch per precision and training
// (predict.Records), carried to every micro-batch size, and from one timed
// pass per graph, precision and checkpointing (cost.TimePass), finished for
// each optimizer and accumulation; a time is taken only when the search
// asks for it. Its predictions are screened (predict.Request.Screen): a
// step stops at the op whose allocation takes its requested bytes past the
// device, since no allocator setting fits more than the device, and a
// first pass that does so rules that micro-batch out for every optimizer
// (no optimizer holds state before its first step). The graphs are built
// once a search (predict.Graphs).
//
// Two levers change more than memory and speed: training LoRA adapters
// (PEFT's defaults for the model family) or QLoRA's adapters on a 4-bit
// NF4 base instead of every parameter, and swapping Adam for bitsandbytes'
// 8-bit Adam, plain or paged, or transformers' Adafactor. They change what
// is trained or how it is optimised, and so the model the job produces;
// every plan that moves them is marked (Candidate.ChangesResults) and ranks
// after every plan that does not, and fewer such changes before more.
//
// The global batch counts the samples of an optimizer step over every
// data-parallel rank; a rank's micro-batch × accumulation is its share.
//
// A lever plugs in as one more dimension of Candidate and one more entry
// in the enumeration; the multi-GPU strategies join the same way.
package plan
