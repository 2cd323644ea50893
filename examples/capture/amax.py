"""torch.amax over time (max pooling of a sequence's features).

    batchfit capture examples/capture/amax.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(torch.amax(self.fc(x), dim=1))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 16, 32),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
