"""batchfit's capture module: run a user's model once on the meta device and
write what PyTorch did as a .bfgraph file (format "batchfit-graph", version 1).

    python3 bfcapture.py SPEC OUT [--batches 2,3]

SPEC is path/to/file.py:make, package.module:make, or a Hugging Face model
directory. The factory's contract is in batchfit's README ("Capture your own
nn.Module"). Nothing runs on a GPU and no weights are allocated: the model
is built on the meta device, where tensors have shapes, dtypes and strides
but no data.

What is recorded, and by which PyTorch mechanism:
* every aten op of the forward pass and the loss, with its arguments and
  results, through a TorchDispatchMode (torch.utils._python_dispatch, in
  PyTorch since 1.13 in this form);
* the outermost torch-level function each op belongs to (F.linear,
  F.conv2d, F.batch_norm, ...), through a TorchFunctionMode
  (torch.overrides): the ops PyTorch decomposes a function into differ
  between releases, the function does not (and, under 2.x, the
  F.scaled_dot_product_attention that F.multi_head_attention_forward
  calls inside it, which the mode does not see);
* the innermost nn.Module running, through the global forward hooks
  (torch.nn.modules.module.register_module_forward_pre_hook/_hook);
* the forward of every torch.autograd.Function subclass, by wrapping its
  forward;
* what autograd saves for backward, through saved_tensors_hooks
  (torch.autograd.graph, since 1.10);
* when the last reference to each tensor goes, through weakref.finalize:
  PyTorch keeps a tensor's Python object alive while C++ holds the
  tensor, so the pack hook hands autograd an alias of what it saves, and
  the finalizer runs when Python lets go of the tensor, saved or not
  (producer "capture" 2; before, a saved tensor's ran only in backward);
* the tensors each call of a numbered child of a container (layers.0,
  blocks.3: a block activation checkpointing may wrap) is handed, through
  a forward pre-hook on the module (with its keyword arguments under
  torch 2.x, register_forward_pre_hook(with_kwargs=True); positional ones
  under 1.13), in tuples, lists and dicts too: torch.utils.checkpoint
  keeps every tensor its function is handed, read or not (producer
  "capture" 3, the file's "calls").

The model is captured at two batch sizes and every size, stride and integer
argument that differs is recorded as linear in the batch, so that one file
serves every batch size.

Errors are one line on stderr, starting "capture: ", and a non-zero exit.
"""

import gzip
import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
import weakref

FORMAT = "batchfit-graph"
VERSION = 1
CAPTURE = 3
# A tensor on a real device larger than this during the capture means the
# model allocates memory of its own (torch.zeros(..., device="cpu") in its
# forward, a weight created outside register_parameter, ...).
REAL_LIMIT = 1 << 20


class CaptureError(Exception):
    pass


def fail(msg):
    raise CaptureError(msg)


def torch_version(torch):
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


# ---------------------------------------------------------------- factory


def load_factory(spec):
    if os.path.isdir(spec):
        return hf_factory(spec)
    if ":" not in spec:
        fail("%s: want path/to/file.py:function, package.module:function or a model directory" % spec)
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py") or os.sep in where or "/" in where:
        if not os.path.isfile(where):
            fail("%s: no such file" % where)
        modname = "_bfcapture_user_" + os.path.splitext(os.path.basename(where))[0]
        s = importlib.util.spec_from_file_location(modname, where)
        mod = importlib.util.module_from_spec(s)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        sys.modules[modname] = mod
        try:
            s.loader.exec_module(mod)
        except Exception as e:
            fail("loading %s: %s: %s" % (where, type(e).__name__, e))
    else:
        try:
            mod = importlib.import_module(where)
        except Exception as e:
            fail("importing %s: %s: %s" % (where, type(e).__name__, e))
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        names = [n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_")]
        fail("%s has no function %r (it has: %s)" % (where, name, ", ".join(sorted(names)[:10])))
    return fn, name


def hf_factory(path):
    if not os.path.isfile(os.path.join(path, "config.json")):
        fail("%s: a model directory needs a config.json" % path)
    try:
        import transformers  # noqa: F401
    except ImportError:
        fail("%s: a Hugging Face directory needs the transformers package in this interpreter; "
             "or write a factory file returning the model (see 'batchfit capture -h')" % path)

    def make(batch_size):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM
        cfg = AutoConfig.from_pretrained(path)
        model = AutoModelForCausalLM.from_config(cfg)
        seq = int(os.environ.get("BATCHFIT_SEQ", "512"))
        ids = torch.zeros(batch_size, seq, dtype=torch.long)
        return {"model": model, "inputs": {"input_ids": ids, "labels": ids}}
    return make, os.path.basename(os.path.abspath(path))


def call_factory(torch, fn, batch, prev):
    takes = True
    try:
        sig = inspect.signature(fn)
        takes = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                    for p in sig.parameters.values())
    except (TypeError, ValueError):
        pass
    try:
        out = fn(batch) if takes else fn()
    except CaptureError:
        raise
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)
        where = ("%s:%d" % (os.path.basename(tb[-1].filename), tb[-1].lineno)) if tb else "?"
        fail("the factory failed at %s: %s: %s" % (where, type(e).__name__, e))
    if isinstance(out, dict):
        d = dict(out)
    elif isinstance(out, (tuple, list)) and 2 <= len(out) <= 4:
        d = dict(zip(("model", "inputs", "targets", "loss"), out))
    else:
        fail("the factory returned %s; want a dict {model, inputs, targets, loss} or a tuple (model, inputs[, targets[, loss]])"
             % type(out).__name__)
    if not isinstance(d.get("model"), torch.nn.Module):
        fail("the factory's model is %s, not a torch.nn.Module" % type(d.get("model")).__name__)
    if d.get("inputs") is None:
        fail("the factory returned no inputs (an example batch, or its shapes)")
    if not takes:
        d["inputs"] = resize(torch, d["inputs"], batch, prev)
        if d.get("targets") is not None:
            d["targets"] = resize(torch, d["targets"], batch, prev)
    return d, takes


