#!/usr/bin/env python3
"""The peers on the same training steps: what each predicts, and what the step really took.

For small real transformers models (validation/capture_hf.py's, at its batch and sequence)
and a few torchvision models, this script runs, each in a fresh process:

* the real CPU training step, two of them (step 0 creates Adam's state, step 1 is the
  steady state):

      batch = new batch; loss = model(**batch).loss (or cross_entropy(model(x), y));
      loss.backward(); opt.step(); opt.zero_grad()

  with torch.optim.Adam(foreach=False), and measures its peak the way validation/step.py
  does: c10's CPU allocator reports every allocation and free to the profiler when memory
  profiling is on, and the peak is the largest running sum of the requested bytes (tensor
  nbytes, no allocator rounding), parameters and buffers included. The running sum is held
  to the allocator's own running total and, at the end, to what Python can count (parameters,
  buffers, gradients, optimizer state), as step.py holds it. One intra-op thread, oneDNN off.
* PyTorch's own MemTracker (torch.distributed._tools.mem_tracker, 2.5) on the same two steps
  of a fresh copy of the same model: a TorchDispatchMode that counts the storages of every
  op's outputs and of the module and optimizer it is given (track_external), and keeps the
  largest total it saw after an op ("peak" snapshot, the Total of the CPU device);
* accelerate's estimate-memory rule (accelerate/commands/estimate.py: gather_data): the
  model built on the meta device under init_empty_weights, as create_empty_model does (with
  the class trained here, not the Hub's AutoModel), its size by calculate_maximum_sizes, and
  the "Training using Adam" column for float32: the largest of estimate_training_usage's
  figures, 4x the model size;
* DeepSpeed's ZeRO model-state estimators for one GPU without offload
  (estimate_zero2_model_states_mem_needs: 2P + 18P bytes; estimate_zero3_model_states_mem_needs:
  4 x the largest layer's parameters + 18P), with P and the largest layer from DeepSpeed's
  own model_to_params.

batchfit's prediction is not in this file: the Go test validation/peers_test.go simulates the
same steps (the capture of each transformers model, the zoo's torchvision model) and compares
every tool's figure with the measured peak.

Run under the environment .ci/run makes from python/requirements-test.txt (BATCHFIT_PYENV):

    $BATCHFIT_PYENV validation/peers.py            # rewrite testdata/reference/peers-cpu.json
    $BATCHFIT_PYENV validation/peers.py --check    # CI: regenerate and compare
    $BATCHFIT_PYENV validation/peers.py --only 'hf-llama*' --out peers-llama.json
"""

import argparse
import fnmatch
import json
import multiprocessing
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
os.environ.setdefault("GLOG_minloglevel", "2")
# DeepSpeed logs its accelerator's detection at import
os.environ.setdefault("DS_ACCELERATOR", "cpu")

import capture_hf  # noqa: E402

OUT = os.path.join(ROOT, "testdata", "reference", "peers-cpu.json")
STEPS = 2
SEED = 0
# torchvision models: batch 2 at 32 px, as validation/step.py runs them.
VISION: Tuple[str, ...] = ("resnet18", "mobilenet_v2", "efficientnet_b0")
VISION_BATCH = 2
VISION_IMAGE = 32
VISION_CLASSES = 1000
TOOLS = ("real", "memtracker", "estimates")
PHASES = ("forward", "backward", "optimizer", "zero_grad")
# what real() measures, as the reference files say it
LOOP = ("batch = new batch; loss = model(**batch).loss (or cross_entropy(model(x), y)); "
        "loss.backward(); opt.step(); opt.zero_grad()")
BYTES = "requested bytes alive (tensor nbytes), parameters and buffers included; the peak of the two steps"

Batch = Dict[str, Any]


def names() -> List[str]:
    return list(capture_hf.MODELS) + ["tv-" + n for n in VISION]


def make(name: str) -> Tuple[Any, Callable[[], Batch]]:
    """The model (seed 0, train mode) and a function that makes a new batch:
    {"inputs": kwargs or a tensor, "targets": tensor or None}."""
    import torch
    torch.manual_seed(SEED)
    if name.startswith("tv-"):
        import torchvision
        model = getattr(torchvision.models, name[3:])(weights=None)

        def vision_batch() -> Batch:
            return {"inputs": torch.randn(VISION_BATCH, 3, VISION_IMAGE, VISION_IMAGE),
                    "targets": torch.randint(0, VISION_CLASSES, (VISION_BATCH,))}
        return model.train(), vision_batch
    factory, _ = capture_hf.MODELS[name]
    return from_factory(factory, capture_hf.MEASURE_BATCH)


