package models

import (
	"fmt"

	"github.com/batchfit/batchfit/graph"
)

// Which transformers releases the graphs can follow (Config.Transformers,
// TransformerConfig.Version), and the causal-LM loss of each.
//
// The releases read are 4.36.2, 4.38.2, 4.44.2, 4.45.2, 4.46.3, 4.47.1,
// 4.48.3, 4.49.0, 4.50.3 (the published wheels' modeling_*.py and
// loss/loss_utils.py) and the current main branch; for GPT-2's buffers
// and eager mask also 4.53.3, 4.56.2, 4.57.3, 5.0.0, 5.1.0, 5.2.0, 5.3.0,
// 5.8.0 and 5.17.0 (transformers_gpt2.go). Before 4.36 no decoder
// had an SDPA attention class (LlamaSdpaAttention arrived in 4.36), so
// every model ran eager attention by default, which the graphs of a
// release do not follow: older releases are refused. Releases after
// 4.50.3 up to the 5.x series are taken to be the main branch read (the
// loss there is 4.49's); a major series after 5 is refused.

const (
	// hfOldestRelease is the oldest release the graphs follow.
	hfOldestRelease hfVersion = 4036
	// hfNewestMajor is the newest major series accepted (5.x, taken as
	// the main branch read).
	hfNewestMajor = 5
)

// hfSDPASince is, for each model_type, the oldest of the releases read
// whose modeling file has the model with an SDPA attention
// (_supports_sdpa = True on its PreTrainedModel). Before it the model either
// did not exist (Qwen2 and Gemma are absent from 4.36.2, Phi-3 from
// 4.38.2) or from_pretrained's default attention was eager, which the
// graphs do not follow for those releases. A release between the one read
// before and this one may have it too; it is refused all the same, being
// unread. T5 is eager in every release (it adds a learned position bias),
// and its graph is the eager one.
var hfSDPASince = map[string]hfVersion{
	"llama": 4036, "mistral": 4038, "qwen2": 4038, "gemma": 4038, "phi3": 4045,
	"gpt2": 4044, "gpt_neox": 4044, "bert": 4044, "vit": 4044, "roberta": 4045, "opt": 4046,
}

// CheckTransformersRelease reports whether v names a transformers release
// the graphs can follow: "" or "latest" (the current code), or
// major.minor[.patch] from 4.36 through the 5.x series.
func CheckTransformersRelease(v string) error {
	n, err := parseHFVersion(v)
	if err != nil {
		return err
	}
	switch {
	case n == hfCurrent:
		return nil
	case n < hfOldestRelease:
		return fmt.Errorf("transformers %s: the oldest release batchfit follows is 4.36 (before it no model had an SDPA attention class, and eager attention by default is not modelled)", v)
	case int(n)/1000 > hfNewestMajor:
		return fmt.Errorf("transformers %s: newer than any release batchfit has read (the 5.x series is the newest); leave the flag out for the current code", v)
	}
	return nil
}

// checkRelease refuses a release the architecture's graph does not
// follow (hfSDPASince).
func (tc TransformerConfig) checkRelease() error {
	if err := CheckTransformersRelease(tc.Version); err != nil {
		return err
	}
	if since, ok := hfSDPASince[tc.Arch]; ok && tc.version() < since {
		return fmt.Errorf("transformers %s: %s is followed from %d.%d on (the oldest release read that has it with SDPA attention; before, it was absent or ran eager attention by default)",
			tc.Version, tc.Arch, since/1000, since%1000)
	}
	return nil
}

// hfLossFunctionSince is the release from which a causal LM computes its
// loss with self.loss_function (loss_utils.ForCausalLMLoss) instead of
// inline: LlamaForCausalLM, Qwen2, Gemma and Phi3 from 4.46; Mistral, GPT-2
// and OPT from 4.48 (their 4.47.1 forward still has the inline
// CrossEntropyLoss); GPT-NeoX from 4.49.
func hfLossFunctionSince(arch string) hfVersion {
	switch arch {
	case "mistral", "gpt2", "opt":
		return 4048
	case "gpt_neox":
		return 4049
	}
	return 4046
}

// hfPadLabels is the release from which ForCausalLMLoss pads the labels
// instead of slicing the logits (4.49.0's loss_utils.py; 4.48.3's still
// copies logits[..., :-1, :]).
const hfPadLabels hfVersion = 4049

