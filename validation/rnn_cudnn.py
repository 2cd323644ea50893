#!/usr/bin/env python3
"""What cuDNN's RNN call keeps for backward on a GPU, measured.

On a CUDA device PyTorch runs nn.LSTM / nn.GRU / nn.RNN as one call,
aten::_cudnn_rnn (aten/src/ATen/native/cudnn/RNN.cpp), whose backward
(_cudnn_rnn_backward, tools/autograd/derivatives.yaml) takes the input, the
flat weight buffer, hx, cx, the output and a "reserve" workspace of bytes that
cuDNN sizes itself (cudnnGetRNNTempSpaceSizes / cudnnGetRNNTrainingReserveSize).
The reserve's size is not written in PyTorch, so this script measures it: for
a grid of RNN shapes it runs one training-mode forward on the GPU under
torch.autograd.graph.saved_tensors_hooks and records every tensor autograd
packs (shape, dtype, storage bytes), memory_allocated before and after the
forward, and the peak during it.

    python3 validation/rnn_cudnn.py --out rnn-cudnn.json

Writes JSON with the torch, CUDA and cuDNN versions and the GPU's name.
"""

import argparse
import itertools
import json
import sys


def grid():
    for mode, hidden, layers, bidir, batch, seq, dtype in itertools.product(
            ("LSTM", "GRU", "RNN_TANH"), (64, 100, 256, 512), (1, 2), (False, True),
            (8, 32), (16, 50), ("float32", "float16")):
        yield {"mode": mode, "input": 48, "hidden": hidden, "layers": layers,
               "bidirectional": bidir, "batch": batch, "seq": seq, "dtype": dtype,
               "batch_first": False, "proj": 0}
    for proj in (32, 64):
        for layers in (1, 2):
            yield {"mode": "LSTM", "input": 48, "hidden": 256, "layers": layers,
                   "bidirectional": False, "batch": 16, "seq": 20, "dtype": "float32",
                   "batch_first": False, "proj": proj}
    for bf in (True,):
        yield {"mode": "LSTM", "input": 48, "hidden": 256, "layers": 2,
               "bidirectional": True, "batch": 16, "seq": 20, "dtype": "float32",
               "batch_first": bf, "proj": 0}


def measure(torch, c):
    dev = torch.device("cuda")
    dt = getattr(torch, c["dtype"])
    kw = dict(num_layers=c["layers"], bidirectional=c["bidirectional"],
              batch_first=c["batch_first"])
    if c["mode"] == "LSTM":
        if c["proj"]:
            kw["proj_size"] = c["proj"]
        m = torch.nn.LSTM(c["input"], c["hidden"], **kw)
    elif c["mode"] == "GRU":
        m = torch.nn.GRU(c["input"], c["hidden"], **kw)
    else:
        m = torch.nn.RNN(c["input"], c["hidden"], nonlinearity="tanh", **kw)
    m = m.to(dev, dt).train()
    shape = (c["batch"], c["seq"], c["input"]) if c["batch_first"] else (c["seq"], c["batch"], c["input"])
    x = torch.randn(shape, device=dev, dtype=dt, requires_grad=True)
    torch.cuda.synchronize()
    params = {p.untyped_storage().data_ptr() for p in m.parameters()}
    saved = []
    seen = set()

    def pack(t):
        st = t.untyped_storage()
        key = st.data_ptr()
        saved.append({"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                      "storage_bytes": st.nbytes(), "param": key in params,
                      "input": key == x.untyped_storage().data_ptr(), "dup": key in seen})
        seen.add(key)
        return t

    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = m(x)
    torch.cuda.synchronize()
    after = torch.cuda.memory_allocated()
    peak = torch.cuda.max_memory_allocated()
    y = out[0]
    r = dict(c)
    r.update({"saved": saved, "allocated_before": before, "allocated_after": after,
              "peak_forward": peak, "output_bytes": y.untyped_storage().nbytes(),
              "flat_weights": bool(getattr(m, "_flat_weights", None) is not None)})
    # the backward runs, so the grid is known to train
    y.float().sum().backward()
    torch.cuda.synchronize()
    r["peak_backward"] = torch.cuda.max_memory_allocated()
    del out, y, x, m
    torch.cuda.empty_cache()
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="rnn-cudnn.json")
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("rnn_cudnn.py needs a CUDA GPU", file=sys.stderr)
        return 2
    env = {"torch": torch.__version__, "cuda": torch.version.cuda,
           "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0)}
    rows = []
    for c in grid():
        try:
            rows.append(measure(torch, c))
        except Exception as e:  # noqa: BLE001 - recorded, the grid goes on
            rows.append(dict(c, error=repr(e)[:500]))
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"schema": "batchfit-rnn-cudnn/1", "environment": env, "rows": rows}, f,
                  indent=1, sort_keys=True)
    print("rnn_cudnn: %d rows, %d errors" % (len(rows), sum("error" in r for r in rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
