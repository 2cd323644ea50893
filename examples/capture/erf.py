"""Elementwise ops no hand-written rule maps (torch.atan2, torch.erf,
torch.hypot, torch.logit): their rule is their derivatives.yaml entry.

    batchfit capture examples/capture/erf.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(64, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        h, g = self.fc1(x), self.fc2(x)
        a = torch.atan2(h, g)
        b = torch.hypot(torch.erf(a), g)
        return self.fc3(torch.logit(torch.sigmoid(b), eps=1e-6))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 64),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
