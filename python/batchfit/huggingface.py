"""Setting a Hugging Face Trainer's batch size from batchfit's answer.

transformers' ``auto_find_batch_size`` (accelerate's
``find_executable_batch_size``) runs the training loop, halves the batch on
every out-of-memory error and starts again. Here the Trainer's own model and
arguments are read once, batchfit answers the largest batch that fits with
its margin, and ``per_device_train_batch_size`` (with
``gradient_accumulation_steps`` for a target global batch) is set before the
first step — no trial on the GPU::

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[BatchSizeCallback(gpu="a100-40gb", global_batch=256)])

A model whose ``config`` batchfit's Hugging Face reader knows (Llama, Mistral,
Qwen2, Gemma, GPT-2, BERT, ...) is predicted from its config.json. For a
Trainer already made, ``configure(trainer, gpu=...)`` reads one batch through
its data collator: the sequence length is the data's, and a model batchfit
cannot build from a config is captured on that batch instead. The Trainer's
FSDP and DeepSpeed settings (``fsdp``, ``deepspeed``) make the prediction one
rank's of a sharded job.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from . import api
from .errors import UsageError
from .results import MaxBatch

# TrainingArguments.optim (transformers' OptimizerNames) → batchfit's
# --optimizer and its implementation flag
_OPTIMIZERS: dict[str, tuple[str, str]] = {
    "adamw_torch": ("adamw", ""),
    "adamw_hf": ("adamw", "forloop"),
    "adamw_torch_fused": ("adamw", "fused"),
    "adafactor": ("adafactor", ""),
    "sgd": ("sgd", ""),
    "adamw_bnb_8bit": ("adamw8bit", ""),
    "adamw_8bit": ("adamw8bit", ""),
    "paged_adamw_8bit": ("paged_adamw8bit", ""),
    "paged_adamw_32bit": ("paged_adamw", ""),
}


def job_options(args: Any) -> dict[str, Any]:
    """batchfit's options for a TrainingArguments: precision, optimizer,
    checkpointing and weight decay, as the Trainer will run them."""
    optim = str(getattr(args, "optim", "adamw_torch"))
    optim = optim.split(".")[-1].lower()  # an OptimizerNames member prints as OptimizerNames.ADAMW_TORCH
    if optim not in _OPTIMIZERS:
        raise UsageError("TrainingArguments.optim %r: batchfit models %s" % (optim, ", ".join(sorted(_OPTIMIZERS))))
    opt, impl = _OPTIMIZERS[optim]
    # Trainer wraps the step in autocast for bf16/fp16 (mixed precision);
    # the weights stay float32
    precision = "bf16-mixed" if getattr(args, "bf16", False) else "16-mixed" if getattr(args, "fp16", False) else "32-true"
    out: dict[str, Any] = {"precision": precision, "optimizer": opt, "weight_decay": float(getattr(args, "weight_decay", 0.0))}
    if impl:
        out[impl] = True
    if getattr(args, "gradient_checkpointing", False):
        # Trainer calls model.gradient_checkpointing_enable(
        # gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs):
        # transformers' own checkpointing, reentrant unless the kwargs
        # say otherwise, with use_cache off
        kw = getattr(args, "gradient_checkpointing_kwargs", None) or {}
        out["checkpoint"] = "hf" if kw.get("use_reentrant", True) else "hf-non-reentrant"
    out.update(parallel_options(args))
    return out


# TrainingArguments.fsdp's FSDPOption values → batchfit's --sharding
_SHARDING = {"full_shard": "full", "shard_grad_op": "grad-op", "hybrid_shard": "hybrid",
             "hybrid_shard_zero2": "hybrid", "no_shard": "none"}


def parallel_options(args: Any) -> dict[str, Any]:
    """batchfit's data-parallel options for the Trainer's FSDP or DeepSpeed
    settings, where given: the ranks (args.world_size), FSDP's sharding
    strategy and CPU offload (args.fsdp), or ZeRO's stage and its
    optimizer and parameter offload (args.deepspeed, a config file or
    dict). The prediction is then one rank's, as the command line's."""
    world = _world(args)
    fsdp = [str(getattr(o, "value", o)) for o in (getattr(args, "fsdp", None) or [])]
    if isinstance(getattr(args, "fsdp", None), str):
        fsdp = args.fsdp.split()
    ds = getattr(args, "deepspeed", None)
    out: dict[str, Any] = {}
    if fsdp:
        out["strategy"] = "fsdp"
        for o in fsdp:
            if o in _SHARDING:
                out["sharding"] = _SHARDING[o]
            elif o == "offload":
                out["offload"] = True
    elif ds:
        cfg = ds
        if isinstance(ds, str):
            with open(ds, encoding="utf-8") as f:
                cfg = json.load(f)
        zero = cfg.get("zero_optimization") or {}
        stage = int(zero.get("stage", 0))
        if stage not in (1, 2, 3):
            raise UsageError("DeepSpeed zero_optimization.stage %r: batchfit models stages 1, 2 and 3" % zero.get("stage"))
        out["strategy"] = "zero%d" % stage
        if (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme"):
            out["offload"] = True
        if (zero.get("offload_param") or {}).get("device") in ("cpu", "nvme"):
            out["offload_params"] = True
    if out or world > 1:
        out["gpus"] = world
    return out


def _world(args: Any) -> int:
    return max(1, int(getattr(args, "world_size", 1) or 1))


def split_global_batch(largest: int, global_batch: int, world: int) -> tuple[int, int]:
    """(micro-batch, accumulation) for global_batch samples per optimizer step
    over world ranks, with micro-batch ≤ largest: the fewest accumulation
    steps, then the smallest micro-batch that still makes up the global
    batch (micro × accumulation × world ≥ global)."""
    if largest < 1:
        raise UsageError("no batch fits: batchfit's largest batch is %d" % largest)
    per_rank = math.ceil(global_batch / world)
    accumulate = math.ceil(per_rank / largest)
    return math.ceil(per_rank / accumulate), accumulate


@dataclass
class BatchSizeCallback(TrainerCallback):
    """A TrainerCallback that sets the batch size when the Trainer is made.

    ``gpu`` is the GPU the job runs on (a catalog name or a size such as
    "24GB"); ``global_batch``, when given, is the samples per optimizer step
    over every rank, made up with gradient accumulation; ``seq`` the
    sequence length the data has (default: the model's). ``options`` are
    more batchfit flags (``options={"alloc_conf": "expandable_segments:True"}``).
    After on_init_end, ``answer`` holds batchfit's MaxBatch."""

    gpu: str
    global_batch: int | None = None
    seq: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    answer: MaxBatch | None = None

    def on_init_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> Any:
        self.answer = largest_batch(model, args, gpu=self.gpu, seq=self.seq, **self.options)
        apply(args, self.answer.max_batch, self.global_batch)
        return control


def apply(args: Any, largest: int, global_batch: int | None) -> None:
    """Set args' per-device batch (and accumulation for global_batch)."""
    if global_batch:
        micro, acc = split_global_batch(largest, global_batch, _world(args))
        args.per_device_train_batch_size = micro
        args.gradient_accumulation_steps = acc
    else:
        args.per_device_train_batch_size = largest


def largest_batch(model: Any, args: Any, *, gpu: str, seq: int | None = None, example: Any = None, **options: Any) -> MaxBatch:
    """batchfit's largest batch for this model under these TrainingArguments:
    from its config.json, or captured on example (one batch) when given."""
    opts = job_options(args)
    opts.update(options)
    if seq and example is None:
        opts["seq"] = seq
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_json_file") and example is None:
        with tempfile.TemporaryDirectory(prefix="batchfit-") as d:
            config.to_json_file(os.path.join(d, "config.json"))
            return api.max_batch(d, gpu=gpu, **opts)
    if example is None:
        raise UsageError("the model has no Hugging Face config: pass example= (one batch of the collator's output)")
    return api.max_batch(model, example, gpu=gpu, **opts)


def configure(trainer: Any, *, gpu: str, global_batch: int | None = None, seq: int | None = None,
              **options: Any) -> MaxBatch:
    """Set a made Trainer's batch size from batchfit, reading one batch of its
    own training data through its data collator: the sequence length is the
    batch's (unless seq is given), and a model batchfit cannot build from its
    config (a model of your own, a class the reader does not know) is
    captured on that batch instead. Returns batchfit's answer."""
    from .errors import BatchfitError

    batch = next(iter(trainer.get_train_dataloader()))
    ids = batch.get("input_ids") if isinstance(batch, dict) else None
    if seq is None and ids is not None and getattr(ids, "dim", lambda: 0)() == 2:
        seq = int(ids.shape[1])
    model = trainer.model
    try:
        answer = largest_batch(model, trainer.args, gpu=gpu, seq=seq, **options)
    except BatchfitError:
        # the config is not one batchfit reads: the model itself, on the
        # collator's batch (its labels give the loss the Trainer uses)
        answer = largest_batch(model, trainer.args, gpu=gpu, example=dict(batch), **options)
    apply(trainer.args, answer.max_batch, global_batch)
    # Trainer.train reads the batch size from its arguments again
    # (self._train_batch_size = self.args.train_batch_size)
    trainer._train_batch_size = trainer.args.train_batch_size
    return answer
