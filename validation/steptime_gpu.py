#!/usr/bin/env python3
"""Training step time of zoo models on one's own CUDA GPU, as calibration rows.

Times the step batchfit's step-time model predicts, for torchvision's builds
of the zoo's vision models and transformers' GPT-2, and writes the figures in
the calibration set's CSV format (testdata/throughput/README.md) with the
`batchfit estimate` command line of each run:

    python3 validation/steptime_gpu.py --gpu h200 --out testdata/throughput/own-h200.csv

The loop is timm's benchmark.py train loop (the one behind timm.csv, so the
two sets are the same measurement on different GPUs): random input already on
the GPU, the model in train mode, forward and cross-entropy under autocast
(float16, no GradScaler), backward, SGD momentum 0.9 Nesterov, zero_grad,
torch.cuda.synchronize() after every step, cudnn.benchmark on; 5 warm-up steps,
then the median of 15 timed steps (host clock around each synchronized step).
Convolutional models run NCHW and channels-last. GPT-2 runs bfloat16 autocast
with AdamW (foreach, PyTorch's default on CUDA), sequence 1024, eager and SDPA
attention. Standard library plus torch, torchvision and transformers.

At small batches (``--batch 1``, ``--gpt2-batch 1 --gpt2-seq 128``) the kernels are shorter
than the host's work to issue them and the step time is the host's: these rows test the
step-time model's host cost per op. ``--count`` profiles one more step of each run
(torch.profiler, CPU and CUDA) and adds to the notes what it issued: CUDA kernels, the
ops called from Python (aten ops at the top of the main thread's stack), and the nodes
autograd's engine ran.
"""

import argparse
import csv
import os
import statistics
import sys
import time

VISION = [
    # (zoo model, family, channels-last run too)
    ("resnet18", "resnet", True), ("resnet50", "resnet", True), ("resnet101", "resnet", True),
    ("wide_resnet50_2", "resnet", True), ("vgg16", "vgg", True), ("densenet121", "densenet", True),
    ("efficientnet_b0", "depthwise", True), ("efficientnet_b3", "depthwise", True),
    ("mobilenet_v2", "depthwise", True), ("mobilenet_v3_large", "depthwise", True),
    ("mobilenet_v3_small", "depthwise", True), ("convnext_tiny", "convnext", True),
    ("vit_b_16", "vit", False), ("vit_b_32", "vit", False), ("vit_l_16", "vit", False),
    ("swin_t", "swin", False),
]
HEADER = ["id", "source", "path", "gpu", "system", "args", "throughput", "unit", "data",
          "exact", "tf32_matmul", "software", "notes"]
WARM, TIMED = 5, 15


def timed(torch, step):
    for _ in range(WARM):
        step()
    torch.cuda.synchronize()
    ts = []
    for _ in range(TIMED):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts), max(ts)


def steps(torch, forward, held, opt):
    """The step as its four phases, and the step: the timed step, then (for
    phased) each phase alone."""
    def backward():
        held.pop("loss").backward()

    parts = [("forward", forward), ("backward", backward), ("optimizer", opt.step), ("zero_grad", opt.zero_grad)]

    def step():
        for _, fn in parts:
            fn()

    return timed(torch, step), step, parts


def phased(torch, parts):
    """Each phase's median wall time over TIMED steps, the device drained
    before and after it: at small batches, the host's time for the phase."""
    ts = {name: [] for name, _ in parts}
    for _ in range(TIMED):
        for name, fn in parts:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts[name].append(time.perf_counter() - t0)
    return "phases (each alone, device drained around it): " + ", ".join(
        "%s %.2f ms" % (name, 1e3 * statistics.median(v)) for name, v in ts.items())


