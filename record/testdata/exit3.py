import sys
import torch

sys.exit(3)
