#!/usr/bin/env python3
"""Real timm image models and a real peft LoRA model, captured and measured under PyTorch 2.x.

The companion of validation/capture_hf.py for two more model libraries:

* timm (huggingface/pytorch-image-models): models built by
  ``timm.create_model(name, pretrained=False)`` (no weights are loaded),
  across ResNet variants, ConvNeXt, EfficientNet, MobileNet, RegNet,
  DenseNet, ViT, Swin and a few more families, at small images (32 px where
  the model runs at 32, 64 px for the transformers, which take the image
  size as an argument; each model's size is in MODELS and in the
  reference), with a cross-entropy loss over 1000 classes;
* peft: a small transformers Llama (the config of capture_hf.py) wrapped by
  ``peft.get_peft_model`` with ``LoraConfig(r=8, target_modules=["q_proj",
  "v_proj"])``: the base weights frozen, only the adapters trained.

For each, this script captures the model with batchfit's capture module
(capture/bfcapture.py, its Python API ``capture(spec, out, batches,
factory=...)``) at batches 2 and 3 into ``testdata/capture/timm-NAME.bfgraph.gz``
(``peft-NAME`` for peft), and measures on the CPU, at batch 4, the bytes
autograd saves for backward at the end of the forward pass (loss included)
with capture_hf.py's definition (its ``measure``): every tensor autograd
packs, once per storage at the storage's full size, less the storages of
parameters, buffers and the batch. It also measures, at the same batch and
image size, the peak of two whole CPU training steps with Adam
(``foreach=False``), with validation/peers.py's loop and its ``real``
(validation/step.py's definition of the peak: the largest running sum of the
bytes c10's CPU allocator reports to the profiler, parameters and buffers
included; one intra-op thread, oneDNN off), each model in a fresh process.
The figures go to ``testdata/reference/timm-torch2-cpu.json`` with the torch,
timm, peft and transformers versions; the steps' setting is its "step" field.

    $BATCHFIT_PYENV validation/capture_timm.py            # rewrite the captures and the reference
    $BATCHFIT_PYENV validation/capture_timm.py --check    # CI: regenerate in a temp dir and compare
    $BATCHFIT_PYENV validation/capture_timm.py --only 'timm-vit*' --out DIR --ref FILE

timm's attention runs F.scaled_dot_product_attention (timm.layers'
use_fused_attn() is true under torch 2.x unless TIMM_FUSED_ATTN says
otherwise; the script pins it to "1" so that the environment cannot change
it). The Go test validation/capture_timm_test.go simulates each capture with
the 2.x CPU rules and holds its saved bytes, and the peaks of its two whole
steps, to these figures.
"""

import fnmatch
import json
import multiprocessing
import os
import queue
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "capture"))
sys.path.insert(0, HERE)

os.environ["TIMM_FUSED_ATTN"] = "1"

import bfcapture  # noqa: E402
from capture_hf import BATCHES, MEASURE_BATCH, SEQ, Batch, Factory, _decoder, capture_main, measure  # noqa: E402
import peers  # noqa: E402

CLASSES = 1000

# timm model -> (family, image size in px, create_model keyword arguments).
# 32 px where the model runs at 32; the transformers take their image size
# (and Swin its window) as arguments and run at 64 px (16 patches of 16 px
# for ViT; for Swin, 16x16 patches of 4 px in windows of 4).
MODELS: Dict[str, Tuple[str, int, Dict[str, Any]]] = {
    "resnet10t": ("resnet", 32, {}),
    "resnet18": ("resnet", 32, {}),
    "resnet18d": ("resnet", 32, {}),
    "resnet50": ("resnet", 32, {}),
    "resnext26ts": ("resnet", 32, {}),
    "seresnet18": ("resnet", 32, {}),
    "resnetv2_50": ("resnet", 32, {}),
    "convnext_atto": ("convnext", 32, {}),
    "convnext_femto": ("convnext", 32, {}),
    "convnextv2_atto": ("convnext", 32, {}),
    "efficientnet_b0": ("efficientnet", 32, {}),
    "efficientnet_lite0": ("efficientnet", 32, {}),
    "tf_efficientnet_b0": ("efficientnet", 32, {}),
    "efficientnetv2_rw_t": ("efficientnet", 32, {}),
    "mixnet_s": ("efficientnet", 32, {}),
    "mobilenetv2_035": ("mobilenet", 32, {}),
    "mobilenetv3_small_050": ("mobilenet", 32, {}),
    "mobilenetv3_large_075": ("mobilenet", 32, {}),
    "mobilenetv4_conv_small": ("mobilenet", 32, {}),
    "lcnet_050": ("mobilenet", 32, {}),
    "mnasnet_050": ("mobilenet", 32, {}),
    "ghostnet_050": ("mobilenet", 32, {}),
    "regnetx_002": ("regnet", 32, {}),
    "regnety_002": ("regnet", 32, {}),
    "regnetx_004": ("regnet", 32, {}),
    "densenet121": ("densenet", 32, {}),
    "vit_tiny_patch16_224": ("vit", 64, {"img_size": 64}),
    "deit_tiny_patch16_224": ("vit", 64, {"img_size": 64}),
    "vit_small_patch16_224": ("vit", 64, {"img_size": 64}),
    "swin_tiny_patch4_window7_224": ("swin", 64, {"img_size": 64, "window_size": 4}),
    "dla34": ("other", 32, {}),
    "repvgg_a0": ("other", 32, {}),
    "poolformer_s12": ("other", 32, {}),
    "pvt_v2_b0": ("other", 32, {}),
    "mobilevit_xxs": ("other", 64, {}),
}


