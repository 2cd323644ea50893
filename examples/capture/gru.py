"""nn.GRU over a sequence, its last hidden state classified.

    batchfit capture examples/capture/gru.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

FEAT, HIDDEN, SEQ, CLASSES = 16, 32, 8, 5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(FEAT, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        _, h = self.gru(x)
        return self.head(h[-1])


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, SEQ, FEAT),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