def resize(torch, x, batch, first):
    # a factory without a batch_size parameter: dim 0 of every tensor is
    # the batch, resized to the batch of each capture (the first too: the
    # two captures are merged as taken at exactly those batches, whatever
    # batch the factory's example had)
    if isinstance(x, torch.Tensor):
        if x.dim() == 0:
            return x
        return torch.empty((batch,) + tuple(x.shape[1:]), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)) and x and all(isinstance(v, int) for v in x):
        return (batch,) + tuple(x[1:])
    if isinstance(x, (tuple, list)):
        return type(x)(resize(torch, v, batch, first) for v in x)
    if isinstance(x, dict):
        return {k: resize(torch, v, batch, first) for k, v in x.items()}
    return x


def to_meta(torch, x, what):
    if isinstance(x, torch.Tensor):
        return x.to("meta") if x.device.type != "meta" else x
    if isinstance(x, (tuple, list)) and x and all(isinstance(v, int) for v in x):
        return torch.empty(tuple(x), device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(to_meta(torch, v, what) for v in x)
    if isinstance(x, dict):
        return {k: to_meta(torch, v, what) for k, v in x.items()}
    if x is None or isinstance(x, (int, float, bool, str)):
        return x
    fail("the factory's %s hold a %s; want tensors, shapes, or tuples, lists and dicts of them" % (what, type(x).__name__))


def host_ranges(torch):
    """The meta device context of torch >= 2.0, less the ranges and values: linspace,
    logspace and arange without a device stay on the CPU. Models read such
    ranges as Python numbers while they are built, which meta tensors cannot
    give: timm's stochastic-depth schedules (ConvNeXt's
    ``[x.tolist() for x in torch.linspace(0, drop_path_rate,
    sum(depths)).split(depths)]``, ViT's ``[x.item() for x in
    torch.linspace(0, drop_path_rate, depth)]``) fail on meta with "Cannot
    copy out of meta tensor". A range is no weight; one kept as a buffer
    goes to meta with the model (model.to("meta")). So do tensors made from
    Python values (torch.tensor, torch.as_tensor): constants a constructor
    computes with, such as a graph's edge list built from an arange."""
    from torch.utils._device import DeviceContext
    ranges = {torch.linspace, torch.logspace, torch.arange, torch.tensor, torch.as_tensor}

    class Ctx(DeviceContext):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in ranges and kwargs.get("device") is None:
                return func(*args, **kwargs)
            return super().__torch_function__(func, types, args, kwargs)
    return Ctx(torch.device("meta"))


class MetaInit:
    """Builds modules on the meta device. torch >= 2.0: the device context
    manager. 1.13: register_parameter and register_buffer moved to meta, as
    accelerate's init_empty_weights does (weights are still made on the CPU
    one module at a time, and freed at once)."""

    def __init__(self, torch):
        self.torch = torch
        self.ctx = None
        self.saved = None
        self.ctors = {}

    def __enter__(self):
        torch = self.torch
        if torch_version(torch) >= (2, 0):
            self.ctx = host_ranges(torch)
            self.ctx.__enter__()
            return self
        # the tensor constructors too, as accelerate's init_on_device does:
        # a Linear's weight is then made on meta and its initialisation
        # costs nothing (without this a 70B model's weights would be made
        # and initialised on the CPU one layer at a time)
        self.ctors = {}
        for name in ("empty", "zeros", "ones", "full", "rand", "randn"):
            fn = getattr(torch, name)
            self.ctors[name] = fn

            def ctor(*a, _fn=fn, **k):
                if k.get("device") is None:
                    k["device"] = "meta"
                return _fn(*a, **k)
            setattr(torch, name, ctor)
        Module = torch.nn.Module
        self.saved = (Module.register_parameter, Module.register_buffer)
        reg_p, reg_b = self.saved

        def register_parameter(module, name, param):
            reg_p(module, name, param)
            if param is not None and param.device.type != "meta":
                cls = type(module._parameters[name])
                kw = module._parameters[name].__dict__
                module._parameters[name] = cls(module._parameters[name].to("meta"), **kw)

        def register_buffer(module, name, tensor, persistent=True):
            reg_b(module, name, tensor, persistent)
            if tensor is not None and tensor.device.type != "meta":
                module._buffers[name] = module._buffers[name].to("meta")
        Module.register_parameter = register_parameter
        Module.register_buffer = register_buffer
        return self

    def __exit__(self, *exc):
        if self.ctx is not None:
            self.ctx.__exit__(*exc)
        if self.saved is not None:
            self.torch.nn.Module.register_parameter, self.torch.nn.Module.register_buffer = self.saved
            for name, fn in self.ctors.items():
                setattr(self.torch, name, fn)
        return False


# ---------------------------------------------------------------- recording


def dtype_name(dt):
    return str(dt).replace("torch.", "")


class Recorder:
    def __init__(self, torch, model):
        self.torch = torch
        self.model = model
        self.tensors = []      # records, index = id
        self.ids = {}          # id(tensor object) -> tensor id
        self.refs = []         # weakrefs, to tell a reused id() apart
        self.storages = {}     # storage key -> storage number
        self.members = {}      # storage number -> weakrefs of its tensors
        self.nstorages = 0
        self.ops = []
        self.module_stack = []
        self.fn = None         # the current outermost function call
        self.fn_calls = 0
        self.custom = None
        self.custom_calls = 0
        self.custom_info = {}
        self.packs = []        # (position in ops, tensor id)
        self.calls = []        # block calls: module, first op, tensors handed
        self.frees = {}
        self.done = False
        self.real_error = None
        self.busy = 0

    # tensors

    def storage_key(self, t):
        try:
            if hasattr(t, "untyped_storage"):
                return t.untyped_storage()._cdata
            return t.storage()._cdata
        except Exception:
            return None

    def storage_nbytes(self, t):
        try:
            if hasattr(t, "untyped_storage"):
                return int(t.untyped_storage().nbytes())
            return int(t.storage().nbytes())
        except Exception:
            n = 1
            for s, st in zip(t.shape, t.stride()):
                if s == 0:
                    return 0
                n += (s - 1) * st
            return (n + t.storage_offset()) * t.element_size()

    def tid(self, t, role="activation", name=None):
        k = id(t)
        if k in self.ids:
            i = self.ids[k]
            if self.refs[i]() is t:
                return i
        # reading the storage may dispatch an op of its own under the mode
        # (an index_put of a buffer, seen on 1.13): not the model's, not
        # recorded
        self.busy += 1
        try:
            key = self.storage_key(t)
            nbytes = self.storage_nbytes(t)
        finally:
            self.busy -= 1
        i = len(self.tensors)
        # A storage's address names it only while it lives: a freed one's
        # address is reused by the next allocation. It lives while a
        # tensor on it does (PyTorch keeps a tensor's Python object as long
        # as C++ holds the tensor).
        sid = None
        if key is not None and key in self.storages:
            old = self.storages[key]
            if any(r() is not None for r in self.members[old]):
                sid = old
        if sid is None:
            sid = self.nstorages
            self.nstorages += 1
            if key is not None:
                self.storages[key] = sid
            self.members[sid] = []
        self.members[sid].append(weakref.ref(t))
        # reading the metadata is no call of the model's either (1.13's
        # function mode sees t.shape)
        self.busy += 1
        try:
            rec = {
                "id": i,
                "shape": [int(s) for s in t.shape],
                "stride": [int(s) for s in t.stride()],
                "offset": int(t.storage_offset()),
                "dtype": dtype_name(t.dtype),
                "storage": sid,
                "storage_nbytes": nbytes,
                "role": role,
                "requires_grad": bool(t.requires_grad),
            }
            if t.device.type != "meta":
                rec["device"] = t.device.type
        finally:
            self.busy -= 1
        if name is not None:
            rec["name"] = name
        self.tensors.append(rec)
        self.ids[k] = i
        self.refs.append(weakref.ref(t))
        weakref.finalize(t, self.freed, i)
        return i

    def freed(self, i):
        if not self.done:
            self.frees[i] = len(self.ops) - 1

    def arg(self, a):
        torch = self.torch
        if isinstance(a, torch.Tensor):
            return {"t": self.tid(a)}
        if isinstance(a, (list, tuple)):
            if a and all(isinstance(v, torch.Tensor) or v is None for v in a) and any(isinstance(v, torch.Tensor) for v in a):
                return {"ts": [self.tid(v) if v is not None else None for v in a]}
            if all(isinstance(v, (bool, int, float)) or v is None for v in a):
                return {"v": [v if not isinstance(v, float) or v == v else None for v in a]}
            return {"other": repr(type(a).__name__)}
        if a is None or isinstance(a, (bool, int, str)):
            return {"v": a}
        if isinstance(a, float):
            return {"v": a if a == a and abs(a) != float("inf") else repr(a)}
        if isinstance(a, torch.dtype):
            return {"dtype": dtype_name(a)}
        if isinstance(a, torch.device):
            return {"device": a.type}
        if isinstance(a, torch.memory_format):
            return {"v": str(a).replace("torch.", "")}
        if isinstance(a, torch.layout):
            return {"v": str(a).replace("torch.", "")}
        return {"other": type(a).__name__}

    # the modes

    def on_aten(self, func, args, kwargs, out):
        if self.busy:
            return
        torch = self.torch
        schema = func._schema
        rec = {
            "aten": str(schema.name),
            "overload": schema.overload_name or "default",
            "args": [self.arg(a) for a in args],
            "module": self.module_stack[-1] if self.module_stack else "",
            "grad": bool(torch.is_grad_enabled()),
        }
        if kwargs:
            rec["kwargs"] = {k: self.arg(v) for k, v in sorted(kwargs.items())}
        outs = out if isinstance(out, (tuple, list)) else (out,)
        ids = []
        for o in outs:
            if isinstance(o, torch.Tensor):
                ids.append(self.tid(o))
                if o.device.type != "meta" and o.numel() * o.element_size() > REAL_LIMIT:
                    raise CaptureError("op %s (module %r) made a %d-byte tensor on %s: the model allocates real memory during the capture; make tensors with device=x.device" % (
                        rec["aten"], rec["module"], o.numel() * o.element_size(), o.device))
            elif isinstance(o, (list, tuple)):
                for p in o:
                    ids.append(self.tid(p) if isinstance(p, torch.Tensor) else None)
            else:
                ids.append(None)
        rec["out"] = ids
        alias, mut = [], []
        for j, a in enumerate(schema.arguments):
            ai = a.alias_info
            if ai is not None and ai.is_write:
                mut.append(j)
        for i, r in enumerate(schema.returns):
            ri = r.alias_info
            if ri is None:
                continue
            for j, a in enumerate(schema.arguments):
                ai = a.alias_info
                if ai is not None and set(ai.before_set) & set(ri.before_set):
                    alias.append([i, j])
        if alias:
            rec["alias"] = alias
        if mut:
            rec["mutates"] = mut
        if self.fn is not None:
            rec["fn"] = self.fn["name"]
            rec["fn_call"] = self.fn["call"]
            if not self.fn["seen"]:
                self.fn["seen"] = True
                rec["fn_args"] = self.fn["args"]
                if self.fn["kwargs"]:
                    rec["fn_kwargs"] = self.fn["kwargs"]
                self.fn["first"] = rec
        if self.custom is not None:
            rec["custom"] = self.custom[0]
            rec["custom_call"] = self.custom[1]
        self.ops.append(rec)

    def pack(self, t):
        """The pack hook: notes what autograd saves and hands it a new
        tensor on the same storage (an alias, made unrecorded). Packed
        itself, the tensor's Python object would live as long as autograd
        holds the tensor (PyTorch keeps a tensor's Python object while
        C++ holds the tensor), and its finalizer would run only in
        backward; holding an alias, autograd keeps the storage and the
        finalizer runs when Python lets go of the tensor, as it does
        where nothing saves it (a checkpointed layer's locals)."""
        self.on_pack(t)
        if not isinstance(t, self.torch.Tensor):
            return t
        self.busy += 1
        try:
            if t.device.type != "meta":
                # a Python number wrapped as a CPU tensor (mul's other):
                # 1.13's dispatch mode hands its detach the number back
                return t
            return t.detach()
        finally:
            self.busy -= 1

    def on_pack(self, t):
        if isinstance(t, self.torch.Tensor):
            i = self.tid(t)
            if self.custom is not None:
                self.custom_info[self.custom[1]]["saved"].append(i)
            else:
                self.packs.append((len(self.ops), i))


def function_name(func):
    mod = getattr(func, "__module__", None) or ""
    qual = getattr(func, "__qualname__", None) or ""
    name = getattr(func, "__name__", None) or str(func)
    if qual.startswith("_TensorBase.") or qual.startswith("Tensor."):
        return "Tensor." + name
    if mod.startswith("torch._C._nn"):
        mod = "torch.nn.functional"
    elif mod.startswith("torch._C") or mod in ("torch._tensor", "builtins", "torch.functional", ""):
        mod = "torch"
    return mod + "." + name


def capture_once(torch, factory, batch, prev):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.overrides import TorchFunctionMode
    import torch.nn.functional as F

    with MetaInit(torch):
        d, takes = call_factory(torch, factory, batch, prev)
    model = d["model"]
    for n, p in list(model.named_parameters()) + list(model.named_buffers()):
        if p.device.type != "meta":
            if p.numel() * p.element_size() > REAL_LIMIT:
                pass
    model.to("meta")
    inputs = to_meta(torch, d["inputs"], "inputs")
    targets = to_meta(torch, d.get("targets"), "targets")
    loss_fn = d.get("loss")
    model.train()

    rec = Recorder(torch, model)
    names = {}
    for n, m in model.named_modules():
        names.setdefault(id(m), n)
    modules = [{"path": n, "type": type(m).__name__} for n, m in model.named_modules()]
    seen = set()
    for n, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            rec.tid(p, "parameter", n)
    for n, b in model.named_buffers():
        if id(b) not in seen:
            seen.add(id(b))
            rec.tid(b, "buffer", n)

    def name_inputs(x, role, prefix):
        if isinstance(x, torch.Tensor):
            if id(x) not in seen:
                seen.add(id(x))
                rec.tid(x, role, prefix)
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                name_inputs(v, role, "%s.%d" % (prefix, i))
        elif isinstance(x, dict):
            for k in sorted(x):
                name_inputs(x[k], role, "%s.%s" % (prefix, k))
    name_inputs(inputs, "input", "input")
    name_inputs(targets, "target", "target")

    def on_meta(args, kwargs):
        """args and kwargs with each 0-d CPU tensor moved to meta where
        another argument is on meta, or None where there is none to move.
        A GPU kernel takes a 0-d CPU tensor as a number (TensorIterator's
        CPU scalars; masked_fill__cuda's value.item(),
        aten/src/ATen/native/cuda/Indexing.cu, for DistilBERT's and
        DeBERTa's scores.masked_fill(mask, torch.tensor(finfo.min))), where
        some meta kernels refuse it (torch._refs.masked_fill lets a CPU
        scalar go with a CUDA, XPU or HPU tensor, not a meta one)."""
        flat = list(args) + list(kwargs.values())
        if not any(isinstance(a, torch.Tensor) and a.device.type == "meta" for a in flat):
            return None

        def cpu0(a):
            return isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() == 0
        if not any(cpu0(a) for a in flat):
            return None
        with torch._C.DisableTorchFunction():
            return (tuple(a.to("meta") if cpu0(a) else a for a in args),
                    {k: v.to("meta") if cpu0(v) else v for k, v in kwargs.items()})

    class DM(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                out = func(*args, **kwargs)
            except RuntimeError:
                # a meta kernel that refuses a CPU number: run it as a GPU
                # would; the recording keeps the arguments as they were
                moved = on_meta(args, kwargs)
                if moved is None:
                    raise
                out = func(*moved[0], **moved[1])
            rec.on_aten(func, args, kwargs, out)
            return out

    def call(func, args, kwargs, run):
        # one torch function call: the aten ops it runs are its own
        outer = rec.fn
        rec.fn_calls += 1
        rec.fn = {"name": function_name(func), "call": rec.fn_calls, "seen": False,
                  "args": [rec.arg(a) for a in args],
                  "kwargs": {k: rec.arg(v) for k, v in sorted(kwargs.items())}}
        try:
            out = run(*args, **kwargs)
        finally:
            fn, rec.fn = rec.fn, outer
        if fn.get("first") is not None:
            outs = out if isinstance(out, (tuple, list)) else (out,)
            fn["first"]["fn_out"] = [rec.tid(o) if isinstance(o, torch.Tensor) else None for o in outs]
        return out

    # torch 2.x's F.multi_head_attention_forward (nn.MultiheadAttention)
    # calls F.scaled_dot_product_attention inside it when need_weights is
    # False, as torchvision's ViT asks. The mode does not see that inner
    # call: torch.overrides.handle_torch_function runs the outer call's
    # handler under _pop_mode_temporarily, so what the call runs inside is
    # no torch function to the mode, and the meta device runs SDPA as its
    # math decomposition (a scaled q, the softmax it saves), which a CPU or
    # GPU runs as one fused kernel saving other tensors. The inner call is
    # recorded as a call of its own, as a direct one is: the body looks
    # the name up in torch.nn.functional's globals when it runs, so it is
    # wrapped there for the outer call's time. The ops before and after it
    # stay multi_head_attention_forward's. 1.13's body has no SDPA (the
    # function is new in 2.0) and is recorded as before.
    mha = getattr(F, "multi_head_attention_forward", None)
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    def inner_sdpa(*args, **kwargs):
        return call(sdpa, args, kwargs, sdpa)

    class FM(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if rec.fn is not None or rec.busy:
                return func(*args, **kwargs)
            if sdpa is None or func is not mha:
                return call(func, args, kwargs, func)

            def run(*a, **k):
                F.scaled_dot_product_attention = inner_sdpa
                try:
                    return func(*a, **k)
                finally:
                    F.scaled_dot_product_attention = sdpa
            return call(func, args, kwargs, run)

    def pre(m, inp):
        rec.module_stack.append(names.get(id(m), "?"))

    # a numbered child of a container (the blocks Go's blockModules picks
    # from): what each call is handed, as the checkpoint that may wrap it
    # would keep it
    def handed(path):
        def hook(m, args, kwargs=None):
            if rec.busy:
                return None
            ids = []

            def add(v):
                if isinstance(v, torch.Tensor):
                    i = rec.tid(v)
                    if i not in ids:
                        ids.append(i)
                elif isinstance(v, (list, tuple)):
                    for w in v:
                        add(w)
                elif isinstance(v, dict):
                    for k in sorted(v, key=str):
                        add(v[k])
            add(list(args))
            add(kwargs or {})
            rec.calls.append({"module": path, "op": len(rec.ops), "args": ids})
            return None
        return hook
    call_hooks = []
    for n, m in model.named_modules():
        last = n.rsplit(".", 1)
        if len(last) != 2 or not last[1].isdigit():
            continue
        h = handed(n)
        try:
            call_hooks.append(m.register_forward_pre_hook(h, with_kwargs=True))
        except TypeError:
            # torch 1.13: no keyword arguments reach a pre-hook
            call_hooks.append(m.register_forward_pre_hook(lambda mod, inp, h=h: h(mod, inp)))

    def post(m, inp, out):
        if rec.module_stack:
            rec.module_stack.pop()

    # custom autograd.Functions: wrap every subclass's apply (what it
    # saves with ctx.save_for_backward is packed inside apply, after
    # forward returns) and its forward (whose ops run with grad off)
    wrapped = []

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)
    for cls in set(subclasses(torch.autograd.Function)):
        if "forward" not in cls.__dict__ or cls.__module__.startswith("torch"):
            continue
        orig_apply = cls.__dict__.get("apply")
        bound = cls.apply

        def make_apply(bound, cname):
            def apply(*a, **k):
                rec.custom_calls += 1
                call = rec.custom_calls
                outer, rec.custom = rec.custom, (cname, call)
                rec.custom_info[call] = {"call": call, "name": cname,
                                         "inputs": [rec.tid(v) for v in a if isinstance(v, torch.Tensor)],
                                         "saved": []}
                try:
                    out = bound(*a, **k)
                finally:
                    rec.custom = outer
                outs = out if isinstance(out, (tuple, list)) else (out,)
                rec.custom_info[call]["outputs"] = [rec.tid(v) if isinstance(v, torch.Tensor) else None for v in outs]
                return out
            return classmethod(lambda c, *a, **k: apply(*a, **k))
        wrapped.append((cls, orig_apply))
        cls.apply = make_apply(bound, cls.__name__)

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(pre),
             torch.nn.modules.module.register_module_forward_hook(post)]
    unpatch = patch_autocast(torch)
    try:
        with torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            with FM(), DM():
                if isinstance(inputs, dict):
                    out = model(**inputs)
                elif isinstance(inputs, (tuple, list)):
                    out = model(*inputs)
                else:
                    out = model(inputs)
                rec.module_stack = ["<loss>"]
                loss = compute_loss(torch, F, out, targets, loss_fn)
                rec.module_stack = []
    except CaptureError:
        raise
    except Exception as e:
        mod = rec.module_stack[-1] if rec.module_stack else ""
        last = rec.ops[-1]["aten"] if rec.ops else "-"
        msg = str(e).split("\n")[0]
        if "meta" in msg and "cpu" in msg and ("expected device" in msg or "same device" in msg):
            # a tensor the forward made without device= is on the CPU
            # beside the model's: on a GPU the same call fails alike
            msg += " (a tensor made in the forward without device=, such as torch.zeros(n, h), is on the CPU while the model's are not; make it with device=x.device, as a GPU run needs too)"
        elif "meta" in msg or "item" in msg or "data-dependent" in msg.lower():
            msg += " (on the meta device tensors have no values: .item(), nonzero and data-dependent shapes cannot be captured)"
        fail("the forward failed in module %r after op %s: %s: %s" % (mod, last, type(e).__name__, msg))
    finally:
        unpatch()
        for h in hooks + call_hooks:
            h.remove()
        for cls, orig in wrapped:
            if orig is None:
                del cls.apply
            else:
                cls.apply = orig
    if rec.real_error:
        fail(rec.real_error)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        fail("the loss is %s, not a scalar tensor" % (type(loss).__name__ if not isinstance(loss, torch.Tensor) else "a tensor of shape %s" % list(loss.shape)))
    loss_id = rec.tid(loss)
    outs = out if isinstance(out, (tuple, list)) else (getattr(out, "logits", out),)
    out_ids = [rec.tid(o) for o in outs if isinstance(o, torch.Tensor)]
    backward = "run"
    try:
        loss.backward()
    except Exception as e:
        backward = "skipped: %s" % str(e).split("\n")[0][:200]
    rec.done = True
    saved = {}
    for pos, t in rec.packs:
        # a pack before op pos's record: the op about to run (its inputs are
        # saved before it dispatches) unless the tensor is an output of the
        # op just recorded (outputs are saved after)
        k = pos
        if pos > 0 and t in (rec.ops[pos - 1].get("out") or []):
            k = pos - 1
        elif pos >= len(rec.ops):
            k = len(rec.ops) - 1
        saved.setdefault(t, []).append(k)
    for t, ks in saved.items():
        rec.tensors[t]["saved_by"] = sorted(set(ks))
    for t, k in rec.frees.items():
        rec.tensors[t]["freed_after"] = k
    return {
        "modules": modules,
        "tensors": rec.tensors,
        "ops": rec.ops,
        "loss": loss_id,
        "outputs": out_ids,
        "backward": backward,
        "custom_calls": [rec.custom_info[k] for k in sorted(rec.custom_info)],
        "calls": rec.calls,
        "name": type(model).__name__,
        "takes_batch": takes,
    }, d


def patch_autocast(torch):
    """Let a model open autocast on its tensors' device while they are on
    meta. Models write torch.autocast(device_type=x.device.type, ...)
    (transformers' rotary embeddings since 4.42 turn autocast off around
    their float32 cos/sin that way), and torch 2.x refuses "meta": it has
    no autocast dtype (torch.get_autocast_dtype raises "unsupported
    scalarType"). Meta tensors have no autocast dispatch key, so the
    context changes nothing they run; it is opened for the CPU instead,
    whose autocast state the capture does not otherwise touch. Returns the
    function that undoes the patch."""
    cls = getattr(getattr(torch, "amp", None), "autocast_mode", None)
    cls = getattr(cls, "autocast", None)
    if cls is None or torch_version(torch) < (2, 0):
        return lambda: None
    orig = cls.__init__

    def init(self, device_type, *a, **k):
        if device_type == "meta":
            device_type = "cpu"
        orig(self, device_type, *a, **k)
    cls.__init__ = init

    def undo():
        cls.__init__ = orig
    return undo


def compute_loss(torch, F, out, targets, loss_fn):
    if loss_fn is not None:
        return loss_fn(out, targets) if targets is not None else loss_fn(out)
    if targets is not None:
        o = getattr(out, "logits", out)
        if isinstance(targets, torch.Tensor) and not targets.dtype.is_floating_point:
            return F.cross_entropy(o, targets)
        if isinstance(targets, torch.Tensor):
            return F.mse_loss(o, targets)
    if getattr(out, "loss", None) is not None:
        return out.loss
    if isinstance(out, dict) and out.get("loss") is not None:
        return out["loss"]
    fail("no loss: return a 'loss' function from the factory, or targets (int64 for cross-entropy, float for MSE)")


# ---------------------------------------------------------------- two batches


def linear(a, b, b0, b1, where):
    """The coefficient k with b == a + k*(b1-b0), or an error."""
    d = b - a
    if d % (b1 - b0) != 0:
        fail("%s: %d at batch %d and %d at batch %d is not linear in the batch" % (where, a, b0, b, b1))
    return d // (b1 - b0)


def merge(g0, g1, b0, b1):
    if len(g0["ops"]) != len(g1["ops"]):
        fail("the model ran %d ops at batch %d and %d at batch %d: the graph depends on the batch size" % (len(g0["ops"]), b0, len(g1["ops"]), b1))
    if len(g0["tensors"]) != len(g1["tensors"]):
        fail("the model made %d tensors at batch %d and %d at batch %d: the graph depends on the batch size" % (len(g0["tensors"]), b0, len(g1["tensors"]), b1))
    for i, (o0, o1) in enumerate(zip(g0["ops"], g1["ops"])):
        if o0["aten"] != o1["aten"] or o0["out"] != o1["out"]:
            fail("op %d is %s at batch %d and %s at batch %d (module %r): the graph depends on the batch size" % (i, o0["aten"], b0, o1["aten"], b1, o0["module"]))
        where = "op %d %s (module %r)" % (i, o0["aten"], o0["module"])
        for key in ("args", "fn_args"):
            if key in o0:
                for a0, a1 in zip(o0[key], o1[key]):
                    merge_arg(a0, a1, b0, b1, where)
        for key in ("kwargs", "fn_kwargs"):
            if key in o0:
                for k in o0[key]:
                    merge_arg(o0[key][k], o1[key].get(k, {}), b0, b1, where)
    if [(c["module"], c["op"], c["args"]) for c in g0["calls"]] != [(c["module"], c["op"], c["args"]) for c in g1["calls"]]:
        fail("the blocks were called with other tensors at batch %d than at batch %d: the graph depends on the batch size" % (b0, b1))
    for t0, t1 in zip(g0["tensors"], g1["tensors"]):
        where = "tensor %d (%s)" % (t0["id"], t0.get("name", "made by op %s" % t0.get("op", "?")))
        if len(t0["shape"]) != len(t1["shape"]) or t0["dtype"] != t1["dtype"]:
            fail("%s has rank or dtype that depends on the batch size" % where)
        for key in ("shape", "stride"):
            ks = [linear(a, b, b0, b1, where + " " + key) for a, b in zip(t0[key], t1[key])]
            if any(ks):
                t0[key.replace("shape", "batch").replace("stride", "stride_batch")] = ks
        k = linear(t0["storage_nbytes"], t1["storage_nbytes"], b0, b1, where + " storage bytes")
        if k:
            t0["storage_nbytes_batch"] = k
        k = linear(t0["offset"], t1["offset"], b0, b1, where + " offset")
        if k:
            t0["offset_batch"] = k
    return g0


def merge_arg(a0, a1, b0, b1, where):
    if "v" not in a0 or "v" not in a1:
        return
    v0, v1 = a0["v"], a1["v"]
    if isinstance(v0, bool) or isinstance(v1, bool):
        return
    if isinstance(v0, int) and isinstance(v1, int) and v0 != v1:
        a0["batch"] = linear(v0, v1, b0, b1, where)
    elif isinstance(v0, list) and isinstance(v1, list) and len(v0) == len(v1):
        ks = []
        for x, y in zip(v0, v1):
            if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool):
                ks.append(linear(x, y, b0, b1, where))
            else:
                ks.append(0)
        if any(ks):
            a0["batch"] = ks


