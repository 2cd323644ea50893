# batchfit's recorder, loaded by `batchfit run` through PYTHONPATH so that no
# line of the training script changes. It reports, after every optimizer
# step, PyTorch's own memory figures as one JSON line on the file descriptor
# $BATCHFIT_RECORD_FD, and an out-of-memory error when one ends the program.
#
# It chains to the sitecustomize it shadows, imports nothing heavy at
# start-up, and hooks PyTorch only once the script imports torch. Every hook
# is guarded: a failure of the recorder is reported once and never changes
# what the script does.
import os
import sys


def _chain_shadowed():
    # Python imports the first sitecustomize on sys.path: this one. Run the
    # one it shadows (the user's, or the distribution's) as it would have.
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)


try:
    _chain_shadowed()
except Exception as e:  # the shadowed file's own error, reported as Python would
    sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n" % (type(e).__name__, e))

sys.modules.setdefault("batchfit_recorder", sys.modules[__name__])

# The pipe is this process's alone: the variables leave the environment
# so that a child (os.system, a launcher's workers) does not write into
# whatever its own fd 3 is, and the descriptor is closed on exec.
_fd = os.environ.pop("BATCHFIT_RECORD_FD", None)
_snapshot_path = os.environ.pop("BATCHFIT_SNAPSHOT", None)
_snapshot_entries = int(os.environ.pop("BATCHFIT_SNAPSHOT_ENTRIES", "100000"))
_out = None
_pid = os.getpid()
_state = {"seq": 0, "forwards": 0, "batch": None, "depth": 0, "optimizers": {}, "failed": False, "oom_sent": False,
          "backward": 0, "want_batch": False, "device_sent": False}


def _send(rec):
    global _out
    if _out is None or os.getpid() != _pid:  # not in DataLoader workers
        return
    import json
    try:
        _out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        _out.flush()
    except Exception:
        _out = None


def _fail(where, e):
    if not _state["failed"]:
        _state["failed"] = True
        _send({"kind": "warning", "message": "recorder: %s: %s: %s" % (where, type(e).__name__, e)})


def _device(torch):
    # Read once CUDA is up, never to start it: importing torch must not
    # create a context (a forked worker could not use CUDA after it, and
    # CUDA_VISIBLE_DEVICES set after the import would be ignored).
    cuda = torch.cuda
    if _state["device_sent"] or not (cuda.is_available() and cuda.is_initialized()):
        return
    _state["device_sent"] = True
    try:
        p = cuda.get_device_properties(cuda.current_device())
        _send({"kind": "device", "device": p.name, "device_total": p.total_memory, "capability": "%d.%d" % (p.major, p.minor)})
    except Exception as e:
        _fail("reading the device", e)


def _memory(torch):
    m = {}
    cuda = getattr(torch, "cuda", None)
    _device(torch)
    if cuda is not None and cuda.is_available() and cuda.is_initialized():
        m["allocated"] = cuda.memory_allocated()
        m["max_allocated"] = cuda.max_memory_allocated()
        m["reserved"] = cuda.memory_reserved()
        m["max_reserved"] = cuda.max_memory_reserved()
        stats = cuda.memory_stats()
        m["num_alloc_retries"] = stats.get("num_alloc_retries", 0)
        m["num_ooms"] = stats.get("num_ooms", 0)
        try:
            free, total = cuda.mem_get_info()
            m["device_free"], m["device_total"] = free, total
        except Exception:
            pass
    try:  # the process' resident memory, for runs on the CPU
        with open("/proc/self/statm") as f:
            m["rss"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except Exception:
        pass
    return m


def _after_step(opt):
    import torch
    st = _state
    st["seq"] += 1
    key = id(opt)
    first = key not in st["optimizers"]
    if first:
        st["optimizers"][key] = {"index": len(st["optimizers"]), "steps": 0}
    o = st["optimizers"][key]
    o["steps"] += 1
    st["depth"] = 0  # a forward that raised never left; this one did
    rec = {"kind": "step", "seq": st["seq"], "optimizer": o["index"], "optimizer_class": type(opt).__name__,
           "step": o["steps"], "micro_batches": st["forwards"]}
    if first:
        # the settings that decide the optimizer's memory, as its first
        # parameter group holds them
        g = opt.param_groups[0] if opt.param_groups else {}
        rec["optimizer_settings"] = {k: g[k] for k in ("momentum", "weight_decay", "foreach", "fused", "amsgrad")
                                     if k in g and (g[k] is None or isinstance(g[k], (bool, int, float)))}
    if st["batch"] is not None:
        rec["batch"] = st["batch"]
    rec.update(_memory(torch))
    import time
    rec["time"] = time.time()
    st["forwards"] = 0
    _send(rec)


def _wrap_step(cls):
    step = cls.__dict__.get("step")
    if step is None or getattr(step, "_batchfit", False):
        return

    def wrapped(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        try:
            _after_step(self)
        except Exception as e:
            _fail("after optimizer step", e)
        return out

    wrapped._batchfit = True
    wrapped.__wrapped__ = step
    wrapped.__name__ = getattr(step, "__name__", "step")
    wrapped.__doc__ = getattr(step, "__doc__", None)
    setattr(cls, "step", wrapped)


def _first_dim(args, kwargs):
    import torch
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, torch.Tensor):
            return int(v.shape[0]) if v.dim() > 0 else None
        if isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, torch.Tensor) and w.dim() > 0:
                    return int(w.shape[0])
        if isinstance(v, dict):
            for w in v.values():
                if isinstance(w, torch.Tensor) and w.dim() > 0:
                    return int(w.shape[0])
    return None