// causalLMLoss is the causal-LM loss on logits [B, L, V], as the release
// computes it.
//
// Before the model's switch to self.loss_function (hfLossFunctionSince)
// the forward computes it inline; the Llama family (Llama, Mistral, Qwen2,
// Gemma, Phi3) upcasts first:
//
//	logits = logits.float()                          # ≤ 4.45: every position, in the forward, labels or not
//	shift_logits = logits[..., :-1, :].contiguous()  # copy [B, L-1, V] (a view when B = 1)
//	shift_labels = labels[..., 1:].contiguous()      # copy [B, L-1]
//	CrossEntropyLoss()(shift_logits.view(-1, V), shift_labels.view(-1))
//
// and returns the logits it upcast (CausalLMOutputWithPast(loss, logits)):
// the float32 copy. LlamaForCausalLM.forward 4.36–4.44:
// lm_head(hidden_states) then logits = logits.float(); 4.45:
// lm_head(hidden_states[:, -num_logits_to_keep:, :]).float(), every
// position in training (num_logits_to_keep=0), and logits.float() again
// under labels (a no-op); MistralForCausalLM 4.46–4.47 upcasts under
// labels only, the same in training. GPT-2, GPT-NeoX and OPT never upcast
// inline.
//
// With self.loss_function (ForCausalLMLoss, 4.46 on) the forward returns
// lm_head's logits and the loss upcasts its own copy:
//
//	logits = logits.float()                          # a copy unless float32
//	4.46–4.48:
//	  shift_logits = logits[..., :-1, :].contiguous()  # copy [B, L-1, V] (a view when B = 1)
//	  shift_labels = labels[..., 1:].contiguous()      # copy [B, L-1]
//	  fixed_cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1))
//	4.49 on:
//	  labels = F.pad(labels, (0, 1), value=-100)       # new [B, L+1] int64
//	  shift_labels = labels[..., 1:].contiguous()      # copy [B, L]
//	  fixed_cross_entropy(logits.view(-1, V), shift_labels.view(-1))
//
// The Builder has no pad, so the padded labels are cat(labels,
// labels[:, :1]) along dim 1: the same new [B, L+1] int64 storage. The
// output returns the logits the loss read (graph.Returned; eval keeps them
// with the output).
func (t *hfBuilder) causalLMLoss(logits, labels graph.TensorID) {
	b := t.b
	V := t.tc.VocabSize
	v := t.tc.version()
	if t.loopLoss {
		t.loopCausalLMLoss(logits, labels)
		return
	}
	if v < hfLossFunctionSince(t.tc.Arch) {
		b.Scope("loss", func() {
			switch t.tc.Arch {
			case "llama", "mistral", "qwen2", "gemma", "phi3":
				logits = b.Cast("float", logits, graph.F32)
			}
			b.Return(logits)
			t.shiftedCrossEntropy(logits, labels)
		})
		return
	}
	b.Return(logits)
	b.Scope("loss", func() {
		lf := b.Cast("float", logits, graph.F32)
		if v < hfPadLabels {
			t.shiftedCrossEntropy(lf, labels)
			return
		}
		padded := b.Cat("pad", 1, labels, b.Narrow("pad_value", labels, 1, 1))
		shift := b.Narrow("shift", padded, 1, t.L)
		shift = b.Contiguous("contiguous", shift)
		flat := b.Reshape("view_logits", lf, -1, V)
		target := b.Reshape("view_labels", shift, -1)
		b.CrossEntropy("cross_entropy", flat, target)
	})
}

// shiftedCrossEntropy is the loss on logits[..., :-1, :].contiguous() and
// labels[..., 1:].contiguous(), as the inline losses and ForCausalLMLoss
// before 4.49 compute it.
func (t *hfBuilder) shiftedCrossEntropy(logits, labels graph.TensorID) {
	b := t.b
	sl := b.Contiguous("shift_logits", b.Narrow("shift_logits_slice", logits, 1, t.L-1))
	lab := b.Contiguous("shift_labels", b.Narrow("shift_labels_slice", labels, 1, t.L-1))
	b.CrossEntropy("cross_entropy", b.Reshape("view_logits", sl, -1, t.tc.VocabSize), b.Reshape("view_labels", lab, -1))
}

// loopCausalLMLoss is the loss a training loop computes itself from the
// logits a model called without labels returns (graph.Config.
// LossFromLogits; validation/measure.py's Trainer.loss):
//
//	labels = F.pad(ids[:, 1:], (0, 1), value=-100)   # new [B, L] int64
//	F.cross_entropy(logits.view(-1, V), labels.reshape(-1))
//
// on the logits as the model returns them, half under autocast (lm_head is
// a Linear), with no float upcast: cross_entropy's own rules (the float32
// copy nll_loss makes under CUDA autocast) apply. The padded labels are
// cat(labels[:, 1:], labels[:, :1]), the same new [B, L] int64 storage.
func (t *hfBuilder) loopCausalLMLoss(logits, labels graph.TensorID) {
	b := t.b
	b.Return(logits)
	b.Scope("loss", func() {
		padded := b.Cat("pad", 1, b.Narrow("shift", labels, 1, t.L-1), b.Narrow("pad_value", labels, 1, 1))
		flat := b.Reshape("view_logits", logits, -1, t.tc.VocabSize)
		target := b.Reshape("view_labels", padded, -1)
		b.CrossEntropy("cross_entropy", flat, target)
	})
}
