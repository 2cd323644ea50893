"""A model written the way scratch code is: in-place tensor methods on
activations (clamp_min_, exp_, abs_, pow_, masked_fill_, F.leaky_relu_,
t_), a stop-gradient target made with detach, and a floor division on it,
under a loss summed from three of torch.nn.functional's (cross-entropy,
smooth L1 and binary cross-entropy with logits).
Autograd keeps, for each in-place op whose formula reads its input, a copy
of the input taken before the write, and the output itself where the
formula reads the result.

    batchfit capture examples/capture/inplace_ops.py:make -- estimate --batch 64
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, CLASSES = 64, 10


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(DIM, DIM)
        self.fc2 = nn.Linear(DIM, DIM)

    def forward(self, x):
        h = self.fc1(x)
        h.clamp_min_(-2.0)            # keeps h as it was
        g = self.fc2(x).mul(0.1)
        g.exp_()                      # keeps its result
        h = h * g
        h.abs_().pow_(0.5)            # each keeps a copy of its input
        h.masked_fill_(h > 3.0, 0.0)  # keeps the mask
        return F.leaky_relu_(h + x, 0.1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.proj = nn.Linear(DIM, DIM)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        h = self.blocks(x)
        # a stop-gradient branch: nothing reads it for backward
        target = torch.floor_divide(h.detach(), 0.5)
        w = self.proj.weight.clone().t_()   # in place on a copy of the weight
        h = h @ w + 0.01 * target
        return self.head(h)


def loss(logits, targets):
    return (F.cross_entropy(logits, targets)
            + 0.1 * F.smooth_l1_loss(logits, torch.zeros_like(logits))
            + F.binary_cross_entropy_with_logits(logits[:, 0], targets.float()))


def make(batch_size):
    return {"model": Net(), "inputs": torch.randn(batch_size, DIM),
            "targets": torch.zeros(batch_size, dtype=torch.long), "loss": loss}
