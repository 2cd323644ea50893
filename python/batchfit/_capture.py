"""Capturing the caller's own model in this interpreter.

The capture module is the one ``batchfit capture`` runs (capture/bfcapture.py
in the repository, bundled into the wheel as ``batchfit._bfcapture``): it runs
the model once on the meta device at two batch sizes and writes a .bfgraph
file, which the binary reads like any other source. Nothing is allocated on a
GPU and the user's weights are never touched: a module instance is copied with
every parameter and buffer replaced by a meta tensor of the same shape.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .errors import CaptureError


def _module() -> ModuleType:
    try:
        from . import _bfcapture  # type: ignore[attr-defined]
        return _bfcapture
    except ImportError:
        pass
    # a checkout: <repo>/python/batchfit/_capture.py, <repo>/capture/bfcapture.py
    path = Path(__file__).resolve().parents[2] / "capture" / "bfcapture.py"
    spec = importlib.util.spec_from_file_location("batchfit._bfcapture", path)
    if spec is None or spec.loader is None or not path.is_file():
        raise CaptureError("the capture module is missing (%s)" % path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def meta_copy(module: Any, keep: tuple[Any, ...] = ()) -> Any:
    """A copy of module whose parameters and buffers are meta tensors.

    copy.deepcopy consults its memo before copying anything, so a memo that
    already maps every parameter and buffer to a meta tensor of its shape
    copies the module's structure and leaves the weights alone (no host or
    GPU memory for them). Objects in keep are shared, not copied (a
    trainer the module refers to)."""
    import torch

    memo: dict[int, Any] = {id(k): k for k in keep}
    for t in itertools.chain(module.parameters(), module.buffers()):
        if id(t) in memo:
            continue
        m = torch.empty_like(t, device="meta")
        if isinstance(t, torch.nn.Parameter):
            m = torch.nn.Parameter(m, requires_grad=t.requires_grad)
        memo[id(t)] = m
    return copy.deepcopy(module, memo)


def factory_for(model: Any, example_inputs: Any, targets: Any, loss: Callable[..., Any] | None,
                keep: tuple[Any, ...] = ()) -> tuple[Callable[..., Any], str]:
    """The capture module's factory for what the caller passed: a module
    instance with its example inputs, or a factory of the capture contract
    (``make(batch_size) -> {"model", "inputs", "targets", "loss"}``)."""
    import torch

    if isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise CaptureError("a module needs example_inputs: a batch (dim 0 is the batch size) or its shapes")
        module = model

        def make() -> dict[str, Any]:
            # a factory without a batch_size parameter: the capture resizes
            # dim 0 of every input and target tensor itself
            return {"model": meta_copy(module, keep), "inputs": example_inputs, "targets": targets, "loss": loss}
        return make, type(model).__name__
    if callable(model):
        if example_inputs is not None:
            raise CaptureError("example_inputs go with a module; a factory returns its own inputs")
        return model, getattr(model, "__name__", "factory")
    raise CaptureError("model is a %s; want a zoo name or path (str), a torch.nn.Module, or a factory" % type(model).__name__)


def capture(model: Any, example_inputs: Any = None, targets: Any = None, loss: Callable[..., Any] | None = None,
            out: str | None = None, keep: tuple[Any, ...] = ()) -> str:
    """Capture the model into a .bfgraph file and return its path (a new
    temporary file unless out names one)."""
    bf = _module()
    fn, name = factory_for(model, example_inputs, targets, loss, keep)
    if out is None:
        fd, out = tempfile.mkstemp(prefix="batchfit-", suffix=".bfgraph")
        os.close(fd)
    try:
        bf.capture("python:" + name, out, (2, 3), factory=fn)
    except bf.CaptureError as e:
        raise CaptureError(str(e)) from None
    return out
