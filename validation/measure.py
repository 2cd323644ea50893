#!/usr/bin/env python3
"""Measure the GPU memory of real PyTorch training steps, for batchfit's accuracy tests.

Runs a matrix of training cases (validation/cases.json) on one CUDA GPU, each case in a fresh
subprocess (an OOM or a crash never poisons the next case), and writes one JSON file with, per
case and per step: torch.cuda.max_memory_allocated / max_memory_reserved (per phase: data,
forward, backward, optimizer), memory_allocated / memory_reserved after each step, the device
memory NVML reports (pynvml, else a ctypes binding of libnvidia-ml, else nvidia-smi, else
torch.cuda.mem_get_info), the memory the process uses outside the caching allocator (CUDA
context, cuBLAS/cuDNN handles, lazily loaded kernels), the step time, and the environment
(torch / CUDA / cuDNN / driver versions, GPU name and capacity).

Modes:
    measure.py [--cases FILE] [--out FILE] [--only ID|GLOB ...] [--resume]
        run the cases (default: all in the case file) and write --out.
    measure.py --maxbatch [--only ...] [--maxbatch-cap N]
        for cases flagged "maxbatch": true (or those named with --only): the largest batch
        that really fits, by doubling then bisection, one fresh process per trial, real OOMs.
    measure.py --dry-run [--no-step]
        CPU only, no CUDA call: validate the case file, build every model (meta device where
        the installed torch supports it, else CPU), count parameters, and run one CPU
        training step at batch 1 (64 px images) for every distinct (model, precision,
        optimizer, checkpoint, accumulation) combination to exercise the worker's code.
    measure.py --list
        print the case ids.
    measure.py --merge SHARD.json ... --out FILE
        one result file from shards run at the same time (validation/gpu_session.sh): the
        per-process CUDA context figure replaces the device-wide one, which the shards disturb.

Conventions of a measured step (the Go step simulator must model the same loop):
    for each micro-batch (gradient accumulation: `accum` micro-batches per step):
        data:      a new batch is created on the device while the previous one is still
                   referenced (as `x = x.to(dev)` in a typical loop), then the old one dropped
        forward:   model + loss (under autocast for amp_*); loss divided by accum
        backward:  loss.backward() (scaler.scale(loss).backward() for amp_fp16)
    optimizer:     optimizer.step() (scaler.step/update for amp_fp16), then
                   zero_grad(set_to_none=True); torch.cuda.empty_cache() if the case says so.
No warm-up step: step 0 is the first step the process ever runs (optimizer state is created
lazily in it). The model is built on the CPU with seed 0 and moved with .to(device).

The CUDA context is measured in each worker before anything else: device memory used (NVML)
before CUDA initialisation versus after torch.cuda.init() and one tiny allocation, minus
memory_reserved. The tiny allocation is then freed and the cache emptied, so the allocator
starts every case empty.

This file is importable without torch: the parent process never touches CUDA.
"""

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CASES = os.path.join(HERE, "cases.json")
SCHEMA = "batchfit-measure/1"

# The case files: measure_cases.py.
from measure_cases import (  # noqa: E402,F401
    ATTN_IMPLS, CASE_DEFAULTS, CASE_KEYS, LM_MODELS, MODELS, OPTIMIZERS, PRECISIONS,
    SDPA_BACKENDS, CaseError, attn_implementation, case_batches, hf_config_path, load_cases,
    select_cases, validate_case)

MEMORY_ERROR_MARKERS = (
    "out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_NOT_ENOUGH_WORKSPACE", "cudaErrorMemoryAllocation",
)

# memory_stats() keys reported at the end of every step (when the installed torch has them).
STEP_STAT_KEYS = (
    "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
    "num_sync_all_streams",
    "segment.all.current", "segment.large_pool.current", "segment.small_pool.current",
    "allocation.all.current",
    "reserved_bytes.large_pool.current", "reserved_bytes.small_pool.current",
    "allocated_bytes.large_pool.current", "allocated_bytes.small_pool.current",
    "inactive_split_bytes.all.current", "inactive_split.all.current",
    "requested_bytes.all.current", "active_bytes.all.current",
)


# NVML (no CUDA context needed): nvml.py.
from nvml import NVML  # noqa: E402


# ==============================================================================================
# Models, data, loss (torch imported lazily: the parent process never needs it)


_REFERENCE = []


