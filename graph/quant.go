package graph

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/batchfit/batchfit/suggest"
)

// QuantFormat is the stored format of a quantized Linear weight.
type QuantFormat uint8

const (
	// NoQuant: the weight is an ordinary parameter.
	NoQuant QuantFormat = iota
	// NF4 and FP4 are bitsandbytes' 4-bit formats (Linear4bit,
	// Params4bit): two codes per byte and a float32 absmax per block.
	NF4
	FP4
	// Int8 is bitsandbytes' LLM.int8 (Linear8bitLt, Int8Params): one int8
	// per element and a float32 scale (SCB) per output row.
	Int8
	// GPTQ is auto-gptq's QuantLinear: int32-packed codes, packed zeros
	// and float16 scales per group of input features.
	GPTQ
	// AWQ is autoawq's GEMM QuantLinear: the same pieces packed along the
	// output features.
	AWQ
)

var quantNames = [...]string{NoQuant: "none", NF4: "nf4", FP4: "fp4", Int8: "int8", GPTQ: "gptq", AWQ: "awq"}

func (f QuantFormat) String() string {
	if int(f) < len(quantNames) {
		return quantNames[f]
	}
	return fmt.Sprintf("quant(%d)", uint8(f))
}

// ParseQuantFormat reads a --quant name.
func ParseQuantFormat(s string) (QuantFormat, error) {
	k := strings.ToLower(strings.TrimSpace(s))
	for f, n := range quantNames {
		if f != int(NoQuant) && n == k {
			return QuantFormat(f), nil
		}
	}
	known := quantNames[1:]
	msg := fmt.Sprintf("unknown quantization %q", s)
	if near := suggest.Nearest(k, known, 2); len(near) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", near[0])
	}
	return NoQuant, fmt.Errorf("%s (known: %s)", msg, strings.Join(known, ", "))
}

// Quant describes how a model's Linear weights are stored and computed
// with: bitsandbytes' BitsAndBytesConfig, or a GPTQ / AWQ checkpoint's
// quantization_config. A Builder with Quant set marks the weight of every
// Linear layer it builds, except those Skip names, as stored in this
// format; the weight is frozen (quantized weights are never trained).
type Quant struct {
	Format QuantFormat
	// Bits of a GPTQ or AWQ code (4 for the bitsandbytes 4-bit formats, 8
	// for Int8).
	Bits int64
	// BlockSize is the bitsandbytes 4-bit block: one absmax per
	// BlockSize elements (quantize_4bit's default, 64).
	BlockSize int64
	// DoubleQuant quantizes the absmax vector again
	// (bnb_4bit_use_double_quant, compress_statistics): uint8 absmax with
	// a float32 absmax per 256 of them.
	DoubleQuant bool
	// GroupSize is GPTQ's and AWQ's group of input features sharing a
	// scale and zero (-1 or 0: the whole row).
	GroupSize int64
	// DescAct is GPTQ's act-order (desc_act); g_idx is stored either way.
	DescAct bool
	// Compute is the dtype the weight is dequantized to for its matmul
	// (bnb_4bit_compute_dtype; float16 for GPTQ and AWQ, whose scales are
	// float16).
	Compute DType
	// ComputeFollowsPrecision: the compute dtype is the precision's
	// (the autocast dtype under mixed precision, else the parameters'),
	// whatever precision the job is simulated in; Compute holds it for the
	// precision the job was given.
	ComputeFollowsPrecision bool
	// Prequantized: the checkpoint stores the quantized tensors, which
	// load as they are; otherwise each weight is loaded in the model's
	// dtype and quantized on the device (Params4bit._quantize,
	// Int8Params._quantize).
	Prequantized bool
	// KeepsInput: bitsandbytes before 0.43.2, whose MatMul4Bit kept its
	// input A for backward whenever an input needed a gradient
	// (ctx.tensors = (A, B)); 0.43.2 keeps only the weight
	// (bitsandbytes#1270, "delete useless buffered activation").
	KeepsInput bool
	// HalfState: QuantState.dtype, the dtype the weight had when
	// quantize_4bit ran and which dequantize_4bit gives back before the
	// matmul's .to(A.dtype), is float16 whatever the model's dtype (false:
	// the model's parameter dtype). bitsandbytes before 0.43.0 quantized
	// from a float16 copy (Params4bit.cuda: self.data.contiguous().half()
	// .cuda(device)), and Lightning Fabric's BitsandbytesPrecision does in
	// every release (_Linear4bit.quantize: weight.contiguous().to(
	// device=device, dtype=torch.half)).
	HalfState bool
	// Head: the output head (an lm_head of its own, not tied to the
	// embedding) is quantized too. transformers keeps it
	// (get_keys_to_not_convert); Lightning Fabric's BitsandbytesPrecision
	// replaces every torch.nn.Linear built under init_module
	// (_ClassReplacementContextManager({"torch.nn.Linear": ...})) or found
	// by convert_module (_convert_layers without ignore_modules), the
	// head included, as LitGPT's --quantize runs it.
	Head bool
	// Torchao: the NF4 weight is torchao's NF4Tensor (to_nf4, linear_nf4),
	// as torchtune's QLoRA builds it, not bitsandbytes' Params4bit. Its
	// layout and temporaries follow torchao v0.1 (torchao/dtypes/
	// nf4tensor.py), which torchtune pinned in April 2024: block 64,
	// scalers double-quantized per 256, state in bfloat16.
	Torchao bool
	// FloatStorage: bnb_4bit_quant_storage is a floating dtype, the
	// model's (bitsandbytes 0.43.0 and later: Params4bit(quant_storage=)),
	// so that the packed codes are a float tensor FSDP can flatten and
	// shard with the rest of a unit. The bytes are the same, two codes a
	// byte; what changes is that PEFT sees a floating base weight
	// (see Adapters.Float32).
	FloatStorage bool
	// Skip lists Linear modules left unquantized (llm_int8_skip_modules,
	// modules_to_not_convert), matched like LoRA targets.
	Skip []string
}

