"""estimate, max_batch, sweep and plan: the command line's answers as Python
objects.

``model`` is a zoo name or a path the command line reads (str), your own
``torch.nn.Module`` with ``example_inputs``, or a factory of the capture
contract. Every other option is the command line's flag of the same name
with ``-`` for ``_`` (``lora_targets="q_proj,v_proj"`` is
``--lora-targets q_proj,v_proj``; ``True`` sets a switch), so every flag is
reachable and a wrong one is refused with the command line's own message
(a ``UsageError``, with the nearest flag named).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Callable, Sequence

from . import _binary
from ._capture import capture
from .results import Estimate, MaxBatch, Plan, Sweep


def _flags(options: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in options.items():
        if v is None or v is False:
            continue
        name = "--" + k.replace("_", "-")
        if v is True:
            out.append(name)
        elif isinstance(v, (list, tuple)):
            out.append("%s=%s" % (name, ",".join(str(x) for x in v)))
        else:
            out.append("%s=%s" % (name, v))
    return out


def _source(model: Any, example_inputs: Any, targets: Any, loss: Callable[..., Any] | None,
            keep: tuple[Any, ...] = ()) -> tuple[str, str | None]:
    if isinstance(model, (str, os.PathLike)):
        if example_inputs is not None:
            raise ValueError("example_inputs go with a module, not a zoo name or a path")
        return os.fspath(model), None
    path = capture(model, example_inputs, targets, loss, keep=keep)
    return path, path


def _run(cmd: str, model: Any, example_inputs: Any, targets: Any, loss: Any, options: dict[str, Any],
         extra: Sequence[str] = (), keep: tuple[Any, ...] = ()) -> Any:
    src, tmp = _source(model, example_inputs, targets, loss, keep)
    try:
        return _binary.run([cmd, src, "--json"] + list(extra) + _flags(options))
    finally:
        if tmp:
            os.remove(tmp)


def estimate(model: Any, example_inputs: Any = None, *, batch_size: int, targets: Any = None,
             loss: Callable[..., Any] | None = None, gpu: str = "h100-80gb", precision: str = "32-true",
             optimizer: str = "adam", checkpoint: str = "none", chart: bool = False, **options: Any) -> Estimate:
    """Predict the memory of one training step at batch_size on gpu.

    With ``chart=True`` the result carries the memory-over-the-step chart
    (SVG), which a notebook shows with the table."""
    svg = ""
    extra: list[str] = []
    chart_path = None
    if chart:
        fd, chart_path = tempfile.mkstemp(prefix="batchfit-", suffix=".svg")
        os.close(fd)
        extra = ["--timeline=" + chart_path]
    try:
        d = _run("estimate", model, example_inputs, targets, loss,
                 dict(batch=batch_size, gpu=gpu, precision=precision, optimizer=optimizer, checkpoint=checkpoint, **options), extra)
        if chart_path:
            with open(chart_path, encoding="utf-8") as f:
                svg = f.read()
    finally:
        if chart_path:
            os.remove(chart_path)
    return Estimate.from_json(d, svg)


def max_batch(model: Any, example_inputs: Any = None, *, targets: Any = None, loss: Callable[..., Any] | None = None,
              gpu: str = "h100-80gb", precision: str = "32-true", optimizer: str = "adam", checkpoint: str = "none",
              keep: tuple[Any, ...] = (), **options: Any) -> MaxBatch:
    """The largest batch that fits on gpu, leaving the margin its band has
    earned on real GPUs (the command line's ``maxbatch``).

    ``keep`` are objects the module refers to that its meta copy shares
    rather than copies (a trainer it holds)."""
    d = _run("maxbatch", model, example_inputs, targets, loss,
             dict(gpu=gpu, precision=precision, optimizer=optimizer, checkpoint=checkpoint, **options), keep=keep)
    return MaxBatch.from_json(d)


def sweep(model: Any, example_inputs: Any = None, *, batch_sizes: Sequence[int] | str, targets: Any = None,
          loss: Callable[..., Any] | None = None, gpu: str = "h100-80gb", precision: str = "32-true",
          optimizer: str = "adam", checkpoint: str = "none", **options: Any) -> Sweep:
    """Predictions over batch sizes: a list, or the command line's range
    form ("1:64" doubles, "8:64:8" steps)."""
    batch = batch_sizes if isinstance(batch_sizes, str) else ",".join(str(b) for b in batch_sizes)
    d = _run("sweep", model, example_inputs, targets, loss,
             dict(batch=batch, gpu=gpu, precision=precision, optimizer=optimizer, checkpoint=checkpoint, **options))
    return Sweep(rows=[Estimate.from_json(r) for r in d])


def plan(model: Any, example_inputs: Any = None, *, global_batch: int, targets: Any = None,
         loss: Callable[..., Any] | None = None, gpu: str = "h100-80gb", **options: Any) -> Plan:
    """What to change (micro-batch and accumulation, precision, checkpointing,
    optimizer implementation, sharding) so that global_batch trains on gpu,
    best first."""
    d = _run("plan", model, example_inputs, targets, loss, dict(global_batch=global_batch, gpu=gpu, **options))
    return Plan.from_json(d)
