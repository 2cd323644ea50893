package graph

// Kind names a primitive op. The names follow the aten op (or autograd
// node) that PyTorch eager runs for the module or function that emits it.
type Kind string

const (
	Linear            Kind = "linear"     // F.linear → addmm / matmul
	MatMul            Kind = "matmul"     // torch.matmul / bmm of two activations
	Conv2d            Kind = "conv2d"     // convolution
	BatchNorm         Kind = "batch_norm" // native_batch_norm / cudnn_batch_norm
	LayerNorm         Kind = "layer_norm" // native_layer_norm
	RMSNorm           Kind = "rms_norm"
	ReLU              Kind = "relu"
	GELU              Kind = "gelu"
	GELUTanh          Kind = "gelu_tanh" // gelu(approximate="tanh"): one fused op
	NewGELU           Kind = "gelu_new"  // Hugging Face NewGELUActivation: the tanh formula as separate ops
	SiLU              Kind = "silu"
	Sigmoid           Kind = "sigmoid"
	Tanh              Kind = "tanh"
	Hardswish         Kind = "hardswish"
	Hardsigmoid       Kind = "hardsigmoid"
	Softmax           Kind = "softmax"
	LogSoftmax        Kind = "log_softmax"
	Dropout           Kind = "dropout"
	MaxPool2d         Kind = "max_pool2d"
	AvgPool2d         Kind = "avg_pool2d"
	AdaptiveAvgPool2d Kind = "adaptive_avg_pool2d"
	Mean              Kind = "mean"       // mean over dims; saves only sizes
	View              Kind = "view"       // any zero-copy view: reshape of contiguous, transpose, permute, select, expand, flatten
	Contiguous        Kind = "contiguous" // a copy into a new storage (contiguous, reshape of a non-contiguous tensor)
	Cast              Kind = "cast"       // .to(dtype)
	Add               Kind = "add"        // a + b (Attr.Inplace for +=)
	Mul               Kind = "mul"        // a * b (Attr.Scalar: a * number)
	Cat               Kind = "cat"
	Embedding         Kind = "embedding"
	Attention         Kind = "attention" // the core of scaled dot-product attention; the kernel is chosen by the setup
	CrossEntropy      Kind = "cross_entropy"
	MSELoss           Kind = "mse_loss"

	Hardtanh   Kind = "hardtanh"        // hardtanh(min, max); nn.ReLU6 is hardtanh(0, 6)
	Sqrt       Kind = "sqrt"            // torch.sqrt
	Reciprocal Kind = "reciprocal"      // torch.reciprocal (1 / x)
	Erf        Kind = "erf"             // torch.erf
	Rand       Kind = "rand"            // torch.empty(size, dtype=like.dtype).bernoulli_(p) (and div_): random noise made in forward, no grad
	Full       Kind = "full"            // like.new_zeros(size) and in-place fills: a constant made in forward, no grad
	Compare    Kind = "compare"         // eq / ne / lt ...: a bool result, no grad
	MaskedFill Kind = "masked_fill"     // x.masked_fill(mask, number), out of place
	Pad        Kind = "constant_pad_nd" // F.pad(x, pads) in constant mode: always a new tensor
	Roll       Kind = "roll"            // torch.roll over one or more dims: a new tensor
	Slice      Kind = "slice"           // x[start:end:step] along one dim: a view
	Index      Kind = "index"           // src[idx] with an integer index tensor (advanced indexing along dim 0)
	// AllGather and ReduceScatter are sequence parallelism's collectives
	// (Megatron-LM's gather_from_sequence_parallel_region and
	// reduce_scatter_to_sequence_parallel_region) along Attr.Dim: a new
	// tensor Attr.Groups times larger, or smaller. Their backward is the
	// other one. A Linear that saves an all-gathered input keeps the shard
	// instead and gathers it again in its backward, as Megatron's
	// LinearWithGradAccumulationAndAsyncCommunication does.
	AllGather     Kind = "all_gather"
	ReduceScatter Kind = "reduce_scatter"
	// Release is a Python function returning: its local variables (and
	// its arguments) let go of the tensors they held. It reads those
	// tensors, so they live until it runs, and makes nothing.
	Release Kind = "release"
	// KVCache is a Hugging Face cache layer's update(key_states, ...) for
	// one layer's keys or values: it returns the whole cache of that layer
	// (Attr.Slot names it, Attr.Static says a preallocated StaticCache).
	KVCache Kind = "kv_cache"
	// Custom is the application of a user's torch.autograd.Function: its
	// forward ran as ops of its own with grad off (their results save
	// nothing); this op gives the Function's result autograd's node. It
	// saves the Inputs that Attr.Saved lists (ctx.save_for_backward), and
	// its backward makes a gradient for each of the first Attr.Count
	// inputs that needs one. The output shares the forward's result.
	Custom Kind = "custom_function"
	// Pow is x ** number (pow.Tensor_Scalar); Rsqrt is torch.rsqrt.
	Pow   Kind = "pow"
	Rsqrt Kind = "rsqrt"
	// LeakyReLU is F.leaky_relu (Attr.Inplace for leaky_relu_).
	LeakyReLU Kind = "leaky_relu"
	// InstanceNorm is F.instance_norm with batch statistics, as
	// at::instance_norm runs it: the affine weight and bias repeated to
	// N×C, the input viewed as one sample of N×C channels, and batch_norm
	// over that (native_batch_norm, cudnn_batch_norm), the result viewed
	// back.
	InstanceNorm Kind = "instance_norm"
	// ConvTranspose2d is F.conv_transpose2d (aten::convolution with
	// transposed set): the weight is [C_in, C_out/groups, kh, kw].
	ConvTranspose2d Kind = "conv_transpose2d"
	// RNN is an nn.LSTM, nn.GRU or nn.RNN forward (torch._VF.lstm, gru,
	// rnn_tanh, rnn_relu) as PyTorch runs it on a GPU: one cuDNN call,
	// aten::_cudnn_rnn (aten/src/ATen/native/cudnn/RNN.cpp), over every
	// layer, direction and time step. Attr.RNN describes it; the inputs are
	// x, h_0, c_0 (LSTM only) and the module's flat weights; the output is
	// the last layer's hidden states at every step. On the CPU the same
	// call runs as per-timestep ops (aten::lstm's composite), which a
	// graph built with Config.CPU holds instead.
	RNN Kind = "rnn"
	// RNNState is the final hidden state h_n (Attr.Slot 0) or cell state
	// c_n (Attr.Slot 1) that the RNN op its input is returns beside its
	// output: the same kernel writes them, so they cost no op of their own.
	RNNState Kind = "rnn_state"
)
