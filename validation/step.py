#!/usr/bin/python3
"""Whole-step CPU reference: the memory timeline of real PyTorch training steps.

Run with the interpreter that has torch and torchvision (Debian: /usr/bin/python3):

    /usr/bin/python3 validation/step.py                 # writes testdata/reference/torch-cpu-step.json
    /usr/bin/python3 validation/step.py --out DIR       # writes into DIR
    /usr/bin/python3 validation/step.py --check         # regenerates in a temp dir, diffs
    /usr/bin/python3 validation/step.py --only 'resnet*' --out /tmp/x   # a slice, for working on a rule

reference.py holds the simulator to autograd at one instant, the end of the forward pass. This
script follows every allocation and free of whole training steps (data, forward with the loss,
backward, optimizer.step, zero_grad), so the peak can be checked where users meet it: in the
backward pass or in the optimizer step.

How it is measured
------------------
c10's CPU allocator reports every allocation and free to the profiler when memory profiling is
on (ProfiledCPUMemoryReporter, c10/core/CPUAllocator.cpp): the pointer, the size and the
running total of the bytes allocated since profiling began. The profiler is started with
memory profiling, the CPU activity and only two record scopes, USER_SCOPE and BACKWARD_FUNCTION:
operator events are not recorded (they cost more than the step itself for models that run many
small kernels), but the scopes below and every autograd node are.

* Phases are user scopes opened with ``_record_function_enter_new``, which allocates nothing
  (``torch.autograd.profiler.record_function`` allocates a handle tensor, and ``Optimizer.step``
  and ``zero_grad`` open one in torch 1.13: the script replaces that annotation with a no-op,
  since on a GPU those handles are host memory anyway).
* In the forward pass every leaf module is a user scope (forward pre- and post-hooks), so the
  forward timeline is at module granularity; in backward every autograd node is a scope of its
  own (``autograd::engine::evaluate_function: ConvolutionBackward0``).
* The model is built (seed 0) before profiling starts: its parameters and buffers are alive
  throughout and never freed, so the bytes alive at any moment are ``param_bytes +
  buffer_bytes`` plus the running sum of the sizes reported since. The script checks that
  sum against what Python can count at the end (gradients, optimizer state, the last batch
  and loss), and checks the running sum against the allocator's own running total.

The loop, the same one batchfit's step simulator follows (train/doc.go):

    for step in range(STEPS):
        x, y = new batch            # the previous batch is released when the names are rebound
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()             # torch 1.13: set_to_none=False, gradients are zeroed and kept

Bytes are what c10 was asked for (the tensor's nbytes), with no allocator rounding: the CPU
allocator has no caching, so this is the "requested" figure of the CUDA allocator's stats, and
the Go test compares it with the simulator's live requested bytes.

The CPU is not CUDA, and the script pins the CPU paths that would otherwise depend on the
machine: one intra-op thread (allocation order and kernel choice do not depend on the core
count), and oneDNN (mkldnn) off, so convolutions run aten's own kernels, whose temporaries
follow from the shapes alone (thnn_conv2d's im2col columns; grouped convolutions split per
group) rather than from the vector width of the processor (oneDNN reorders to blocked layouts
padded to 8 or 16 channels). Images are small (32 px; 64 px at batch 1, see SMALL_IMAGE below) so
that the whole zoo runs in a few minutes on two cores; every rule involved is per op and
shape-exact, so a smaller image tests the same rules.

Output (deterministic: sorted keys, integers only, no timestamps, no host names):
``torch-cpu-step.json``: per case (``model/bBATCH/OPTIMIZER``), the parameter and buffer bytes,
and per step: ``alive_before``, ``peak``, ``peak_phase``, ``peak_op`` (the leaf module or
autograd node inside which the peak was reached; ``-`` outside any), and per phase its
``peak`` and ``end``. Each model's case at its largest batch with SGD also carries the steady
step's ``timeline``: one row per scope in order, ``[phase, name, live after, peak within]``.
"""

