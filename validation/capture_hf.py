#!/usr/bin/env python3
"""Real Hugging Face transformers models, captured and measured under PyTorch 2.x.

For small configs of real transformers classes (built from their Config with
no weights: 2 layers, hidden 64, sequence 16), this script

* captures each model with batchfit's capture module (capture/bfcapture.py,
  its Python API ``capture(spec, out, batches, factory=...)``) into
  ``testdata/capture/hf-NAME.bfgraph.gz``, and
* measures, on the CPU, the bytes autograd saves for backward at the end of
  the forward pass (loss included), with the definition of
  validation/reference.py and capture/testdata/checkpoint_saved.py: every
  tensor autograd packs (``torch.autograd.graph.saved_tensors_hooks``),
  counted once per storage at the storage's full size, leaving out the
  storages of parameters, buffers and the batch (inputs and targets), which
  are alive anyway. The figures go to ``testdata/reference/hf-torch2-cpu.json``
  with the torch and transformers versions.

Run with an interpreter that has PyTorch 2.x and transformers (CI: the
environment .ci/run makes from python/requirements-test.txt, BATCHFIT_PYENV):

    $BATCHFIT_PYENV validation/capture_hf.py            # rewrite the captures and the reference
    $BATCHFIT_PYENV validation/capture_hf.py --check    # CI: regenerate in a temp dir and compare
    $BATCHFIT_PYENV validation/capture_hf.py --only 'hf-llama*' --out /tmp/x

Attention runs as each model's config names it, explicitly: "eager" (the
softmax written out, as transformers' own eager classes do) or "sdpa"
(torch.nn.functional.scaled_dot_product_attention, which on the CPU of 2.5
runs the flash kernel when dropout is 0).

BERT with SDPA is left out: transformers' _prepare_4d_attention_mask_for_sdpa
asks torch.all(mask == 1), a data-dependent test meta tensors cannot answer.

The Go test validation/capture_hf_test.go simulates each capture with the
2.x CPU rules and holds its saved bytes to these figures. The captures are
gzip'd JSON with sorted keys and a zero time stamp, and the reference has
sorted keys and integers only, so both are byte-for-byte reproducible for one
torch and transformers.
"""

import argparse
import fnmatch
import gzip
import json
import os
import shutil
import sys
import tempfile
from typing import Any, Callable, Dict, List, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "capture"))

import bfcapture  # noqa: E402

SEQ = 16
VOCAB = 96
HIDDEN = 64
LAYERS = 2
HEADS = 4
IMAGE = 32
PATCH = 8
BATCHES = (2, 3)
# The batch the saved bytes are measured at: one the capture never ran, so
# the test also holds the capture's batch scaling.
MEASURE_BATCH = 4

Batch = Dict[str, Any]
Factory = Callable[[int], Batch]


def _decoder(cls_name: str, attn: str, **extra: Any) -> Callable[[], Any]:
    def make() -> Any:
        import transformers
        cfg = getattr(transformers, cls_name)(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
            max_position_embeddings=4 * SEQ, attn_implementation=attn, **extra)
        return cfg
    return make


def causal_lm(config: Callable[[], Any]) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_config(config())
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        # labels: transformers shifts them and computes the cross-entropy
        # in the model's forward; the loss is the output's .loss
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids.clone()}}
    return make


def gpt2(attn: str) -> Factory:
    def config() -> Any:
        from transformers import GPT2Config
        return GPT2Config(vocab_size=VOCAB, n_positions=4 * SEQ, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                          attn_implementation=attn)
    return causal_lm(config)


def bert(attn: str) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import BertConfig, BertForMaskedLM
        cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         intermediate_size=2 * HIDDEN, max_position_embeddings=4 * SEQ, attn_implementation=attn)
        model = BertForMaskedLM(cfg)
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        # an attention mask, as a user's batch has: without one BertModel
        # looks for padding in the ids (pad_token_id in input_ids[:, [-1, 0]]),
        # a data-dependent test that meta tensors cannot answer
        mask = torch.ones(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "attention_mask": mask, "labels": ids.clone()}}
    return make


def vit(attn: str) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import ViTConfig, ViTForImageClassification
        cfg = ViTConfig(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                        intermediate_size=2 * HIDDEN, image_size=IMAGE, patch_size=PATCH, num_labels=10,
                        attn_implementation=attn)
        model = ViTForImageClassification(cfg)
        return {"model": model, "inputs": {"pixel_values": torch.zeros(batch_size, 3, IMAGE, IMAGE)},
                "targets": torch.zeros(batch_size, dtype=torch.long)}
    return make


def t5(attn: str) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import T5Config, T5ForConditionalGeneration
        cfg = T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN, num_layers=LAYERS,
                       num_decoder_layers=LAYERS, num_heads=HEADS, decoder_start_token_id=0,
                       attn_implementation=attn)
        model = T5ForConditionalGeneration(cfg)
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids.clone()}}
    return make


def whisper(attn: str) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from transformers import WhisperConfig, WhisperForConditionalGeneration
        # 16 mel bins over 32 frames: the encoder's second convolution
        # (stride 2) gives max_source_positions = 16 positions
        cfg = WhisperConfig(vocab_size=VOCAB, d_model=HIDDEN, encoder_layers=LAYERS, decoder_layers=LAYERS,
                            encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
                            encoder_ffn_dim=2 * HIDDEN, decoder_ffn_dim=2 * HIDDEN, num_mel_bins=16,
                            max_source_positions=SEQ, max_target_positions=2 * SEQ, pad_token_id=0,
                            decoder_start_token_id=1, use_cache=False, attn_implementation=attn)
        model = WhisperForConditionalGeneration(cfg)
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_features": torch.zeros(batch_size, 16, 2 * SEQ), "labels": ids}}
    return make