def from_factory(factory: Callable[[int], Batch], batch: int) -> Tuple[Any, Callable[[], Batch]]:
    """The model of a capture factory (capture_hf.py's Factory) in train mode, and a
    function that makes a new batch with the example's values (an attention mask of
    ones, zero ids; an image tensor): the caller seeds first."""
    d = factory(batch)
    example = d["inputs"]
    targets = d.get("targets")

    def new_batch() -> Batch:
        inputs = example.clone() if not isinstance(example, dict) else {k: v.clone() for k, v in example.items()}
        return {"inputs": inputs, "targets": None if targets is None else targets.clone()}
    return d["model"].train(), new_batch


def loss_of(model: Any, b: Batch) -> Any:
    import torch.nn.functional as F
    if isinstance(b["inputs"], dict):
        out = model(**b["inputs"])
        if b["targets"] is not None:
            return F.cross_entropy(out.logits, b["targets"])
        return out.loss
    return F.cross_entropy(model(b["inputs"]), b["targets"])


def optimizer(model: Any) -> Any:
    import torch
    return torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)


def pin() -> None:
    import torch
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


# ----------------------------------------------------------------------------------------------
# The real step.


def _storage_bytes(ts: List[Any]) -> int:
    seen: Dict[int, int] = {}
    for t in ts:
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def real(name: str, maker: Optional[Callable[[str], Tuple[Any, Callable[[], Batch]]]] = None) -> Dict[str, Any]:
    """The measured peak of each step (validation/step.py's definition), of the model
    and batches that maker (make unless given) builds for name."""
    import torch
    from torch.autograd import (_disable_profiler, _enable_profiler, _prepare_profiler, ProfilerActivity,
                                ProfilerConfig, ProfilerState)
    from torch._C._profiler import RecordScope, _ExperimentalConfig
    pin()
    model, new_batch = (maker or make)(name)
    opt = optimizer(model)
    base = _storage_bytes(list(model.parameters()) + list(model.buffers()))
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    cfg = ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig())
    acts = {ProfilerActivity.CPU}
    _prepare_profiler(cfg, acts)
    _enable_profiler(cfg, acts, {RecordScope.USER_SCOPE, RecordScope.BACKWARD_FUNCTION})
    b: Optional[Batch] = None
    loss = None
    for step in range(STEPS):
        h = enter("%d/forward" % step, None)
        b = new_batch()
        loss = loss_of(model, b)
        leave(h)
        h = enter("%d/backward" % step, None)
        loss.backward()
        leave(h)
        h = enter("%d/optimizer" % step, None)
        opt.step()
        leave(h)
        h = enter("%d/zero_grad" % step, None)
        opt.zero_grad()
        leave(h)
    h = enter("end", None)
    b = loss = None
    leave(h)
    roots = _disable_profiler().experimental_event_tree()
    scopes = ["%d/%s" % (s, ph) for s in range(STEPS) for ph in PHASES] + ["end"]
    if sorted(r.name for r in roots) != sorted(scopes):
        raise RuntimeError("%s: scopes %s" % (name, [r.name for r in roots]))
    live = base
    peaks = [0] * STEPS
    phases: List[Dict[str, int]] = [{} for _ in range(STEPS)]
    for r in sorted(roots, key=lambda n: scopes.index(n.name)):
        mems = []
        stack = [r]
        while stack:
            n = stack.pop()
            if n.name == "[memory]":
                mems.append(n)
            stack.extend(n.children)
        mems.sort(key=lambda n: (n.start_time_ns, n.id))
        peak = live
        for m in mems:
            ef = m.extra_fields
            live += ef.alloc_size
            if ef.total_allocated != live - base:
                raise RuntimeError("%s: running sum %d, the allocator's total %d" % (name, live - base,
                                                                                   ef.total_allocated))
            peak = max(peak, live)
        if r.name != "end":
            s, ph = r.name.split("/")
            phases[int(s)][ph] = peak
            peaks[int(s)] = max(peaks[int(s)], peak)
    ts = list(model.parameters()) + list(model.buffers())
    ts += [p.grad for p in model.parameters() if p.grad is not None]
    ts += [v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)]
    if live != _storage_bytes(ts):
        raise RuntimeError("%s: %d bytes alive by the running sum, %d counted from Python" % (
            name, live, _storage_bytes(ts)))
    return {"param_bytes": base, "step_peaks": peaks, "peak": max(peaks), "phase_peaks": phases}


# ----------------------------------------------------------------------------------------------
# The peers.


