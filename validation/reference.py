#!/usr/bin/python3
"""CPU reference numbers from real PyTorch for batchfit's Go tests.

Run with the interpreter that has torch and torchvision (Debian: /usr/bin/python3):

    /usr/bin/python3 validation/reference.py                # writes testdata/reference/
    /usr/bin/python3 validation/reference.py --out DIR      # writes into DIR
    /usr/bin/python3 validation/reference.py --check        # regenerates in a temp dir, diffs

Outputs (deterministic: sorted keys, no timestamps, no host names, integers only):

* ``torch-cpu.json`` -- per model: ``param_count``, ``param_bytes``, ``buffer_bytes``, and per
  batch size: ``saved_bytes``, ``saved_storages``, ``saved_by_fn``, ``input_bytes``,
  ``target_bytes``, ``logits_bytes``, ``wrapped_scalar_bytes``.
* ``torch-cpu-saved.json`` -- for batch sizes 1 and 2 only: every distinct saved storage in
  forward order (first saver, attribute, shape, dtype, bytes, which other slots share it).

What is measured
----------------
Every model runs one forward pass in train mode, on the CPU, in float32, followed by the loss
(``cross_entropy(logits, targets)`` with int64 class indices). Nothing is run backward. At that
moment autograd holds, in its graph, the tensors that the backward formulas need (the "saved
tensors" of tools/autograd/derivatives.yaml). ``saved_bytes`` is the memory those tensors pin:

* counted once per storage (a ReLU's ``result`` and the next Linear's ``mat1`` are one storage;
  a ``select`` view saved by a Linear pins its whole base storage), keyed by the storage's
  data pointer, counting the storage's full ``nbytes``;
* EXCLUDING the storages of parameters and buffers: they exist whether or not autograd saves
  them (a Linear saves ``W.t()``, a view of the weight; BatchNorm saves ``running_mean``), so
  the Go simulator accounts for them as parameters/buffers, not as activations;
* EXCLUDING the storages of the input batch and of the targets: the simulator accounts for them
  as batch data, which lives before the forward pass and independently of autograd.

So ``saved_bytes`` is exactly the activation memory the step simulator must attribute to the
forward pass as "saved activation" (on a GPU, each storage additionally rounds up to the
caching allocator's 512-byte blocks; that is the allocator's business, not recorded here).

Two independent methods are used and must agree (asserted):

1. ``torch.autograd.graph.saved_tensors_hooks``: the pack hook sees every tensor that autograd
   saves, in forward order; it keeps a reference to it (autograd keeps them anyway) together
   with its storage's data pointer and size.
2. A walk of the graph from ``loss.grad_fn`` through ``next_functions``, reading every node's
   ``_saved_*`` attributes (tensors and tuples of tensors), deduplicating storages globally.

Reading a ``_saved_*`` attribute calls the unpack hook, which tells which pack (hence which
position in forward order) that attribute holds; this is how each storage is attributed to the
node that saved it first (``saved_by_fn``), and it lets the script assert that the two methods
saw exactly the same packs, not only the same total.

0-dim float64 tensors are Python numbers that the argument parser wrapped (e.g. ``q / sqrt(E)``
saves ``other`` as a wrapped number). They are counted in ``saved_bytes`` (autograd holds them)
and also reported separately in ``wrapped_scalar_bytes``: on a CUDA run they stay on the host
and cost no device memory.

CPU-specific paths (torch 1.13): dropout on the CPU does not use ``native_dropout``; it
multiplies by a float noise tensor (``MulBackward0`` saves it, input dtype), whereas on CUDA
the fused kernel saves a bool mask. Batch norm on the CPU is ``native_batch_norm``; on CUDA
with cuDNN it is ``cudnn_batch_norm`` and also saves a uint8 reserve space. The Go op rules
must keep such device differences as data.
"""

import argparse
import difflib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

import refname