import argparse
import difflib
import fnmatch
import json
import multiprocessing
import operator
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# c10 warns (through glog) about every free of a block allocated before profiling began; the
# frees are of blocks the running sum never counted, and the end-of-run check below holds the
# sum to what Python can count, so the warnings are noise.
os.environ.setdefault("GLOG_minloglevel", "2")

import refname  # noqa: E402

OUT_FILE = "torch-cpu-step.json"  # torch 1.13's; another release's carries it (out_file)
STEPS = 2  # step 0 creates the optimizer state; step 1 is the steady state
PHASES = ("forward", "backward", "optimizer", "zero_grad")
OPTIMIZERS = ("sgd_momentum", "adam", "adam_foreach")
SMALL = ("mlp", "mlp-L1-H256", "mlp-L8-H512", "simpleconv", "lora-mlp-r8", "lora-mlp-r16-dropout")  # reference.NOT_TORCHVISION
SMALL_BATCHES = (1, 8, 32)
# torchvision: SGD at batches 1 and 2, Adam (the optimizer step's rules do not depend on the
# batch) at batch 2.
VISION_CASES = ((1, "sgd_momentum"), (2, "sgd_momentum"), (2, "adam"))
# torchvision models that also run Adam with foreach (the small models all do), at batch 2.
FOREACH = ("resnet18", "mobilenet_v2", "vit_b_16")
# Image side (see the module doc): 32 px, the smallest every model takes, except at batch 1,
# where a batch-norm layer needs more than one value per channel and 32 px leaves ResNet,
# DenseNet, MobileNet and EfficientNet a 1×1 map at the end: 64 px there. ViT-*/16 runs at
# 32 px (4 patches) throughout.
SMALL_IMAGE, BATCH1_IMAGE = 32, 64
PATCH16 = ("vit_b_16", "vit_l_16")
# Every model's case at its largest batch with SGD carries the steady step's timeline.
# Cases too large to run beside another worker on a machine with 8 GB to spare.
ALONE = ("vit_l_16",)


# Models no builder covers, from batchfit's capture examples (examples/capture/NAME.py, each a
# factory make(batch_size) returning the model, an example batch, targets and a loss): the
# captured graphs of these are held to the cases below (validation/capture_test.go).
CAPTURED = ("transformer", "rnn", "unet", "inplace", "inplace_ops", "layers", "finetune", "customfn", "nnunet2d")
# the factory of an example that is not make (capture_zoo.py captures the same one)
CAPTURED_FACTORY = {"nnunet2d": "make_small"}
CAPTURED_CASES = ((2, "sgd_momentum"), (4, "sgd_momentum"), (4, "adam"))


def cases(only=None):
    import reference
    out = []
    for name in CAPTURED:
        for b, o in CAPTURED_CASES:
            cid = "capture-%s/b%d/%s" % (name, b, o)
            if only and not any(fnmatch.fnmatch(cid, p) or fnmatch.fnmatch("capture-" + name, p) for p in only):
                continue
            out.append({"id": cid, "model": "capture-" + name, "batch": b, "optimizer": o, "image": None,
                        "detail": b == 4 and o == "sgd_momentum"})
    for name in reference.MODELS:
        small = name in SMALL
        if small:
            combos = [(b, o) for b in SMALL_BATCHES for o in OPTIMIZERS]
        else:
            combos = list(VISION_CASES) + ([(2, "adam_foreach")] if name in FOREACH else [])
        last = max(b for b, _ in combos)
        for b, o in combos:
            cid = "%s/b%d/%s" % (name, b, o)
            if only and not any(fnmatch.fnmatch(cid, p) or fnmatch.fnmatch(name, p) for p in only):
                continue
            image = None
            if not small:
                image = BATCH1_IMAGE if b == 1 and name not in PATCH16 else SMALL_IMAGE
            detail = b == last and o == "sgd_momentum"
            out.append({"id": cid, "model": name, "batch": b, "optimizer": o, "image": image,
                        "detail": detail})
    return out


