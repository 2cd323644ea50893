package graph

import (
	"fmt"
	"sort"
	"strings"
)

// DType is a tensor element type.
type DType uint8

const (
	F32 DType = iota
	F16
	BF16
	F64
	I64
	I32
	I8
	U8
	Bool
	F8E4M3
	F8E5M2
)

var dtypeInfo = [...]struct {
	name  string
	size  int64
	float bool
}{
	F32:    {"float32", 4, true},
	F16:    {"float16", 2, true},
	BF16:   {"bfloat16", 2, true},
	F64:    {"float64", 8, true},
	I64:    {"int64", 8, false},
	I32:    {"int32", 4, false},
	I8:     {"int8", 1, false},
	U8:     {"uint8", 1, false},
	Bool:   {"bool", 1, false},
	F8E4M3: {"float8_e4m3fn", 1, true},
	F8E5M2: {"float8_e5m2", 1, true},
}

// Size is the number of bytes of one element.
func (d DType) Size() int64 {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].size
	}
	return 0
}

// IsFloat reports whether d is a floating-point type (one that can require
// gradients).
func (d DType) IsFloat() bool { return int(d) < len(dtypeInfo) && dtypeInfo[d].float }

func (d DType) String() string {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].name
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

var dtypeAliases = map[string]DType{
	"float32": F32, "fp32": F32, "float": F32, "f32": F32,
	"float16": F16, "fp16": F16, "half": F16, "f16": F16,
	"bfloat16": BF16, "bf16": BF16,
	"float64": F64, "fp64": F64, "double": F64,
	"int64": I64, "long": I64, "int32": I32, "int": I32, "int8": I8, "uint8": U8, "bool": Bool,
	"float8_e4m3fn": F8E4M3, "f8_e4m3": F8E4M3, "float8_e5m2": F8E5M2, "f8_e5m2": F8E5M2,
}

// ParseDType accepts PyTorch's names and their common short forms.
func ParseDType(s string) (DType, error) {
	if d, ok := dtypeAliases[strings.ToLower(strings.TrimPrefix(s, "torch."))]; ok {
		return d, nil
	}
	return 0, fmt.Errorf("unknown dtype %q (known: float32, float16, bfloat16, float64, int64, int32, int8, uint8, bool)", s)
}

// Shape is a tensor shape with concrete sizes.
type Shape []int64

// Numel is the number of elements. It does not check for overflow: the
// shapes of a built graph are (the Builder and Validate refuse a tensor
// beyond MaxBytes, see CheckedBytes); a shape from elsewhere is checked
// with CheckedBytes first.
func (s Shape) Numel() int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Clone returns a copy of s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Role says where a tensor comes from.
type Role uint8

const (
	Activation Role = iota // produced by an op
	Parameter              // nn.Parameter
	Buffer                 // registered buffer (running statistics, ...)
	Input                  // the input batch
	Target                 // the targets of the loss
)

func (r Role) String() string {
	return [...]string{"activation", "parameter", "buffer", "input", "target"}[r]
}

// TensorID indexes Graph.Tensors. None marks an absent optional tensor.
type TensorID int32

// None is the TensorID of an absent tensor (a Linear without bias).
const None TensorID = -1

// Tensor is one tensor of the graph.
type Tensor struct {
	Name  string
	Shape Shape
	DType DType
	Role  Role
	// View is the tensor whose storage this one shares (a view, or the
	// result of an in-place op), or None when it owns its storage. It always
	// names a tensor that owns its storage.
	View TensorID
	// RequiresGrad follows PyTorch: parameters require grad, the input batch
	// does not, an op's output does when any differentiable input does.
	RequiresGrad bool
	// Untrained marks a frozen parameter that autograd nonetheless treats
	// as requiring grad: a view of a flat parameter that does (see
	// UnfreezeMixedUnits). Its gradient is computed; no optimizer holds it.
	Untrained bool
	// Quant is the stored format of a quantized Linear weight (nil for
	// every other tensor): the parameter's bytes on the device are
	// Quant.Pieces, not Shape × DType.
	Quant *Quant
	// KeepDType marks a parameter that keeps DType whatever the
	// precision: PEFT's float32 LoRA weights on a quantized base.
	KeepDType bool
	// Strides are the tensor's strides in elements where it is dense but
	// laid out in another order than its dims' (a TensorIterator result
	// of a permuted operand: Whisper's conv output permuted and added to
	// its positions), as a capture recorded them; nil where it is
	// contiguous, not dense, or not known (the builders). A reentrant
	// checkpoint's detached input has them, and so its .grad
	// (train.handOnDetached).
	Strides []int64
	// Leaf marks an activation a factory op made (torch.zeros) and
	// Python then made require grad (tensor.requires_grad = True): a leaf
	// of autograd, not a parameter. The AccumulateGrad node of an op that
	// reads it holds it (accumulate_grad.h keeps the variable), so it
	// lives as long as that node, and its gradient becomes its .grad,
	// which lives with it.
	Leaf bool
}

