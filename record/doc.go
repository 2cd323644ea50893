// Package record watches a real training job: it runs the user's command
// unchanged with a small recorder loaded into its Python, receives what the
// recorder reports after every optimizer step, and reads and writes the
// recording as JSON lines that `batchfit validate` accepts.
//
// The recorder (recorder/sitecustomize.py, embedded in the binary) is
// written to a temporary directory put first on PYTHONPATH, so Python
// imports it as sitecustomize before the script runs; it runs the
// sitecustomize it shadows, and hooks PyTorch only when the script imports
// torch. After every optimizer step it reports the figures PyTorch's own
// caching allocator keeps — torch.cuda.memory_allocated,
// max_memory_allocated, memory_reserved, max_memory_reserved, and from
// memory_stats num_alloc_retries and num_ooms — with the batch size (the
// first dimension of the outermost module's first tensor argument) and the
// number of forward passes since the last step. An out-of-memory error that
// ends the program is reported with its message and, on request, a memory
// snapshot (torch.cuda.memory._dump_snapshot, with the allocator's history
// recorded from the start).
//
// Reports travel over a pipe the child inherits as file descriptor
// $BATCHFIT_RECORD_FD, never over the child's standard streams, which stay
// the user's: the traceback of a failing script reaches the terminal as it
// would without batchfit, and the child's exit status is passed through.
// Hooks are registered with PyTorch 2's register_optimizer_step_post_hook
// where it exists and by wrapping each optimizer class's step once where it
// does not (PyTorch 1.13); the batch comes from the global forward hooks of
// torch.nn.modules.module.
package record
