"""Fine-tuning a zoo model: torchvision's ResNet-18 with its backbone frozen
and a new two-layer head for 5 classes.

    batchfit capture examples/capture/finetune.py:make -- maxbatch --gpu rtx-3090
"""
import torch
import torch.nn as nn
import torchvision


def make(batch_size):
    model = torchvision.models.resnet18(weights=None)
    for p in model.parameters():
        p.requires_grad_(False)
    model.fc = nn.Sequential(nn.Linear(512, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 5))
    return {"model": model,
            "inputs": torch.randn(batch_size, 3, 64, 64),
            "targets": torch.zeros(batch_size, dtype=torch.long)}
