// Package capture brings a user's own PyTorch model to batchfit.
//
// `batchfit capture file.py:make` runs the user's factory under an embedded
// Python module (bfcapture.py) with the user's own interpreter. The model
// is built on the meta device, so no weight is allocated, and one forward
// pass and its loss run under a TorchDispatchMode that records every aten
// op with its arguments and results, a TorchFunctionMode that records the
// torch-level function each op belongs to (F.linear, F.conv2d, ...), the
// module hooks that name the module running, and the saved-tensor hooks
// that say what autograd keeps for backward. The model runs at two batch
// sizes, and every size that differs is recorded as linear in the batch.
// The result is a .bfgraph file (JSON, optionally gzip-compressed,
// "batchfit-graph" version 1).
//
// Load reads such a file and Build maps it onto the simulator's ops
// (package graph) at any batch size. Why map instead of replaying what
// autograd saved on the meta device: what an op saves, and in which dtype,
// depends on the precision (autocast's casts), the device (CUDA's kernels
// save other tensors than the CPU's: a bool dropout mask instead of a float
// noise, cuDNN's batch-norm reserve) and the levers batchfit answers
// (checkpointing, LoRA); those rules live in package train, keyed by op
// kind. The mapping uses the torch function where one names a whole unit
// the simulator has a rule for (linear, cross_entropy, dropout,
// scaled_dot_product_attention), because the aten ops a function
// decomposes into differ between PyTorch releases while the function does
// not, and the aten op otherwise. A recurrent module's call
// (torch._VF.lstm, gru, rnn_tanh, rnn_relu), which the meta device runs
// step by step as the CPU does, becomes the one cuDNN call a GPU runs
// (rnn.go), unless the graph is built for the CPU (graph.Config.CPU). An
// op without a rule is refused, naming the op and the module that ran it.
// No rule depends on the model.
package capture
