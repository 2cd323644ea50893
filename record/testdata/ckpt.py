# Activation checkpointing: backward reruns each block's forward, which is
# not a micro-batch; three steps of one forward pass each.
import torch
from torch.utils.checkpoint import checkpoint

blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()) for _ in range(4))
opt = torch.optim.SGD(blocks.parameters(), lr=0.1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = blocks

    def forward(self, x):
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x


net = Net()
for _ in range(3):
    net(torch.randn(6, 8, requires_grad=True)).sum().backward()
    opt.step()
    opt.zero_grad()
