#!/usr/bin/env python3
"""Real transformers models under their own gradient checkpointing, measured on the CPU.

The models are capture_hf.py's (small configs of real transformers classes, no
weights), at its measuring batch, each trained with the library's own
checkpointing, ``model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=
{"use_reentrant": R})``, once reentrant and once not. What transformers 4.44
does with it (modeling_utils.py, gradient_checkpointing_enable and
_set_gradient_checkpointing; modeling_gpt2.py GPT2Model.forward,
modeling_t5.py T5Stack.forward, modeling_llama.py LlamaModel.forward):

* every module with a ``gradient_checkpointing`` attribute (the stacks of
  layers) calls each layer through ``functools.partial(torch.utils.checkpoint.
  checkpoint, **kwargs)``, with ``{"use_reentrant": True}`` when no kwargs are
  given, and passes the layer's inputs as positional arguments (Llama: the
  hidden states, the mask, position_ids, the cache, flags, cache_position and
  the (cos, sin) tuple; T5: the hidden states, the masks, the position biases);
* in training it turns ``use_cache`` off ("`use_cache=True` is incompatible
  with gradient checkpointing"), so the output keeps no past_key_values: the
  decoder's keys and values are freed when the layer is done with them.

Per model and mode, the reference holds

* ``saved_bytes``: what autograd and the checkpoints hold for backward at the
  end of the forward pass, loss included, with capture_hf.py's definition
  (every storage autograd packs, parameters, buffers and the batch left out)
  plus every tensor a checkpoint call was handed, in a tuple too: both
  torch.utils.checkpoint flavours keep all their arguments to backward
  (CheckpointFunction.forward: ``ctx.save_for_backward(*tensor_inputs)`` and
  ``ctx.inputs`` for the rest; _NoopSaveInputs: ``ctx.save_for_backward`` and
  the ``get_args`` closure), and a tuple such as Llama's position embeddings
  is not packed;
* ``forward_peak``, ``forward_end``, ``backward_peak``: the bytes alive above
  those before the forward (the model and the batch), the largest during the
  forward and the loss, at its end, and the largest during loss.backward(),
  followed through c10's CPU allocator as validation/step.py follows them
  (its profiler set-up and event walk). The CPU run keeps two things a GPU
  run keeps on the host: the 0-d loss, and each checkpoint call's
  ``torch.get_rng_state()`` (preserve_rng_state, the default).

Run with the pinned PyTorch 2.x and transformers (BATCHFIT_PYENV):

    $BATCHFIT_PYENV validation/checkpoint_hf.py           # writes testdata/reference/hf-checkpoint-torch2-cpu.json
    $BATCHFIT_PYENV validation/checkpoint_hf.py --check   # CI: measure again and compare
    $BATCHFIT_PYENV validation/checkpoint_hf.py --only 'hf-gpt2*' --out /tmp/x.json

The Go test validation/checkpoint_hf_test.go builds each committed capture
(testdata/capture/hf-NAME.bfgraph.gz) and simulates it under ``--checkpoint
hf`` and ``hf-non-reentrant``.
"""

import argparse
import fnmatch
import gc
import json
import os
import sys
import tempfile
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
# c10 warns about frees of blocks allocated before profiling began (step.py)
os.environ.setdefault("GLOG_minloglevel", "2")

import capture_hf  # noqa: E402
import step  # noqa: E402

MODES = {"reentrant": True, "non_reentrant": False}
REF = os.path.join(ROOT, "testdata", "reference", "hf-checkpoint-torch2-cpu.json")


def noted(handed: Dict[int, int], call: Any, *args: Any, **kwargs: Any) -> Any:
    """call(*args, **kwargs), a checkpoint call, noting into handed the
    storages of the tensors it is handed when it keeps them: a call whose
    output requires no grad built no node, which keeps nothing (reentrant:
    THPFunction_apply makes no node when no input requires grad, and
    CheckpointFunction's ctx goes as apply returns; non-reentrant:
    _NoopSaveInputs' node is held only through the frame that packed
    tensors hold, and none is packed; torch/utils/checkpoint.py)."""
    out = call(*args, **kwargs)
    if any(t.requires_grad for t in capture_hf._tensors(out)):
        for t in capture_hf._tensors(list(args)) + capture_hf._tensors(kwargs):
            ptr, n = capture_hf._storage(t)
            handed[ptr] = n
    return out


def _checkpointed(make: Any, batch: int, reentrant: bool) -> Any:
    """The model and batch of a factory, in training with the library's
    checkpointing; the checkpoint function also notes the storages of the
    tensors it is handed and keeps (noted, into the returned set)."""
    import torch
    torch.manual_seed(0)
    d = make(batch)
    model = d["model"]
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    model.train()
    handed: Dict[int, int] = {}
    for m in model.modules():
        fn = getattr(m, "_gradient_checkpointing_func", None)
        if fn is None or getattr(fn, "_batchfit", False):
            continue

        def noting(*args: Any, _fn: Any = fn, **kwargs: Any) -> Any:
            return noted(handed, _fn, *args, **kwargs)
        noting._batchfit = True  # type: ignore[attr-defined]
        m._gradient_checkpointing_func = noting
    return d, handed


