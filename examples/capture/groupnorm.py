"""nn.GroupNorm after a convolution.

    batchfit capture examples/capture/groupnorm.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.gn(self.conv(x)))
        return self.head(x.mean((2, 3)))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 3, 16, 16),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
