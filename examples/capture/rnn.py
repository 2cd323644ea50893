"""A recurrent classifier with its time loop in Python: an Elman cell made of
two nn.Linear layers and tanh, the hidden state carried from step to step,
the last state classified.

    batchfit capture examples/capture/rnn.py:make -- maxbatch --gpu t4
"""
import torch
import torch.nn as nn

FEATURES, HIDDEN, STEPS, CLASSES = 32, 128, 12, 10


class RNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(FEATURES, HIDDEN)
        self.rec = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.out = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        h = x.new_zeros(x.shape[0], HIDDEN)
        for t in range(x.shape[1]):
            h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
        return self.out(h)


def make(batch_size):
    return {"model": RNN(),
            "inputs": torch.randn(batch_size, STEPS, FEATURES),
            "targets": torch.zeros(batch_size, dtype=torch.long)}
