#!/usr/bin/env python3
"""The host's cost of a convolution and a batch norm on a CUDA GPU, by memory format.

dispatch_cpu.py --device cuda times each op once, on a tiny NCHW tensor. A
convolution's host work depends on which library runs it: cuDNN's (its v8
API builds, caches and executes an engine plan per call, Conv_v8.cpp) or
PyTorch's own depthwise kernels (conv_depthwise2d), and which one runs
depends on the memory format and the shape (ConvParams::use_cudnn_depthwise,
aten/src/ATen/native/Convolution.cpp). The same holds for batch norm
(cuDNN's spatial or persistent kernels). This times, with tensors small
enough that the device waits for the host, float16 under autocast as the
step-time runs use, each case's forward alone (under no_grad) and its
forward and backward (the backward of y.sum()), in NCHW and channels-last:

    python3 validation/host_conv_gpu.py --out FILE

cudnn.benchmark on; 30 warm-up calls (the benchmark's search happens there),
then the median of 7 timings of 200 calls each, the device drained at the
end of each timing; the figure is µs per call. An elementwise add is timed
the same way as the floor every op pays. Standard library plus torch.
"""

import argparse
import json
import statistics
import sys
import time

CALLS, REPEATS, WARM = 200, 7, 30


def timed(torch, fn):
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) / CALLS)
    return round(statistics.median(ts) * 1e6, 2)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    torch.backends.cudnn.benchmark = True
    dev = "cuda"
    # (name, channels in, channels out, kernel, stride, groups)
    convs = [
        ("conv3x3", 64, 64, 3, 1, 1),
        ("conv1x1", 64, 256, 1, 1, 1),
        ("depthwise3x3", 96, 96, 3, 1, 96),
        ("depthwise3x3-s2", 96, 96, 3, 2, 96),
        ("depthwise5x5", 96, 96, 5, 1, 96),
        ("depthwise7x7", 96, 96, 7, 1, 96),
    ]
    out = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "calls": CALLS, "repeats": REPEATS,
           "input": "batch 2, 14x14 pixels; float32 weights, float16 autocast", "cases": {}}
    a = torch.randn(2, 96, 14, 14, device=dev)
    b = torch.randn(2, 96, 14, 14, device=dev)
    out["cases"]["add"] = {"forward": timed(torch, lambda: torch.add(a, b))}
    for fmt in ("nchw", "nhwc"):
        mf = torch.channels_last if fmt == "nhwc" else torch.contiguous_format
        for name, cin, cout, k, s, g in convs:
            x = torch.randn(2, cin, 14, 14, device=dev).contiguous(memory_format=mf).requires_grad_()
            w = torch.randn(cout, cin // g, k, k, device=dev).contiguous(memory_format=mf).requires_grad_()

            def fwd():
                with torch.no_grad(), torch.autocast(dev, dtype=torch.float16):
                    F.conv2d(x, w, stride=s, padding=k // 2, groups=g)

            def step():
                with torch.autocast(dev, dtype=torch.float16):
                    y = F.conv2d(x, w, stride=s, padding=k // 2, groups=g)
                y.sum().backward()

            out["cases"]["%s-%s" % (name, fmt)] = {"forward": timed(torch, fwd), "forward_backward": timed(torch, step)}
        x = torch.randn(2, 96, 14, 14, device=dev, dtype=torch.float16).contiguous(memory_format=mf).requires_grad_()
        bn = torch.nn.BatchNorm2d(96).to(dev).train()

        def bnf():
            with torch.no_grad():
                bn(x)

        def bns():
            bn(x).sum().backward()

        out["cases"]["batch_norm-%s" % fmt] = {"forward": timed(torch, bnf), "forward_backward": timed(torch, bns)}
        # the backward of y.sum() alone: what each forward_backward pays besides its op
        y0 = torch.randn(2, 96, 14, 14, device=dev, requires_grad=True)
        out["cases"]["sum-backward-%s" % fmt] = {"forward_backward": timed(torch, lambda: y0.sum().backward())}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    for k, v in out["cases"].items():
        print("%-24s %s" % (k, "  ".join("%s %.1f us" % kv for kv in v.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