def capture(spec, out, batches, factory=None):
    try:
        import torch
    except ImportError:
        fail("this interpreter (%s) has no torch module; choose one that has with --python" % sys.executable)
    if not hasattr(torch.nn.modules.module, "register_module_forward_pre_hook"):
        fail("torch %s is too old: batchfit capture needs 1.13 or later" % torch.__version__)
    if factory is None:
        factory, fname = load_factory(spec)
    else:
        fname = spec.rsplit(":", 1)[-1]
    b0, b1 = batches
    g0, _ = capture_once(torch, factory, b0, None)
    g1, _ = capture_once(torch, factory, b1, b0)
    g = merge(g0, g1, b0, b1)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "producer": {"capture": CAPTURE, "torch": torch.__version__},
        "name": g["name"],
        "factory": spec if os.path.isdir(spec) else os.path.basename(spec.rsplit(":", 1)[0]) + ":" + fname,
        "batch": {"captured": [b0, b1]},
        "modules": g["modules"],
        "tensors": g["tensors"],
        "ops": g["ops"],
        "loss": g["loss"],
        "outputs": g["outputs"],
        "backward": g["backward"],
        "custom_calls": g["custom_calls"],
    }
    if g["calls"]:
        doc["calls"] = g["calls"]
    data = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    tmp = out + ".tmp"
    try:
        if out.endswith(".gz"):
            with open(tmp, "wb") as f:
                with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as z:
                    z.write(data)
        else:
            with open(tmp, "wb") as f:
                f.write(data)
        os.replace(tmp, out)
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        fail("writing %s: %s" % (out, e))
    return doc


def main(argv):
    import argparse
    p = argparse.ArgumentParser(prog="bfcapture")
    p.add_argument("spec")
    p.add_argument("out")
    p.add_argument("--batches", default="2,3")
    a = p.parse_args(argv)
    try:
        bs = [int(x) for x in a.batches.split(",")]
        if len(bs) != 2 or bs[0] < 1 or bs[1] <= bs[0]:
            raise ValueError
    except ValueError:
        print("capture: --batches %r: want two increasing batch sizes such as 2,3" % a.batches, file=sys.stderr)
        return 2
    try:
        doc = capture(a.spec, a.out, bs)
    except CaptureError as e:
        print("capture: %s" % e, file=sys.stderr)
        return 1
    try:
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except Exception:
        rss = 0
    print(json.dumps({"ops": len(doc["ops"]), "tensors": len(doc["tensors"]), "max_rss_kib": rss}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
