"""torchvision's ResNet-18 with 64-pixel images: the smallest capture example.

    batchfit capture examples/capture/resnet18.py:make -- estimate --batch 64
"""
import torch
import torchvision


def make(batch_size):
    model = torchvision.models.resnet18(weights=None)
    images = torch.randn(batch_size, 3, 64, 64)
    labels = torch.randint(0, 1000, (batch_size,))
    return {"model": model, "inputs": images, "targets": labels}
