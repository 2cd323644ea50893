#!/usr/bin/python3
"""ONNX test files for batchfit's onnx package, exported from real PyTorch.

Run with the interpreter that has torch 1.13, torchvision 0.14 and onnx (Debian:
/usr/bin/python3 with python3-torch, python3-torchvision, python3-onnx):

    /usr/bin/python3 validation/onnx/export.py            # writes testdata/onnx/
    /usr/bin/python3 validation/onnx/export.py --out DIR  # writes into DIR
    /usr/bin/python3 validation/onnx/export.py --check    # regenerates in a temp dir, diffs

What it writes
--------------
``testdata/onnx/<name>.onnx`` for each model below, exported with

    torch.onnx.export(model, x, f, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, dynamic_axes={input: {0: "batch"}, ...})

Training-mode export keeps BatchNormalization in its training form (training_mode=1, the
running statistics as extra outputs) and keeps Dropout nodes with their ratio; an eval-mode
export would fold both away. Every model here exports in training mode with torch 1.13; should
one fail to, the script falls back to an eval-mode export and records that in the file's
``doc_string``.

The weights are stripped so the committed files stay small (each well under 200 KB):

* ``mlp.onnx`` is exported with ``export_params=False``: there are no initializers at all, the
  parameters are graph inputs with their shapes (the "weights missing" case).
* every other file keeps its initializers' names, dims and data types, but each floating-point
  initializer's data is declared as external (``data_location: EXTERNAL``) in a file that does
  not exist (``location: <name>.weights.bin``, never written). Integer initializers (shape
  constants, the position-id buffer) stay inline: they are tiny and shape inference needs them.

``testdata/onnx/torch-cpu.json`` holds, for every exported model, what PyTorch itself reports
on the CPU in train mode: the parameter count and the bytes autograd holds saved at the end of
the forward pass plus the cross-entropy loss (validation/reference.py's ``measure``: storages
deduplicated; parameters, buffers, input and targets excluded), at batch sizes 1 and 2.

``testdata/onnx/zoo/`` holds every torchvision model of the zoo (validation/reference.py's list)
exported the same way in training mode at batch 2, 32 px (VGG at 224 px: torch 1.13 exports
``adaptive_avg_pool2d`` only when the output size divides the input's), opset 14, weights
stripped; ``zoo/exports.json`` records each one's image side and node count, or the exporter's
refusal (torch 1.13 cannot export the in-place ``bernoulli_`` of torchvision's stochastic depth
in training mode, so EfficientNet, ConvNeXt and Swin are refused). The Go test
(validation/onnx_step_test.go) imports each and requires the step peaks of the zoo's builder.

Everything is deterministic (fixed seeds, no timestamps, stripped data), so ``--check`` can diff
a fresh run against the committed files byte for byte.

Models
------
* ``simpleconv``, ``mlp``: validation/reference.py's definitions (the seed networks).
* ``resnet18``, ``mobilenet_v3_small``: torchvision 0.14, ``weights=None``.
* ``tinyformer``: a 2-layer pre-LN transformer encoder written with plain modules (token and
  position nn.Embedding, a position-id buffer, fused qkv Linear + split, matmul/softmax
  attention with dropout, GELU MLP), classifying from token 0. Opset 14 (LayerNorm is exported
  decomposed into ReduceMean/Sub/Pow/Sqrt/Div/Mul/Add), batch and sequence axes dynamic.
* ``tinyformer17``: the same at opset 17 (LayerNormalization nodes), only the batch axis
  dynamic (the exported sequence length, 16, is baked in).
* ``convbn``: two bias-free 3×3 convolutions, each followed by BatchNorm2d and ReLU, a max pool
  and a Linear classifier, at 32 px. ``eval/convbn.onnx`` is the same module exported with
  torch.onnx.export's defaults (eval mode): the BatchNorms are folded into the convolutions,
  whose new weights and biases are named ``onnx::Conv_<n>`` (see ``EVAL_DIR``).
"""

import argparse
import difflib
import io
import json
import math
import multiprocessing
import os
import shutil
import sys
import tempfile

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import reference  # noqa: E402  (validation/reference.py: the seed models and the measurement)

SEED = 0
BATCHES = (1, 2)
EXPORT_BATCH = 2
SEQ = 16
MEASURED_FILE = "torch-cpu.json"


