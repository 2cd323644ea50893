#!/usr/bin/env python3
"""More real transformers architectures, captured and held to whole CPU steps under PyTorch 2.x.

capture_hf.py holds twelve transformers models to the bytes autograd saves;
this script adds 28 more architectures and, as validation/capture_timm.py
does for timm, measures the peak of two whole CPU training steps of each:

* causal language models (``AutoModelForCausalLM.from_config``, the loss
  from ``labels``): OPT, Falcon, Phi, Phi-3, GPT-NeoX, GPT-J, CodeGen,
  Gemma 2, OLMo, Starcoder2, StableLM;
* masked language models with an attention mask of ones (``*ForMaskedLM``):
  DistilBERT, RoBERTa, ALBERT, ELECTRA, DeBERTa-v2;
* sequence-to-sequence models (the decoder's input made from ``labels``):
  BART, mT5, and Pegasus and Marian with an attention mask of ones;
* image classification at 32 px (``*ForImageClassification``, 10 labels,
  the loss from ``labels``): BEiT, DeiT, DINOv2, SegFormer, MobileViT,
  Swin, ResNet.

Each is built from its Config with no weights, at capture_hf.py's size: 2
layers, hidden 64, 4 heads, sequence 16, a vocabulary of 96 (the
convolutional stages of SegFormer, MobileViT and ResNet are as small, and
MODELS says how). Attention runs as transformers 4.44 picks it under torch
2.x, stated explicitly: "sdpa" where the class supports it
(``_supports_sdpa``), "eager" otherwise and for Gemma 2, which transformers
asks to be trained with eager attention (Gemma2ForCausalLM.forward's
warning: its SDPA path leaves out the attention's soft-capping).

For each model the script captures it with batchfit's capture module
(capture/bfcapture.py, ``capture(spec, out, batches, factory=...)``) at
batches 2 and 3 into ``testdata/capture/hf-NAME.bfgraph.gz``, measures at
batch 4 the bytes autograd saves by the end of the forward (capture_hf.py's
``measure``) and the peak of two whole CPU steps with
``Adam(foreach=False)`` (capture_timm.py's ``measure_steps``: peers.py's loop
and its ``real``, each model in a fresh process). The figures go to
``testdata/reference/transformers-torch2-cpu.json``, in
timm-torch2-cpu.json's form, with the torch and transformers versions.

    $BATCHFIT_PYENV validation/capture_transformers.py            # rewrite the captures and the reference
    $BATCHFIT_PYENV validation/capture_transformers.py --check    # CI: regenerate in a temp dir and compare
    $BATCHFIT_PYENV validation/capture_transformers.py --only 'hf-opt*' --out DIR --ref FILE

Left out, because the meta device has no values to answer what their
forward asks of the data: a mixture of experts' routing (Mixtral,
Qwen2-MoE: the tokens each expert takes are ``torch.where`` of the one-hot
choice of ``torch.topk``, an ``aten::nonzero`` whose size depends on the
values) and BLOOM (its attention takes ``kv_length = cache_position[-1] + 1``,
a tensor, as a size of ``view``, which calls ``.item()``). StableLM and
Qwen2-MoE default to 32 key-value heads, which 4 attention heads cannot
share (``repeat_kv`` by 4 // 32 = 0): StableLM is built with as many
key-value heads as heads. Pegasus and Marian, given no attention mask, ask
whether ``pad_token_id`` is among the ids
(``warn_if_padding_and_no_attention_mask``, ``.item()`` again): they are
given a mask of ones, as the masked language models are.

The Go tests validation/capture_transformers_test.go build each capture at
batch 4, simulate it under the 2.x CPU rules and hold its saved bytes and its
whole steps to these figures.
"""

import os
import sys
from typing import Any, Callable, Dict, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "capture"))
sys.path.insert(0, HERE)