// bnb4Nested is the block of quantize_blockwise over the absmax vector
// under double quantization (quantize_4bit calls it with blocksize=256).
const bnb4Nested = 256

// Check validates the settings.
func (q *Quant) Check() error {
	if q == nil {
		return nil
	}
	switch q.Format {
	case NF4, FP4:
		switch q.BlockSize {
		case 32, 64, 128, 256, 512, 1024, 2048, 4096:
		default:
			// quantize_4bit's docstring: valid values are 32 to 4096, powers of two
			return fmt.Errorf("4-bit block size must be 32, 64, 128, 256, 512, 1024, 2048 or 4096, got %d", q.BlockSize)
		}
	case Int8:
	case GPTQ, AWQ:
		switch q.Bits {
		case 2, 3, 4, 8:
		default:
			return fmt.Errorf("%s bits must be 2, 3, 4 or 8, got %d", q.Format, q.Bits)
		}
		if q.Format == AWQ && q.Bits != 4 {
			return fmt.Errorf("awq stores 4-bit codes only, got %d bits", q.Bits)
		}
		if q.GroupSize < -1 {
			return fmt.Errorf("%s group size must be positive or -1, got %d", q.Format, q.GroupSize)
		}
	default:
		return fmt.Errorf("unknown quantization format %d", q.Format)
	}
	if !q.Compute.IsFloat() {
		return fmt.Errorf("quantization compute dtype must be floating, got %s", q.Compute)
	}
	return nil
}

// skipped reports whether the Linear at path stays unquantized.
func (q *Quant) skipped(path string) bool {
	for _, s := range q.Skip {
		if matches(path, s) || strings.HasPrefix(path, s+".") || strings.Contains(path, "."+s+".") {
			return true
		}
	}
	return false
}

// QuantPiece is one allocation a quantized weight keeps on the device.
type QuantPiece struct {
	Name  string // the tensor's name after the weight's (as checkpoints store them)
	DType DType
	Numel int64
}

