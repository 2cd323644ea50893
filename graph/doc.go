// Package graph describes a model as the step simulator sees it: tensors with
// concrete shapes and dtypes, and ops that read and write them, in the order
// PyTorch eager would run the forward pass.
//
// Every source of a model — the built-in zoo, the YAML layer spec, a Hugging
// Face config, an ONNX file — is only a builder of a Graph. A Graph is built
// for one setup (batch size, sequence length), so all shapes are concrete.
//
// Ops are the primitive autograd-visible operations of PyTorch (addmm,
// convolution, native_batch_norm, relu, the attention kernel, ...), not
// nn.Modules. What each op saves for backward is not described here: that is
// the op table of package train, the one place where those rules live. A
// graph only says which tensors exist, which are views of which storage, and
// which op produced which.
//
// Views (reshape of a contiguous tensor, transpose, permute, select, expand,
// in-place ops) are tensors whose View field names the tensor whose storage
// they share. PyTorch counts memory per storage, and so does the simulator.
package graph
