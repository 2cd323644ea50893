# A library that asks whether torch is installed before the script
# imports it (transformers does this): the recorder must still hook torch.
import importlib.util

assert importlib.util.find_spec("torch") is not None
import torch

m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(2):
    m(torch.randn(5, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