// Bytes is the piece's size.
func (p QuantPiece) Bytes() int64 { return p.Numel * p.DType.Size() }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// Pieces lists the device tensors that hold a quantized [out, in] weight,
// in the order they are allocated, as the libraries create them:
//
//   - nf4/fp4 (bitsandbytes 0.49 quantize_4bit): the packed codes, uint8
//     [(n+1)/2, 1]; the absmax, float32, one per BlockSize elements; the
//     16-entry float32 code get_4bit_type makes for every weight. With
//     double quantization the absmax is replaced by its quantize_blockwise
//     (blocksize 256): the mean subtracted first (offset, a 0-d float32),
//     uint8 codes (one per block), a float32 absmax per 256 blocks and a
//     copy of the 256-entry float32 dynamic map (QuantState(code=code.to(
//     A.device, copy=True))).
//   - int8 (Int8Params._quantize, int8_vectorwise_quant): CB int8 [out,
//     in] and SCB float32 [out].
//   - gptq (auto-gptq QuantLinear): qweight int32 [in·bits/32, out], qzeros
//     int32 [groups, out·bits/32], scales float16 [groups, out], g_idx
//     int32 [in], with groups = ceil(in / group_size).
//   - awq (autoawq WQLinear_GEMM): qweight int32 [in, out·bits/32], qzeros
//     int32 [groups, out·bits/32], scales float16 [groups, out].
//
// Packed int32 dimensions round up (a partial word is still a word).
func (q *Quant) Pieces(out, in int64) []QuantPiece {
	n := out * in
	switch q.Format {
	case NF4, FP4:
		blocks := ceilDiv(n, q.BlockSize)
		if q.Torchao {
			return torchaoPieces(n, blocks)
		}
		ps := []QuantPiece{{"weight", U8, (n + 1) / 2}}
		if !q.DoubleQuant {
			return append(ps, QuantPiece{"weight.absmax", F32, blocks}, QuantPiece{"weight.quant_map", F32, 16})
		}
		return append(ps,
			QuantPiece{"weight.quant_map", F32, 16},
			QuantPiece{"weight.offset", F32, 1},
			QuantPiece{"weight.absmax", U8, blocks},
			QuantPiece{"weight.nested_absmax", F32, ceilDiv(blocks, bnb4Nested)},
			QuantPiece{"weight.nested_quant_map", F32, 256})
	case Int8:
		return []QuantPiece{{"weight", I8, n}, {"SCB", F32, out}}
	case GPTQ, AWQ:
		g := q.Groups(in)
		packedOut := ceilDiv(out*q.Bits, 32)
		if q.Format == AWQ {
			return []QuantPiece{{"qweight", I32, in * packedOut}, {"qzeros", I32, g * packedOut}, {"scales", F16, g * out}}
		}
		return []QuantPiece{{"qweight", I32, ceilDiv(in*q.Bits, 32) * out}, {"qzeros", I32, g * packedOut},
			{"scales", F16, g * out}, {"g_idx", I32, in}}
	}
	return nil
}

// torchaoPieces are the tensors NF4Tensor.from_tensor (torchao v0.1)
// keeps, in the order it makes them: the 16-entry bfloat16 nf4 table
// (torch.tensor(..., device=device)); double_quantize_scalers' mean of the
// block absmaxes (0-d bfloat16), its quantization_factor, whose [:, 0]
// view keeps the whole 256 / (2 * scaler_absmax) it is cut from (one
// bfloat16 per block, as torchao's own comment says: "realizes n_scaler
// entries"), and the int8 quantized scalers (one per block); then
// convert_to_norm_float_weight's uint8 codes, two to a byte.
func torchaoPieces(n, blocks int64) []QuantPiece {
	return []QuantPiece{{"nf4", BF16, 16}, {"scaler_mean", BF16, 1}, {"quantization_factor", BF16, blocks},
		{"quantized_scalers", I8, blocks}, {"quantized_data", U8, (n + 1) / 2}}
}

// Groups is the number of groups of input features sharing a scale and
// zero (GPTQ, AWQ).
func (q *Quant) Groups(in int64) int64 {
	if q.GroupSize <= 0 {
		return 1
	}
	return ceilDiv(in, q.GroupSize)
}

// StoredBytes is the sum of Pieces.
func (q *Quant) StoredBytes(out, in int64) int64 {
	var s int64
	for _, p := range q.Pieces(out, in) {
		s += p.Bytes()
	}
	return s
}

// String describes the format as flags would give it.
func (q *Quant) String() string {
	switch q.Format {
	case NF4, FP4:
		s := fmt.Sprintf("%s (block %d", q.Format, q.BlockSize)
		if q.Torchao {
			s = fmt.Sprintf("%s (torchao NF4Tensor, block %d", q.Format, q.BlockSize)
		}
		if q.DoubleQuant {
			s += ", double quantization"
		}
		return s + ", compute " + q.Compute.String() + ")"
	case GPTQ, AWQ:
		g := "per row"
		if q.GroupSize > 0 {
			g = fmt.Sprintf("group %d", q.GroupSize)
		}
		return fmt.Sprintf("%s %d-bit (%s)", q.Format, q.Bits, g)
	}
	return q.Format.String()
}

