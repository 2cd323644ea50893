// Package spec reads a model written as a YAML list of layers and builds
// its Graph. It is for the models that are neither in the zoo nor a Hugging
// Face config or an ONNX file: a few lines describe an nn.Sequential, and
// batchfit predicts its training memory like any other model's.
//
//	name: mlp
//	input: {shape: [784], dtype: float32}
//	loss: cross_entropy
//	params:
//	  layers: 4
//	  hidden: 1024
//	layers:
//	  - flatten
//	  - repeat: $layers
//	    block:
//	      - linear: $hidden
//	      - relu
//	  - linear: 10
//
// Parse (or ParseFile) checks the file and returns a Spec; Spec.Build makes
// the Graph for one batch size, sequence length and set of parameter
// values. Every error names the file and line it comes from, as
// "mlp.yaml:12: linear: out must be a positive integer, got 0", and is a
// *Error.
//
// # The file
//
// A spec is one YAML mapping with these keys:
//
//   - name: the model's name (default: the file's base name without its
//     extension).
//   - description: free text.
//   - input (required): the shape of one sample, without the batch, and
//     its dtype: {shape: [3, 224, 224]}, {shape: [seq], dtype: int64}.
//     The dtype defaults to float32 and takes PyTorch's names (float16,
//     bf16, int64, ...). A bare list is a shape: input: [784]. The batch
//     size is prepended when the spec is built.
//   - loss: cross_entropy (the default) or mse. Cross-entropy takes the
//     last layer's output as logits, the classes being its last dimension:
//     [batch, classes] with int64 targets [batch], or [batch, seq, classes]
//     with targets [batch, seq], both flattened to [batch·seq] rows as
//     language models do. MSE compares the output with targets of its own
//     shape and dtype.
//   - params: symbols with their default values, as integers. Layers refer
//     to them, and they can be changed when the spec is built (the command
//     line's --layers and --hidden set the symbols layers and hidden). The
//     symbol seq is the sequence length; declaring it under params gives
//     its default.
//   - layers (required): the list of layers, run in order.
//
// # Layers
//
// A layer is written as its type alone (relu), or as a mapping whose first
// key is its type. The type's value is a mapping of fields, or the value of
// the type's main field (linear: 10 is linear: {out: 10}); further keys of
// the mapping are more fields:
//
//	layers:
//	  - relu
//	  - linear: {out: 10, bias: false}
//	  - linear: 10
//	    bias: false
//	  - conv2d: 64
//	    kernel: 3
//
// Type and field names ignore case, '_' and '-', so PyTorch's class names
// (Conv2d, BatchNorm2d, MaxPool2d) and argument names (out_features,
// kernel_size, num_embeddings) are accepted as they are. Sizes that
// PyTorch asks for but that follow from the input (in_features,
// in_channels, num_features) are inferred; when written, they are checked.
//
// Integer fields take an integer or an expression over symbols: $hidden,
// 4 * $dim, $layers - 1, $dim // $heads. Expressions have + - * / // and
// parentheses; / must divide exactly, // rounds down. The $ is optional
// (seq and $seq are the same symbol). Pair fields (kernel, stride,
// padding, dilation, size) take one value for both sides or a pair [h, w].
// Dimension fields (dim, start) count the batch as dimension 0, as PyTorch
// does, and may be negative; dimension 0 itself is refused.
//
//	type                fields (main field first; defaults in parentheses)
//	linear              out, bias (true), in
//	conv2d              out, kernel, stride (1), padding (0, or same or valid),
//	                    dilation (1), groups (1), bias (true), in
//	batchnorm2d         features                       input [batch, C, H, W]
//	batchnorm1d         features                       input [batch, C] or [batch, C, L]
//	layernorm           dims (1), bias (true)          normalizes the last dims dimensions
//	rmsnorm
//	relu, gelu, silu,   inplace (false); gelu also approximate (none or tanh)
//	sigmoid, tanh, hardswish, hardsigmoid
//	softmax, logsoftmax dim (-1)
//	dropout             p (0.5), inplace (false)
//	maxpool2d           kernel, stride (kernel), padding (0), dilation (1), ceil_mode (false)
//	avgpool2d           kernel, stride (kernel), padding (0), ceil_mode (false)
//	adaptiveavgpool2d   size
//	flatten             start (1)
//	mean                dim (one or a list)
//	embedding           num, dim                       input: integer ids
//	position_embedding  num                            adds learned positions to [batch, seq, dim]
//	attention           heads, causal (false), bias (true), dropout (0)
//	                    self-attention on [batch, seq, dim]: qkv and output projections
//	residual            layers                         y = x + f(x); f must keep the shape
//	repeat              count, block                   the block, count times
//
// Every layer also takes name, its module name. Layers are named as
// nn.Sequential names them, by their index in their list ("0", "1", ...),
// so that parameters are named "3.weight" or "layers.2.0.bias"; a repeat
// without a name that is the only such repeat in its list is named
// "layers".
//
// Each repetition of a repeat is one checkpointable block of the graph
// (graph.Builder.Block), named after the repeat and the repetition:
// layers.0, layers.1, .... A repeat inside a repeated block repeats its
// layers within the outer block.
//
// YAML anchors and aliases may name a list of layers once and use it
// again (block: &mlp [...] and later residual: *mlp).
//
// # Limits
//
// A spec is at most MaxFileSize bytes and nests residual and repeat at most
// MaxDepth deep. Build refuses, before building anything, a spec whose
// layers expand to more than MaxOps ops, and refuses tensors and totals of
// parameters or activations of more than MaxElements elements, so that no
// file can make batchfit allocate without bound.
package spec
