"""F.normalize of an embedding (L2 norm along the features) before a
cosine classifier.

    batchfit capture examples/capture/normalize.py:make -- estimate --batch 8
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 128)
        self.head = nn.Linear(128, 10, bias=False)

    def forward(self, x):
        return self.head(F.normalize(self.fc(x), dim=1))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, 64),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
