"""What real PyTorch keeps for backward after the forward pass of a
captured example, without and with torch.utils.checkpoint(use_reentrant=False)
around each repeated block: the bytes of the distinct storages autograd
holds, parameters and the batch left out (they are alive anyway).

Outside a checkpointed block, autograd keeps what each op saves
(saved_tensors_hooks sees every one). Inside, checkpoint's own hooks keep
nothing (pack returns an empty Holder) and the block's arguments are kept
by its unpack closure until backward (torch/utils/checkpoint.py,
_checkpoint_without_reentrant), so they are counted instead.

    /usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/transformer.py:make:blocks 16
    /usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/encoder.py:make:enc.layers 8
    /usr/bin/python3 capture/testdata/checkpoint_saved.py examples/capture/gru.py:make 8   # no blocks: none only
"""
import importlib.util
import sys

import torch
import torch.utils.checkpoint as cp


def load(spec):
    path, fn, attr = (spec.split(":") + [""])[:3]
    s = importlib.util.spec_from_file_location("m", path)
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return getattr(m, fn), attr


def saved(spec, batch, checkpoint):
    make, attr = load(spec)
    torch.manual_seed(0)
    d = make(batch)
    model = d["model"]
    skip = {p.data_ptr() for p in model.parameters()} | {b.data_ptr() for b in model.buffers()}
    ins = d["inputs"] if isinstance(d["inputs"], (tuple, list)) else (d["inputs"],)
    tg = d.get("targets")
    tg = () if tg is None else tg if isinstance(tg, (tuple, list)) else (tg,)
    skip |= {t.data_ptr() for t in tuple(ins) + tuple(tg)}
    held = {}

    def keep(t):
        st = t.storage()
        if st.data_ptr() not in skip:
            held[st.data_ptr()] = st.nbytes()

    def pack(t):
        keep(t)
        return t

    if checkpoint:
        blocks = model
        for a in attr.split("."):
            blocks = getattr(blocks, a)
        for blk in blocks:
            fwd = blk.forward

            def wrapped(*args, _f=fwd, **kwargs):
                for a in tuple(args) + tuple(kwargs.values()):
                    if torch.is_tensor(a):
                        keep(a)
                return cp.checkpoint(_f, *args, use_reentrant=False, **kwargs)
            blk.forward = wrapped
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*ins)
        loss = d["loss"](out, d["targets"]) if "loss" in d else out.sum()
    total = sum(held.values())
    loss.backward()
    return total


if __name__ == "__main__":
    spec, batch = sys.argv[1], int(sys.argv[2])
    for c in (False, True) if spec.count(":") > 1 else (False,):
        print("%s %d" % ("full" if c else "none", saved(spec, batch, c)))