def count(torch, step):
    """What one step issues, from the profiler: kernels run on the device,
    aten ops at the top of the main thread's stack, autograd engine nodes."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    kernels = top = nodes = launches = 0
    busy = 0.0
    for e in prof.events():
        dev = str(getattr(e, "device_type", "")).rsplit(".", 1)[-1]
        if dev == "CUDA":
            kernels += 1
            busy += e.time_range.elapsed_us()
        elif e.name.startswith("autograd::engine::evaluate_function"):
            nodes += 1
        elif e.name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"):
            launches += 1
        elif e.name.startswith("aten::") and e.cpu_parent is None:
            top += 1
    return ("profiled step: %d device kernels (%.2f ms of kernel time), %d launch calls, "
            "%d top-level aten ops, %d autograd nodes") % (kernels, busy / 1e3, launches, top, nodes)


def vision_row(torch, name, channels_last, batch, image):
    import torchvision
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).cuda().train()
    x = torch.randn(batch, 3, image, image, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, nesterov=True)
    loss_fn = torch.nn.CrossEntropyLoss()

    held = {}

    def forward():
        with torch.autocast("cuda", dtype=torch.float16):
            held["loss"] = loss_fn(model(x), y)

    return steps(torch, forward, held, opt)


def gpt2_row(torch, attn, batch, seq):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config()
    cfg._attn_implementation = attn
    model = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    held = {}

    def forward():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            held["loss"] = model(input_ids=ids, labels=ids).loss

    return steps(torch, forward, held, opt)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", required=True, help="batchfit's catalog name of this GPU")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--only", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--gpt2-batch", type=int, default=16)
    ap.add_argument("--gpt2-seq", type=int, default=1024)
    ap.add_argument("--count", action="store_true", help="profile one more step: kernels, ops, nodes")
    ap.add_argument("--phases", action="store_true", help="time each phase alone too")
    ap.add_argument("--nchw-only", action="store_true", help="no channels-last runs")
    args = ap.parse_args()
    import torch
    torch.backends.cudnn.benchmark = True
    name = torch.cuda.get_device_name(0)
    soft = "torch-%s-cuda-%s-cudnn-%s" % (torch.__version__, torch.version.cuda,
                                          torch.backends.cudnn.version())
    path = "validation/steptime_gpu.py"
    # batchfit's runtime profile of the running release (--torch 2.11 for 2.11.0+cu130)
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    runs = []
    for model, fam, cl in VISION:
        for fmt in (("contiguous", "channels_last") if cl and not args.nchw_only else ("contiguous",)):
            runs.append(("vision", model, fam, fmt))
    for attn in ("eager", "sdpa"):
        runs.append(("gpt2", "gpt2", "transformer", attn))
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for kind, model, fam, var in runs:
            if args.only and model not in args.only.split(","):
                continue
            try:
                if kind == "vision":
                    (med, lo, hi), step, parts = vision_row(torch, model, var == "channels_last", args.batch, args.image)
                    samples = args.batch / med
                    cmd = "%s --gpu %s --batch %d --precision 16-mixed --optimizer sgd --momentum 0.9 --image %d --torch %s" % (
                        model, args.gpu, args.batch, args.image, release)
                    if var == "channels_last":
                        cmd += " --memory-format channels_last"
                    rid = "own-%s-%s-%s-16-mixed-b%d" % (args.gpu, model, "nhwc" if var == "channels_last" else "nchw", args.batch)
                    unit = "images/s"
                    loop = "timm benchmark.py's train loop: float16 autocast, no GradScaler, SGD momentum 0.9 Nesterov"
                else:
                    bs, seq = args.gpt2_batch, args.gpt2_seq
                    (med, lo, hi), step, parts = gpt2_row(torch, var, bs, seq)
                    samples = bs / med
                    cmd = "gpt2 --gpu %s --batch %d --seq %d --precision bf16-mixed --optimizer adamw --attention %s --torch %s" % (
                        args.gpu, bs, seq, "eager" if var == "eager" else "auto", release)
                    rid = "own-%s-gpt2-%s-bf16-mixed-b%d-s%d" % (args.gpu, var, bs, seq)
                    unit = "sequences/s"
                    loop = "GPT2LMHeadModel(GPT2Config()) attn_implementation %s, bfloat16 autocast, AdamW (foreach), labels = inputs" % var
                notes = "family %s; %s; step %.2f ms median of %d (min %.2f, max %.2f) after %d warm-up; %s" % (
                    fam, loop, med * 1e3, TIMED, lo * 1e3, hi * 1e3, WARM, name)
                if args.phases:
                    notes += "; " + phased(torch, parts)
                if args.count:
                    notes += "; " + count(torch, step)
                w.writerow([rid, "own measurement", path, args.gpu, name, cmd, "%.2f" % samples, unit,
                            "synthetic (random tensors on the GPU)", "true", "false", soft, notes])
                f.flush()
                print("%-48s %8.2f ms  %9.1f %s" % (rid, med * 1e3, samples, unit), flush=True)
            except Exception as e:  # noqa: BLE001 - one model's failure is printed, the rest run
                print("%s %s: %r" % (model, var, e), file=sys.stderr, flush=True)
            step = parts = None
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