def _install(torch):
    global _out
    if _fd is None or _out is not None:
        return
    try:
        fd = int(_fd)
        os.set_inheritable(fd, False)
        _out = os.fdopen(fd, "w", buffering=1)
    except Exception:
        return
    hello = {"kind": "start", "pid": _pid, "torch": torch.__version__, "python": sys.version.split()[0],
             "cuda": bool(torch.cuda.is_available())}
    if _snapshot_path and torch.cuda.is_available():
        # The allocator's history from the moment CUDA starts: wrap the
        # lazy initialisation rather than start CUDA here.
        lazy = torch.cuda._lazy_init

        def lazy_init_and_record():
            lazy()
            if not _state.get("history"):
                _state["history"] = True
                try:
                    try:
                        torch.cuda.memory._record_memory_history(enabled="all", max_entries=_snapshot_entries)
                    except TypeError:  # PyTorch 2.0's signature
                        torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=_snapshot_entries)
                except Exception as e:
                    _fail("recording the allocator's history", e)

        torch.cuda._lazy_init = lazy_init_and_record
        hello["recording_history"] = True
    _send(hello)

    # backward passes under way: forwards run inside one (a checkpoint's
    # recomputation) are not micro-batches
    ag_backward = torch.autograd.backward

    def backward(*args, **kwargs):
        _state["backward"] += 1
        try:
            return ag_backward(*args, **kwargs)
        finally:
            _state["backward"] -= 1

    torch.autograd.backward = backward

    # every optimizer class, present and future: PyTorch 2's global hook
    # where it exists, otherwise the class's step wrapped once
    Optimizer = torch.optim.Optimizer
    # torch.optim deletes its submodules' names in some releases (1.13)
    optmod = sys.modules.get("torch.optim.optimizer")
    reg = getattr(optmod, "register_optimizer_step_post_hook", None)
    if reg is not None:
        def post(opt, args, kwargs):
            try:
                _after_step(opt)
            except Exception as e:
                _fail("after optimizer step", e)
        reg(post)
    else:
        init = Optimizer.__init__

        def patched_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            try:
                for c in type(self).__mro__:
                    if c is Optimizer:
                        break
                    if "step" in c.__dict__:
                        _wrap_step(c)
                        break
            except Exception as e:
                _fail("hooking the optimizer", e)

        Optimizer.__init__ = patched_init

    # the batch: the first dimension of the outermost module's first tensor
    # argument, for forward passes that record gradients
    mm = sys.modules.get("torch.nn.modules.module")
    if mm is not None and hasattr(mm, "register_module_forward_pre_hook"):
        def pre(module, args):
            st = _state
            st["depth"] += 1
            if st["backward"] > 0 or not torch.is_grad_enabled():
                return
            try:
                b = _first_dim(args, {})
            except Exception:
                b = None
            if st["depth"] == 1:
                st["forwards"] += 1
                # a model called with keywords alone (model(**batch)) shows
                # its batch to the first submodule given a tensor
                st["want_batch"] = b is None
                if b is not None:
                    st["batch"] = b
            elif st["want_batch"] and b is not None:
                st["want_batch"] = False
                st["batch"] = b

        def post_fwd(module, args, out):
            _state["depth"] = max(0, _state["depth"] - 1)

        mm.register_module_forward_pre_hook(pre)
        mm.register_module_forward_hook(post_fwd)

    prev = sys.excepthook

    def excepthook(tp, value, tb):
        try:
            _report_exception(torch, value)
        except Exception as e:
            _fail("reporting the error", e)
        prev(tp, value, tb)

    sys.excepthook = excepthook


def _is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e)


def _report_exception(torch, e):
    seen = set()
    while e is not None and id(e) not in seen:  # the OOM may be the cause of what ends the program
        seen.add(id(e))
        if _is_oom(torch, e) and not _state["oom_sent"]:
            _state["oom_sent"] = True
            rec = {"kind": "oom", "message": str(e), "micro_batches": _state["forwards"]}
            if _state["batch"] is not None:
                rec["batch"] = _state["batch"]
            rec.update(_memory(torch))
            snap = _snapshot_path
            if snap and torch.cuda.is_available():
                try:
                    torch.cuda.memory._dump_snapshot(snap)
                    rec["snapshot"] = snap
                except Exception as x:
                    rec["snapshot_error"] = "%s: %s" % (type(x).__name__, x)
            _send(rec)
            return
        e = e.__cause__ or e.__context__


class _TorchFinder:
    # Installs the hooks right after the script's first `import torch`,
    # so that scripts that never import it pay nothing. It stays until torch
    # has run: a library that only asks whether torch exists
    # (importlib.util.find_spec, as transformers does) must not use it up.
    def __init__(self):
        self.looking = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.looking:
            return None
        import importlib.util
        self.looking = True
        try:
            spec = importlib.util.find_spec("torch")
        finally:
            self.looking = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module
        finder = self

        def exec_and_hook(module):
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
            exec_module(module)
            try:
                _install(module)
            except Exception as e:
                _fail("installing", e)

        class Loader:
            # torch's own loader in all but exec_module
            def __getattr__(self, name):
                return getattr(loader, name)

            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                exec_and_hook(module)

        spec.loader = Loader()
        return spec


if _fd is not None:
    if "torch" in sys.modules:
        _install(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchFinder())