import bfcapture  # noqa: E402
from capture_hf import BATCHES, HEADS, HIDDEN, IMAGE, LAYERS, MEASURE_BATCH, SEQ, VOCAB, Batch, Factory, \
    capture_main, measure  # noqa: E402
from capture_timm import measure_steps  # noqa: E402
import peers  # noqa: E402

LABELS = 10
FFN = 2 * HIDDEN
HEAD_DIM = HIDDEN // HEADS


def _config(cls_name: str, **kw: Any) -> Callable[[], Any]:
    def make() -> Any:
        import transformers
        return getattr(transformers, cls_name)(**kw)
    return make


def causal_lm(config: Callable[[], Any]) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_config(config())
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids.clone()}}
    return make


def masked_lm(cls_name: str, config: Callable[[], Any]) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        import transformers
        model = getattr(transformers, cls_name)(config())
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        # an attention mask of ones, as capture_hf.py's BERT: without one the
        # models look for padding in the ids, which meta tensors cannot answer
        mask = torch.ones(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}}
    return make


def seq2seq(cls_name: str, config: Callable[[], Any], mask: bool = False) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        import transformers
        model = getattr(transformers, cls_name)(config())
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        # the decoder's input is labels shifted right (shift_tokens_right)
        inputs = {"input_ids": ids, "labels": ids.clone()}
        if mask:
            # Pegasus's and Marian's encoders, given no mask, ask whether
            # pad_token_id is among the ids (warn_if_padding_and_no_attention_mask)
            inputs["attention_mask"] = torch.ones(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": inputs}
    return make


def image(cls_name: str, config: Callable[[], Any]) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        import transformers
        model = getattr(transformers, cls_name)(config())
        # labels: the model computes the cross-entropy over its num_labels
        return {"model": model, "inputs": {"pixel_values": torch.zeros(batch_size, 3, IMAGE, IMAGE),
                                           "labels": torch.zeros(batch_size, dtype=torch.long)}}
    return make


# the arguments every decoder config below takes by these names
_DEC = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, max_position_embeddings=4 * SEQ)
# the token ids a config defaults to outside a vocabulary of 96
_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_ENC = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, max_position_embeddings=4 * SEQ, attn_implementation="eager")
_VIS = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
            image_size=IMAGE, patch_size=8, num_labels=LABELS)

_S2S = dict(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
            encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
            max_position_embeddings=4 * SEQ, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)