def _reference_module():
    """validation/reference.py holds the model definitions shared with the CPU reference."""
    if _REFERENCE:
        return _REFERENCE[0]
    import importlib.util
    spec = importlib.util.spec_from_file_location("batchfit_reference",
                                                  os.path.join(HERE, "reference.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _REFERENCE.append(mod)
    return mod


def build_model(case):
    """The model (on the CPU, seed 0), its per-sample input spec and the number of classes."""
    import torch
    name = case["model"]
    torch.manual_seed(0)
    if name == "gpt2":
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel
        kwargs = {}
        if case["attn_implementation"]:
            kwargs["attn_implementation"] = case["attn_implementation"]
        cfg = GPT2Config(**kwargs)
        if case["attn_implementation"]:
            try:  # some versions ignore the constructor kwarg
                cfg._attn_implementation = case["attn_implementation"]
            except Exception:
                pass
        model = GPT2LMHeadModel(cfg)
        info = {"kind": "lm", "vocab": cfg.vocab_size, "seq_len": case["seq_len"],
                "transformers": transformers.__version__,
                "attn_implementation": getattr(model.config, "_attn_implementation", None)}
        return model, info
    if name == "hf_config":
        return _build_hf_config(case)
    ref = _reference_module()
    builder, in_shape, classes, _ = ref.MODELS[name]
    torch.manual_seed(0)
    small = case.get("_dry_image")
    if small and len(in_shape) == 3 and in_shape[1] > small:
        # --dry-run's CPU steps exercise the worker's code, not the sizes: images of `small`
        # pixels (ViT built for them: its position table follows the image).
        in_shape = (in_shape[0], small, small)
        if name.startswith("vit_"):
            import torchvision
            model = getattr(torchvision.models, name)(weights=None, image_size=small)
        else:
            model = builder()
    else:
        model = builder()
    return model, {"kind": "classifier", "input_shape": list(in_shape), "classes": classes}


def _build_hf_config(case):
    """A causal LM from the case's config.json: AutoModelForCausalLM.from_config with the
    attention implementation passed to from_config itself (transformers 5 dropped the
    config's _attn_implementation setter that gpt2's path tries; the kwarg is in 4.36+)."""
    import torch
    try:
        import transformers
    except ImportError as e:
        raise RuntimeError("model \"hf_config\" needs transformers, which %s cannot import "
                           "(%s)" % (sys.executable, e))
    with open(hf_config_path(case), encoding="utf-8") as f:
        text = f.read()
    # AutoConfig.from_pretrained on the directory: the loader every release keeps, which
    # also maps the keys a release renamed (torch_dtype to dtype in 5.x)
    cfg = transformers.AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(hf_config_path(case))))
    attn = attn_implementation(case)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    info = {"kind": "lm", "vocab": cfg.vocab_size, "seq_len": case["seq_len"],
            "transformers": transformers.__version__,
            "attn_implementation": getattr(model.config, "_attn_implementation", attn),
            "class": type(model).__name__, "hf_config": case["hf_config"],
            # the file's text as read: batchfit builds its prediction from this, never
            # opening a path a result file names
            "hf_config_json": text}
    return model, info


def sdpa_context(case, device):
    """torch.nn.attention.sdpa_kernel(<the case's backend>), or a null context.

    On the CPU (--dry-run) every backend is run as math: the CPU has no memory-efficient or
    cuDNN kernel (sdp_utils_cpp.cpp's select_sdp_backend_cpp knows math and flash only), and
    the dry run exercises the worker's code, not the kernel. Torch before 2.3 has no
    torch.nn.attention: a case that names a backend fails there, and a CPU dry run steps it
    without the context.
    """
    backend = case["sdpa_backend"]
    if backend is None:
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        if device.type == "cpu":
            return contextlib.nullcontext()
        raise RuntimeError("sdpa_backend %r needs torch.nn.attention.sdpa_kernel (torch 2.3+)"
                           % backend)
    if device.type == "cpu":
        backend = "math"
    member = {"math": "MATH", "efficient": "EFFICIENT_ATTENTION", "flash": "FLASH_ATTENTION",
              "cudnn": "CUDNN_ATTENTION"}[backend]
    if not hasattr(SDPBackend, member):
        raise RuntimeError("sdpa_backend %r: this torch's SDPBackend has no %s" % (
            backend, member))
    return sdpa_kernel(getattr(SDPBackend, member))


def checkpoint_blocks(case, model):
    """Wrap each block's forward in torch.utils.checkpoint (non-reentrant). Returns the count.

    Blocks: mlp Linear+ReLU pairs; simpleconv conv-relu-pool stages; vgg16 the five stages of
    `features` (each ending with its MaxPool); resnet each BasicBlock/Bottleneck; vit_b_16
    each EncoderBlock; gpt2 each GPT2Block; hf_config each decoder layer. Stems, heads and
    losses are not checkpointed.
    """
    import torch.nn as nn
    name = case["model"]
    blocks = []
    if name.startswith("mlp"):
        mods = list(model.children())  # Flatten, (Linear, ReLU)*L, Linear
        body = mods[1:-1]
        pairs = [nn.Sequential(body[i], body[i + 1]) for i in range(0, len(body), 2)]
        model = nn.Sequential(mods[0], *pairs, mods[-1])
        blocks = pairs
    elif name == "simpleconv":
        mods = list(model.children())
        stages = [nn.Sequential(*mods[0:3]), nn.Sequential(*mods[3:6])]
        model = nn.Sequential(*stages, *mods[6:])
        blocks = stages
    elif name == "vgg16":
        stages, cur = [], []
        for m in model.features.children():
            cur.append(m)
            if isinstance(m, nn.MaxPool2d):
                stages.append(nn.Sequential(*cur))
                cur = []
        assert not cur
        model.features = nn.Sequential(*stages)
        blocks = stages
    elif name in ("resnet18", "resnet50"):
        for layer in (model.layer1, model.layer2, model.layer3, model.layer4):
            blocks += list(layer.children())
    elif name == "vit_b_16":
        blocks = list(model.encoder.layers.children())
    elif name == "gpt2":
        blocks = list(model.transformer.h)
    elif name == "hf_config":
        blocks = list(model.model.layers)  # LlamaForCausalLM and its relatives
    for b in blocks:
        _checkpoint_forward(b)
    return model, len(blocks)


