# Waits for SIGTERM, which `batchfit run` must pass on, and exits 7 from
# its handler after writing the marker file named by its argument.
import signal
import sys
import time

import torch


def on_term(signum, frame):
    with open(sys.argv[1], "w") as f:
        f.write("terminated")
    sys.exit(7)


signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(60)
sys.exit(1)
