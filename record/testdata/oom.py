# An out-of-memory error, as PyTorch ≥ 2.1 words it, raised during a step
# and re-raised by the framework as the cause of another error.
import torch

m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.randn(2, 4)).sum().backward()
opt.step()
MSG = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.23 GiB is free. "
       "Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 74.10 GiB is allocated "
       "by PyTorch, and 3.12 GiB is reserved by PyTorch but unallocated.")
try:
    raise RuntimeError(MSG)
except RuntimeError as e:
    raise ValueError("the training loop failed") from e