def _checkpoint_forward(module):
    from torch.utils.checkpoint import checkpoint
    orig = module.forward

    def forward(*args, **kwargs):
        if kwargs:
            return checkpoint(orig, *args, use_reentrant=False, **kwargs)
        return checkpoint(orig, *args, use_reentrant=False)

    module.forward = forward


def make_optimizer(case, params):
    import torch
    kw = {}
    if case["foreach"] is not None:
        kw["foreach"] = case["foreach"]
    if case["fused"] is not None:
        kw["fused"] = case["fused"]
    opt = case["optimizer"]
    if opt == "sgd":
        return torch.optim.SGD(params, lr=1e-3, **kw)
    if opt == "sgd_momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, **kw)
    if opt == "adam":
        return torch.optim.Adam(params, lr=1e-4, **kw)
    return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, **kw)


class Trainer:
    """One training setup; step() runs one optimizer step and records memory per phase."""

    def __init__(self, case, device, record):
        import torch
        self.torch = torch
        self.case = case
        self.device = device
        self.cuda = device.type == "cuda"
        self.record = record  # callable(phase_name) -> dict, or None
        prec = case["precision"]
        self.param_dtype = torch.bfloat16 if prec == "bf16" else torch.float32
        self.amp_dtype = {"amp_bf16": torch.bfloat16, "amp_fp16": torch.float16}.get(prec)
        # CPU dry runs: CPU autocast supports bf16 only; GradScaler needs CUDA.
        self.amp_enabled = self.amp_dtype is not None and (
            self.cuda or self.amp_dtype == torch.bfloat16)
        self.scaler = None
        if prec == "amp_fp16":
            if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
                self.scaler = torch.amp.GradScaler(device.type, enabled=self.cuda)
            else:
                self.scaler = torch.cuda.amp.GradScaler(enabled=self.cuda)

        model, self.info = build_model(case)
        self.checkpointed_blocks = 0
        if case["checkpoint"]:
            model, self.checkpointed_blocks = checkpoint_blocks(case, model)
        self.model = model.to(device=device, dtype=self.param_dtype).train()
        self.param_count = sum(p.numel() for p in self.model.parameters())
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.buffer_bytes = sum(b.numel() * b.element_size() for b in self.model.buffers())
        self.optimizer = make_optimizer(case, self.model.parameters())
        self.batch = None
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(0)

    def new_batch(self, b):
        torch = self.torch
        if self.info["kind"] == "lm":
            ids = torch.randint(0, self.info["vocab"], (b, self.info["seq_len"]),
                                device=self.device, generator=self.gen)
            return (ids,)
        x = torch.randn((b, *self.info["input_shape"]), device=self.device,
                        dtype=self.param_dtype, generator=self.gen)
        y = torch.randint(0, self.info["classes"], (b,), device=self.device, generator=self.gen)
        return (x, y)

    def loss(self, batch):
        import torch.nn.functional as F
        if self.info["kind"] == "lm":
            ids, = batch
            out = self.model(input_ids=ids, use_cache=False)
            logits = out.logits if hasattr(out, "logits") else out[0]
            # Shifted LM loss without copying the logits: pad the labels instead.
            labels = F.pad(ids[:, 1:], (0, 1), value=-100)
            return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.reshape(-1),
                                   ignore_index=-100)
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def _autocast(self):
        if not self.amp_enabled:
            return contextlib.nullcontext()
        return self.torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _phase(self, name):
        return self.record(name) if self.record else {}

    def step(self, b, progress):
        torch = self.torch
        accum = self.case["accum"]
        micro = []
        for j in range(accum):
            progress.update(micro=j, phase="data")
            new = self.new_batch(b)          # the previous batch is still referenced here
            self.batch = new
            del new
            data = self._phase("data")
            progress["phase"] = "forward"
            # The forward and the backward inside the case's SDPA kernel choice: the backward
            # runs the kernel the forward chose, and naming it for both keeps the choice for
            # anything the backward recomputes (checkpointed blocks).
            with sdpa_context(self.case, self.device):
                with self._autocast():
                    loss = self.loss(self.batch)
                if accum > 1:
                    loss = loss / accum
                fwd = self._phase("forward")
                progress["phase"] = "backward"
                if self.scaler is not None:
                    self.scaler.scale(loss).backward()
                else:
                    loss.backward()
                bwd = self._phase("backward")
            micro.append({"data": data, "forward": fwd, "backward": bwd,
                          "loss": loss.item() * accum})
        progress["phase"] = "optimizer"
        skipped = None
        if self.scaler is not None:
            scale_before = self.scaler.get_scale() if self.scaler.is_enabled() else None
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if scale_before is not None:
                # GradScaler skips optimizer.step() on inf/nan grads and lowers the scale; a
                # skipped first step means no optimizer state yet.
                skipped = self.scaler.get_scale() < scale_before
        else:
            self.optimizer.step()
        opt_step = self._phase("optimizer_step")
        progress["phase"] = "zero_grad"
        self.optimizer.zero_grad(set_to_none=True)
        zero = self._phase("zero_grad")
        out = {"micro": micro, "optimizer_step": opt_step, "zero_grad": zero,
               "optimizer_step_skipped": skipped}
        if self.scaler is not None and self.scaler.is_enabled():
            out["grad_scale"] = self.scaler.get_scale()
        return out