// DenseStrides is TensorImpl::compute_non_overlapping_and_dense
// (c10/core/TensorImpl.cpp): the dims of shape s, ordered by their
// strides st (elements) from the smallest, each step the product of the
// sizes before it, dims of size 1 skipped: the tensor fills its storage
// without gaps or overlaps, in whatever order.
func DenseStrides(s Shape, st []int64) bool {
	if len(st) != len(s) {
		return false
	}
	order := make([]int, len(s))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return st[order[a]] > st[order[b]] })
	want := int64(1)
	for k := len(order) - 1; k >= 0; k-- {
		d := order[k]
		if s[d] == 1 {
			continue
		}
		if st[d] != want {
			return false
		}
		want *= s[d]
	}
	return true
}

// Bytes is the size of the tensor's own elements.
func (t *Tensor) Bytes() int64 { return t.Shape.Numel() * t.DType.Size() }

// QueryLayout is the order in memory of an attention query's [B, H, L, D]
// dims.
type QueryLayout uint8

const (
	// QueryBHLD is a contiguous query.
	QueryBHLD QueryLayout = iota
	// QueryBLHD is the transpose(1, 2) of a contiguous [B, L, H, D], as
	// transformers' q_proj(x).view(B, L, H, D).transpose(1, 2) is.
	QueryBLHD
	// QueryLBHD is a contiguous [L, B, E] seen as [B, H, L, D], as
	// nn.MultiheadAttention's q.view(L, B*H, D).transpose(0, 1) then
	// .view(B, H, L, D) is (F.multi_head_attention_forward).
	QueryLBHD
)

// Order is the query's dims, as indices into [B, H, L, D], from the
// outermost in memory to the innermost.
func (l QueryLayout) Order() [4]int {
	switch l {
	case QueryBLHD:
		return [4]int{0, 2, 1, 3}
	case QueryLBHD:
		return [4]int{2, 0, 1, 3}
	}
	return [4]int{0, 1, 2, 3}
}