def memtracker(name: str) -> Dict[str, Any]:
    """MemTracker's peak over the same two steps."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    pin()
    model, new_batch = make(name)
    opt = optimizer(model)
    mt = MemTracker()
    mt.track_external(model, opt)
    with mt:
        for step in range(STEPS):
            b = new_batch()
            loss = loss_of(model, b)
            loss.backward()
            opt.step()
            opt.zero_grad()
            del b, loss
            if step == 0:
                # as its own test of a training loop does (test/distributed/_tools/test_mem_tracker.py):
                # the per-module statistics allow one iteration; the device's peak stays
                mt.reset_mod_stats()
    snap = mt.get_tracker_snapshot("peak")[torch.device("cpu")]
    return {"peak": snap["Total"], "by_kind": {k: v for k, v in sorted(snap.items()) if k != "Total" and v}}


def estimates(name: str) -> Dict[str, Any]:
    """accelerate's and DeepSpeed's estimates from the model's parameters."""
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs, model_to_params
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    with init_empty_weights():
        model, _ = make(name)
    total, largest = calculate_maximum_sizes(model)
    training = estimate_training_usage(total, "float32")
    # DeepSpeed's *_all_live estimators take the model itself, on a device: model_to_params tells
    # tied parameters apart by data_ptr, which is 0 for every tensor on the meta device
    real_model, _ = make(name)
    params, largest_params = model_to_params(real_model)
    _, z2 = estimate_zero2_model_states_mem_needs(params, num_gpus_per_node=1, num_nodes=1, cpu_offload=False)
    _, z3, _ = estimate_zero3_model_states_mem_needs(params, largest_params, num_gpus_per_node=1, num_nodes=1,
                                                  cpu_offload=False, cpu_offload_params=False, zero_init=False)
    return {
        "accelerate": {"model_bytes": int(total), "largest_layer_bytes": int(largest[0]),
                       "training_adam": int(max(training.values()))},
        "deepspeed": {"params": int(params), "largest_layer_params": int(largest_params),
                      "zero2": int(z2), "zero3": int(z3)},
    }


def _work(job: Tuple[str, str]) -> Tuple[str, str, Dict[str, Any]]:
    name, tool = job
    fn = {"real": real, "memtracker": memtracker, "estimates": estimates}[tool]
    if tool != "memtracker":
        return name, tool, fn(name)
    try:
        return name, tool, fn(name)
    except RuntimeError as e:
        # a peer that cannot answer: its error, in the figures' place (MemTracker registers a
        # gradient hook on every parameter, and a frozen one raises)
        return name, tool, {"error": "%s: %s" % (type(e).__name__, e)}


def generate(only: str, jobs: int) -> Dict[str, Any]:
    import accelerate
    import deepspeed
    import torch
    import torchvision
    import transformers
    todo = [(n, t) for n in names() if not only or fnmatch.fnmatch(n, only) for t in TOOLS]
    doc: Dict[str, Any] = {
        "generator": "validation/peers.py",
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                     "torchvision": torchvision.__version__.split("+")[0], "accelerate": accelerate.__version__,
                     "deepspeed": deepspeed.__version__},
        "steps": STEPS,
        "optimizer": "adam",
        "loop": LOOP,
        "bytes": BYTES,
        "models": {},
    }
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, maxtasksperchild=1) as pool:
        for name, tool, res in pool.imap_unordered(_work, todo):
            m = doc["models"].setdefault(name, {})
            if name.startswith("tv-"):
                m.update({"batch": VISION_BATCH, "image": VISION_IMAGE})
            else:
                m.update({"batch": capture_hf.MEASURE_BATCH, "seq": capture_hf.SEQ,
                          "attention": capture_hf.MODELS[name][1]})
            if tool == "estimates":
                m.update(res)
            else:
                m[tool] = res
    return doc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="regenerate and compare with the committed file")
    ap.add_argument("--only", default="", help="models (a glob)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    doc = generate(a.only, a.jobs)
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if not a.check:
        with open(a.out, "w") as f:
            f.write(text)
        for n in sorted(doc["models"]):
            m = doc["models"][n]
            print("%-20s real %10d memtracker %10s accelerate %10d zero2 %10d" % (
                n, m["real"]["peak"], m["memtracker"].get("peak", "-"), m["accelerate"]["training_adam"],
                m["deepspeed"]["zero2"]))
        return 0
    with open(a.out) as f:
        old = json.load(f)
    bad = []
    for k in ("versions", "steps", "optimizer", "loop", "bytes"):
        if old.get(k) != doc[k]:
            bad.append("%s: %s, committed %s" % (k, doc[k], old.get(k)))
    for n, m in sorted(doc["models"].items()):
        if old["models"].get(n) != m:
            bad.append("%s: %s, committed %s" % (n, m, old["models"].get(n)))
    if bad:
        print("peers: differs from what is committed (run validation/peers.py and commit):\n" + "\n".join(bad))
        return 1
    print("peers: %d models' figures as committed" % len(doc["models"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
