"""nnU-Net 2D as NVIDIA's DeepLearningExamples trains it on MSD Task01
(BraTS) and benchmarks it (PyTorch/Segmentation/nnUNet, scripts/benchmark.py
--dim 2): MONAI's DynUNet with the strides and kernels nn_unet.py derives
from the 192x160 patch (five stride-2 levels, 3x3 kernels), MONAI's default
filters for 2D (32, 64, 128, 256, 512, 512), instance norm with affine
weights and in-place LeakyReLU(0.01) after every convolution, transposed
convolutions with bias to go up, no deep supervision (the benchmark does not
pass --deep_supervision), and MONAI's DiceCELoss(include_background=False,
softmax=True, to_onehot_y=True, batch=True). The input is four modalities,
the output four classes. Written with torch alone, module for module as
MONAI builds it, so that capture needs no MONAI.

    batchfit capture examples/capture/nnunet2d.py:make -- sweep --batch 32,64,128 --gpu a100-80gb --precision 16-mixed --optimizer adam --fused
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

IN, CLASSES, PATCH = 4, 4, (192, 160)
FILTERS = [32, 64, 128, 256, 512, 512]


class Basic(nn.Module):
    """MONAI's UnetBasicBlock: two convolutions without bias, each followed
    by instance norm and LeakyReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm1 = nn.InstanceNorm2d(cout, affine=True)
        self.norm2 = nn.InstanceNorm2d(cout, affine=True)
        self.lrelu = nn.LeakyReLU(0.01, inplace=True)

    def forward(self, x):
        x = self.lrelu(self.norm1(self.conv1(x)))
        return self.lrelu(self.norm2(self.conv2(x)))


class Up(nn.Module):
    """MONAI's UnetUpBlock: a transposed convolution (with bias) up, the
    skip joined along channels, then a basic block."""

    def __init__(self, cin, cout):
        super().__init__()
        self.transp_conv = nn.ConvTranspose2d(cin, cout, 2, 2, bias=True)
        self.conv_block = Basic(2 * cout, cout, 1)

    def forward(self, x, skip):
        return self.conv_block(torch.cat((self.transp_conv(x), skip), dim=1))


class DynUNet(nn.Module):
    def __init__(self):
        super().__init__()
        f = FILTERS
        self.input_block = Basic(IN, f[0], 1)
        self.downsamples = nn.ModuleList([Basic(f[i - 1], f[i], 2) for i in range(1, len(f) - 1)])
        self.bottleneck = Basic(f[-2], f[-1], 2)
        self.upsamples = nn.ModuleList([Up(f[i], f[i - 1]) for i in range(len(f) - 1, 0, -1)])
        self.output_block = nn.Conv2d(f[0], CLASSES, 1, bias=True)

    def forward(self, x):
        skips = [self.input_block(x)]
        for d in self.downsamples:
            skips.append(d(skips[-1]))
        y = self.bottleneck(skips[-1])
        for u, s in zip(self.upsamples, reversed(skips)):
            y = u(y, s)
        return self.output_block(y)


def dice_ce(logits, target):
    """MONAI's DiceCELoss as nnU-Net configures it: the Dice loss over the
    batch (batch=True) without the background channel, on softmax
    probabilities against a one-hot target, plus cross-entropy on the
    squeezed target."""
    onehot = torch.zeros_like(logits, dtype=torch.float32).scatter_(1, target, 1.0)
    probs = torch.softmax(logits, 1)
    onehot, probs = onehot[:, 1:], probs[:, 1:]
    dims = [0, 2, 3]
    inter = torch.sum(onehot * probs, dim=dims)
    denom = torch.sum(onehot, dim=dims) + torch.sum(probs, dim=dims)
    dice = torch.mean(1.0 - (2.0 * inter + 1e-5) / (denom + 1e-5))
    # F.cross_entropy(logits, target.squeeze(1)) as MONAI calls it runs
    # nll_loss2d, which PyTorch 1.13 has no meta kernel for: the same loss
    # over pixels as rows costs one copy of the four-channel logits more
    rows = logits.permute(0, 2, 3, 1).reshape(-1, CLASSES)
    return dice + F.cross_entropy(rows, target.reshape(-1))


def make(batch_size, patch=PATCH):
    h, w = patch
    return {"model": DynUNet(),
            "inputs": torch.randn(batch_size, IN, h, w),
            "targets": torch.zeros(batch_size, 1, h, w, dtype=torch.long),
            "loss": dice_ce}


def make_small(batch_size):
    """The same network and loss on a 64x64 patch (a 2x2 bottleneck): what
    the whole-step CPU reference runs (validation/step.py), in seconds."""
    return make(batch_size, (64, 64))