// Attr holds the attributes ops need; each op kind uses a few of them.
type Attr struct {
	P        float64 // dropout probability
	Inplace  bool
	Dim      int
	Kernel   [2]int64
	Stride   [2]int64
	Padding  [2]int64
	Dilation [2]int64
	Groups   int64
	Heads    int64 // attention heads (query)
	KVHeads  int64 // attention key/value heads (grouped-query attention)
	Causal   bool
	// GQA marks an attention called with enable_gqa=True (PyTorch >= 2.5):
	// where fewer key/value heads than query heads reach the math kernel,
	// it repeats them (repeat_interleave) before the products, where a
	// call without it leaves at::matmul to broadcast them.
	GQA bool
	// Query is how an attention's query [B, H, L, D] is laid out in
	// memory: kernels that allocate their output in the query's layout
	// (the CPU flash kernel) return a tensor that the view back to the
	// sequence's layout leaves contiguous, and the .contiguous() that
	// follows copies nothing.
	Query QueryLayout
	// QueryContiguous marks an attention whose query is a contiguous
	// [B, H, L, D] tensor (the builder's contiguity), rather than a
	// permuted view or a strided slice of a fused projection: CUDA's
	// flash kernel then lays its output out as the query.
	QueryContiguous bool
	Scalar          bool // mul/div by a Python number rather than a tensor
	// Number is, on a Scalar op, the 0-d host tensor the Python argument
	// parser wrapped the number in, where the capture or the builder
	// knows it (the zero Number where the op takes none or nobody says).
	Number Number
	// Host marks a Full op standing for a tensor the model keeps in host
	// memory, made before the step (a plain attribute built on the CPU):
	// it takes no device memory and the step allocates nothing for it.
	Host bool
	// InputCopy marks a layer_norm whose input is not contiguous:
	// native_layer_norm works on input.contiguous(), a temporary copy (it
	// still saves the input argument itself); and a linear whose N-D input
	// was not contiguous, so that F.linear took the matmul path (its input
	// is matmul's copy). On a cast it is .to(copy=True): always a copy.
	InputCopy bool
	// ChannelsLast marks a convolution whose input is in channels-last
	// layout while its weight is not (ConvNeXt's downsampling after a
	// permuted LayerNorm): the kernels then make a channels-last copy of
	// the weight.
	ChannelsLast bool
	// Pad is a pad's mode.
	Pad PadMode
	// Count is the number of dims a roll shifts (each beyond the first is
	// one more intermediate copy: roll_common rolls one dim at a time).
	Count int
	// CastTo is a cast's target (the output's DType unless it says
	// otherwise).
	CastTo CastTarget
	// Slot is the cache tensor a KVCache op updates (2·layer for keys,
	// 2·layer+1 for values); Static marks a preallocated cache written in
	// place. Inplace on a KVCache op says the first update of a dynamic
	// cache keeps key_states itself rather than a copy.
	Slot   int
	Static bool
	// WeightView marks a Linear whose weight reaches the matmul as a view
	// (an einsum of the weight, which rearranges it first): autocast's
	// cast cache, which holds only leaves that are not views, does not
	// apply, and the weight is cast anew at every use.
	WeightView bool
	// All marks a mean over every element, torch.mean(x) without dims
	// (MeanBackward0, which keeps only sizes), apart from a mean over
	// listed dims (MeanBackward1).
	All bool
	// Saved are the positions in Inputs that a Custom op saves.
	Saved []int
	// RNN describes an RNN op's layers (nil for every other op).
	RNN *RNNAttr
	// Perm is a View op's order of dims when the view reorders them (a
	// transpose, permute or t): output dim i is input dim Perm[i]. It is
	// nil for a view that keeps the elements' order (view, reshape,
	// flatten, squeeze, unsqueeze, expand) and for the slices. The
	// backward of a reordering view reorders the gradient back
	// (derivatives.yaml: transpose's grad.transpose(dim0, dim1),
	// permute's permute_backwards), so a contiguous gradient comes back
	// strided: the simulator follows it (train's gradient layout).
	Perm []int
}

// Number is a Python number handed to add, sub, mul or div where the
// Tensor overload takes a tensor (x * 0.5, x / 4, x - 2, x.mul_(0.5)):
// torch's bindings wrap it in a 0-d CPU tensor before the op runs
// (PythonArgs::tensor_slow, torch/csrc/utils/python_arg_parser.cpp:
// scalar_to_tensor, set_wrapped_number) of the number's Python type,
// float64 for a float, int64 for an int, bool for a bool. The Scalar
// overloads, reached only from C++ (F.dropout's div_.Scalar), take a
// c10::Scalar: no tensor.
type Number struct {
	// Wrapped says the op is handed the number so; DType is the wrapped
	// tensor's.
	Wrapped bool
	DType   DType
	// Kept: the op's node saves the wrapped tensor. The derivative
	// formulas of tools/autograd/derivatives.yaml read other for self's
	// gradient in mul.Tensor (mul_tensor_backward(grad, other, ...)) and
	// div.Tensor; add and sub save nothing.
	Kept bool
}

// WrappedDouble is a Python float handed to mul or div (x * 0.5), which
// the node keeps.
var WrappedDouble = Number{Wrapped: true, DType: F64, Kept: true}

// CastTarget is the dtype a Cast converts to.
type CastTarget uint8

