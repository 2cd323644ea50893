// Package onnx reads ONNX models exported from PyTorch and builds their
// training graphs: an ONNX file is one more source of a graph.Graph, like
// the zoo and the YAML layer spec.
//
//	m, err := onnx.Load("resnet18.onnx")        // or onnx.Parse(data, name)
//	g, err := m.Build(models.Config{Batch: 64})  // *Model is a predict.Source
//
// # Reading
//
// Load reads at most MaxFileSize (2 GiB, the protobuf limit) and decodes
// the ModelProto with the bindings in package onnxpb. Weights are never
// needed, only their shapes and types, so an initializer may be
//
//   - inline (raw_data or the typed fields): its length is checked
//     against its declared shape, and small integer and float constants
//     are decoded (shape vectors, axes, scalars, position ids);
//   - external (data_location EXTERNAL): its dims and data_type are used
//     and the file named by its location is never opened;
//   - stripped (dims and type, no data), or missing altogether: a graph
//     input that only weight slots use (a file exported with
//     export_params=False), or a name that only value_info describes,
//     stands for the weight.
//
// Declared shapes of more than 2^40 elements, data that does not match
// its shape, truncated or non-protobuf files, files without a graph, an
// ir_version or an opset, and opsets newer than 20, are refused with an
// error naming the file and what was expected. Parse never panics (FuzzLoad).
//
// # Shapes
//
// Shapes are inferred once, at load time, symbolically: a size is a
// monomial c·batch^i·seq^j. The batch is axis 0 of the first data input:
// its dim_param ("batch", "N", ...), or, in a file exported without a
// dynamic batch axis, its fixed size, which is then also recognised as
// the first entry of literal Reshape targets. A second dim_param at axis 1
// of an input is the sequence length (Dims reports models.DimSeq and Build
// needs Config.Seq); a fixed axis 1 of a token input is DefaultSeq. Any
// other symbolic size is an error. The shape arithmetic of an export
// (Shape, Gather, Unsqueeze, Concat, Slice, Cast, Add/Sub/Mul/Div, Equal,
// Where, Range, ConstantOfShape, Expand on constants) is folded with those
// symbols, so x.view(x.size(0), -1) follows the batch. Build evaluates the
// sizes and checks every op's shape against the Builder's.
//
// # Operators
//
// Supported (opset 7 to 20, as torch 1.13 exports opset 13 to 17):
//
//	Conv (2-D)                 → Conv2d; W, B are parameters
//	BatchNormalization         → BatchNorm (training mode always; scale and
//	                             bias are parameters, mean and var buffers)
//	LayerNormalization         → LayerNorm; also the ReduceMean/Sub/Pow/
//	                             ReduceMean/Add/Sqrt/Div/Mul/Add pattern of
//	                             older opsets (without the Mul weight it
//	                             stays primitive ops)
//	Gemm, MatMul with a weight → Linear (F.linear), a following bias Add
//	                             fused; a MatMul weight [in, out] (or the
//	                             Transpose of a [out, in] one) is the
//	                             parameter [out, in]
//	MatMul of two activations  → MatMul
//	Relu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu → the activation
//	Clip                       → Hardtanh (ReLU6)
//	Sqrt, Reciprocal, Erf      → Sqrt, Reciprocal, Erf
//	Div/Erf/Add/Mul/Mul (erf GELU pattern) → GELU
//	Softmax, LogSoftmax        → Softmax, LogSoftmax
//	MaxPool, AveragePool       → MaxPool2d, AvgPool2d
//	GlobalAveragePool          → Mean over H, W viewed keepdim (what
//	                             adaptive_avg_pool2d(1) runs: it saves
//	                             nothing)
//	ReduceMean                 → Mean (+ a view for keepdims)
//	Flatten, Reshape, Unsqueeze, Squeeze → views; a reshape that PyTorch
//	                             cannot do as a view (its strides, by
//	                             PyTorch's computeStride) is a copy
//	Transpose, Expand, Slice, Split, Gather of a constant index → views
//	Gather from a weight       → Embedding; Gather with constant 1-D
//	                             indices (index_select) → a new tensor
//	Concat                     → Cat
//	Add, Sub                   → Add (sub saves nothing either)
//	Mul, Div                   → Mul (div saves what mul saves)
//	x op number (Add/Sub/Mul/Div/Neg) → a scalar op that saves nothing
//	Pow with a constant exponent → x * x (saves x, as pow does)
//	Dropout                    → Dropout with the node's ratio
//	Pad                        → constant_pad_nd (no op when every pad is
//	                             zero), reflect and edge → reflection and
//	                             replication padding, which save their input
//	Identity, Cast             → nothing, or Cast
//	Constant, Shape, ConstantOfShape, Range, Equal, Where → folded
//
// An unsupported operator (or an operator of another domain, or one used
// in a way batchfit cannot map) is an error naming the op type, the node
// name and its index. A graph of more than MaxNodes nodes is refused before
// conversion, which is otherwise linear in the graph's size.
//
// # Parameters
//
// Parameters are the float initializers (or missing weights) that feed
// weight slots: Conv W and B, Gemm B and C, a constant MatMul operand,
// BatchNormalization and LayerNormalization scale and bias, an embedding
// table, and any other float initializer of more than one element used as
// an operand (position embeddings, class tokens). BatchNormalization mean
// and var are buffers. One-element float initializers are numbers;
// integer initializers are constants (a buffer, or an extra input when
// their shape follows the batch, when an op uses them as a tensor, as the
// zoo declares the position ids forward() creates). A weight shared by a
// Linear and an embedding (tied embeddings) is one parameter; one shared
// by convolution or normalization layers is counted once per use (Notes).
//
// # Training
//
// ONNX files describe inference, so a few facts of training are decided
// here:
//
//   - BatchNormalization is simulated in training mode whether the file was
//     exported in training mode (training_mode=1, as validation/onnx/export.py
//     does with torch.onnx.TrainingMode.TRAINING) or in eval mode.
//   - Dropout nodes (kept by a training-mode export) become training-mode
//     dropout with their ratio. An eval-mode export removes dropout
//     entirely and its probability cannot be recovered: such dropout is
//     not modelled (Notes says when the file looks eval-mode).
//   - In-place ops (nn.ReLU(inplace=True), out += identity) are not
//     recorded by ONNX: every op writes a new tensor. Saved activations are
//     the same; the transient peak during the forward pass can be higher
//     than PyTorch's.
//   - The loss is cross_entropy on the first graph output: logits [N, C]
//     with int64 class targets [N]; logits [N, ..., C] are viewed as
//     [N·..., C] with targets [N, ...] (the masked-LM loss of
//     transformers); an output of rank 0 or 1 gets mse_loss against a float
//     target of its shape.
//   - The graph has no checkpointable blocks (Graph.Blocks is empty), so
//     activation checkpointing changes nothing for an ONNX model.
//
// # Validation
//
// validation/onnx/export.py exports the seed networks, resnet18,
// mobilenet_v3_small and a small transformer with torch 1.13 into
// testdata/onnx (weights stripped) and records what PyTorch saves for
// them; TestExports checks parameter counts (exactly) and saved
// activation bytes (within 1 %) against those figures and against
// testdata/reference/torch-cpu.json.
package onnx
