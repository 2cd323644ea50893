"""Layers and ops beyond the common ones: a layer norm without affine
weights, a weight-standardized 1-D convolution and a
scaled Linear (whose weights the forward computes), an argmax whose
indices gather the scores, a mask filled with a tensor made from a Python
number (as transformers' DistilBERT fills its attention scores), and an
unused parameter.

    batchfit capture examples/capture/layers.py:make -- estimate --batch 32
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CH, DEPTH, SIDE, CLASSES = 4, 4, 8, 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2 * DEPTH, CH, 3, padding=1)
        self.norm = nn.LayerNorm(CH * SIDE * SIDE, elementwise_affine=False)
        self.conv1 = nn.Conv1d(CH, CH, 3, padding=1)
        self.fc = nn.Linear(CH * SIDE * SIDE, 64)
        self.scale = nn.Parameter(torch.ones(64, 1))
        self.head = nn.Linear(64, CLASSES)
        self.unused = nn.Linear(64, 64)

    def forward(self, x):
        y = F.relu(self.conv(x.flatten(1, 2)))       # B, CH, SIDE, SIDE
        w = self.conv1.weight
        w = (w - w.mean((1, 2), keepdim=True)) / (w.std((1, 2), keepdim=True) + 1e-5)
        y = F.conv1d(y.flatten(2), w, self.conv1.bias, padding=1)   # B, CH, SIDE*SIDE
        y = self.norm(y.flatten(1))
        y = torch.tanh(F.linear(y, self.fc.weight * self.scale, self.fc.bias))
        scores = self.head(y)
        best = scores.argmax(-1, keepdim=True)       # no gradient
        low = scores.masked_fill(scores < -3.0, torch.tensor(-3.0))
        return low + 0.1 * torch.gather(scores, 1, best)


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 2, DEPTH, SIDE, SIDE),
            "targets": torch.zeros(batch_size, dtype=torch.long)}
