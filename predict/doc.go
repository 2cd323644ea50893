// Package predict runs the whole pipeline for one question: a model source
// is built into a Graph for the requested sizes, the step simulator turns
// training steps on it into a Trace, and the allocator simulator replays
// the Trace on the chosen GPU. The Result carries the static breakdown
// (parameters, gradients, optimizer state, saved activations, batch), the
// allocator's timeline (peak allocated, peak reserved, per-step figures),
// and the verdict: whether the job fits on the device, and which figure
// decided it.
package predict