# ==============================================================================================
# Worker: one case in this (fresh) process


def environment(torch, dev, nvml):
    props = torch.cuda.get_device_properties(dev)
    env = {
        "gpu_name": props.name,
        "gpu_total_memory": int(props.total_memory),
        "gpu_capability": "%d.%d" % (props.major, props.minor),
        "gpu_multiprocessors": props.multi_processor_count,
        "gpu_uuid": str(getattr(props, "uuid", "")) or None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "driver": nvml.driver_version(),
        "python": platform.python_version(),
        "nvml_source": nvml.source,
        "nvml_device_match": nvml.match,
        "mem_get_info_total": int(torch.cuda.mem_get_info(dev)[1]),
        "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
        "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
        "env": {k: os.environ.get(k) for k in (
            "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_MODULE_LOADING",
            "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "CUDA_VISIBLE_DEVICES",
            "PYTORCH_NO_CUDA_MEMORY_CACHING") if os.environ.get(k) is not None},
    }
    for name in ("torchvision", "transformers", "pynvml", "nvidia-ml-py"):
        try:  # versions without importing (importing transformers takes seconds)
            import importlib.metadata
            env[name] = importlib.metadata.version(name)
        except Exception:
            env[name] = None
    for fn in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled",
               "cudnn_sdp_enabled"):
        f = getattr(torch.backends.cuda, fn, None)
        if f is not None:
            env[fn] = bool(f())
    return env


def _start_history(torch):
    mem = torch.cuda.memory
    if not hasattr(mem, "_record_memory_history"):
        return "unavailable: torch.cuda.memory._record_memory_history missing"
    try:  # torch >= 2.1
        mem._record_memory_history(enabled="all", context="all", stacks="python",
                                   max_entries=2000000)
        return "enabled"
    except TypeError:
        pass
    try:  # torch 2.0
        mem._record_memory_history(True, trace_alloc_max_entries=2000000,
                                   trace_alloc_record_context=True)
        return "enabled (2.0 API)"
    except Exception as e:
        return "unavailable: %s" % e


def _dump_history(torch, path):
    import pickle
    mem = torch.cuda.memory
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if hasattr(mem, "_dump_snapshot"):
        mem._dump_snapshot(path)
    else:
        with open(path, "wb") as f:
            pickle.dump(mem._snapshot(), f)
    return path


def cuda_device(torch):
    """The device a worker measures (CUDA_VISIBLE_DEVICES picks the GPU)."""
    return torch.device("cuda", 0)


def is_memory_error(exc_or_msg):
    msg = str(exc_or_msg)
    return any(m in msg for m in MEMORY_ERROR_MARKERS)


