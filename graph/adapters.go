package graph

import (
	"fmt"
	"sort"
	"strings"
)

// Adapters describe parameter-efficient fine-tuning: LoRA adapters on
// named Linear layers, and frozen parameters. A Builder with Adapters set
// builds the model as PEFT's get_peft_model leaves it.
//
// LoRA follows peft.tuners.lora.layer.Linear: the base layer keeps its
// weight (frozen), and its output gets lora_B(lora_A(dropout(x))) *
// scaling added, out of place, where lora_A is nn.Linear(in, r, bias=False),
// lora_B nn.Linear(r, out, bias=False), dropout nn.Dropout(p) (nn.Identity
// for p = 0) and scaling = alpha / r. With LoRA every parameter outside
// the adapters is frozen (requires_grad=False), as get_peft_model does.
type Adapters struct {
	// Rank is LoRA's r; 0 means no LoRA.
	Rank    int64
	Alpha   float64
	Dropout float64
	// Targets are module names as PEFT's target_modules list matches them:
	// a Linear whose full name equals a target or ends with "." + target.
	Targets []string
	// Freeze lists module names (or prefixes of them, matched the same
	// way) whose parameters are frozen.
	Freeze []string
	// Native: the adapters are the training library's own, LitGPT's
	// (litgpt/lora.py LoRALinear) or torchtune's (torchtune/modules/peft
	// LoRALinear), not PEFT's. They differ only on a quantized base: the
	// adapter weights are made in the model's dtype (Fabric's init dtype,
	// torchtune's set_default_dtype), and forward adds (B(A(dropout(x)))) *
	// scaling to the base result on x as it comes, with no defensive clone
	// and no casts around the adapter.
	Native bool
	// Float32 is PEFT's autocast_adapter_dtype=True, get_peft_model's
	// default from PEFT 0.12 (peft/tuners/tuners_utils.py,
	// BaseTunerLayer._cast_adapter_dtype): float16 and bfloat16 adapter
	// weights are cast to float32 after they are made, so on a
	// half-precision base the adapters, their gradients and their
	// optimizer state are float32, and Linear.forward casts the input to
	// the adapter's dtype (_cast_input_dtype) and the sum back to the
	// base result's (result.to(torch_result_dtype)). Before 0.12 an
	// adapter takes its base weight's dtype whenever that is floating
	// (LoraLayer._move_adapter_to_device_of_base_layer). Native adapters
	// ignore it.
	Float32 bool
}

// peftQuant reports whether PEFT's rules for an adapter on a quantized
// base layer apply (float32 adapters, casts, the 4-bit clone).
func (a *Adapters) peftQuant() bool { return a != nil && !a.Native }

// float32 reports whether the adapter on a base layer quantized in format
// qf (NoQuant: a plain Linear) is float32 and PEFT casts around it. nn.Linear
// makes the adapters float32; PEFT before 0.12 casts them to the base
// weight's dtype when that is floating
// (_move_adapter_to_device_of_base_layer: weight.dtype.is_floating_point),
// which a bitsandbytes weight is only with a float quant_storage; from 0.12
// autocast_adapter_dtype keeps them float32 in every case.
func (a *Adapters) float32(qf QuantFormat, floatStorage bool) bool {
	if a == nil || a.Native {
		return false
	}
	if a.Float32 {
		return true
	}
	return qf != NoQuant && !floatStorage
}

// Scaling is alpha / r.
func (a *Adapters) Scaling() float64 { return a.Alpha / float64(a.Rank) }

// matches reports whether the module name matches a PEFT-style target.
func matches(name, target string) bool {
	return name == target || strings.HasSuffix(name, "."+target)
}

// frozen reports whether the parameter at path (module.param) is frozen,
// noting which --freeze names matched.
func (b *Builder) frozen(path string) bool {
	a := b.Adapters
	if a == nil {
		return false
	}
	if a.Rank > 0 {
		return true // every base parameter, with LoRA
	}
	module := path
	if i := strings.LastIndex(path, "."); i >= 0 {
		module = path[:i]
	}
	hit := false
	for _, f := range a.Freeze {
		// a module and every module inside it
		if strings.HasPrefix(module+".", f+".") || strings.Contains("."+module+".", "."+f+".") {
			if b.freezeHits == nil {
				b.freezeHits = map[string]bool{}
			}
			b.freezeHits[f] = true
			hit = true
		}
	}
	return hit
}

// loraTarget reports whether the Linear at path gets an adapter.
func (a *Adapters) loraTarget(path string) bool {
	if a == nil || a.Rank <= 0 {
		return false
	}
	for _, t := range a.Targets {
		if matches(path, t) {
			return true
		}
	}
	return false
}

