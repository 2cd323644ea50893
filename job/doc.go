// Package job is the one typed description of a job batchfit predicts:
// the model and its sizes, how it is trained (precision, optimizer,
// accumulation, checkpointing, attention), the releases of the software
// that runs it, the allocator's settings, adapters and quantization,
// data, tensor and pipeline parallelism, inference, and the GPU.
//
// Job holds the values; Fields is the table of them, one entry a field:
// its flag name, kind, choices, default, help, the environment variable it
// falls back to, and the commands that take it. Everything that presents
// or reads a job is made from the table, so that a field or a choice
// added once appears everywhere: the command line's flags (Register), the
// web server's decoding of a request and its /api/fields, the page's
// controls and options, a recording's header, and the validation cases.
// Choices come from the package that owns them: the optimizers from
// train.Optimizers, the precisions from train.Precisions.
//
// Request turns a Job into a predict.Request. The rules of compatibility
// live there: what needs adapters, which optimizers have a single
// implementation, which flags exclude each other, and how defaults
// resolve (AdamW's weight decay, the strategy for more than one GPU). Bad
// input is a UsageError, with the flag named.
//
// The environment is read once, by the command line's entry, into an Env
// (EnvFrom(os.Getenv)) and passed in Options: a web request and a test
// pass none, so that no answer depends on the shell it was asked from.
package job
