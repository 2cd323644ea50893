"""The CS336 language model (models/cs336.go) on the CPU, under torch 1.13 and 2.x.

Builds the course's BasicsTransformerLM from its published architecture
(pre-norm blocks of RMSNorm, causal attention with RoPE and a softmax
written with max, exp and sum, SwiGLU with SiLU as x * sigmoid(x); the loss
is -log_softmax gathered at the targets, the log-softmax written with max,
exp, sum and log), runs one forward and the loss, and counts the bytes of
the distinct storages autograd saved for backward, leaving out parameters,
buffers and the batch. TestCS336AgainstTorchCPU holds batchfit's figure to
testdata/reference/cs336-cpu.json (torch 1.13; cs336-cpu-torch2.5.json for 2.5, refname.py),
which this script writes:

    /usr/bin/python3 validation/cs336.py            # writes testdata/reference/cs336-cpu.json
    /usr/bin/python3 validation/cs336.py --check    # regenerates in memory and diffs
"""
import json
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
OUT = os.path.join(HERE, "..", "testdata", "reference", "cs336-cpu.json")

VOCAB = 10000
CASES = [  # d_model, d_ff, heads, layers, batch, seq
    (768, 3072, 12, 2, 2, 16),
    (768, 3072, 12, 1, 1, 64),
]


def rms_norm(x, w, eps=1e-5):
    in_dtype = x.dtype
    x = x.to(torch.float32)
    rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x = x * rms
    return (w * x).to(in_dtype)


def softmax(x, dim=-1):
    shifted = x - torch.max(x, dim=dim, keepdim=True)[0]
    e = torch.exp(shifted)
    return e / torch.sum(e, dim=dim, keepdim=True)


def log_softmax(x, dim=-1):
    x = x - torch.max(x, dim=dim, keepdim=True)[0]
    return x - torch.log(torch.sum(torch.exp(x), dim=dim, keepdim=True))


def linear(x, w):
    return torch.einsum("...i,oi->...o", x, w)


class Model(torch.nn.Module):
    def __init__(self, d, ff, heads, layers, seq):
        super().__init__()
        p = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        self.heads, self.dk = heads, d // heads
        self.emb = p(VOCAB, d)
        self.blocks = torch.nn.ModuleList()
        for _ in range(layers):
            blk = torch.nn.Module()
            blk.ln1, blk.ln2 = p(d), p(d)
            blk.q, blk.k, blk.v, blk.o = p(d, d), p(d, d), p(d, d), p(d, d)
            blk.w1, blk.w3, blk.w2 = p(ff, d), p(ff, d), p(d, ff)
            self.blocks.append(blk)
        self.ln_final, self.head = p(d), p(VOCAB, d)
        half = torch.arange(0, self.dk, 2) / self.dk
        ang = torch.arange(seq)[:, None] * (10000.0 ** -half)[None, :]
        self.register_buffer("table", torch.stack((torch.cos(ang), torch.sin(ang))), persistent=False)

    def rope(self, x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        cos, sin = self.table[:, : x.size(-2), :].unbind(0)
        r1 = cos * x1 - sin * x2
        r2 = sin * x1 + cos * x2
        return torch.cat((r1, r2), dim=-1)

    def attention(self, blk, x):
        b, t, d = x.shape
        split = lambda y: y.reshape(b, t, self.heads, self.dk).permute(0, 2, 1, 3)
        q = self.rope(split(linear(x, blk.q)))
        k = self.rope(split(linear(x, blk.k)))
        v = split(linear(x, blk.v))
        iota = torch.arange(t)
        mask = iota[:, None] >= iota[None, :]
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.dk)
        scores = torch.where(mask, scores, float("-inf"))
        out = torch.einsum("bhqk,bhkd->bhqd", softmax(scores), v)
        out = out.permute(0, 2, 1, 3).reshape(b, t, d)
        return linear(out, blk.o)

    def forward(self, ids):
        x = self.emb[ids, :]
        for blk in self.blocks:
            x = x + self.attention(blk, rms_norm(x, blk.ln1))
            h = rms_norm(x, blk.ln2)
            a = linear(h, blk.w1)
            x = x + linear(a * torch.sigmoid(a) * linear(h, blk.w3), blk.w2)
        return linear(rms_norm(x, self.ln_final), self.head)


def wrapped_scalar(t):
    """A Python number that an op wrapped as a 0-dim CPU double tensor (x / 8.0): it is
    not on the device, as in reference.py."""
    return t.dim() == 0 and t.dtype == torch.float64


def storage(t):
    if hasattr(t, "untyped_storage"):  # 2.x: TypedStorage is deprecated
        st = t.untyped_storage()
        return st.data_ptr(), st.nbytes()
    return t.storage().data_ptr(), t.storage().size() * t.element_size()


def measure(d, ff, heads, layers, batch, seq):
    torch.manual_seed(0)
    model = Model(d, ff, heads, layers, seq)
    ids = torch.randint(0, VOCAB, (batch, seq))
    targets = torch.randint(0, VOCAB, (batch, seq))
    saved = {}

    def pack(t):
        if wrapped_scalar(t):
            return t
        ptr, n = storage(t)
        saved[ptr] = n
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(ids)
        loss = torch.mean(torch.gather(-log_softmax(logits), -1, targets.unsqueeze(-1)))
    skip = {storage(t)[0] for t in list(model.parameters()) + list(model.buffers()) + [ids, targets]}
    params = sum(p.numel() for p in model.parameters())
    return {"d_model": d, "d_ff": ff, "heads": heads, "layers": layers, "batch": batch, "seq": seq,
            "param_count": params, "saved_bytes": sum(n for p, n in saved.items() if p not in skip)}


def generate():
    import refname
    return {"torch": refname.plain(torch.__version__), "cases": [measure(*c) for c in CASES]}


def main():
    import step
    # the file's keys keep the order they are made in (no sort_keys)
    return step.one_file_main(__doc__, OUT, generate, dump=lambda d: json.dumps(d, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
