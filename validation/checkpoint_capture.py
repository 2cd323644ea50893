#!/usr/bin/env python3
"""Captured models under real torch.utils.checkpoint, measured on the CPU.

The companion of validation/checkpoint_hf.py (whose measurement it imports:
``saved`` and ``timeline``) for the captures that are not transformers
models of capture_hf.py, each at batch 4, reentrant and not:

* timm 1.0.11 models of capture_timm.py under the library's own
  ``model.set_grad_checkpointing(True)``. What timm does with it
  (timm/models/_manipulate.py, checkpoint_seq; resnet.py, convnext.py,
  vision_transformer.py, swin_transformer.py, efficientnet.py,
  forward_features): ``checkpoint_seq`` calls ``torch.utils.checkpoint.
  checkpoint(run_function(j, j), x, preserve_rng_state=True)`` for each
  block j, one tensor in and one out, with no ``use_reentrant``, which
  PyTorch 2.5 takes as True (torch/utils/checkpoint.py, checkpoint: "the
  use_reentrant parameter should be passed explicitly", then
  ``use_reentrant = True``). The blocks are ResNet's ``layerN.M`` (the
  four stages flattened), ConvNeXt's ``stages.N.blocks.M`` and Swin's
  ``layers.N.blocks.M`` (the stage's downsample outside), ViT's
  ``blocks.N``, EfficientNet's ``blocks.N.M`` (flattened): the innermost
  repeated modules. ``reentrant`` is timm's default; ``non_reentrant``
  passes ``use_reentrant=False`` to the same calls.
* peft 0.13's LoRA Llama of capture_timm.py under transformers' own
  checkpointing, enabled on the base model before ``get_peft_model`` as
  peft's documentation has it: PeftModel.__init__ then calls
  ``_prepare_model_for_gradient_checkpointing``, whose
  ``enable_input_require_grads`` makes the frozen embedding's output
  require grad (peft/peft_model.py), so that the reentrant layers' LoRA
  weights get their gradients.
* the capture examples examples/capture/transformer.py (``blocks``) and
  encoder.py (``enc.layers``) with ``torch.utils.checkpoint.checkpoint(
  block.forward, *args, use_reentrant=R)`` around each block, as
  capture/testdata/checkpoint_saved.py wraps them.

The examples need nothing but torch, so they run under Debian's 1.13 too
(/usr/bin/python3, which has neither timm, peft nor transformers: under
1.13 the script measures the examples only and imports none of them),
whose torch.utils.checkpoint differs from 2.5's without reentrance:
``_checkpoint_without_reentrant`` keeps the arguments in its unpack
closure and recomputes the whole function at the first unpack, with no
early stop (validation/README.md, "Two releases"; docs/accuracy.md §12).
Each release writes its own file (refname.py): 1.13's
testdata/reference/capture-checkpoint-cpu.json, 2.5's
capture-checkpoint-cpu-torch2.5.json.

The figures are checkpoint_hf.py's: saved bytes after the forward (every
storage autograd packs and every tensor a checkpoint call was handed,
parameters, buffers and the batch left out), and the bytes above the model
and the batch at the forward's end, at its peak and at the backward's
peak, followed through c10's CPU allocator.

    $BATCHFIT_PYENV validation/checkpoint_capture.py           # writes testdata/reference/capture-checkpoint-cpu-torch2.5.json
    $BATCHFIT_PYENV validation/checkpoint_capture.py --check   # CI: measure again and compare
    $BATCHFIT_PYENV validation/checkpoint_capture.py --only 'timm-vit*' --out /tmp/x.json
    /usr/bin/python3 validation/checkpoint_capture.py --check  # the examples under 1.13 (references.sh)

The Go test validation/checkpoint_capture_test.go simulates each committed
capture (testdata/capture/NAME.bfgraph.gz; the examples' torch2.5/ ones
for 2.5's file, 1.13's own for 1.13's) under ``--checkpoint timm``,
``timm-non-reentrant``, ``hf``, ``hf-non-reentrant``, ``full-reentrant``
and ``full``, under the --torch profile of the release that made the file.
"""

import argparse
import fnmatch
import functools
import importlib
import importlib.util
import os
import sys
from typing import Any, Dict, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
os.environ.setdefault("GLOG_minloglevel", "2")

import capture_hf  # noqa: E402
import capture_timm  # noqa: E402  (pins TIMM_FUSED_ATTN as the captures ran)
import checkpoint_hf  # noqa: E402
import refname  # noqa: E402
import step  # noqa: E402

BATCH = 4
# 1.13's name; 2.5's file carries "-torch2.5" (refname.name)
REF = os.path.join(ROOT, "testdata", "reference", "capture-checkpoint-cpu.json")

# one of each family whose checkpointed blocks the captured graph has
TIMM = ["resnet18", "resnet50", "convnext_atto", "vit_tiny_patch16_224",
        "swin_tiny_patch4_window7_224", "efficientnet_b0"]
EXAMPLES = {"capture-transformer": ("transformer.py", "blocks"),
            "capture-encoder": ("encoder.py", "enc.layers")}