# name -> (factory, attention implementation). The attention is explicit:
# transformers' default depends on the installed torch.
MODELS: Dict[str, Tuple[Factory, str]] = {
    "hf-llama-eager": (causal_lm(_decoder("LlamaConfig", "eager")), "eager"),
    "hf-llama-sdpa": (causal_lm(_decoder("LlamaConfig", "sdpa")), "sdpa"),
    "hf-mistral-sdpa": (causal_lm(_decoder("MistralConfig", "sdpa")), "sdpa"),
    "hf-qwen2-sdpa": (causal_lm(_decoder("Qwen2Config", "sdpa")), "sdpa"),
    "hf-gemma-sdpa": (causal_lm(_decoder("GemmaConfig", "sdpa", head_dim=HIDDEN // HEADS,
                                                   hidden_activation="gelu_pytorch_tanh")), "sdpa"),
    "hf-gpt2-eager": (gpt2("eager"), "eager"),
    "hf-bert-mlm-eager": (bert("eager"), "eager"),
    "hf-vit-eager": (vit("eager"), "eager"),
    "hf-vit-sdpa": (vit("sdpa"), "sdpa"),
    "hf-t5-eager": (t5("eager"), "eager"),
    "hf-whisper-eager": (whisper("eager"), "eager"),
    "hf-whisper-sdpa": (whisper("sdpa"), "sdpa"),
}


def _tensors(x: Any) -> List[Any]:
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for k in sorted(x) for t in _tensors(x[k])]
    return []


def _storage(t: Any) -> Tuple[int, int]:
    """The address and size of t's storage. Tensor.untyped_storage came
    with 2.0; 1.13's Tensor.storage() is a TypedStorage over the same
    bytes (checkpoint_capture.py runs the capture examples under Debian's
    1.13 too)."""
    import torch
    import refname
    s = t.storage() if refname.release(torch.__version__) == "1.13" else t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def measure(make: Factory, batch: int) -> int:
    """Autograd's saved bytes after the forward pass and the loss, on the CPU."""
    import torch
    import torch.nn.functional as F
    torch.manual_seed(0)
    d = make(batch)
    model = d["model"]
    model.train()
    skip = {_storage(t)[0] for t in list(model.parameters()) + list(model.buffers())}
    skip |= {_storage(t)[0] for t in _tensors(d["inputs"]) + _tensors(d.get("targets"))}
    held: Dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr, n = _storage(t)
        if ptr not in skip:
            held[ptr] = n
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(**d["inputs"])
        if d.get("targets") is not None:
            loss = F.cross_entropy(out.logits, d["targets"])
        else:
            loss = out.loss
    total = sum(held.values())
    loss.backward()
    return total


def run(out: str, ref: str, only: str) -> None:
    import torch
    import transformers
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    doc: Dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "batch": MEASURE_BATCH,
        "seq": SEQ,
        "models": {},
    }
    for name, (make, attn) in MODELS.items():
        if only and not fnmatch.fnmatch(name, only):
            continue
        bfcapture.capture("transformers:" + name, os.path.join(out, name + ".bfgraph.gz"), BATCHES, factory=make)
        doc["models"][name] = {"attention": attn, "saved_bytes": measure(make, MEASURE_BATCH)}
    with open(ref, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def capture_main(prog: str, run_fn: Callable[[str, str, str], None], ref_name: str, keys: Sequence[str]) -> int:
    """The command line of a capture script: write the captures and the
    reference, or with --check make them again in a scratch folder and
    compare them, byte for byte and figure for figure, with what is
    committed (keys: the reference's version and size fields)."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--check", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--out", default=os.path.join(ROOT, "testdata", "capture"))
    p.add_argument("--ref", default=os.path.join(ROOT, "testdata", "reference", ref_name))
    a = p.parse_args()
    if not a.check:
        run_fn(a.out, a.ref, a.only)
        return 0
    tmp = tempfile.mkdtemp()
    try:
        tref = os.path.join(tmp, "ref.json")
        run_fn(tmp, tref, a.only)
        bad = []
        for f in sorted(os.listdir(tmp)):
            if not f.endswith(".bfgraph.gz"):
                continue
            with gzip.open(os.path.join(tmp, f)) as x:
                new = x.read()
            try:
                with gzip.open(os.path.join(a.out, f)) as x:
                    old = x.read()
            except OSError:
                old = None
            if new != old:
                bad.append(f)
        with open(tref) as x:
            new_ref = json.load(x)
        with open(a.ref) as x:
            old_ref = json.load(x)
        for name, fig in new_ref["models"].items():
            if old_ref["models"].get(name) != fig:
                bad.append("%s: %s, committed %s" % (name, fig, old_ref["models"].get(name)))
        for k in keys:
            if new_ref[k] != old_ref[k]:
                bad.append("%s %s, committed %s" % (k, new_ref[k], old_ref[k]))
        if bad:
            print("%s: differs from what is committed: %s (run validation/%s.py and commit)" % (prog, "; ".join(bad), prog))
            return 1
        print("%s: %d captures and their saved bytes as committed" % (prog, len(new_ref["models"])))
        return 0
    finally:
        shutil.rmtree(tmp)


def main() -> int:
    return capture_main("capture_hf", run, "hf-torch2-cpu.json", ("torch", "transformers", "batch", "seq"))


if __name__ == "__main__":
    sys.exit(main())
