"""A residual MLP that works in place: nn.ReLU(inplace=True), a scaling
out.mul_(0.5), out += identity, and out.relu_().

    batchfit capture examples/capture/inplace.py:make -- estimate --batch 256
"""
import torch
import torch.nn as nn

DIM, CLASSES = 256, 10


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, DIM)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(DIM, DIM)

    def forward(self, x):
        out = self.act(self.fc1(x))
        out = self.fc2(out)
        out.mul_(0.5)
        out += x
        return out.relu_()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block(), Block())
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        return self.head(self.blocks(x))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, DIM), "targets": torch.zeros(batch_size, dtype=torch.long)}