# torch 1.13's files keep their names; another release's carry it (refname.py).
MAIN_FILE = refname.name("torch-cpu.json", torch.__version__)
SAVED_FILE = refname.name("torch-cpu-saved.json", torch.__version__)
TORCH2 = not torch.__version__.startswith("1.")
SAVED_DETAIL_BATCHES = (1, 2)
SEED = 0

SMALL_BATCHES = [1, 8, 32]
VISION_BATCHES = [1, 2]


# ----------------------------------------------------------------------------------------------
# Models. The Go zoo defines the same structures; keep these definitions exactly.


def mlp(layers, hidden, in_features=784, classes=10):
    """Flatten, Linear(in, H), ReLU, (Linear(H, H), ReLU) * (layers-1), Linear(H, classes)."""
    mods = [nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    mods.append(nn.Linear(hidden, classes))
    return nn.Sequential(*mods)


class LoRALinear(nn.Module):
    """peft.tuners.lora.layer.Linear's forward for one adapter, in plain
    PyTorch: the base layer frozen, result + lora_B(lora_A(dropout(x))) *
    scaling added out of place (PEFT itself is not a Debian package)."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        for p in base.parameters():
            p.requires_grad_(False)
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        self.scaling = alpha / r

    def forward(self, x):
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def lora_mlp(layers, hidden, r, alpha, dropout):
    """mlp() with LoRA on every hidden Linear and the head frozen, as
    get_peft_model leaves a model: only the adapters train."""
    m = mlp(layers, hidden)
    linears = [i for i, mod in enumerate(m) if isinstance(mod, nn.Linear)]
    for i in linears[:-1]:
        m[i] = LoRALinear(m[i], r, alpha, dropout)
    for p in m[linears[-1]].parameters():
        p.requires_grad_(False)
    return m


def simpleconv(classes=10):
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 8 * 8, classes),
    )


def tv(name):
    return lambda: getattr(torchvision.models, name)(weights=None)


# name -> (builder, per-sample input shape, classes, batch sizes)
MODELS = {
    "mlp": (lambda: mlp(4, 1024), (784,), 10, SMALL_BATCHES),
    "mlp-L1-H256": (lambda: mlp(1, 256), (784,), 10, SMALL_BATCHES),
    "mlp-L8-H512": (lambda: mlp(8, 512), (784,), 10, SMALL_BATCHES),
    "lora-mlp-r8": (lambda: lora_mlp(4, 1024, 8, 16, 0.0), (784,), 10, SMALL_BATCHES),
    "lora-mlp-r16-dropout": (lambda: lora_mlp(4, 1024, 16, 32, 0.1), (784,), 10, SMALL_BATCHES),
    "simpleconv": (simpleconv, (3, 32, 32), 10, SMALL_BATCHES),
    "resnet18": (tv("resnet18"), (3, 224, 224), 1000, VISION_BATCHES),
    "resnet50": (tv("resnet50"), (3, 224, 224), 1000, VISION_BATCHES),
    "vgg16": (tv("vgg16"), (3, 224, 224), 1000, VISION_BATCHES),
    "vit_b_16": (tv("vit_b_16"), (3, 224, 224), 1000, VISION_BATCHES),
}
# The models above that are not torchvision's (the ONNX exporter and the
# whole-step reference build these themselves).
NOT_TORCHVISION = ("mlp", "mlp-L1-H256", "mlp-L8-H512", "simpleconv", "lora-mlp-r8", "lora-mlp-r16-dropout")
# Per-storage detail (torch-cpu-saved.json) only for the models above; the
# rest of the torchvision zoo gets the summary figures.
DETAIL_MODELS = set(MODELS)
for _name in ["resnet34", "resnet101", "resnet152", "wide_resnet50_2", "vgg11", "vgg13", "vgg19",
              "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn", "vit_b_32", "vit_l_16", "mobilenet_v2",
              "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "efficientnet_b1",
              "efficientnet_b2", "efficientnet_b3", "efficientnet_b4", "convnext_tiny", "convnext_small",
              "convnext_base", "swin_t", "densenet121", "densenet161", "densenet169", "densenet201"]:
    MODELS[_name] = (tv(_name), (3, 224, 224), 1000, VISION_BATCHES)


# The models that take longest (ViT-L/16's and ConvNeXt's forwards at 224 px and their
# trunc_normal_ initialisation, VGG's large Linear layers), run first.
LARGEST = ("vit_l_16", "convnext_base", "convnext_small", "vgg13", "vgg19_bn", "vgg19", "vgg16",
           "vgg16_bn", "vgg11_bn", "vit_b_16", "vgg13_bn", "swin_t")


# ----------------------------------------------------------------------------------------------
# Storage helpers (torch 1.13 has Tensor.storage(); 2.x prefers untyped_storage()).


def _storage(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()


def storage_key(t):
    return _storage(t).data_ptr()


def storage_nbytes(t):
    return _storage(t).nbytes()


def dtype_name(dt):
    return str(dt).replace("torch.", "")


def is_wrapped_scalar(t):
    # Python numbers wrapped by the argument parser are 0-dim double (or int64/complex128)
    # tensors. In a float32 model a 0-dim float64 saved tensor can only be one of those.
    return t.dim() == 0 and t.dtype == torch.float64


# ----------------------------------------------------------------------------------------------
# Measurement.


class _Packed:
    __slots__ = ("tensor", "index")

    def __init__(self, tensor, index):
        self.tensor = tensor
        self.index = index


class SavedRecorder:
    """saved_tensors_hooks that remember every pack in forward order."""

    def __init__(self):
        self.packs = []  # (tensor, storage ptr, storage nbytes), forward order
        self.unpacked = []  # pack indices returned by the unpack hook since the last reset
        self.handles = []  # every _Packed handed to autograd

    def pack(self, t):
        self.packs.append((t, storage_key(t), storage_nbytes(t)))
        h = _Packed(t, len(self.packs) - 1)
        self.handles.append(h)
        return h

    def release(self):
        """Breaks the cycle node -> packed handle -> saved output -> grad_fn = node. It runs
        through C++ autograd nodes, where Python's collector cannot see, so without this every
        measured graph (activations included) would stay alive until the process ends."""
        for h in self.handles:
            h.tensor = None
        self.handles.clear()
        self.packs.clear()

    def unpack(self, p):
        self.unpacked.append(p.index)
        return p.tensor

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)


def walk_graph(root):
    """All nodes reachable from root, in a deterministic DFS order."""
    seen, order, stack = set(), [], [root]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        order.append(fn)
        for nxt, _ in reversed(fn.next_functions):
            stack.append(nxt)
    return order


def saved_slots(fn, rec):
    """(attr, tensor, pack index) for every tensor a node saved (tuples flattened). The pack
    index is None for a wrapped number that torch 2.x saved without the hooks."""
    out = []
    for attr in sorted(a for a in dir(fn) if a.startswith("_saved_")):
        rec.unpacked.clear()
        value = getattr(fn, attr)
        tensors = []
        if isinstance(value, torch.Tensor):
            tensors = [value]
        elif isinstance(value, (tuple, list)):
            tensors = [v for v in value if isinstance(v, torch.Tensor)]
        if not tensors:
            continue
        if not rec.unpacked and len(tensors) == 1 and is_wrapped_scalar(tensors[0]) and TORCH2:
            # torch 2.x's SavedVariable keeps a wrapped number itself and gives it to no
            # saved_tensors_hooks (torch/csrc/autograd/saved_variable.cpp, the constructor:
            # "is_wrapped_number" skips set_hooks_and_pack_data), so reading it unpacks nothing.
            # Autograd holds it all the same: it is counted, placed by its node's sequence number.
            out.append((attr[len("_saved_"):], tensors[0], None))
            continue
        assert len(rec.unpacked) == len(tensors), (type(fn).__name__, attr, rec.unpacked)
        for t, idx in zip(tensors, rec.unpacked):
            out.append((attr[len("_saved_"):], t, idx))
    return out


def measure(model, in_shape, classes, batch):
    torch.manual_seed(SEED)
    x = torch.randn(batch, *in_shape)
    y = torch.randint(0, classes, (batch,), dtype=torch.int64)
    excluded = {}  # storage ptr -> why
    for p in model.parameters():
        excluded[storage_key(p)] = "param"
    for b in model.buffers():
        excluded[storage_key(b)] = "buffer"
    excluded[storage_key(x)] = "input"
    excluded[storage_key(y)] = "target"

    rec = SavedRecorder()
    with rec.hooks():
        logits = model(x)
        loss = F.cross_entropy(logits, y)

    # Method 1: the pack hooks alone.
    hook_storages = {}
    for _, ptr, nbytes in rec.packs:
        if ptr not in excluded and ptr not in hook_storages:
            hook_storages[ptr] = nbytes
    hook_total = sum(hook_storages.values())

    # Method 2: the graph walk. Map each pack index to the (node class, attr) holding it.
    pack_owner = {}
    pack_seq = {}  # pack index -> its node's sequence number
    unhooked = []  # (sequence number, node class, attr, tensor): torch 2.x's wrapped numbers
    nodes_by_class = {}
    for fn in walk_graph(loss.grad_fn):
        cls = type(fn).__name__
        nodes_by_class[cls] = nodes_by_class.get(cls, 0) + 1
        for attr, t, idx in saved_slots(fn, rec):
            if idx is None:
                unhooked.append((fn._sequence_nr(), cls, attr, t))
                continue
            assert idx not in pack_owner, "pack reached twice"
            pack_owner[idx] = (cls, attr, t)
            if TORCH2:  # (1.13's nodes do not expose it, and save no wrapped number unhooked)
                pack_seq[idx] = fn._sequence_nr()
    graph_storages = {}
    for _, _, t in list(pack_owner.values()) + [(c, a, t) for _, c, a, t in unhooked]:
        ptr = storage_key(t)
        if ptr not in excluded:
            graph_storages[ptr] = storage_nbytes(t)
    graph_total = sum(graph_storages.values())
    for _, _, _, t in unhooked:
        ptr = storage_key(t)
        if ptr not in excluded and ptr not in hook_storages:
            hook_storages[ptr] = storage_nbytes(t)
    hook_total = sum(hook_storages.values())
    # An in-place op on a view (efficientnet's classifier dropout on the
    # flattened pool output) rebases the view's history: CopySlices keeps
    # the in-place node, and what it saved, internally, where next_functions
    # does not reach. Those packs are alive all the same; the pack hooks
    # count them, and they are attributed to "CopySlices(hidden)".
    hidden = [i for i in range(len(rec.packs)) if i not in pack_owner]
    if hidden:
        nodes_by_class["CopySlices(hidden)"] = 0
    for idx in hidden:
        pack_owner[idx] = ("CopySlices(hidden)", "?", rec.packs[idx][0])
    assert graph_total <= hook_total, (hook_total, graph_total)
    if not hidden:
        assert hook_total == graph_total, (hook_total, graph_total)

    # Attribution, in forward (= pack) order; an unhooked wrapped number goes after the last
    # pack of a node made no later than its own (none in torch 1.13).
    order = [(idx, pack_owner[idx], rec.packs[idx][1], rec.packs[idx][2]) for idx in range(len(rec.packs))]
    for seq, cls, attr, t in sorted(unhooked, key=lambda u: u[0]):
        at = 0
        for i, (idx, _, _, _) in enumerate(order):
            if idx is not None and pack_seq.get(idx, seq + 1) <= seq:
                at = i + 1
        order.insert(at, (None, (cls, attr, t), storage_key(t), storage_nbytes(t)))
    by_fn = {
        cls: {"nodes": n, "tensors": 0, "excluded_slots": 0, "storages": 0, "bytes": 0}
        for cls, n in nodes_by_class.items()
    }
    detail = []
    first = {}  # storage ptr -> detail record
    wrapped = 0
    for _, (cls, attr, t), ptr, nbytes in order:
        if ptr in excluded:
            by_fn[cls]["excluded_slots"] += 1
            continue
        by_fn[cls]["tensors"] += 1
        if ptr in first:
            first[ptr]["shared_with"].append("%s.%s" % (cls, attr))
            continue
        by_fn[cls]["storages"] += 1
        by_fn[cls]["bytes"] += nbytes
        if is_wrapped_scalar(t):
            wrapped += nbytes
        r = {
            "grad_fn": cls,
            "attr": attr,
            "shape": list(t.shape),
            "dtype": dtype_name(t.dtype),
            "tensor_bytes": t.numel() * t.element_size(),
            "nbytes": nbytes,
            "shared_with": [],
        }
        if is_wrapped_scalar(t):
            r["wrapped_scalar"] = True
        first[ptr] = r
        detail.append(r)
    assert sum(r["nbytes"] for r in detail) == hook_total

    summary = {
        "batch": batch,
        "saved_bytes": hook_total,
        "saved_storages": len(detail),
        "saved_by_fn": by_fn,
        "wrapped_scalar_bytes": wrapped,
        "input_bytes": storage_nbytes(x),
        "target_bytes": storage_nbytes(y),
        "logits_bytes": logits.numel() * logits.element_size(),
    }
    rec.release()
    del loss, logits, rec, pack_owner, first, order, unhooked
    return summary, detail


def build(name):
    builder, in_shape, classes, batches = MODELS[name]
    torch.manual_seed(SEED)
    model = builder().train()
    return model, in_shape, classes, batches


def _measure_model(name):
    torch.set_num_threads(1)
    torch.set_grad_enabled(True)
    model, in_shape, classes, batches = build(name)
    entry = {
        "input_shape": list(in_shape),
        "classes": classes,
        "param_count": sum(p.numel() for p in model.parameters()),
        "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "batches": [],
    }
    details = {}
    for b in batches:
        summary, detail = measure(model, in_shape, classes, b)
        entry["batches"].append(summary)
        if b in SAVED_DETAIL_BATCHES and name in DETAIL_MODELS:
            details[str(b)] = detail
    return name, entry, details


def generate():
    torch.set_grad_enabled(True)
    main = {
        "generator": "validation/reference.py",
        "torch": refname.plain(torch.__version__),
        "torchvision": refname.plain(torchvision.__version__),
        "device": "cpu",
        "dtype": "float32",
        "mode": "train",
        "loss": "cross_entropy(logits, int64 class targets), mean reduction",
        "saved_bytes_definition": (
            "bytes of distinct storages held by autograd after forward+loss, before backward; "
            "excluding parameter, buffer, input and target storages"
        ),
        "models": {},
    }
    saved = {
        "generator": "validation/reference.py",
        "torch": refname.plain(torch.__version__),
        "torchvision": refname.plain(torchvision.__version__),
        "models": {},
    }
    # One process per model, two at a time (forked: torch is imported once), each on one
    # intra-op thread: what autograd saves does not depend on the threads or the process. The
    # largest models go first, so that the pool ends on small ones rather than on one process
    # alone (the files' keys are sorted: the order they finish in changes nothing).
    order = sorted(MODELS, key=lambda n: (n not in LARGEST, LARGEST.index(n) if n in LARGEST else 0))
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2, maxtasksperchild=1) as pool:
        for name, entry, details in pool.imap_unordered(_measure_model, order):
            main["models"][name] = entry
            for b, detail in details.items():
                saved["models"].setdefault(name, {})[b] = detail
    gpt2 = gpt2_param_count()
    if gpt2 is not None:
        main["models"]["gpt2"] = gpt2
    return main, saved


def gpt2_param_count():
    """param_count of GPT2LMHeadModel(GPT2Config()) if transformers is importable, else None."""
    try:
        import transformers  # noqa: F401
        from transformers import GPT2Config, GPT2LMHeadModel
    except Exception:
        return None
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(GPT2Config())
    # Tied embeddings: parameters() already yields the shared weight once.
    return {
        "transformers": transformers.__version__,
        "param_count": sum(p.numel() for p in model.parameters()),
    }


# ----------------------------------------------------------------------------------------------
# Output.


def dump_main(obj):
    return json.dumps(obj, sort_keys=True, indent=1) + "\n"


def dump_saved(obj):
    """Indented like dump_main, but one saved-tensor record per line (keeps the file small)."""
    lines = ["{"]
    top = sorted(k for k in obj if k != "models")
    for k in top:
        lines.append(" %s: %s," % (json.dumps(k), json.dumps(obj[k], sort_keys=True)))
    lines.append(' "models": {')
    names = sorted(obj["models"])
    for i, name in enumerate(names):
        lines.append("  %s: {" % json.dumps(name))
        batches = sorted(obj["models"][name], key=int)
        for j, b in enumerate(batches):
            recs = obj["models"][name][b]
            lines.append("   %s: [" % json.dumps(b))
            for k, r in enumerate(recs):
                sep = "," if k < len(recs) - 1 else ""
                lines.append("    " + json.dumps(r, sort_keys=True) + sep)
            lines.append("   ]" + ("," if j < len(batches) - 1 else ""))
        lines.append("  }" + ("," if i < len(names) - 1 else ""))
    lines.append(" }")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == obj
    return text


def write(out_dir):
    main, saved = generate()
    os.makedirs(out_dir, exist_ok=True)
    for fname, text in ((MAIN_FILE, dump_main(main)), (SAVED_FILE, dump_saved(saved))):
        with open(os.path.join(out_dir, fname), "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return main


def check(committed_dir):
    tmp = tempfile.mkdtemp(prefix="batchfit-reference-")
    try:
        write(tmp)
        failed = False
        for fname in (MAIN_FILE, SAVED_FILE):
            want_path = os.path.join(committed_dir, fname)
            got_path = os.path.join(tmp, fname)
            with open(got_path, encoding="utf-8") as f:
                got = f.read()
            if not os.path.exists(want_path):
                print("reference: %s is missing (regenerate with validation/reference.py)"
                      % want_path, file=sys.stderr)
                failed = True
                continue
            with open(want_path, encoding="utf-8") as f:
                want = f.read()
            if got == want:
                continue
            failed = True
            diff = list(difflib.unified_diff(
                want.splitlines(True), got.splitlines(True),
                fromfile=want_path + " (committed)", tofile=fname + " (regenerated)"))
            sys.stderr.write("reference: %s differs from a fresh run:\n" % want_path)
            limit = 200
            sys.stderr.writelines(diff[:limit])
            if len(diff) > limit:
                sys.stderr.write("... (%d more diff lines)\n" % (len(diff) - limit))
        if failed:
            return 1
        print("reference: %s and %s match a fresh run" % (MAIN_FILE, SAVED_FILE))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.join(os.path.dirname(here), "testdata", "reference")
    ap = argparse.ArgumentParser(
        description="Write CPU reference numbers (param counts, autograd saved tensors).")
    ap.add_argument("--out", default=default_out,
                    help="output directory (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and diff against --out; "
                         "exit 1 with the diff on mismatch")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.out)
    m = write(args.out)
    for name, e in m["models"].items():
        per_batch = ", ".join("B=%d %d" % (b["batch"], b["saved_bytes"])
                              for b in e.get("batches", []))
        print("%-12s params %-10d saved %s" % (name, e["param_count"], per_batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