// Check validates the settings.
func (a *Adapters) Check() error {
	if a == nil {
		return nil
	}
	if a.Rank < 0 {
		return fmt.Errorf("LoRA rank must be positive, got %d", a.Rank)
	}
	if a.Rank > 0 && len(a.Targets) == 0 {
		return fmt.Errorf("LoRA needs target modules (PEFT's target_modules), such as q_proj,v_proj")
	}
	if !(a.Dropout >= 0 && a.Dropout < 1) { // NaN too
		return fmt.Errorf("LoRA dropout must be in [0, 1), got %g", a.Dropout)
	}
	return nil
}

// LoRA is an adapter's two parameters.
type LoRA struct{ A, B TensorID }

// LoRAParams creates, when a LoRA target matches the Linear name (in →
// out features) under the current scope, its adapter's parameters
// name.lora_A.weight [r, in] and name.lora_B.weight [out, r], trainable,
// in PEFT's registration order (after the base layer's own). It also
// records the Linear's name for errors about targets.
func (b *Builder) LoRAParams(name string, in, out int64) (LoRA, bool) {
	if b.Adapters == nil || b.inLoRA {
		return LoRA{}, false
	}
	if b.linearNames == nil {
		b.linearNames, b.loraHits = map[string]bool{}, map[string]bool{}
	}
	b.linearNames[name] = true
	if !b.Adapters.loraTarget(b.path(name)) {
		return LoRA{}, false
	}
	b.loraHits[b.path(name)] = true
	b.inLoRA = true
	defer func() { b.inLoRA = false }()
	r := b.Adapters.Rank
	b.Push(name)
	l := LoRA{A: b.Param("lora_A.weight", Shape{r, in}), B: b.Param("lora_B.weight", Shape{out, r})}
	b.Pop()
	if qf, ok := b.quantized[b.path(name)]; b.err == nil && b.Adapters.float32(qf, ok && b.floatStorage()) {
		// nn.Linear makes them float32, and PEFT's
		// _move_adapter_to_device_of_base_layer casts an adapter to the
		// base layer's dtype only when that is floating: on a quantized
		// base with uint8 storage they stay float32, and from PEFT 0.12
		// get_peft_model's autocast_adapter_dtype keeps half ones
		// float32 on every base (see Adapters.float32)
		for _, id := range []TensorID{l.A, l.B} {
			b.g.Tensors[id].DType, b.g.Tensors[id].KeepDType = F32, true
		}
	}
	return l, true
}

// ApplyLoRA adds the adapter l of the Linear name (input x, base output
// base) to its output, as peft's Linear.forward does.
func (b *Builder) ApplyLoRA(name string, x, base TensorID, l LoRA) TensorID {
	a := b.Adapters
	qf, quantized := b.quantized[b.path(name)]
	if !a.peftQuant() {
		qf, quantized = NoQuant, false
	}
	// PEFT casts around a float32 adapter: the quantized layers outside
	// autocast (bnb.Linear4bit.forward's requires_conversion), the plain
	// Linear through _cast_input_dtype and result.to(torch_result_dtype)
	casts := a.float32(qf, quantized && b.floatStorage())
	if qf == NF4 || qf == FP4 {
		// peft.tuners.lora.bnb.Linear4bit.forward: "for 4bit, we need to
		// defensively clone" the base layer's result before adding
		base = b.Clone(name+".clone", base)
	}
	b.inLoRA = true
	defer func() { b.inLoRA = false }()
	b.Push(name)
	h := x
	if casts {
		// x = self._cast_input_dtype(x, lora_A.weight.dtype), float32;
		// a no-op where x is float32 already (under autocast the model's
		// own parameters are)
		h = b.CastAs("cast_input", h, F32, CastToDTypeOutsideAutocast)
	}
	if a.Dropout > 0 {
		h = b.Dropout("lora_dropout", h, a.Dropout, false)
	}
	u := b.LinearWith("lora_A", h, l.A, None)
	v := b.LinearWith("lora_B", u, l.B, None)
	v = b.Scale("scaling", v)
	if casts {
		// output.to(expected_dtype) (quantized layers) or the sum's
		// result.to(torch_result_dtype) (plain Linear): back to the base
		// result's dtype. The plain Linear adds in float32 first; the
		// cast is taken before the add, the same bytes kept
		v = b.CastAs("cast_output", v, F32, CastToModelOutsideAutocast)
	}
	b.Pop()
	return b.Add(name+".lora_add", base, v)
}

// floatStorage reports a bitsandbytes 4-bit base whose packed codes are
// stored in a float dtype (bnb_4bit_quant_storage).
func (b *Builder) floatStorage() bool { return b.Quant != nil && b.Quant.FloatStorage }

// unmatchedTargets lists the LoRA targets no Linear matched.
func (b *Builder) unmatchedTargets() []string {
	var out []string
	for _, t := range b.Adapters.Targets {
		hit := false
		for p := range b.loraHits {
			if matches(p, t) {
				hit = true
				break
			}
		}
		if !hit {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}
