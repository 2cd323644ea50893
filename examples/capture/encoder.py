"""nn.TransformerEncoder (post-norm layers, ReLU MLP, dropout) under a
classification head: the layers are the blocks checkpointing wraps.

    batchfit capture examples/capture/encoder.py:make -- estimate --batch 8 --checkpoint full
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, HEADS, LAYERS, SEQ, CLASSES = 64, 4, 3, 32, 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(DIM, HEADS, dim_feedforward=4 * DIM, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        return self.head(self.enc(x).mean(1))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, SEQ, DIM),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": F.cross_entropy}
