"""A model with its own torch.autograd.Function: a gated activation whose
forward computes x * sigmoid(x) and saves only its input, and whose backward
recomputes the sigmoid.

    batchfit capture examples/capture/customfn.py:make -- estimate --batch 128
"""
import torch
import torch.nn as nn

DIM, CLASSES = 256, 10


class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (s * (1 + x * (1 - s)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, 4 * DIM)
        self.fc2 = nn.Linear(4 * DIM, DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        return self.head(self.fc2(Swish.apply(self.fc1(x))))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, DIM), "targets": torch.zeros(batch_size, dtype=torch.long)}
