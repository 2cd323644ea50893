#!/usr/bin/env python3
"""The kernels of one training step, each with the call that issued it.

steptime_gpu.py times the steps behind own-h200.csv; this profiles one more
step of the same runs (its loop, its models, batch 256, float16 autocast; GPT-2
under bfloat16 autocast with AdamW) and writes every CUDA kernel the step ran
with the op that launched it and that op's ancestors: the aten op inside cuDNN's
or cuBLAS's call, the op the model called, the autograd node of the backward.
That is what the step-time model's kernel rules are read against: how many
kernels cuDNN runs per convolution of an NCHW tensor and of a channels-last
one, and which (the layout transposes, the convolution, the reductions of a
weight gradient); the time of each GEMM against its FLOPs (the GEMM share of
the dense peak a GPU reaches); the time of each elementwise and normalization
kernel against its bytes (the bandwidth share).

    python3 validation/kernels_gpu.py --gpu h200 --out DIR [--only resnet50,...] [--deadline 300]

One file per run, DIR/<run>.json.gz:
  {"run", "model", "layout", "batch", "gpu", "device", "software",
   "step_ms": median of the timed steps (steptime_gpu.py's timing),
   "device_kernels", "device_us": every CUDA kernel the profiled step ran,
   "attributed_kernels", "attributed_us": those linked to an op,
   "strings": [names], "ops": [[name, chain, shapes]], "kernels": [[name, op, us]]}
where an op's name and its chain (its ancestors, innermost first, up to the
root of its thread) are indexes into strings, its shapes the profiler's input
shapes, and each kernel names its own string, the op (an index into ops) that
launched it and its duration in microseconds. Kernels are linked the way
torch.profiler links them (the CUDA runtime call's correlation id to the
innermost op open on the launching thread).
Standard library plus torch, torchvision and transformers.
"""

import argparse
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import steptime_gpu  # noqa: E402  (the same models, loop and timing)

# The outliers of §4.4 first (ResNet-18's NCHW run, DenseNet, Swin, the
# depthwise networks in both layouts), with their controls.
RUNS = [
    ("resnet50", "nchw"), ("resnet50", "nhwc"), ("resnet18", "nchw"), ("resnet18", "nhwc"),
    ("densenet121", "nchw"), ("densenet121", "nhwc"),
    ("mobilenet_v3_large", "nchw"), ("mobilenet_v3_large", "nhwc"),
    ("efficientnet_b0", "nchw"), ("efficientnet_b0", "nhwc"),
    ("swin_t", "nchw"), ("vit_b_16", "nchw"), ("gpt2", "sdpa"),
    ("convnext_tiny", "nchw"), ("convnext_tiny", "nhwc"), ("vgg16", "nchw"), ("vgg16", "nhwc"),
]


def profiled(torch, step):
    """One step under torch.profiler (CPU and CUDA, input shapes), the device
    drained before and after."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    return prof


def table(prof):
    strings, index = [], {}

    def s(name):
        if name not in index:
            index[name] = len(strings)
            strings.append(name)
        return index[name]

    ops, kernels = [], []
    dev_n, dev_us = 0, 0.0
    for e in prof.events():
        if str(getattr(e, "device_type", "")).rsplit(".", 1)[-1] == "CUDA":
            dev_n += 1
            dev_us += e.time_range.elapsed_us()
            continue
        ks = getattr(e, "kernels", None) or []
        if not ks:
            continue
        chain, p = [], e.cpu_parent
        while p is not None:
            chain.append(s(p.name))
            p = p.cpu_parent
        shapes = [list(x) if isinstance(x, (list, tuple)) else x for x in (e.input_shapes or [])]
        oi = len(ops)
        ops.append([s(e.name), chain, shapes])
        for k in ks:
            kernels.append([s(k.name), oi, round(float(k.duration), 3)])
    att_us = sum(k[2] for k in kernels)
    return {"device_kernels": dev_n, "device_us": round(dev_us, 1),
            "attributed_kernels": len(kernels), "attributed_us": round(att_us, 1),
            "strings": strings, "ops": ops, "kernels": kernels}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", required=True, help="batchfit's catalog name of this GPU")
    ap.add_argument("--out", required=True, help="directory for one .json.gz per run")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--gpt2-batch", type=int, default=16)
    ap.add_argument("--gpt2-seq", type=int, default=1024)
    ap.add_argument("--only", default="", help="comma-separated runs, model or model:layout")
    ap.add_argument("--deadline", type=float, default=0, help="seconds; start no run after it")
    ap.add_argument("--trace", default="resnet50:nchw,resnet50:nhwc",
                    help="runs whose Chrome trace is kept too (model:layout, comma-separated)")
    args = ap.parse_args()
    import torch
    torch.backends.cudnn.benchmark = True
    steptime_gpu.TIMED = 8
    os.makedirs(args.out, exist_ok=True)
    soft = "torch-%s-cuda-%s-cudnn-%s" % (torch.__version__, torch.version.cuda,
                                          torch.backends.cudnn.version())
    only = [x for x in args.only.split(",") if x]
    traces = set(x for x in args.trace.split(",") if x)
    t0 = time.time()
    for model, layout in RUNS:
        run = "%s:%s" % (model, layout)
        if only and model not in only and run not in only:
            continue
        if args.deadline and time.time() - t0 > args.deadline:
            print("%s: skipped (deadline)" % run, flush=True)
            continue
        ts = time.time()
        step = None
        try:
            if model == "gpt2":
                (med, _, _), step, _ = steptime_gpu.gpt2_row(torch, layout, args.gpt2_batch, args.gpt2_seq)
                batch = args.gpt2_batch
            else:
                (med, _, _), step, _ = steptime_gpu.vision_row(torch, model, layout == "nhwc", args.batch, 224)
                batch = args.batch
            prof = profiled(torch, step)
            doc = {"run": run, "model": model, "layout": layout, "batch": batch, "gpu": args.gpu,
                   "device": torch.cuda.get_device_name(0), "software": soft,
                   "step_ms": round(med * 1e3, 3)}
            if model == "gpt2":
                doc["seq"] = args.gpt2_seq
            doc.update(table(prof))
            name = run.replace(":", "-")
            with gzip.open(os.path.join(args.out, name + ".json.gz"), "wt", encoding="utf-8") as f:
                json.dump(doc, f, separators=(",", ":"))
            if run in traces:
                tmp = os.path.join(args.out, name + ".trace.json")
                prof.export_chrome_trace(tmp)
                with open(tmp, "rb") as src, gzip.open(tmp + ".gz", "wb") as dst:
                    dst.write(src.read())
                os.remove(tmp)
            print("%-28s step %8.2f ms  %5d kernels %9.1f us  attributed %5d %9.1f us  (%.0f s)" % (
                run, med * 1e3, doc["device_kernels"], doc["device_us"], doc["attributed_kernels"],
                doc["attributed_us"], time.time() - ts), flush=True)
        except Exception as e:  # noqa: BLE001 - one run's failure is printed, the rest go on
            print("%s: %r" % (run, e), file=sys.stderr, flush=True)
        step = prof = None
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