class Block(nn.Module):
    """Pre-LN transformer block: attention by matmul/softmax, GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.drop = nn.Dropout(0.1)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        B, L, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q = q.view(B, L, self.heads, hd).transpose(1, 2)
        k = k.view(B, L, self.heads, hd).transpose(1, 2)
        v = v.view(B, L, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = self.drop(att.softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(B, L, D)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyFormer(nn.Module):
    def __init__(self, vocab=1000, d=64, heads=4, layers=2, positions=32, classes=10):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(positions, d)
        self.register_buffer("position_ids", torch.arange(positions).unsqueeze(0))
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, ids):
        L = ids.shape[1]
        x = self.tok(ids) + self.pos(self.position_ids[:, :L])
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x)[:, 0])


def convbn(classes=10):
    """Two bias-free convolutions each followed by BatchNorm2d: what eval-mode export folds."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 16 * 16, classes))


def image(shape):
    return lambda b: torch.randn(b, *shape)


def tokens(b):
    return torch.randint(0, 1000, (b, SEQ), dtype=torch.int64)


# name -> (builder, example input, classes, opset, dynamic axes of the input, weights)
# weights: "external" (declared external, data dropped) or "missing" (export_params=False).
MODELS = {
    "simpleconv": (reference.simpleconv, image((3, 32, 32)), 10, 14, {0: "batch"}, "external"),
    "mlp": (lambda: reference.mlp(4, 1024), image((784,)), 10, 14, {0: "batch"}, "missing"),
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), image((3, 224, 224)), 1000, 14,
                 {0: "batch"}, "external"),
    "mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(weights=None),
                           image((3, 224, 224)), 1000, 14, {0: "batch"}, "external"),
    "convbn": (convbn, image((3, 32, 32)), 10, 14, {0: "batch"}, "external"),
    "tinyformer": (TinyFormer, tokens, 10, 14, {0: "batch", 1: "sequence"}, "external"),
    "tinyformer17": (TinyFormer, tokens, 10, 17, {0: "batch"}, "external"),
}


# The eval-mode set (testdata/onnx/eval/): models of MODELS exported the way torch.onnx.export
# does by default (training=TrainingMode.EVAL, do_constant_folding=True), which folds each
# BatchNorm into the convolution before it (torch/onnx/utils.py _model_to_graph runs
# _C._jit_pass_onnx_eval_peephole in eval mode; its fuseConvBatchNorm gives the folded weight
# and bias new names, onnx::Conv_<n>). Their training figures are those of torch-cpu.json for
# the same name: what the module really saves, which the folded file does not show.
EVAL_DIR = "eval"
EVAL_MODELS = ("convbn",)