# name -> (family, attention, factory)
MODELS: Dict[str, Tuple[str, str, Factory]] = {
    "hf-opt-eager": ("causal-lm", "eager", causal_lm(_config(
        "OPTConfig", vocab_size=VOCAB, hidden_size=HIDDEN, ffn_dim=FFN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, max_position_embeddings=4 * SEQ, word_embed_proj_dim=HIDDEN,
        attn_implementation="eager", **_IDS))),
    "hf-falcon-sdpa": ("causal-lm", "sdpa", causal_lm(_config(
        "FalconConfig", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        attn_implementation="sdpa", bos_token_id=1, eos_token_id=2))),
    "hf-phi-sdpa": ("causal-lm", "sdpa", causal_lm(_config("PhiConfig", attn_implementation="sdpa", **_DEC))),
    "hf-phi3-eager": ("causal-lm", "eager", causal_lm(_config(
        "Phi3Config", attn_implementation="eager", num_key_value_heads=2, **_DEC, **_IDS))),
    "hf-gpt_neox-sdpa": ("causal-lm", "sdpa", causal_lm(_config(
        "GPTNeoXConfig", attn_implementation="sdpa", **_DEC))),
    # rotary_dim: the default of 64 is more than a head's 16
    "hf-gptj-eager": ("causal-lm", "eager", causal_lm(_config(
        "GPTJConfig", vocab_size=VOCAB, n_positions=4 * SEQ, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        rotary_dim=HEAD_DIM // 2, attn_implementation="eager", bos_token_id=1, eos_token_id=2))),
    "hf-codegen-eager": ("causal-lm", "eager", causal_lm(_config(
        "CodeGenConfig", vocab_size=VOCAB, n_positions=4 * SEQ, n_ctx=4 * SEQ, n_embd=HIDDEN, n_layer=LAYERS,
        n_head=HEADS, rotary_dim=HEAD_DIM // 2, attn_implementation="eager", bos_token_id=1, eos_token_id=2))),
    "hf-gemma2-eager": ("causal-lm", "eager", causal_lm(_config(
        "Gemma2Config", attn_implementation="eager", num_key_value_heads=2, head_dim=HEAD_DIM, **_DEC, **_IDS))),
    "hf-olmo-sdpa": ("causal-lm", "sdpa", causal_lm(_config("OlmoConfig", attn_implementation="sdpa", **_DEC, **_IDS))),
    "hf-starcoder2-sdpa": ("causal-lm", "sdpa", causal_lm(_config(
        "Starcoder2Config", attn_implementation="sdpa", num_key_value_heads=2, **_DEC, bos_token_id=1,
        eos_token_id=2))),
    "hf-stablelm-sdpa": ("causal-lm", "sdpa", causal_lm(_config(
        "StableLmConfig", attn_implementation="sdpa", num_key_value_heads=HEADS, **_DEC, bos_token_id=1,
        eos_token_id=2))),
    "hf-distilbert-mlm-eager": ("masked-lm", "eager", masked_lm("DistilBertForMaskedLM", _config(
        "DistilBertConfig", vocab_size=VOCAB, dim=HIDDEN, hidden_dim=FFN, n_layers=LAYERS, n_heads=HEADS,
        max_position_embeddings=4 * SEQ, attn_implementation="eager"))),
    "hf-roberta-mlm-eager": ("masked-lm", "eager", masked_lm("RobertaForMaskedLM", _config(
        "RobertaConfig", **_ENC))),
    "hf-albert-mlm-eager": ("masked-lm", "eager", masked_lm("AlbertForMaskedLM", _config(
        "AlbertConfig", embedding_size=HIDDEN // 2, **_ENC))),
    "hf-electra-mlm-eager": ("masked-lm", "eager", masked_lm("ElectraForMaskedLM", _config(
        "ElectraConfig", embedding_size=HIDDEN // 2, **_ENC))),
    "hf-deberta_v2-mlm-eager": ("masked-lm", "eager", masked_lm("DebertaV2ForMaskedLM", _config(
        "DebertaV2Config", **_ENC))),
    "hf-bart-sdpa": ("seq2seq", "sdpa", seq2seq("BartForConditionalGeneration", _config(
        "BartConfig", vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
        encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN, decoder_ffn_dim=FFN,
        max_position_embeddings=4 * SEQ, attn_implementation="sdpa", decoder_start_token_id=2, forced_eos_token_id=2,
        **_IDS))),
    "hf-mt5-eager": ("seq2seq", "eager", seq2seq("MT5ForConditionalGeneration", _config(
        "MT5Config", vocab_size=VOCAB, d_model=HIDDEN, d_kv=HEAD_DIM, d_ff=FFN, num_layers=LAYERS,
        num_decoder_layers=LAYERS, num_heads=HEADS, decoder_start_token_id=0, attn_implementation="eager"))),
    "hf-pegasus-eager": ("seq2seq", "eager", seq2seq("PegasusForConditionalGeneration", _config(
        "PegasusConfig", attn_implementation="eager", **_S2S), mask=True)),
    "hf-marian-eager": ("seq2seq", "eager", seq2seq("MarianMTModel", _config(
        "MarianConfig", attn_implementation="eager", **_S2S), mask=True)),
    "hf-beit-eager": ("image", "eager", image("BeitForImageClassification", _config(
        "BeitConfig", attn_implementation="eager", **_VIS))),
    "hf-deit-sdpa": ("image", "sdpa", image("DeiTForImageClassification", _config(
        "DeiTConfig", attn_implementation="sdpa", **_VIS))),
    "hf-dinov2-eager": ("image", "eager", image("Dinov2ForImageClassification", _config(
        "Dinov2Config", attn_implementation="eager", **_VIS))),
    # four stages of one layer each, 16 to 64 channels
    "hf-segformer-eager": ("image", "eager", image("SegformerForImageClassification", _config(
        "SegformerConfig", num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1],
        hidden_sizes=[16, 32, 48, HIDDEN], num_attention_heads=[1, 2, 2, HEADS], mlp_ratios=[2, 2, 2, 2],
        num_labels=LABELS, attn_implementation="eager"))),
    # MobileViT's five stages halve 32 px down to 1; patches of 1 x 1
    "hf-mobilevit-eager": ("image", "eager", image("MobileViTForImageClassification", _config(
        "MobileViTConfig", image_size=IMAGE, patch_size=1, hidden_sizes=[32, 48, HIDDEN],
        neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_attention_heads=HEADS, num_labels=LABELS,
        attn_implementation="eager"))),
    # patches of 2 px in windows of 4: 16 x 16, then 8 x 8 tokens
    "hf-swin-eager": ("image", "eager", image("SwinForImageClassification", _config(
        "SwinConfig", image_size=IMAGE, patch_size=2, embed_dim=HIDDEN // 2, depths=[1, 1], num_heads=[2, HEADS],
        window_size=4, num_labels=LABELS, attn_implementation="eager"))),
    "hf-resnet-eager": ("image", "eager", image("ResNetForImageClassification", _config(
        "ResNetConfig", embedding_size=16, hidden_sizes=[16, 32, 48, HIDDEN], depths=[1, 1, 1, 1],
        layer_type="bottleneck", num_labels=LABELS, attn_implementation="eager"))),
}


def all_models() -> Dict[str, Tuple[Factory, Dict[str, Any]]]:
    """name -> (factory, what the reference records of it)."""
    out: Dict[str, Tuple[Factory, Dict[str, Any]]] = {}
    for name, (family, attn, make) in MODELS.items():
        info: Dict[str, Any] = {"family": family, "attention": attn}
        if family == "image":
            info["image"] = IMAGE
        else:
            info["seq"] = SEQ
        out[name] = (make, info)
    return out


def _step_model(name: str) -> Tuple[Any, Any]:
    """peers.real's model and batches for name, seeded as peers.make seeds."""
    import torch
    torch.manual_seed(peers.SEED)
    return peers.from_factory(all_models()[name][0], MEASURE_BATCH)


def run(out: str, ref: str, only: str) -> None:
    import fnmatch
    import json
    import torch
    import transformers
    os.makedirs(out, exist_ok=True)
    todo = [n for n in all_models() if not only or fnmatch.fnmatch(n, only)]
    steps = measure_steps(todo, maker=_step_model)
    torch.set_num_threads(1)
    doc: Dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "batch": MEASURE_BATCH,
        "step": {"batch": MEASURE_BATCH, "steps": peers.STEPS, "optimizer": "adam", "loop": peers.LOOP,
                 "bytes": peers.BYTES, "nnpack": torch._nnpack_available()},
        "models": {},
    }
    for name, (make, info) in all_models().items():
        if name not in todo:
            continue
        bfcapture.capture("transformers:" + name, os.path.join(out, name + ".bfgraph.gz"), BATCHES, factory=make)
        row = dict(info)
        row["saved_bytes"] = measure(make, MEASURE_BATCH)
        row["steps"] = steps[name]
        doc["models"][name] = row
    with open(ref, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def main() -> int:
    return capture_main("capture_transformers", run, "transformers-torch2-cpu.json",
                        ("torch", "transformers", "batch", "step"))


if __name__ == "__main__":
    sys.exit(main())
