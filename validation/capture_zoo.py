#!/usr/bin/python3
"""Capture every torchvision model of batchfit's zoo with batchfit's own
capture module (capture/bfcapture.py), at the whole-step CPU reference's
setup (validation/step.py: 32-pixel images), and the capture examples
(examples/capture/*.py), into testdata/capture/.

    /usr/bin/python3 validation/capture_zoo.py            # rewrite testdata/capture/*.bfgraph.gz
    /usr/bin/python3 validation/capture_zoo.py --check    # CI: capture into a temp dir and compare
    /usr/bin/python3 validation/capture_zoo.py --only 'resnet*' --out /tmp/x
    "$BATCHFIT_PYENV" validation/capture_zoo.py           # PyTorch 2.5: testdata/capture/torch2.5/

torch 1.13's captures are testdata/capture/NAME.bfgraph.gz; another release's go into
testdata/capture/torchX.Y/ (refname.py), held by the same tests under that release's profile.

The Go test validation/capture_test.go builds each captured graph and holds
it to the zoo's own builder: saved bytes and whole-step peaks within 0.1 %.
The files are gzip'd JSON with sorted keys and a zero gzip time stamp, so a
capture is byte-for-byte reproducible for one torch and torchvision.
"""

import argparse
import fnmatch
import gzip
import multiprocessing
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "capture"))
sys.path.insert(0, HERE)

import bfcapture  # noqa: E402
import refname  # noqa: E402

# The zoo's torchvision members (models/torchvision*.go), each built as
# step.py builds it.
MODELS = [
    "convnext_base", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201",
    "efficientnet_b0", "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small",
    "resnet101", "resnet152", "resnet18", "resnet34", "resnet50",
    "swin_t",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19", "vgg19_bn",
    "vit_b_16", "vit_b_32", "vit_l_16",
    "wide_resnet50_2",
]
IMAGE = 32
# The capture examples (examples/capture/NAME.py) that no builder covers:
# their captures are held to the whole-step CPU reference (step.py's
# capture-NAME cases).
# An entry NAME:FACTORY captures another factory of the file than make.
EXAMPLES = ["amax", "clamp", "conv1d", "customfn", "encoder", "erf", "finetune", "groupnorm", "gru", "inplace", "inplace_ops", "layers", "lstm", "normalize", "rnn",
            "transformer", "unet", "nnunet2d:make_small"]


# Published-throughput workloads that are captures (testdata/throughput
# names these files): file name -> example spec.
BENCHMARKS = {"nnunet2d-msd01": "nnunet2d.py:make"}


def factory(name):
    def make(batch_size):
        import torch
        import torchvision
        kw = {"weights": None}
        if name.startswith("vit_"):
            kw["image_size"] = IMAGE
        model = getattr(torchvision.models, name)(**kw)
        return {"model": model,
                "inputs": torch.zeros(batch_size, 3, IMAGE, IMAGE),
                "targets": torch.zeros(batch_size, dtype=torch.long)}
    return make


def jobs(out, only):
    """(spec, output path, torchvision model or None) of every capture to make."""
    todo = []
    for name in MODELS:
        if only and not fnmatch.fnmatch(name, only):
            continue
        todo.append(("torchvision:" + name, os.path.join(out, name + ".bfgraph.gz"), name))
    for entry in EXAMPLES:
        name, _, fn = entry.partition(":")
        if only and not fnmatch.fnmatch("capture-" + name, only):
            continue
        spec = os.path.join(ROOT, "examples", "capture", name + ".py") + ":" + (fn or "make")
        todo.append((spec, os.path.join(out, "capture-" + name + ".bfgraph.gz"), None))
    for name, spec in BENCHMARKS.items():
        if only and not fnmatch.fnmatch(name, only):
            continue
        todo.append((os.path.join(ROOT, "examples", "capture", spec), os.path.join(out, name + ".bfgraph.gz"), None))
    return todo


def _capture(job):
    spec, path, tv = job
    bfcapture.capture(spec, path, (2, 3), factory=factory(tv) if tv else None)
    return path


def run(out, only, procs=2):
    """Makes every capture, procs at a time: each is a capture of its own (the capture module
    runs the model on the meta device, in Python, on one core), written to its own file."""
    os.makedirs(out, exist_ok=True)
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        for _ in pool.imap_unordered(_capture, jobs(out, only)):
            pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--check", action="store_true")
    p.add_argument("--only")
    p.add_argument("--out", help="default: testdata/capture, or testdata/capture/torchX.Y for a release other than 1.13")
    a = p.parse_args()
    if a.out is None:
        import torch
        a.out = refname.capture_dir(ROOT, torch.__version__)
    if not a.check:
        run(a.out, a.only)
        return 0
    tmp = tempfile.mkdtemp()
    try:
        run(tmp, a.only)
        bad = []
        for f in sorted(os.listdir(tmp)):
            with gzip.open(os.path.join(tmp, f)) as x:
                new = x.read()
            try:
                with gzip.open(os.path.join(a.out, f)) as x:
                    old = x.read()
            except OSError:
                old = None
            if new != old:
                bad.append(f)
        if bad:
            print("capture_zoo: captures differ from %s: %s (run validation/capture_zoo.py with this interpreter and commit)"
                  % (os.path.relpath(a.out, ROOT), ", ".join(bad)))
            return 1
        print("capture_zoo: %d captures as committed" % len(os.listdir(tmp)))
        return 0
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    sys.exit(main())