def export_eval(name):
    """The ONNX ModelProto of name exported with torch.onnx.export's defaults, weights stripped."""
    _, example, _, opset, axes, _ = MODELS[name]
    model = build(name).eval()
    torch.manual_seed(SEED)
    x = example(EXPORT_BATCH)
    f = io.BytesIO()
    torch.onnx.export(model, x, f, opset_version=opset, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": axes, "logits": {0: "batch"}})
    m = onnx.load_from_string(f.getvalue())
    onnx.checker.check_model(m)
    strip(m, name)
    m.doc_string = ("exported by validation/onnx/export.py (torch %s, torchvision %s); eval-mode export "
                    "(torch.onnx.export's defaults: BatchNorm folded into the convolutions); "
                    "floating-point initializers declared external, data not shipped"
                    % (torch.__version__, torchvision.__version__))
    return m


# The zoo set (testdata/onnx/zoo/): every torchvision model of validation/reference.py,
# exported in training mode at batch 2 with the image side validation/step.py measures batch 2
# at (32 px), so that the Go test can hold the import to PyTorch's own step timeline too. VGG
# needs 224 px: torch 1.13 exports adaptive_avg_pool2d only when the output size divides the
# input's. A model the exporter refuses is listed in zoo/exports.json with the exporter's
# message, not left out silently.
ZOO_DIR = "zoo"
ZOO_INDEX = "exports.json"
ZOO_IMAGE = 32
ZOO_IMAGE_OVERRIDE = {n: 224 for n in ("vgg11", "vgg13", "vgg16", "vgg19",
                                       "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn")}


def zoo_names():
    return [n for n in reference.MODELS if n not in reference.NOT_TORCHVISION]


def export_zoo(name):
    """(ModelProto or None, index entry) for one torchvision model of the zoo set."""
    image = ZOO_IMAGE_OVERRIDE.get(name, ZOO_IMAGE)
    torch.manual_seed(SEED)
    kw = {"image_size": image} if name.startswith("vit_") else {}
    model = getattr(torchvision.models, name)(weights=None, **kw).train()
    torch.manual_seed(SEED)
    x = torch.randn(EXPORT_BATCH, 3, image, image)
    f = io.BytesIO()
    entry = {"image": image, "batch": EXPORT_BATCH, "opset": 14}
    try:
        torch.onnx.export(model, x, f, training=torch.onnx.TrainingMode.TRAINING, opset_version=14,
                          do_constant_folding=False, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    except Exception as e:  # the exporter's refusal is the data
        msg = str(e).split("\n")[0]
        entry["refused"] = "%s: %s" % (type(e).__name__, msg.split(" Please feel free")[0])
        return None, entry
    m = onnx.load_from_string(f.getvalue())
    onnx.checker.check_model(m)
    strip(m, name)
    m.doc_string = ("exported by validation/onnx/export.py (torch %s, torchvision %s); training-mode "
                    "export at %d px; floating-point initializers declared external, data not shipped"
                    % (torch.__version__, torchvision.__version__, image))
    entry["nodes"] = len(m.graph.node)
    return m, entry


def _export_zoo_bytes(name):
    torch.set_num_threads(1)
    m, entry = export_zoo(name)
    return name, (m.SerializeToString() if m is not None else None), entry


def build(name):
    builder = MODELS[name][0]
    torch.manual_seed(SEED)
    return builder().train()


def export(name):
    """The ONNX ModelProto of name, weights stripped."""
    _, example, _, opset, axes, weights = MODELS[name]
    model = build(name)
    torch.manual_seed(SEED)
    x = example(EXPORT_BATCH)
    in_name = "input_ids" if x.dtype == torch.int64 else "input"
    note = "exported by validation/onnx/export.py (torch %s, torchvision %s)" % (
        torch.__version__, torchvision.__version__)
    f = io.BytesIO()
    kwargs = dict(opset_version=opset, do_constant_folding=False, input_names=[in_name],
                  output_names=["logits"], dynamic_axes={in_name: axes, "logits": {0: "batch"}},
                  export_params=(weights != "missing"))
    try:
        torch.onnx.export(model, x, f, training=torch.onnx.TrainingMode.TRAINING, **kwargs)
        note += "; training-mode export"
    except Exception as e:  # fall back to eval mode, and say so in the file
        f = io.BytesIO()
        torch.onnx.export(model.eval(), x, f, training=torch.onnx.TrainingMode.EVAL, **kwargs)
        note += "; eval-mode export (training-mode export failed: %s)" % type(e).__name__
    m = onnx.load_from_string(f.getvalue())
    onnx.checker.check_model(m)  # before stripping: the checker looks for external files
    if weights == "external":
        strip(m, name)
        note += "; floating-point initializers declared external, data not shipped"
    else:
        note += "; exported without parameters (export_params=False)"
    m.doc_string = note
    return m


FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
               onnx.TensorProto.DOUBLE}


def strip(m, name):
    """Declare every floating-point initializer external (a file never written), keeping dims."""
    offset = 0
    location = name + ".weights.bin"
    for t in m.graph.initializer:
        if t.data_type not in FLOAT_TYPES:
            continue
        n = 1
        for d in t.dims:
            n *= d
        size = n * {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.DOUBLE: 8}.get(t.data_type, 2)
        t.ClearField("raw_data")
        t.ClearField("float_data")
        t.ClearField("double_data")
        t.ClearField("int32_data")
        t.data_location = onnx.TensorProto.EXTERNAL
        del t.external_data[:]
        for k, v in (("location", location), ("offset", str(offset)), ("length", str(size))):
            e = t.external_data.add()
            e.key, e.value = k, v
        offset += size


def measure(name):
    builder, example, classes, _, _, _ = MODELS[name]
    model = build(name)
    entry = {"param_count": sum(p.numel() for p in model.parameters()), "batches": []}
    for b in BATCHES:
        torch.manual_seed(SEED)
        x = example(b)
        summary = measure_one(model, x, classes)
        summary["batch"] = b
        entry["batches"].append(summary)
    return entry


def measure_one(model, x, classes):
    """reference.measure, for an input tensor of any dtype."""
    shape = tuple(x.shape[1:])
    if x.dtype == torch.int64:
        # reference.measure draws float inputs; measure token models the same way, by hand.
        saved = reference.SavedRecorder()
        excluded = {reference.storage_key(p) for p in model.parameters()}
        excluded |= {reference.storage_key(b) for b in model.buffers()}
        y = torch.randint(0, classes, (x.shape[0],), dtype=torch.int64)
        excluded |= {reference.storage_key(x), reference.storage_key(y)}
        with saved.hooks():
            loss = F.cross_entropy(model(x), y)
        seen = {}
        for _, ptr, nbytes in saved.packs:
            if ptr not in excluded and ptr not in seen:
                seen[ptr] = nbytes
        del loss
        return {"saved_bytes": sum(seen.values()), "saved_storages": len(seen)}
    summary, _ = reference.measure(model, shape, classes, x.shape[0])
    return {"saved_bytes": summary["saved_bytes"], "saved_storages": summary["saved_storages"]}


def write(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    measured = {"generator": "validation/onnx/export.py", "torch": torch.__version__,
                "torchvision": torchvision.__version__, "device": "cpu", "mode": "train",
                "models": {}}
    for name in MODELS:
        m = export(name)
        data = m.SerializeToString()
        with open(os.path.join(out_dir, name + ".onnx"), "wb") as f:
            f.write(data)
        measured["models"][name] = measure(name)
        print("%-20s %7d bytes  params %d  saved %s" % (
            name, len(data), measured["models"][name]["param_count"],
            ", ".join("B=%d %d" % (b["batch"], b["saved_bytes"])
                      for b in measured["models"][name]["batches"])))
    with open(os.path.join(out_dir, MEASURED_FILE), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(measured, sort_keys=True, indent=1) + "\n")
    ev = os.path.join(out_dir, EVAL_DIR)
    os.makedirs(ev, exist_ok=True)
    for name in EVAL_MODELS:
        data = export_eval(name).SerializeToString()
        with open(os.path.join(ev, name + ".onnx"), "wb") as f:
            f.write(data)
        print("eval %-19s %7d bytes" % (name, len(data)))
    zoo = os.path.join(out_dir, ZOO_DIR)
    os.makedirs(zoo, exist_ok=True)
    index = {"generator": "validation/onnx/export.py", "torch": torch.__version__,
             "torchvision": torchvision.__version__, "models": {}}
    # Two at a time, each in a process of its own (forked, torch imported once).
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(2, maxtasksperchild=1) as pool:
        for name, data, entry in pool.imap(_export_zoo_bytes, zoo_names()):
            index["models"][name] = entry
            if data is not None:
                with open(os.path.join(zoo, name + ".onnx"), "wb") as f:
                    f.write(data)
            print("zoo %-20s %s" % (name, entry.get("refused") or "%d nodes" % entry["nodes"]))
    with open(os.path.join(zoo, ZOO_INDEX), "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(index, sort_keys=True, indent=1) + "\n")


def check(committed):
    tmp = tempfile.mkdtemp(prefix="batchfit-onnx-")
    try:
        write(tmp)
        failed = False
        subdirs = (ZOO_DIR, EVAL_DIR)
        fresh = [f for f in sorted(os.listdir(tmp)) if f not in subdirs]
        stale = []
        for d in subdirs:
            fresh += [os.path.join(d, f) for f in sorted(os.listdir(os.path.join(tmp, d)))]
            if os.path.isdir(os.path.join(committed, d)):
                stale += sorted(set(os.path.join(d, f) for f in os.listdir(os.path.join(committed, d)))
                                - set(fresh))
        for fname in stale:
            print("export: %s is no longer exported" % os.path.join(committed, fname), file=sys.stderr)
            failed = True
        for fname in fresh:
            want_path = os.path.join(committed, fname)
            with open(os.path.join(tmp, fname), "rb") as f:
                got = f.read()
            if not os.path.exists(want_path):
                print("export: %s is missing" % want_path, file=sys.stderr)
                failed = True
                continue
            with open(want_path, "rb") as f:
                want = f.read()
            if got == want:
                continue
            failed = True
            print("export: %s differs from a fresh export" % want_path, file=sys.stderr)
            if fname.endswith(".json"):
                sys.stderr.writelines(difflib.unified_diff(
                    want.decode().splitlines(True), got.decode().splitlines(True),
                    fromfile=want_path, tofile=fname + " (fresh)"))
        if failed:
            return 1
        print("export: %s matches a fresh export" % committed)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    default_out = os.path.join(os.path.dirname(os.path.dirname(HERE)), "testdata", "onnx")
    ap = argparse.ArgumentParser(description="Export the ONNX test models (weights stripped).")
    ap.add_argument("--out", default=default_out, help="output directory (default: %(default)s)")
    ap.add_argument("--check", action="store_true",
                    help="export into a temporary directory and compare with --out")
    args = ap.parse_args(argv)
    torch.set_grad_enabled(True)
    if args.check:
        return check(args.out)
    write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