def worker_main(case_path, result_path, snapshot_dir):
    with open(case_path, encoding="utf-8") as f:
        case = json.load(f)
    res = {"id": case["id"], "case": case, "status": "error", "progress": {}}
    torch = None
    history = False
    try:
        nvml = NVML()
        before = nvml.device_memory()          # before CUDA is initialised in this process
        import torch  # noqa: F811  (imported late on purpose)
        res["status"] = "running"
        dev = cuda_device(torch)
        t0 = time.perf_counter()
        torch.cuda.init()
        tiny = torch.empty(1, device=dev)
        torch.cuda.synchronize(dev)
        init_s = time.perf_counter() - t0
        nvml.rebind_uuid(str(getattr(torch.cuda.get_device_properties(dev), "uuid", "")))
        after = nvml.device_memory()
        free, total = torch.cuda.mem_get_info(dev)
        reserved = torch.cuda.memory_reserved(dev)
        proc, how = nvml.process_used(os.getpid())
        res["env"] = environment(torch, dev, nvml)
        res["context"] = {
            "init_s": round(init_s, 3),
            "reserved_at_measure": reserved,
            "device_used_before_init": before and before["used"],
            "device_used_after_init": after and after["used"],
            "context_bytes": (after["used"] - before["used"] - reserved)
            if before and after else None,
            "process_used_after_init": proc,
            "process_match": how,
            "context_bytes_process": proc - reserved if proc is not None else None,
            "mem_get_info_used_after_init": int(total - free),
            # Without NVML there is no baseline: this bound also counts other processes.
            "context_bytes_upper_bound": int(total - free) - reserved,
        }
        del tiny
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
        torch.backends.cudnn.benchmark = case["cudnn_benchmark"]
        if case["snapshot"]:
            res["snapshot_history"] = _start_history(torch)
            history = res["snapshot_history"].startswith("enabled")

        def record(name):
            torch.cuda.synchronize(dev)
            s = torch.cuda.memory_stats(dev)
            out = {
                "peak_allocated": torch.cuda.max_memory_allocated(dev),
                "peak_reserved": torch.cuda.max_memory_reserved(dev),
                "peak_active": s.get("active_bytes.all.peak"),
                "peak_requested": s.get("requested_bytes.all.peak"),
                "allocated": torch.cuda.memory_allocated(dev),
                "reserved": torch.cuda.memory_reserved(dev),
            }
            torch.cuda.reset_peak_memory_stats(dev)
            return out

        trainer = Trainer(case, dev, record)
        res["setup"] = {"after_model_and_optimizer": record("setup")}
        res["model"] = dict(trainer.info, param_count=trainer.param_count,
                            param_bytes=trainer.param_bytes, buffer_bytes=trainer.buffer_bytes,
                            checkpointed_blocks=trainer.checkpointed_blocks,
                            optimizer_class=type(trainer.optimizer).__name__)
        steps = []
        res["steps"] = steps
        progress = res["progress"]
        for i, b in enumerate(case_batches(case)):
            progress.update(step=i, batch=b, micro=0, phase="start")
            torch.cuda.synchronize(dev)
            t = time.perf_counter()
            st = trainer.step(b, progress)
            torch.cuda.synchronize(dev)
            st["time_s"] = round(time.perf_counter() - t, 4)
            st["step"], st["batch"], st["micro_batches"] = i, b, case["accum"]
            phases = [p for m in st["micro"] for p in (m["data"], m["forward"], m["backward"])]
            phases += [st["optimizer_step"], st["zero_grad"]]
            st["peak_allocated"] = max(p["peak_allocated"] for p in phases)
            st["peak_reserved"] = max(p["peak_reserved"] for p in phases)
            if case["empty_cache"]:
                st["reserved_before_empty_cache"] = torch.cuda.memory_reserved(dev)
                torch.cuda.empty_cache()
            st.update({"allocated_after": torch.cuda.memory_allocated(dev),
                       "reserved_after": torch.cuda.memory_reserved(dev)})
            dm = nvml.device_memory()
            if dm is not None:
                st["device_used_after"], st["device_used_source"] = dm["used"], nvml.source
            else:
                free, total = torch.cuda.mem_get_info(dev)
                st["device_used_after"], st["device_used_source"] = total - free, "mem_get_info"
            proc, _ = nvml.process_used(os.getpid())
            st["process_used_after"] = proc
            st["non_allocator_bytes"] = (proc - st["reserved_after"]) if proc is not None \
                else None
            stats = torch.cuda.memory_stats(dev)
            st["stats"] = {k: stats[k] for k in STEP_STAT_KEYS if k in stats}
            steps.append(st)
        progress.update(phase="done")
        allp = [res["setup"]["after_model_and_optimizer"]] + steps
        res["max_memory_allocated"] = max(p["peak_allocated"] for p in allp)
        res["max_memory_reserved"] = max(p["peak_reserved"] for p in allp)
        res["status"] = "ok"
    except BaseException as e:  # noqa: B902 -- record everything, including KeyboardInterrupt
        oom_types = tuple(t for t in (
            getattr(torch, "OutOfMemoryError", None) if torch else None,
            getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None,
        ) if t is not None)
        if (oom_types and isinstance(e, oom_types)) or is_memory_error(e):
            res["status"] = "oom"
        else:
            res["status"] = "error"
            res["traceback"] = traceback.format_exc()[-6000:]
        res["error"] = "%s: %s" % (type(e).__name__, e)
        if torch is not None and torch.cuda.is_initialized():
            try:
                dev = cuda_device(torch)
                res["at_failure"] = {
                    "allocated": torch.cuda.memory_allocated(dev),
                    "reserved": torch.cuda.memory_reserved(dev),
                    "peak_allocated_since_phase_start": torch.cuda.max_memory_allocated(dev),
                    "peak_reserved_since_phase_start": torch.cuda.max_memory_reserved(dev),
                    "num_ooms": torch.cuda.memory_stats(dev).get("num_ooms"),
                }
            except Exception:
                pass
    finally:
        if history and torch is not None:
            try:
                res["snapshot"] = os.path.relpath(_dump_history(
                    torch, os.path.join(snapshot_dir, case["id"] + ".pickle")))
            except Exception as e:
                res["snapshot_error"] = "%s: %s" % (type(e).__name__, e)
        tmp = result_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(res, f, sort_keys=True, indent=1, default=str)
        os.replace(tmp, result_path)
    return {"ok": 0, "oom": 3}.get(res["status"], 1)