# ----------------------------------------------------------------------------------------------
# One case, in a fresh process.


class _NoRecordFunction:
    """Stands in for torch.autograd.profiler.record_function (see the module doc)."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def factory(name):
    """The capture example's make function."""
    import importlib.util
    path = os.path.join(os.path.dirname(HERE), "examples", "capture", name + ".py")
    spec = importlib.util.spec_from_file_location("capture_example_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, CAPTURED_FACTORY.get(name, "make"))


def like(x):
    """A new batch like the factory's example: random floats, zero indices."""
    import torch
    if x.dtype.is_floating_point:
        return torch.randn(x.shape, dtype=x.dtype)
    return torch.zeros(x.shape, dtype=x.dtype)


def build(case, built=None):
    """(model, per-sample input shape or the capture example, classes) of a case; built is
    build() of a case with the same build_key, whose model is taken rather than built again."""
    import torch
    import torchvision
    import reference
    name = case["model"]
    if name.startswith("capture-"):
        if built is not None:
            return built
        torch.manual_seed(reference.SEED)
        d = factory(name[len("capture-"):])(case["batch"])
        return d["model"].train(), d, None
    builder, in_shape, classes, _ = reference.MODELS[name]
    if case["image"] is not None:
        in_shape = (3, case["image"], case["image"])
    if built is not None:
        return built[0].train(), in_shape, classes
    torch.manual_seed(reference.SEED)
    if case["image"] is None:
        model = builder()
    else:
        kw = {"image_size": case["image"]} if name.startswith("vit_") else {}
        model = getattr(torchvision.models, name)(weights=None, **kw)
    return model.train(), in_shape, classes


def make_optimizer(kind, params):
    import torch
    if kind == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=False)
    if kind == "adam_foreach":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    raise ValueError("unknown optimizer %r" % kind)


def start_profiler():
    """Memory profiling with only user scopes and autograd nodes recorded (see the module doc)."""
    from torch.autograd import (_enable_profiler, _prepare_profiler, ProfilerActivity,
                                ProfilerConfig, ProfilerState)
    from torch._C._profiler import RecordScope, _ExperimentalConfig
    cfg = ProfilerConfig(ProfilerState.KINETO, False, True, False, False, False, _ExperimentalConfig())
    acts = {ProfilerActivity.CPU}
    _prepare_profiler(cfg, acts)
    _enable_profiler(cfg, acts, {RecordScope.USER_SCOPE, RecordScope.BACKWARD_FUNCTION})


def selfcheck():
    """The method on a case worked out by hand, before any model is measured.

    x (1000 float32, made before profiling: never counted) requires grad.
      forward:  y = x.exp()   +4000  exp's result, which ExpBackward0 saves
                s = y.sum()   +4     the 0-d loss
      backward: s.backward()  +4     ones_like(s), the seed
                                     SumBackward0 expands it (a view, nothing new)
                              +4000  ExpBackward0: grad * result, which AccumulateGrad
                                     steals as x.grad
                              -4     the seed, which torch.autograd.backward's grad_tensors
                                     list holds until the engine returns (y stays: Python
                                     still holds it)
      end:      del y, s      -4000, -4
    So forward peaks at 4004 and ends there; backward peaks at 8008 and ends at 8004; what
    is left is x.grad, 4000 bytes.
    """
    import torch
    from torch.autograd import _disable_profiler
    torch.set_num_threads(1)
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    x = torch.zeros(1000, requires_grad=True)
    start_profiler()
    h = enter("forward", None)
    y = x.exp()
    s = y.sum()
    leave(h)
    h = enter("backward", None)
    s.backward()
    leave(h)
    h = enter("end", None)
    del y, s
    leave(h)
    roots = _disable_profiler().experimental_event_tree()
    got, live = {}, 0
    for r in sorted(roots, key=lambda n: n.start_time_ns):
        peak = live
        for _, mems in segments(r):
            for m in mems:
                live += m.extra_fields.alloc_size
                peak = max(peak, live)
        got[r.name] = (peak, live)
    want = {"forward": (4004, 4004), "backward": (8008, 8004), "end": (8004, 4000)}
    if got != want or live != x.grad.numel() * 4:
        raise RuntimeError("step.py's method disagrees with the hand-worked case: got %s, want %s"
                           % (got, want))


