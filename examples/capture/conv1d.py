"""nn.Conv1d over a signal, pooled and classified.

    batchfit capture examples/capture/conv1d.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(4, 16, 5, padding=2)
        self.conv2 = nn.Conv1d(16, 32, 3, stride=2, padding=1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(x.mean(-1))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 4, 64),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