# ==============================================================================================
# Parent: one subprocess per case


def run_case(case, timeout, snapshot_dir):
    with tempfile.TemporaryDirectory(prefix="batchfit-measure-") as td:
        case_path = os.path.join(td, "case.json")
        result_path = os.path.join(td, "result.json")
        with open(case_path, "w", encoding="utf-8") as f:
            json.dump(case, f)
        env = dict(os.environ)
        env.update(case["env"])
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", case_path, result_path,
               "--snapshot-dir", os.path.abspath(snapshot_dir)]
        t = time.perf_counter()
        rc, out_tail = None, ""
        try:
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=timeout)
            rc, out_tail = p.returncode, p.stdout.decode("utf-8", "replace")[-3000:]
        except subprocess.TimeoutExpired as e:
            out_tail = (e.output or b"").decode("utf-8", "replace")[-3000:]
            rc = "timeout"
        wall = round(time.perf_counter() - t, 2)
        if os.path.exists(result_path):
            with open(result_path, encoding="utf-8") as f:
                res = json.load(f)
        else:
            res = {"id": case["id"], "case": case, "status": "crashed"}
        if rc == "timeout":
            res["status"] = "timeout"
        elif res.get("status") in ("running", "error") and rc != 0 and "error" not in res:
            res["status"] = "crashed"
        res["returncode"] = rc
        res["wall_s"] = wall
        if res["status"] != "ok":
            res["output_tail"] = out_tail
        return res


def fits(res):
    return res["status"] == "ok"


def write_json(path, obj):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def summary_line(res):
    s = "%-40s %-8s" % (res["id"], res["status"])
    if res["status"] == "ok":
        s += " peak alloc %8.1f MiB  reserved %8.1f MiB  ctx %s" % (
            res["max_memory_allocated"] / 1048576, res["max_memory_reserved"] / 1048576,
            _mib((res.get("context") or {}).get("context_bytes_process")
                 or (res.get("context") or {}).get("context_bytes")))
    elif res.get("error"):
        s += " " + res["error"].splitlines()[0][:110]
    return s + "  (%ss)" % res.get("wall_s")


def _mib(v):
    return "?" if v is None else "%.0f MiB" % (v / 1048576)


def run_matrix(args, cases):
    out = {"schema": SCHEMA, "mode": "cases", "cases_file": os.path.relpath(args.cases),
           "environment": None, "results": []}
    done = {}
    if args.resume and os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            prev = json.load(f)
        for r in prev.get("results", []):
            if r.get("status") in ("ok", "oom"):
                done[r["id"]] = r
        out["environment"] = prev.get("environment")
    by_id = dict(done)
    failures = 0
    for case in cases:
        if case["id"] in done:
            print("%-40s (kept from %s)" % (case["id"], args.out), flush=True)
            continue
        res = run_case(case, args.timeout, args.snapshot_dir)
        by_id[case["id"]] = res
        if out["environment"] is None and res.get("env"):
            out["environment"] = res["env"]
        failures += res["status"] not in ("ok", "oom")
        print(summary_line(res), flush=True)
        out["results"] = [by_id[c["id"]] for c in cases if c["id"] in by_id]
        write_json(args.out, out)
    out["results"] = [by_id[c["id"]] for c in cases if c["id"] in by_id]
    write_json(args.out, out)
    print("wrote %s (%d results, %d failed)" % (args.out, len(out["results"]), failures))
    return 1 if failures else 0