def out_file():
    """The file name of the running PyTorch's reference (refname.py)."""
    import torch
    return refname.name(OUT_FILE, torch.__version__)


def pin_cpu_paths():
    """One intra-op thread and oneDNN off (see the module doc); set before any torch op runs in
    a process, so that no OpenMP pool exists when the process forks."""
    import torch
    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


def build_key(case):
    """Cases that build the same model share one build: build() depends on the model, on the
    image only for ViT (image_size) and on the batch only for a capture example (its factory
    makes the example batch beside the model)."""
    name = case["model"]
    if name.startswith("capture-"):
        return (name, case["batch"])
    if name.startswith("vit_"):
        return (name, case["image"])
    return (name,)


def run_case(case, built=None):
    """One case, in a process of its own; built is build(case)'s result when the model was built
    before the process forked (a model of the same key, built with the same seed, untouched)."""
    import torch
    import torch.nn.functional as F
    import torch.autograd.profiler as autograd_profiler
    from torch.autograd import _disable_profiler

    pin_cpu_paths()
    autograd_profiler.record_function = _NoRecordFunction

    model, in_shape, classes = build(case, built)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buffer_bytes = sum(b.numel() * b.element_size() for b in model.buffers())
    # (a frozen backbone's parameters are not given to the optimizer, as fine-tuning does)
    opt = make_optimizer(case["optimizer"], [p for p in model.parameters() if p.requires_grad])
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction

    handles = {}

    def pre(mod, args):
        handles[id(mod)] = enter(mod._batchfit_name, None)

    def post(mod, args, out):
        leave(handles.pop(id(mod)))

    for name, mod in model.named_modules():
        if not list(mod.children()):
            mod._batchfit_name = name
            mod.register_forward_pre_hook(pre)
            mod.register_forward_hook(post)

    torch.manual_seed(1)
    start_profiler()
    x = y = loss = None
    for step in range(STEPS):
        h = enter("step%d/forward" % step, None)
        if isinstance(in_shape, dict):
            # a capture example: its batch, targets and loss
            x, y = like(in_shape["inputs"]), like(in_shape["targets"])
            loss_fn = in_shape.get("loss") or F.cross_entropy
            loss = loss_fn(model(x), y)
        else:
            x = torch.randn(case["batch"], *in_shape)
            y = torch.randint(0, classes, (case["batch"],), dtype=torch.int64)
            loss = F.cross_entropy(model(x), y)
        leave(h)
        h = enter("step%d/backward" % step, None)
        loss.backward()
        leave(h)
        h = enter("step%d/optimizer" % step, None)
        opt.step()
        leave(h)
        h = enter("step%d/zero_grad" % step, None)
        opt.zero_grad()
        leave(h)
    h = enter("end", None)
    x = y = loss = None
    leave(h)
    result = _disable_profiler()

    # What Python can count at the end: it must equal the running sum. Storages, not tensors:
    # a gradient can be a view that pins a larger storage (at batch 1 ViT's class token
    # gradient is a slice of the gradient of the cat that prepends it).
    import reference
    storages = {}
    for t in list(model.parameters()) + list(model.buffers()):
        storages[reference.storage_key(t)] = reference.storage_nbytes(t)
    for p in model.parameters():
        if p.grad is not None:
            storages[reference.storage_key(p.grad)] = reference.storage_nbytes(p.grad)
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v):
                storages[reference.storage_key(v)] = reference.storage_nbytes(v)
    alive = sum(storages.values())
    return summarize(case, result.experimental_event_tree(), param_bytes, buffer_bytes, alive)


