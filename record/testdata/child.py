# One step here, then a child process (os.system, which keeps the
# descriptors open across exec unless they are close-on-exec) that trains
# five steps of its own: only this process's step is recorded.
import os
import sys

import torch

m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.randn(2, 4)).sum().backward()
opt.step()
assert "BATCHFIT_RECORD_FD" not in os.environ
status = os.system("%s %s > /dev/null" % (sys.executable, os.path.join(os.path.dirname(__file__), "train.py")))
sys.exit(os.waitstatus_to_exitcode(status))