def _loss(d: Dict[str, Any]) -> Any:
    """The loss as capture_hf.py takes it: the output's, or cross-entropy
    of the logits against the targets (ViT)."""
    import torch.nn.functional as F
    out = d["model"](**d["inputs"])
    if d.get("targets") is not None:
        return F.cross_entropy(out.logits, d["targets"])
    return out.loss


def saved(make: Any, batch: int, reentrant: bool, prepare: Any = None) -> int:
    """Autograd's and the checkpoints' bytes for backward after the forward
    pass. prepare (default: transformers' checkpointing) makes the model and
    batch and the set the checkpoint calls note their tensors into; a
    "loss_fn" in its dict takes the loss instead of _loss (checkpoint_capture.py)."""
    import torch
    d, handed = (prepare or _checkpointed)(make, batch, reentrant)
    model = d["model"]
    skip = {capture_hf._storage(t)[0] for t in list(model.parameters()) + list(model.buffers())}
    skip |= {capture_hf._storage(t)[0] for t in capture_hf._tensors(d["inputs"]) + capture_hf._tensors(d.get("targets"))}
    held: Dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr, n = capture_hf._storage(t)
        held[ptr] = n
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = d.get("loss_fn", _loss)(d)
    held.update(handed)
    total = sum(n for ptr, n in held.items() if ptr not in skip)
    loss.backward()
    return total


def timeline(make: Any, batch: int, reentrant: bool, prepare: Any = None) -> Dict[str, int]:
    """The peaks of one forward (with the loss) and backward, above what was
    alive before (prepare as for saved)."""
    import torch
    from torch.autograd import _disable_profiler
    d, _ = (prepare or _checkpointed)(make, batch, reentrant)
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    # the garbage of earlier runs (a reentrant checkpoint's ctx is in a
    # reference cycle) goes now, not when the collector happens to run
    # inside the profiled phases, where its frees would count
    gc.collect()
    gc.disable()
    step.start_profiler()
    h = enter("forward", None)
    # loss = model(**batch).loss: the output goes once the loss is taken
    loss = d.get("loss_fn", _loss)(d)
    leave(h)
    h = enter("backward", None)
    loss.backward()
    leave(h)
    roots = _disable_profiler().experimental_event_tree()
    gc.enable()
    out: Dict[str, int] = {}
    live = 0
    for r in sorted(roots, key=lambda n: n.start_time_ns):
        if r.name not in ("forward", "backward"):
            raise RuntimeError("memory events outside the phases: %s" % r.name)
        peak = live
        for m in step.memory_events(r):
            live += m.extra_fields.alloc_size
            peak = max(peak, live)
        out[r.name + "_peak"] = peak
        if r.name == "forward":
            out["forward_end"] = live
    return out


def run(only: str) -> Dict[str, Any]:
    import torch
    import transformers
    step.pin_cpu_paths()
    doc: Dict[str, Any] = {
        "torch": torch.__version__.split("+")[0],
        "transformers": transformers.__version__,
        "batch": capture_hf.MEASURE_BATCH,
        "seq": capture_hf.SEQ,
        "models": {},
    }
    for name, (make, attn) in capture_hf.MODELS.items():
        if only and not fnmatch.fnmatch(name, only):
            continue
        doc["models"][name] = dict(figures(make, capture_hf.MEASURE_BATCH), attention=attn)
    return doc


def figures(make: Any, batch: int, prepare: Any = None) -> Dict[str, Any]:
    """A model's figures in both modes: saved bytes, the forward's peak
    and end, the backward's peak."""
    fig: Dict[str, Any] = {}
    for mode, reentrant in MODES.items():
        m = {"saved_bytes": saved(make, batch, reentrant, prepare)}
        m.update(timeline(make, batch, reentrant, prepare))
        fig[mode] = m
    return fig


def main() -> int:
    p = argparse.ArgumentParser(prog="checkpoint_hf")
    p.add_argument("--check", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--out", default=REF)
    a = p.parse_args()
    import transformers
    transformers.logging.set_verbosity_error()  # the use_cache notice, once a model
    return write_or_check("checkpoint_hf", run(a.only), a.out, ("torch", "transformers", "batch", "seq"), a.check)


def write_or_check(prog: str, doc: Dict[str, Any], path: str, keys: Tuple[str, ...], check: bool) -> int:
    """Write doc to path, or with check compare it with what path holds
    (the keys and every model's figures): 1 and what differs, or 0."""
    if not check:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        return 0
    with open(path) as f:
        old = json.load(f)
    bad: List[str] = []
    for k in keys:
        if doc[k] != old[k]:
            bad.append("%s %s, committed %s" % (k, doc[k], old[k]))
    for name, fig in doc["models"].items():
        if old["models"].get(name) != fig:
            bad.append("%s: %s, committed %s" % (name, fig, old["models"].get(name)))
    if bad:
        print("%s: differs from what is committed: %s (run validation/%s.py and commit)" % (prog, "; ".join(bad), prog))
        return 1
    print("%s: %d models, both checkpointing modes, as committed" % (prog, len(doc["models"])))
    return 0

if __name__ == "__main__":
    sys.exit(main())
