package train

import (
	"fmt"
	"strings"
)

// Wrap is how FSDP's units are cut (the auto-wrap policy), which decides
// what of a LoRA model gets a gradient.
type Wrap string

const (
	// WrapBlock is transformer_auto_wrap_policy on the block class, one
	// unit per block (torch/distributed/fsdp/wrap.py), as Lightning
	// Fabric's FSDPStrategy(auto_wrap_policy={Block}) runs LitGPT. A
	// block's frozen base weights and its adapters share one flat
	// parameter, which FSDP1 allows only with use_orig_params=True
	// (Fabric's default): _validate_tensors_to_flatten in
	// torch/distributed/fsdp/_flat_param.py refuses mixed requires_grad
	// otherwise. The flat parameter then requires grad when any of its
	// parameters does (FlatParamHandle._init_flat_param_and_metadata:
	// requires_grad = any(p.requires_grad)), so backward produces, and the
	// unit reduce-scatters and keeps a shard of, a gradient of the whole
	// flat parameter, the frozen part included.
	WrapBlock Wrap = "block"
	// WrapLoRA is PEFT's fsdp_auto_wrap_policy (peft/utils/other.py):
	// lambda_auto_wrap_policy puts every leaf module whose weight requires
	// grad (lora_A, lora_B) in a unit of its own, or'ed with the block
	// policy, so the blocks' flat parameters hold only frozen weights and
	// get no gradient (use_orig_params=False, as the PEFT and accelerate
	// FSDP guides set it). transformers' Trainer installs it for every
	// PEFT model under FSDP (Trainer._fsdp_qlora_plugin_updates), and
	// Answer.AI's fsdp_qlora builds the same or'ed policy.
	WrapLoRA Wrap = "lora"
	// WrapParam is FSDP2's fully_shard: every parameter its own DTensor
	// shard; a frozen parameter has no gradient and is not reduced
	// (FSDPParamGroup.post_backward reduces the parameters whose grad is
	// not None), as torchtune's distributed LoRA and QLoRA recipes run.
	WrapParam Wrap = "param"
)

// ParseWrap reads an --fsdp-wrap name.
func ParseWrap(s string) (Wrap, error) {
	switch w := Wrap(strings.ToLower(strings.TrimSpace(s))); w {
	case "", "default":
		return "", nil // the library's default for the job (normalize)
	case WrapBlock, WrapLoRA, WrapParam:
		return w, nil
	case "transformer", "transformer-based-wrap", "transformer_based_wrap":
		return WrapBlock, nil
	case "peft", "lambda":
		return WrapLoRA, nil
	case "fully-shard", "fully_shard", "fsdp2":
		return WrapParam, nil
	}
	return "", fmt.Errorf("unknown FSDP wrap policy %q (want block, lora or param)", s)
}
