"""A decoder-only transformer written from scratch: einsum projections and
attention scores, a hand-written softmax (max, exp, sum, div), a causal mask,
LayerNorm, a GELU MLP, and cross-entropy over the vocabulary.

    batchfit capture examples/capture/transformer.py:make -- estimate --batch 32
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ = 512, 64, 4, 2, 32


def softmax(x, dim):
    x = x - x.max(dim=dim, keepdim=True).values
    e = x.exp()
    return e / e.sum(dim=dim, keepdim=True)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wqkv = nn.Parameter(torch.randn(3, DIM, DIM) * DIM ** -0.5)
        self.wo = nn.Parameter(torch.randn(DIM, DIM) * DIM ** -0.5)
        self.register_buffer("mask", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), 1), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = torch.einsum("bsd,tde->tbse", x, self.wqkv)
        q = q.reshape(b, s, HEADS, d // HEADS)
        k = k.reshape(b, s, HEADS, d // HEADS)
        v = v.reshape(b, s, HEADS, d // HEADS)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * (d // HEADS) ** -0.5
        scores = scores.masked_fill(self.mask[:s, :s], -1e9)
        p = softmax(scores, -1)
        o = torch.einsum("bhqk,bkhd->bqhd", p, v).reshape(b, s, d)
        return torch.einsum("bsd,de->bse", o, self.wo)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(DIM)
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def make(batch_size):
    ids = torch.zeros(batch_size, SEQ, dtype=torch.long)
    return {"model": Decoder(), "inputs": ids, "targets": ids.clone(), "loss": loss}