def summarize(case, roots, param_bytes, buffer_bytes, alive_end):
    """Walks the event tree in time order and folds the memory events into per-step figures."""
    phases = []  # (step, phase, node)
    for r in roots:
        if r.name.startswith("step") and "/" in r.name:
            s, ph = r.name.split("/", 1)
            phases.append((int(s[4:]), ph, r))
    phases.sort(key=lambda t: t[2].start_time_ns)
    if [(s, ph) for s, ph, _ in phases] != [(s, ph) for s in range(STEPS) for ph in PHASES]:
        raise RuntimeError("%s: phase scopes out of order: %s" % (case["id"], [(s, ph) for s, ph, _ in phases]))
    # Memory events outside any phase would mean something ran unobserved.
    stray = [r for r in roots if r.name == "[memory]"]
    end = [r for r in roots if r.name == "end"]
    if stray:
        raise RuntimeError("%s: %d memory events outside the phases" % (case["id"], len(stray)))

    live = param_bytes + buffer_bytes
    base = live
    steps = []
    for s in range(STEPS):
        st = {"alive_before": live, "peak": live, "peak_phase": "", "peak_op": "", "phases": {}}
        step_peak = live
        timeline = []
        for s2, ph, node in phases:
            if s2 != s:
                continue
            phase_peak = live
            for name, mems in segments(node):
                # (the innermost loop of the script: hundreds of thousands of events a case;
                # a segment's peak is at most its phase's, at most the step's)
                seg_peak = live
                for m in mems:
                    ef = m.extra_fields
                    live += ef.alloc_size
                    total = ef.total_allocated
                    if total != live - base:
                        raise RuntimeError("%s: running sum %d disagrees with the allocator's total %d"
                                           % (case["id"], live - base, total))
                    if live > seg_peak:
                        seg_peak = live
                        if live > phase_peak:
                            phase_peak = live
                        if live > step_peak:
                            step_peak = live
                            st["peak"], st["peak_phase"], st["peak_op"] = live, ph, name
                timeline.append([ph, name, live, seg_peak])
            st["phases"][ph] = {"peak": phase_peak, "end": live}
        if case["detail"] and s == STEPS - 1:
            st["timeline"] = timeline
        steps.append(st)
    for e in end:
        for _, mems in segments(e):
            for m in mems:
                live += m.extra_fields.alloc_size
    if live != alive_end:
        raise RuntimeError("%s: %d bytes alive by the running sum, %d counted from Python"
                           % (case["id"], live, alive_end))
    return {
        "model": case["model"], "batch": case["batch"], "optimizer": case["optimizer"],
        "image": case["image"], "param_bytes": param_bytes, "buffer_bytes": buffer_bytes,
        "steps": steps,
    }


def segments(phase_node):
    """The phase's children in time order, as (scope name, memory events in order): a leaf
    module or autograd node is one segment; memory events directly under the phase (functional
    code between modules, the loss, the optimizer) form segments named '-'."""
    out = []
    for c in sorted(phase_node.children, key=lambda n: (n.start_time_ns, n.id)):
        if c.name == "[memory]":
            if out and out[-1][0] == "-":
                out[-1][1].append(c)
            else:
                out.append(("-", [c]))
            continue
        name = c.name
        prefix = "autograd::engine::evaluate_function: "
        if name.startswith(prefix):
            name = name[len(prefix):]
        out.append((name, memory_events(c)))
    return out


def memory_events(node):
    """The memory events under node, in time order. (A case has hundreds of thousands: a
    depthwise convolution without oneDNN loops over its groups. The events are leaves, so their
    children are not asked for, and the sort key is read by attrgetter, in C.)"""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.name == "[memory]":
            out.append(n)
        else:
            stack.extend(n.children)
    out.sort(key=_TIME_ORDER)
    return out


