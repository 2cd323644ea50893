"""torch.clamp between two layers (a hand-written ReLU6).

    batchfit capture examples/capture/clamp.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(torch.clamp(self.fc1(x), 0, 6))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 64),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