const (
	// CastToDType: the output tensor's DType.
	CastToDType CastTarget = iota
	// CastToDTypeOutsideAutocast: the output's DType, but nothing under
	// autocast (PEFT's `if not torch.is_autocast_enabled(): x =
	// x.to(lora_A.weight.dtype)`).
	CastToDTypeOutsideAutocast
	// CastToModelOutsideAutocast: the model's parameter dtype, but nothing
	// under autocast (PEFT's `output.to(expected_dtype)`, the base
	// layer's result dtype).
	CastToModelOutsideAutocast
)

// PadMode is F.pad's mode.
type PadMode uint8

const (
	PadConstant  PadMode = iota // constant_pad_nd
	PadReflect                  // reflection_pad1d/2d/3d
	PadReplicate                // replication_pad1d/2d/3d (ONNX "edge")
)

// Op is one primitive operation of the forward pass.
type Op struct {
	Kind   Kind
	Name   string     // module path, e.g. "layer1.0.conv1"
	Inputs []TensorID // activation operands, in order
	Weight TensorID   // None when absent
	Bias   TensorID   // None when absent
	// Buffers are non-parameter state the op reads (running mean and var).
	Buffers []TensorID
	Output  TensorID
	Attr    Attr
	// Block is the index in Graph.Blocks of the checkpointable block the op
	// belongs to, or -1.
	Block int32
}

// Graph is a model for one setup: tensors, ops in forward order, and the
// loss.
type Graph struct {
	Name    string
	Tensors []Tensor
	Ops     []Op
	Inputs  []TensorID
	Targets []TensorID
	Loss    TensorID
	// Returned are tensors the forward returns beside the loss: a Hugging
	// Face ModelOutput holds the logits (CausalLMOutputWithPast(loss=loss,
	// logits=logits)), so they live to the forward's end whatever their
	// last use, and as long as the caller keeps the output.
	Returned []TensorID
	// Blocks names the repeated blocks (transformer layers, residual
	// blocks) that activation checkpointing wraps one at a time.
	Blocks []string
	// BlockArgs are, per block, the tensors its call is handed, read or
	// not (a Llama layer's position_ids beside its position embeddings),
	// as a capture recorded them; nil where not known (the builders,
	// older captures): what torch.utils.checkpoint keeps for the block.
	BlockArgs [][]TensorID
}

// Tensor returns the tensor with the given id.
func (g *Graph) Tensor(id TensorID) *Tensor { return &g.Tensors[id] }

// Storage returns the id of the tensor owning id's storage.
func (g *Graph) Storage(id TensorID) TensorID {
	if v := g.Tensors[id].View; v != None {
		return v
	}
	return id
}

// StorageBytes is the size of the storage behind id.
func (g *Graph) StorageBytes(id TensorID) int64 {
	return g.Tensors[g.Storage(id)].Bytes()
}

// ParamCount is the number of parameter elements, each shared (tied)
// parameter counted once.
func (g *Graph) ParamCount() int64 {
	var n int64
	for i := range g.Tensors {
		if g.Tensors[i].Role == Parameter {
			n += g.Tensors[i].Shape.Numel()
		}
	}
	return n
}

// Bytes sums the bytes of the tensors with the given role.
func (g *Graph) Bytes(r Role) int64 {
	var n int64
	for i := range g.Tensors {
		if g.Tensors[i].Role == r && g.Tensors[i].View == None {
			n += g.Tensors[i].Bytes()
		}
	}
	return n
}

// Params lists the parameter tensors in creation order, which is the order
// of model.parameters() for the builders in this project.
func (g *Graph) Params() []TensorID {
	var ps []TensorID
	for i := range g.Tensors {
		if g.Tensors[i].Role == Parameter {
			ps = append(ps, TensorID(i))
		}
	}
	return ps
}