def timm_model(name: str, px: int, kwargs: Dict[str, Any]) -> Factory:
    def make(batch_size: int) -> Batch:
        import timm
        import torch
        model = timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)
        return {"model": model, "inputs": torch.zeros(batch_size, 3, px, px),
                "targets": torch.zeros(batch_size, dtype=torch.long)}
    return make


def lora_llama(attn: str) -> Factory:
    def make(batch_size: int) -> Batch:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM
        base = AutoModelForCausalLM.from_config(_decoder("LlamaConfig", attn)())
        # peft's defaults otherwise: lora_alpha 8, lora_dropout 0 (an
        # nn.Identity), no bias; the base weights are frozen
        model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids.clone()}}
    return make


# name -> (factory, what the reference records of it)
def all_models() -> Dict[str, Tuple[Factory, Dict[str, Any]]]:
    out: Dict[str, Tuple[Factory, Dict[str, Any]]] = {}
    for name, (family, px, kw) in MODELS.items():
        out["timm-" + name] = (timm_model(name, px, kw), {"family": family, "image": px})
    for attn in ("eager", "sdpa"):
        out["peft-lora-llama-" + attn] = (lora_llama(attn), {"family": "peft-lora", "attention": attn, "seq": SEQ})
    return out


class _Logits:
    """timm returns the logits tensor; capture_hf.measure reads .logits."""


def _measure(make: Factory, batch: int, timm_model_: bool) -> int:
    if not timm_model_:
        return measure(make, batch)

    def wrapped(b: int) -> Batch:
        import torch
        d = make(b)
        inner = d["model"]

        class Out(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = inner

            def forward(self, x: Any) -> Any:
                o = _Logits()
                o.logits = self.m(x)  # type: ignore[attr-defined]
                return o
        return {"model": Out(), "inputs": {"x": d["inputs"]}, "targets": d["targets"]}
    return measure(wrapped, batch)


def _step_model(name: str) -> Tuple[Any, Any]:
    """peers.real's model and batches for name: the capture's factory at the
    measured batch, seeded as peers.make seeds."""
    import torch
    torch.manual_seed(peers.SEED)
    return peers.from_factory(all_models()[name][0], MEASURE_BATCH)


def _steps(name: str, q: Any, maker: Any) -> None:
    try:
        q.put((name, peers.real(name, maker or _step_model), None))
    except Exception as e:  # noqa: BLE001 - handed to the parent, which raises it
        q.put((name, None, "%s: %s" % (type(e).__name__, e)))


def measure_steps(names: List[str], jobs: int = 2, maker: Any = None) -> Dict[str, Dict[str, Any]]:
    """The measured peaks of two whole CPU steps of each model, each in a fresh
    process (jobs at a time: CI's two cores), as peers.py runs them, of the
    model and batches maker(name) makes (this script's models unless given). Every
    process is forked from this one's main thread, before it runs any torch
    op: a process forked from another thread (a multiprocessing.Pool's worker
    handler) makes the profiler's kineto complain that its client was
    registered on another thread."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    out: Dict[str, Dict[str, Any]] = {}
    todo = list(names)
    procs: Dict[str, Any] = {}
    while todo or procs:
        while todo and len(procs) < jobs:
            name = todo.pop(0)
            procs[name] = ctx.Process(target=_steps, args=(name, q, maker))
            procs[name].start()
        try:
            name, res, err = q.get(timeout=5)
        except queue.Empty:
            # a process that died without an answer (a crash in a kernel)
            for n, p in procs.items():
                if not p.is_alive() and p.exitcode != 0:
                    raise RuntimeError("%s: the whole steps' process exited with %s" % (n, p.exitcode))
            continue
        procs.pop(name).join()
        if err is not None:
            raise RuntimeError("%s: the whole steps: %s" % (name, err))
        out[name] = res
    return out


def run(out: str, ref: str, only: str) -> None:
    import peft
    import timm
    import torch
    import transformers
    os.makedirs(out, exist_ok=True)
    todo = [n for n in all_models() if not only or fnmatch.fnmatch(n, only)]
    steps = measure_steps(todo)
    torch.set_num_threads(1)
    doc: Dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "timm": timm.__version__,
        "peft": peft.__version__,
        "transformers": transformers.__version__,
        "batch": MEASURE_BATCH,
        # the whole steps: peers.py's loop, optimizer and bytes, at "batch"
        # and each model's image size
        "step": {"batch": MEASURE_BATCH, "steps": peers.STEPS, "optimizer": "adam", "loop": peers.LOOP,
                 "bytes": peers.BYTES, "nnpack": torch._nnpack_available()},
        "models": {},
    }
    for name, (make, info) in all_models().items():
        if name not in todo:
            continue
        spec = ("timm:" if name.startswith("timm-") else "peft:") + name
        bfcapture.capture(spec, os.path.join(out, name + ".bfgraph.gz"), BATCHES, factory=make)
        row = dict(info)
        row["saved_bytes"] = _measure(make, MEASURE_BATCH, name.startswith("timm-"))
        row["steps"] = steps[name]
        doc["models"][name] = row
    with open(ref, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")


def main() -> int:
    return capture_main("capture_timm", run, "timm-torch2-cpu.json", ("torch", "timm", "peft", "transformers", "batch", "step"))


if __name__ == "__main__":
    sys.exit(main())
