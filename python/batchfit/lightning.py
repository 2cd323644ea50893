"""Setting a Lightning module's batch size from batchfit's answer.

Lightning's ``BatchSizeFinder`` (``Tuner.scale_batch_size``) runs trial
steps at growing batch sizes until one runs out of memory. This callback
takes the same place — it looks the batch size up by the same attribute
name on the module, its hparams, the datamodule or its hparams
(``lightning_hasattr``/``lightning_setattr``), at the same moment
(``on_fit_start``), and reloads the dataloaders as the finder does — but
sets it once, from batchfit's largest batch that fits with its margin,
with no trial on the GPU::

    trainer = L.Trainer(callbacks=[BatchfitBatchSize(gpu="a100-40gb")])
    trainer.fit(model, datamodule=dm)

What is predicted is one training step as Lightning runs it: the module's
``training_step`` on one batch of its own train dataloader (captured on the
meta device, the weights untouched), at the trainer's precision, with the
optimizer ``configure_optimizers`` made. On a GPU the measured peaks after
the first steps are logged beside the prediction.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.parsing import lightning_hasattr, lightning_setattr

from . import api
from .results import MaxBatch

log = logging.getLogger(__name__)


class _TrainingStep(torch.nn.Module):
    """The module's training_step as a forward: what the capture runs.

    self.log is a no-op while it runs (no loop collects results there)."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        batch: Any = kwargs if kwargs else (args[0] if len(args) == 1 else args)
        m = self.module
        saved = m.__dict__.get("log"), m.__dict__.get("log_dict")
        m.log = lambda *a, **k: None
        m.log_dict = lambda *a, **k: None
        try:
            out = m.training_step(batch, 0)
        finally:
            for name, v in zip(("log", "log_dict"), saved):
                if v is None:
                    m.__dict__.pop(name, None)
                else:
                    m.__dict__[name] = v
        return {"loss": out["loss"] if isinstance(out, dict) else out}


# torch.optim classes → batchfit's --optimizer
_OPTIMIZERS = {"SGD": "sgd", "Adam": "adam", "AdamW": "adamw", "Adafactor": "adafactor"}


def optimizer_options(optimizer: Any) -> dict[str, Any]:
    """batchfit's optimizer options for a torch.optim optimizer: its kind,
    its implementation (foreach, fused) and the settings that change its
    state (SGD's momentum, Adam's amsgrad, weight decay)."""
    name = type(optimizer).__name__
    if name not in _OPTIMIZERS:
        raise MisconfigurationException("batchfit models %s, not %s" % (", ".join(sorted(_OPTIMIZERS)), name))
    d = optimizer.defaults
    out: dict[str, Any] = {"optimizer": _OPTIMIZERS[name], "weight_decay": float(d.get("weight_decay", 0.0))}
    if d.get("fused"):
        out["fused"] = True
    elif d.get("foreach") is False:
        out["forloop"] = True
    elif d.get("foreach"):
        out["foreach"] = True
    if name == "SGD" and d.get("momentum"):
        out["momentum"] = float(d["momentum"])
    if d.get("amsgrad"):
        out["amsgrad"] = True
    return out


class BatchfitBatchSize(Callback):
    """Sets the batch size before fit from batchfit's largest batch.

    ``gpu`` is the GPU the job runs on (a catalog name or a size such as
    "24GB"); ``batch_arg_name`` the attribute the dataloaders read, as
    BatchSizeFinder's; ``options`` more batchfit flags (``checkpoint="full"``
    for a module that checkpoints its blocks). After fit starts, ``answer``
    holds batchfit's MaxBatch and ``batch_size`` the size set."""

    def __init__(self, gpu: str, batch_arg_name: str = "batch_size", check_steps: int = 3, **options: Any) -> None:
        self.gpu = gpu
        self.batch_arg_name = batch_arg_name
        self.check_steps = check_steps
        self.options = options
        self.answer: MaxBatch | None = None
        self.batch_size: int | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and not lightning_hasattr(pl_module, self.batch_arg_name):
            raise MisconfigurationException(
                "Field %s not found in `model`, `datamodule`, nor their `hparams` attributes." % self.batch_arg_name)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        loop = trainer.fit_loop
        loop.setup_data()
        batch = next(iter(trainer.train_dataloader))
        opts: dict[str, Any] = {"precision": str(trainer.precision)}
        if trainer.optimizers:
            opts.update(optimizer_options(trainer.optimizers[0]))
        opts.update(self.options)
        self.answer = api.max_batch(_TrainingStep(pl_module), batch, gpu=self.gpu, keep=(trainer,), **opts)
        self.batch_size = self.answer.max_batch
        lightning_setattr(pl_module, self.batch_arg_name, self.batch_size)
        log.info("batchfit: batch size %d on %s (device total %s bytes predicted)", self.batch_size, self.gpu,
                 self.answer.at_max.device_total_bytes if self.answer.at_max else "?")
        # the dataloaders are made again with the new size, as
        # BatchSizeFinder's _reset_dataloaders does
        loop._combined_loader = None
        loop.setup_data()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx + 1 != self.check_steps or not torch.cuda.is_available() or self.answer is None or self.answer.at_max is None:
            return
        at = self.answer.at_max
        log.info("batchfit: after %d steps at batch %d, max_memory_allocated %d (predicted %d), max_memory_reserved %d (predicted %d)",
                 self.check_steps, self.batch_size, torch.cuda.max_memory_allocated(), at.peak_allocated_bytes,
                 torch.cuda.max_memory_reserved(), at.peak_reserved_bytes)