// Validate checks the structural invariants the simulator relies on: ids in
// range, views pointing at owners, ops writing fresh tensors in order.
func (g *Graph) Validate() error {
	n := TensorID(len(g.Tensors))
	in := func(id TensorID) bool { return id >= 0 && id < n }
	for i, t := range g.Tensors {
		if t.View != None {
			if !in(t.View) {
				return fmt.Errorf("tensor %d (%s): view of unknown tensor %d", i, t.Name, t.View)
			}
			if g.Tensors[t.View].View != None {
				return fmt.Errorf("tensor %d (%s): view of a view", i, t.Name)
			}
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("tensor %d (%s): negative dimension in %v", i, t.Name, t.Shape)
			}
		}
	}
	if len(g.Ops) > MaxOps {
		return opsError(g.Name)
	}
	produced := make([]bool, n)
	for i, t := range g.Tensors {
		if t.Role != Activation {
			produced[i] = true
		}
	}
	for i, op := range g.Ops {
		for _, id := range op.Inputs {
			if !in(id) || !produced[id] {
				return fmt.Errorf("op %d (%s %s): input %d is not produced before it", i, op.Kind, op.Name, id)
			}
		}
		for _, id := range append([]TensorID{op.Weight, op.Bias}, op.Buffers...) {
			if id != None && (!in(id) || g.Tensors[id].Role == Activation) {
				return fmt.Errorf("op %d (%s %s): weight, bias or buffer %d is not a parameter or buffer", i, op.Kind, op.Name, id)
			}
		}
		if !in(op.Output) || produced[op.Output] {
			return fmt.Errorf("op %d (%s %s): output %d missing or written twice", i, op.Kind, op.Name, op.Output)
		}
		produced[op.Output] = true
		if op.Block >= int32(len(g.Blocks)) {
			return fmt.Errorf("op %d (%s %s): block %d out of range", i, op.Kind, op.Name, op.Block)
		}
	}
	if len(g.BlockArgs) > len(g.Blocks) {
		return fmt.Errorf("graph %s: arguments of %d blocks, %d blocks", g.Name, len(g.BlockArgs), len(g.Blocks))
	}
	for b, args := range g.BlockArgs {
		for _, t := range args {
			if !in(t) {
				return fmt.Errorf("block %d (%s): argument %d out of range", b, g.Blocks[b], t)
			}
		}
	}
	if !in(g.Loss) || !produced[g.Loss] {
		return fmt.Errorf("graph %s has no loss", g.Name)
	}
	for _, t := range g.Returned {
		if !in(t) || !produced[t] {
			return fmt.Errorf("graph %s returns tensor %d, which no op makes", g.Name, t)
		}
	}
	return g.checkTotal()
}

// UnfreezeMixedUnits applies FSDP1's flat parameters to g: with
// use_orig_params=True a unit (here a block) may hold frozen and trainable
// parameters together, and then the frozen ones are views of a flat
// parameter that requires grad, so autograd computes their gradients and
// the ops save what those gradients need — "the gradient memory usage
// will be higher than expected (namely, equivalent to not freezing those
// parameters)", as FullyShardedDataParallel's documentation says. Such
// parameters become RequiresGrad and Untrained (the optimizer is given the
// trainable ones only), and the ops' outputs are marked again. It reports
// how many parameters it changed.
func (g *Graph) UnfreezeMixedUnits() int {
	block := map[TensorID]int32{}
	for i := range g.Ops {
		op := &g.Ops[i]
		for _, t := range append([]TensorID{op.Weight, op.Bias}, op.Inputs...) {
			if t != None && g.Tensors[t].Role == Parameter && op.Block >= 0 {
				if _, ok := block[t]; !ok {
					block[t] = op.Block
				}
			}
		}
	}
	trainable := map[int32]bool{}
	for t, b := range block {
		if g.Tensors[t].RequiresGrad {
			trainable[b] = true
		}
	}
	n := 0
	for t, b := range block {
		tt := &g.Tensors[t]
		if trainable[b] && !tt.RequiresGrad && tt.Quant == nil && tt.DType.IsFloat() {
			tt.RequiresGrad, tt.Untrained = true, true
			n++
		}
	}
	if n == 0 {
		return 0
	}
	for i := range g.Ops {
		op := &g.Ops[i]
		if op.Kind == Full || op.Kind == Rand || op.Kind == Compare {
			continue // made outside autograd
		}
		out := &g.Tensors[op.Output]
		if out.RequiresGrad || !out.DType.IsFloat() {
			continue
		}
		for _, t := range append([]TensorID{op.Weight, op.Bias}, op.Inputs...) {
			if t != None && g.Tensors[t].RequiresGrad {
				out.RequiresGrad = true
				break
			}
		}
	}
	return n
}