def _noting(handed: Dict[int, int], reentrant: bool) -> Any:
    """torch.utils.checkpoint.checkpoint with use_reentrant set, noting the
    storages of the tensors each call is handed and keeps (noted)."""
    import torch.utils.checkpoint as cp

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        own = {k: kwargs.pop(k) for k in ("preserve_rng_state", "context_fn", "determinism_check", "debug") if k in kwargs}
        if reentrant and kwargs:
            # CheckpointFunction takes no keyword arguments: those of
            # nn.TransformerEncoderLayer's call (src_mask=None,
            # is_causal=False, ...) go with the function, as a user binds them
            fn = functools.partial(fn, **kwargs)
            kwargs = {}
        return checkpoint_hf.noted(handed, cp.checkpoint, fn, *args, use_reentrant=reentrant, **own, **kwargs)
    return call


def _timm(name: str) -> Tuple[Any, Any]:
    _, px, kw = capture_timm.MODELS[name]
    make = capture_timm.timm_model(name, px, kw)

    def prepare(make: Any, batch: int, reentrant: bool) -> Tuple[Dict[str, Any], Dict[int, int]]:
        import torch
        import torch.nn.functional as F
        import timm.models._manipulate as manip
        torch.manual_seed(0)
        d = make(batch)
        d["model"].set_grad_checkpointing(True)
        d["model"].train()
        handed: Dict[int, int] = {}
        # checkpoint_seq calls the checkpoint it imported by name
        manip.checkpoint = _noting(handed, reentrant)
        d["loss_fn"] = lambda d: F.cross_entropy(d["model"](d["inputs"]), d["targets"])
        return d, handed
    return make, prepare


def _peft(attn: str) -> Tuple[Any, Any]:
    def make(batch: int) -> Dict[str, Any]:
        return {}

    def prepare(_: Any, batch: int, reentrant: bool) -> Tuple[Dict[str, Any], Dict[int, int]]:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM
        torch.manual_seed(0)
        base = AutoModelForCausalLM.from_config(capture_hf._decoder("LlamaConfig", attn)())
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        # capture_timm.lora_llama's adapters
        model = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
        model.train()
        handed: Dict[int, int] = {}
        for m in model.modules():
            fn = getattr(m, "_gradient_checkpointing_func", None)
            if fn is None:
                continue

            def noting(*args: Any, _fn: Any = fn, **kwargs: Any) -> Any:
                return checkpoint_hf.noted(handed, _fn, *args, **kwargs)
            m._gradient_checkpointing_func = noting
        ids = torch.zeros(batch, capture_hf.SEQ, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids.clone()}}, handed
    return make, prepare


def _example(file: str, attr: str) -> Tuple[Any, Any]:
    def make(batch: int) -> Dict[str, Any]:
        s = importlib.util.spec_from_file_location("example", os.path.join(ROOT, "examples", "capture", file))
        m = importlib.util.module_from_spec(s)
        s.loader.exec_module(m)  # type: ignore[union-attr]
        return m.make(batch)

    def prepare(make: Any, batch: int, reentrant: bool) -> Tuple[Dict[str, Any], Dict[int, int]]:
        import torch
        torch.manual_seed(0)
        d = make(batch)
        d["model"].train()
        handed: Dict[int, int] = {}
        call = _noting(handed, reentrant)
        blocks = d["model"]
        for a in attr.split("."):
            blocks = getattr(blocks, a)
        for blk in blocks:
            blk.forward = (lambda f: lambda *args, **kwargs: call(f, *args, **kwargs))(blk.forward)
        d["loss_fn"] = lambda d: d["loss"](d["model"](d["inputs"]), d["targets"])
        return d, handed
    return make, prepare


def libraries(version: str) -> Tuple[str, ...]:
    """The libraries besides torch the release's cases need: timm, peft and
    transformers under 2.x; none under Debian's 1.13, which has none of
    them and runs the capture examples only."""
    return () if refname.release(version) == "1.13" else ("timm", "peft", "transformers")


def cases(version: str) -> Dict[str, Tuple[Any, Any]]:
    out: Dict[str, Tuple[Any, Any]] = {}
    if libraries(version):
        for n in TIMM:
            out["timm-" + n] = _timm(n)
        for attn in ("eager", "sdpa"):
            out["peft-lora-llama-" + attn] = _peft(attn)
    for n, (file, attr) in EXAMPLES.items():
        out[n] = _example(file, attr)
    return out


def run(only: str) -> Dict[str, Any]:
    import torch
    step.pin_cpu_paths()
    doc: Dict[str, Any] = {"torch": refname.plain(torch.__version__), "batch": BATCH, "models": {}}
    for lib in libraries(torch.__version__):
        doc[lib] = importlib.import_module(lib).__version__
    for name, (make, prepare) in cases(torch.__version__).items():
        if only and not fnmatch.fnmatch(name, only):
            continue
        doc["models"][name] = checkpoint_hf.figures(make, BATCH, prepare)
    return doc


def main() -> int:
    p = argparse.ArgumentParser(prog="checkpoint_capture")
    p.add_argument("--check", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--out", default="", help="default: the release's file (refname.name of %s)" % os.path.relpath(REF, ROOT))
    a = p.parse_args()
    import warnings
    import torch
    libs = libraries(torch.__version__)
    if libs:
        import transformers
        transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*use_reentrant.*")
    return checkpoint_hf.write_or_check("checkpoint_capture", run(a.only), a.out or refname.name(REF, torch.__version__),
                                        ("torch",) + libs + ("batch",), a.check)

if __name__ == "__main__":
    sys.exit(main())