def merge(args, cases, paths):
    """One result file from the shards of a parallel run, in the case file's order.

    Shards that ran at the same time on one GPU see each other in NVML's device-wide figures,
    so each result's `context_bytes` is replaced by the per-process figure
    (`context_bytes_process`, NVML's memory of this process minus what the allocator holds),
    which the others do not disturb; the allocator's own statistics are per process anyway.
    """
    out, by_id = None, {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        if out is None:
            out = d
        for r in d.get("results", []):
            by_id[r["id"]] = r
    if out is None:
        raise SystemExit("--merge: no input files")
    for r in by_id.values():
        ctx = r.get("context") or {}
        if ctx.get("context_bytes_process") is not None:
            ctx["context_bytes_device_wide"] = ctx.get("context_bytes")
            ctx["context_bytes"] = ctx["context_bytes_process"]
            ctx["context_source"] = "process (shards ran concurrently)"
    out["cases_file"] = os.path.relpath(args.cases, os.path.dirname(HERE))
    out["results"] = [by_id[c["id"]] for c in cases if c["id"] in by_id]
    write_json(args.out, out)
    print("merged %d results into %s" % (len(out["results"]), args.out))
    return 0


def run_maxbatch(args, cases):
    out = {"schema": SCHEMA, "mode": "maxbatch", "cases_file": os.path.relpath(args.cases),
           "environment": None, "maxbatch": []}
    status = 0
    for case in cases:
        if "batches" in case:
            print("%s: skipped (batch schedule)" % case["id"])
            continue
        trials = []

        def trial(b):
            c = dict(case, batch=b, snapshot=False, id="%s.b%d" % (case["id"], b))
            if args.maxbatch_steps:
                c["steps"] = args.maxbatch_steps
            r = run_case(c, args.timeout, args.snapshot_dir)
            if r["status"] == "error" and is_memory_error(r.get("error", "")):
                r["status"] = "oom"
            if out["environment"] is None and r.get("env"):
                out["environment"] = r["env"]
            t = {"batch": b, "status": r["status"], "wall_s": r.get("wall_s"),
                 "max_memory_allocated": r.get("max_memory_allocated"),
                 "max_memory_reserved": r.get("max_memory_reserved"),
                 "error": (r.get("error") or "")[:2000] or None,
                 "at_failure": r.get("at_failure")}
            trials.append(t)
            print("  %-40s %s" % (c["id"], summary_line(r)[41:]), flush=True)
            if r["status"] not in ("ok", "oom"):
                raise RuntimeError("trial %d: %s" % (b, r["status"]))
            return fits(r)

        best, first_oom, err = None, None, None
        try:
            b = max(1, case["batch"])
            if trial(b):
                best = b
                while b < args.maxbatch_cap:
                    b = min(max(b + 1, int(b * args.maxbatch_growth)), args.maxbatch_cap)
                    if trial(b):
                        best = b
                    else:
                        first_oom = b
                        break
            else:
                first_oom = b
                while best is None and b > 1:
                    b = min(b - 1, int(b / args.maxbatch_growth))
                    if trial(b):
                        best = b
                    else:
                        first_oom = b
            while (best is not None and first_oom is not None and first_oom - best > 1
                   and first_oom - best > best * args.maxbatch_resolution):
                mid = (best + first_oom) // 2
                if trial(mid):
                    best = mid
                else:
                    first_oom = mid
        except RuntimeError as e:
            err, status = str(e), 1
        entry = {"id": case["id"], "case": case, "max_batch": best,
                 "smallest_oom": first_oom, "capped": best == args.maxbatch_cap,
                 "trials": trials, "error": err}
        out["maxbatch"].append(entry)
        print("%s: max batch %s (smallest OOM %s)%s" % (
            case["id"], best, first_oom, " ERROR " + err if err else ""), flush=True)
        write_json(args.out, out)
    write_json(args.out, out)
    print("wrote %s" % args.out)
    return status


# ==============================================================================================
# Dry run (CPU, no CUDA)


def dry_run(args, cases):
    import torch
    print("case file %s: %d cases valid" % (args.cases, len(cases)))
    have_tf = True
    try:
        import transformers  # noqa: F401
    except Exception:
        have_tf = False
    # Parameter counts: on the meta device where torch supports it (>= 2.0), else the CPU.
    models = sorted({c["model"] for c in cases}, key=MODELS.index)
    where = "meta" if hasattr(torch.device("cpu"), "__enter__") else "cpu"
    for name in models:
        if name in LM_MODELS and not have_tf:
            print("  %-12s skipped: transformers not importable" % name)
            continue
        proto = next(c for c in cases if c["model"] == name)
        built = where
        try:
            if where == "meta":
                with torch.device("meta"):
                    model, _ = build_model(proto)
            else:
                model, _ = build_model(proto)
        except Exception:
            built = "cpu"
            model, _ = build_model(proto)
        print("  %-12s params %d (built on %s)" % (
            name, sum(p.numel() for p in model.parameters()), built))
        del model
    if args.no_step:
        return 0
    # One CPU step at batch 1 per distinct setup, through the worker's own Trainer.
    import inspect
    opt_params = set(inspect.signature(torch.optim.AdamW.__init__).parameters)
    seen, failures, skipped = set(), 0, 0
    dev = torch.device("cpu")
    for case in cases:
        key = (case["model"], case["precision"], case["checkpoint"],
               case["attn_implementation"], case["hf_config"], case["sdpa_backend"])
        if case["model"].startswith("mlp") or case["model"] == "simpleconv":
            # Optimizer and accumulation paths are model-agnostic: vary them on small models.
            key += (case["optimizer"], min(case["accum"], 2), case["fused"], case["foreach"])
        if key in seen:
            continue
        seen.add(key)
        if case["model"] in LM_MODELS and not have_tf:
            skipped += 1
            continue
        c = dict(case, accum=min(case["accum"], 2), steps=1, batch=1, _dry_image=64)
        c.pop("batches", None)
        note = ""
        for k in ("fused", "foreach"):
            if c[k] is not None and k not in opt_params:
                note += " (torch %s has no optimizer %s=; not exercised)" % (torch.__version__, k)
                c[k] = None
        if c["fused"]:
            note += " (fused= needs CUDA in most versions; not exercised on the CPU)"
            c["fused"] = None
        if c["precision"] == "amp_fp16":
            note += " (fp16 autocast and GradScaler need CUDA: ran in fp32)"
        if c["model"] in LM_MODELS:
            c["seq_len"] = min(c["seq_len"], 32)
        if c["sdpa_backend"] not in (None, "math"):
            note += " (sdpa_backend %s ran as math on the CPU)" % c["sdpa_backend"]
        if c["model"] == "hf_config":
            note += " [%s, attn %s, sdpa_backend %s]" % (
                c["hf_config"], attn_implementation(c), c["sdpa_backend"])
        t = time.perf_counter()
        try:
            tr = Trainer(c, dev, None)
            st = tr.step(1, {})
            loss = st["micro"][0]["loss"]
            ok = loss == loss  # not NaN
            msg = "loss %.3f" % loss
        except Exception as e:
            ok, msg = False, "%s: %s" % (type(e).__name__, e)
            traceback.print_exc()
        failures += not ok
        print("  step %-12s %-8s %-12s ckpt=%-5s accum=%d  %s  %s (%.1fs)%s" % (
            c["model"], c["precision"], c["optimizer"], c["checkpoint"], c["accum"],
            "ok " if ok else "FAIL", msg, time.perf_counter() - t, note), flush=True)
    print("dry run: %d setups stepped on the CPU, %d failed%s" % (
        len(seen) - skipped, failures,
        ", %d skipped (transformers not importable)" % skipped if skipped else ""))
    return 1 if failures else 0


# ==============================================================================================


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Measure GPU memory of PyTorch training steps (one subprocess per case).",
        epilog="examples:\n"
               "  measure.py --dry-run\n"
               "  measure.py --out results.json --only 'resnet18-*'\n"
               "  measure.py --out results.json --resume        # continue an interrupted run\n"
               "  measure.py --maxbatch --out maxbatch.json\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=DEFAULT_CASES, help="case file (JSON, or YAML)")
    ap.add_argument("--out", default="measure-results.json", help="output JSON file")
    ap.add_argument("--only", nargs="+", metavar="ID", help="case ids or glob patterns")
    ap.add_argument("--resume", action="store_true",
                    help="keep ok/oom results already in --out and run only the others")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per case process")
    ap.add_argument("--snapshot-dir", default=None,
                    help="where snapshot pickles go (default: <out>.snapshots/)")
    ap.add_argument("--dry-run", action="store_true",
                    help="CPU only: validate cases, build models, one CPU step per setup")
    ap.add_argument("--no-step", action="store_true", help="with --dry-run: do not step")
    ap.add_argument("--list", action="store_true", help="print the case ids and exit")
    ap.add_argument("--maxbatch", action="store_true",
                    help="find the largest batch that fits (cases with \"maxbatch\": true)")
    ap.add_argument("--maxbatch-cap", type=int, default=65536, help="largest batch tried")
    ap.add_argument("--maxbatch-growth", type=float, default=2.0,
                    help="factor between trials until the first OOM (or the first fit, going down)")
    ap.add_argument("--maxbatch-resolution", type=float, default=0.0,
                    help="stop bisecting when the gap is under this fraction of the largest fit")
    ap.add_argument("--maxbatch-steps", type=int, default=None,
                    help="steps per trial (default: the case's steps)")
    ap.add_argument("--merge", nargs="+", metavar="SHARD",
                    help="merge the result files of shards run at the same time into --out")
    ap.add_argument("--worker", nargs=2, metavar=("CASE", "RESULT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.snapshot_dir is None:
        args.snapshot_dir = os.path.splitext(args.out)[0] + ".snapshots"
    if args.worker:
        return worker_main(args.worker[0], args.worker[1], args.snapshot_dir)
    try:
        cases = load_cases(args.cases)
        selected = select_cases(cases, args.only, maxbatch=args.maxbatch)
    except (CaseError, OSError, ValueError) as e:
        print("measure: %s" % e, file=sys.stderr)
        return 2
    if args.list:
        for c in selected:
            print(c["id"])
        return 0
    if args.merge:
        return merge(args, selected, args.merge)
    if args.dry_run:
        return dry_run(args, selected)
    if args.maxbatch:
        return run_maxbatch(args, selected)
    return run_matrix(args, selected)


if __name__ == "__main__":
    sys.exit(main())