_TIME_ORDER = operator.attrgetter("start_time_ns", "id")


def _forked(case, built, conn):
    """A case's process: runs it and sends (id, result, error) back."""
    import time
    import traceback
    t0 = time.monotonic()
    try:
        res = run_case(case, built)
    except BaseException:  # the parent reports it, with the case's id
        conn.send((case["id"], None, traceback.format_exc()))
        return
    conn.send((case["id"], res, None))
    sys.stderr.write("step: %-32s %6.1f s\n" % (case["id"], time.monotonic() - t0))


def run_cases(todo, jobs):
    """Runs every case in a process of its own, jobs at a time (a case of ALONE takes them all),
    and returns {id: result}.

    Each process is forked from this one with torch imported and the case's model already built
    (build_key: one build per model, not per case), so the allocator's profiling counters start
    at zero in each and no case pays for importing torch or for initialising the weights
    (torchvision's trunc_normal_ and kaiming init of a large model take longer than its two
    32-pixel steps). The build runs here on one thread with oneDNN off (pin_cpu_paths), so that
    no OpenMP pool is forked. While the cases of one model run, the next model is built."""
    import collections
    from multiprocessing.connection import wait
    ctx = multiprocessing.get_context("fork")
    groups = collections.OrderedDict()
    for c in todo:
        groups.setdefault(build_key(c), []).append(c)
    # the large models first: the small ones fill the end
    keys = sorted(groups, key=lambda k: 0 if any(k[0].startswith(a) for a in ALONE) else 1)
    queue = collections.deque((c, k) for k in keys for c in groups[k])
    pin_cpu_paths()
    built = {}  # key -> build() of a key with cases still to start
    running = {}  # connection -> (process, case, slots)
    out = {}

    def slots(case):
        return jobs if any(case["model"].startswith(a) for a in ALONE) else 1

    def prebuild():
        # the model of the next case not yet built (at most one ahead of the running ones)
        for c, k in queue:
            if k not in built:
                built[k] = build(c)
                return

    while queue or running:
        used = sum(n for _, _, n in running.values())
        while queue and (not running or used + slots(queue[0][0]) <= jobs):
            case, key = queue.popleft()
            if key not in built:
                built[key] = build(case)
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_forked, args=(case, built[key], send))
            proc.start()
            send.close()
            running[recv] = (proc, case, slots(case))
            used += slots(case)
            if not any(k == key for _, k in queue):
                del built[key]  # its processes hold their own copies
        if queue and len(built) == 0:
            prebuild()
        for conn in wait(list(running)):
            proc, case, _ = running.pop(conn)
            try:
                cid, res, err = conn.recv()
            except EOFError:
                cid, res, err = case["id"], None, "the process ended without a result"
            proc.join()
            if err is not None or proc.exitcode != 0:
                for other, _, _ in running.values():
                    other.kill()
                raise RuntimeError("step: %s failed (exit %s):\n%s" % (cid, proc.exitcode, err))
            out[cid] = res
    return out


# ----------------------------------------------------------------------------------------------
# The whole file.


def generate(only=None, jobs=2):
    import torch
    import torchvision
    todo = cases(only)
    out = {
        "generator": "validation/step.py",
        "torch": refname.plain(torch.__version__),
        "torchvision": refname.plain(torchvision.__version__),
        "device": "cpu",
        "threads": 1,
        "mkldnn": False,
        "nnpack": torch._nnpack_available(),
        "steps": STEPS,
        "loop": "x, y = new batch; loss = cross_entropy(model(x), y); loss.backward(); "
                "opt.step(); opt.zero_grad()",
        "bytes": "requested bytes alive (tensor nbytes), parameters and buffers included",
        "cases": {},
    }
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # in a process of its own, like every case
        pool.apply(selfcheck)
    out["cases"] = run_cases(todo, jobs)
    return out


