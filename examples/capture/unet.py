"""A small U-Net: convolution, batch norm and ReLU, max-pooling down,
nearest-neighbour upsampling written with expand and reshape, skip
connections joined with torch.cat, and per-pixel cross-entropy.

    batchfit capture examples/capture/unet.py:make -- sweep --batch 8,16,32 --gpu a10
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CLASSES, SIZE = 4, 32


def block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


def up2(x):
    n, c, h, w = x.shape
    return x[:, :, :, None, :, None].expand(n, c, h, 2, w, 2).reshape(n, c, 2 * h, 2 * w)


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1, self.d2, self.mid = block(3, 16), block(16, 32), block(32, 64)
        self.u2, self.u1 = block(64 + 32, 32), block(32 + 16, 16)
        self.head = nn.Conv2d(16, CLASSES, 1)

    def forward(self, x):
        s1 = self.d1(x)
        s2 = self.d2(F.max_pool2d(s1, 2))
        m = self.mid(F.max_pool2d(s2, 2))
        y = self.u2(torch.cat([up2(m), s2], dim=1))
        y = self.u1(torch.cat([up2(y), s1], dim=1))
        return self.head(y)


def loss(logits, targets):
    return F.cross_entropy(logits.permute(0, 2, 3, 1).reshape(-1, CLASSES), targets.reshape(-1))


def make(batch_size):
    return {"model": UNet(),
            "inputs": torch.randn(batch_size, 3, SIZE, SIZE),
            "targets": torch.zeros(batch_size, SIZE, SIZE, dtype=torch.long),
            "loss": loss}