// quantize marks the weight w of the Linear name (under the current
// scope) as stored in the Builder's quantized format, frozen.
func (b *Builder) quantize(name string, w TensorID) {
	q := b.Quant
	if q == nil || q.Format == NoQuant || b.inLoRA || w == None || b.err != nil {
		return
	}
	if q.skipped(b.path(name)) {
		return
	}
	t := &b.g.Tensors[w]
	t.Quant = q
	t.RequiresGrad = false
	if b.quantized == nil {
		b.quantized = map[string]QuantFormat{}
	}
	b.quantized[b.path(name)] = q.Format
}

// QuantizeLinear marks the weight w of the Linear name as quantized when
// the Builder has a Quant (builders that create a Linear's parameters
// themselves call it beside LoRAParams).
func (b *Builder) QuantizeLinear(name string, w TensorID) { b.quantize(name, w) }

// FabricExcessNoteID names the documented gap of LitGPT's published QLoRA
// peaks (Lightning Fabric's 4-bit layers, bitsandbytes before 0.43.2):
// they exceed the rules read from the sources by up to about one more
// bfloat16 copy of each 4-bit layer's input, which no source read explains
// (docs/accuracy.md, section 8, "LitGPT's 4-bit rows"; section 11.3).
const FabricExcessNoteID = "fabric-4bit-excess"

// FabricExcessNote is printed with every prediction whose 4-bit layers are
// Fabric's.
const FabricExcessNote = "note [" + FabricExcessNoteID + "]: LitGPT's published QLoRA peaks (Fabric's 4-bit layers, bitsandbytes before 0.43.2) are above these rules by up to about one more bfloat16 copy of each 4-bit layer's input (12-13 % of the peak on its 2024 config_hub table, 2-7 % on its 2023 resource tables), which the sources read do not explain: expect up to that much more"

// QuantizeHead marks the output head's weight w (the Linear name under
// the current scope) as quantized when the Quant covers the head
// (Quant.Head); model builders call it for an lm_head of its own.
func (b *Builder) QuantizeHead(name string, w TensorID) {
	if b.Quant != nil && b.Quant.Head {
		b.quantize(name, w)
	}
}

// BnbKeepsInput reports whether bitsandbytes release v ("0.41.1"; empty:
// the current one) keeps MatMul4Bit's input for backward: every release
// before 0.43.2 does (see Quant.KeepsInput).
func BnbKeepsInput(v string) (bool, error) {
	n, err := bnbRelease(v)
	if err != nil || n == nil {
		return false, err
	}
	return n[0] == 0 && (n[1] < 43 || n[1] == 43 && n[2] < 2), nil
}

// BnbHalfState reports whether bitsandbytes release v (empty: the current
// one) quantizes a 4-bit weight from a float16 copy, so that its
// QuantState.dtype is float16 whatever the model's dtype: releases before
// 0.43.0 do (Params4bit.cuda: w = self.data.contiguous().half().cuda(
// device); 0.43.0 made it self.data.contiguous().cuda(device)).
func BnbHalfState(v string) (bool, error) {
	n, err := bnbRelease(v)
	if err != nil || n == nil {
		return false, err
	}
	return n[0] == 0 && n[1] < 43, nil
}

// PeftFloat32Adapters reports whether PEFT release v (empty: the current
// one) keeps LoRA adapters float32 on a half-precision base:
// get_peft_model's autocast_adapter_dtype=True, from 0.12.0.
func PeftFloat32Adapters(v string) (bool, error) {
	n, err := bnbRelease(v)
	if err != nil {
		return false, err
	}
	return n == nil || n[0] > 0 || n[1] >= 12, nil
}

// bnbRelease parses a bitsandbytes release ("0.41.1", "0.42"); nil for
// the empty string (the current release).
func bnbRelease(v string) (*[3]int, error) {
	if v == "" {
		return nil, nil
	}
	var n [3]int
	parts := strings.Split(strings.TrimPrefix(strings.TrimSpace(v), "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("release %q: want one such as 0.41.1", v)
	}
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 || x > 1000 {
			return nil, fmt.Errorf("release %q: want one such as 0.41.1", v)
		}
		n[i] = x
	}
	return &n, nil
}