def dump(obj):
    """Indented JSON with one timeline row per line."""
    text = json.dumps(obj, sort_keys=True, indent=1)
    lines, out, in_row = text.split("\n"), [], False
    # Fold the innermost arrays (timeline rows) onto one line each.
    buf = []
    for ln in lines:
        s = ln.strip()
        if in_row:
            buf.append(s)
            if s.startswith("]"):
                out.append(buf[0] + "".join(b if b.startswith("]") else b + " " for b in buf[1:]).replace(" ]", "]"))
                in_row, buf = False, []
            continue
        if s == "[" and out and out[-1].strip().endswith("["):
            in_row, buf = True, [ln.rstrip()]
            continue
        out.append(ln)
    text = "\n".join(out) + "\n"
    assert json.loads(text) == obj
    return text


def one_file_main(doc, out, generate, dump=None):
    """The command line of a one-file reference (generate.py, autocast.py,
    cs336.py): --check regenerates and diffs against the committed file,
    --out names another. out is torch 1.13's file; another release's
    carries its name (refname.py). dump turns the result into the file's
    text (default: indented JSON with sorted keys). Returns the exit
    status."""
    import torch
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="regenerate and diff against the committed file")
    ap.add_argument("--out", default=refname.name(out, torch.__version__))
    args = ap.parse_args()
    data = generate()
    text = dump(data) if dump else json.dumps(data, indent=1, sort_keys=True) + "\n"
    return write_or_check(text, args.out, args.check)


def write_or_check(text, out, check):
    """The one-file references' output (generate.py, autocast.py): text
    written to out, or with check compared with the committed out, a
    unified diff printed where they differ. Returns the exit status."""
    if not check:
        with open(out, "w") as f:
            f.write(text)
        return 0
    if not os.path.exists(out):
        print("%s is missing (run the script without --check and commit it)" % out, file=sys.stderr)
        return 1
    with open(out) as f:
        old = f.read()
    if old != text:
        sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True), out, "regenerated"))
        return 1
    return 0


def write(out_dir, only=None, jobs=2):
    data = generate(only, jobs)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, out_file()), "w", encoding="utf-8", newline="\n") as f:
        f.write(dump(data))
    return data


def check(committed_dir, jobs):
    tmp = tempfile.mkdtemp(prefix="batchfit-step-")
    try:
        write(tmp, jobs=jobs)
        name = out_file()
        want_path = os.path.join(committed_dir, name)
        with open(os.path.join(tmp, name), encoding="utf-8") as f:
            got = f.read()
        if not os.path.exists(want_path):
            print("step: %s is missing (regenerate with validation/step.py)" % want_path, file=sys.stderr)
            return 1
        with open(want_path, encoding="utf-8") as f:
            want = f.read()
        if got == want:
            print("step: %s matches a fresh run" % name)
            return 0
        diff = list(difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                         fromfile=want_path + " (committed)", tofile=name + " (regenerated)"))
        sys.stderr.write("step: %s differs from a fresh run:\n" % want_path)
        sys.stderr.writelines(diff[:200])
        if len(diff) > 200:
            sys.stderr.write("... (%d more diff lines)\n" % (len(diff) - 200))
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    default_out = os.path.join(os.path.dirname(HERE), "testdata", "reference")
    ap = argparse.ArgumentParser(description="Write the whole-step CPU memory reference.")
    ap.add_argument("--out", default=default_out, help="output directory (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and diff against --out")
    ap.add_argument("--only", nargs="+", help="case ids or model names (globs) to run")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--list", action="store_true", help="print the case ids")
    args = ap.parse_args(argv)
    if args.list:
        for c in cases(args.only):
            print(c["id"])
        return 0
    if args.check:
        return check(args.out, args.jobs)
    data = write(args.out, args.only, args.jobs)
    for cid in sorted(data["cases"]):
        st = data["cases"][cid]["steps"][-1]
        print("%-32s before %12d peak %12d in %s (%s)" % (cid, st["alive_before"], st["peak"],
                                                         st["peak_phase"], st["peak_op"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
