#!/usr/bin/env python3
"""Rows of the calibration set from timm's published training benchmark.

timm (huggingface/pytorch-image-models) publishes the training throughput of
its models measured with its benchmark.py on one GeForce RTX 3090, in
results/benchmark-train-amp-{nchw,nhwc}-pt112-cu113-rtx3090.csv (columns
model, train_samples_per_sec, train_step_time, train_batch_size,
train_img_size, param_count). This script reads the two files of one commit
and writes the rows whose timm model is the architecture a batchfit zoo
model builds (torchvision's), in the calibration set's format:

    git -C TIMM show COMMIT:results/benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv > nchw.csv
    git -C TIMM show COMMIT:results/benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv > nhwc.csv
    python3 validation/throughput_timm.py nchw.csv nhwc.csv > testdata/throughput/timm.csv

The run each figure comes from (benchmark.py at that commit, --bench train
--amp, with and without --channels-last): random input of the stated batch
and image size already on the GPU, the model in train mode, forward and
cross-entropy under torch.cuda.amp.autocast, backward, then
optimizer.step() of create_optimizer_v2(opt='sgd', lr=1e-4): torch.optim.SGD
with momentum 0.9, Nesterov, no weight decay, no GradScaler; zero_grad
before each step; torch.cuda.synchronize() after each step; 10 warm-up
steps, 50 timed. PyTorch 1.12, CUDA 11.3. Standard library only.
"""

import csv
import sys

REPO = "huggingface/pytorch-image-models"
COMMIT = "c865028c34fc05cc7deea8e753b30d8cd1952591"
FILES = {
    "nchw": "results/benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv",
    "nhwc": "results/benchmark-train-amp-nhwc-pt112-cu113-rtx3090.csv",
}

# timm model -> (batchfit zoo model, family, what differs from the zoo's
# torchvision build, if anything).
MODELS = {
    "resnet18": ("resnet18", "resnet", ""),
    "resnet34": ("resnet34", "resnet", ""),
    "resnet50": ("resnet50", "resnet", ""),
    "resnet101": ("resnet101", "resnet", ""),
    "resnet152": ("resnet152", "resnet", ""),
    "wide_resnet50_2": ("wide_resnet50_2", "resnet", ""),
    "vgg11": ("vgg11", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg13": ("vgg13", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg16": ("vgg16", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg19": ("vgg19", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg11_bn": ("vgg11_bn", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg13_bn": ("vgg13_bn", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg16_bn": ("vgg16_bn", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "vgg19_bn": ("vgg19_bn", "vgg", "timm's head is a 7x7 then a 1x1 convolution (ConvMlp) where torchvision has two Linear layers of the same arithmetic"),
    "densenet121": ("densenet121", "densenet", ""),
    "densenet161": ("densenet161", "densenet", ""),
    "densenet169": ("densenet169", "densenet", ""),
    "densenet201": ("densenet201", "densenet", ""),
    "efficientnet_b0": ("efficientnet_b0", "depthwise", "timm runs it without stochastic depth (drop_path_rate 0), torchvision's has it"),
    "efficientnet_b1": ("efficientnet_b1", "depthwise", "timm runs it without stochastic depth (drop_path_rate 0), torchvision's has it"),
    "efficientnet_b2": ("efficientnet_b2", "depthwise", "timm runs it without stochastic depth (drop_path_rate 0), torchvision's has it"),
    "efficientnet_b3": ("efficientnet_b3", "depthwise", "timm runs it without stochastic depth (drop_path_rate 0), torchvision's has it"),
    "efficientnet_b4": ("efficientnet_b4", "depthwise", "timm runs it without stochastic depth (drop_path_rate 0), torchvision's has it"),
    "mobilenetv2_100": ("mobilenet_v2", "depthwise", ""),
    "mobilenetv3_large_100": ("mobilenet_v3_large", "depthwise", "timm's head is a 1x1 convolution after the pool where torchvision has a Linear of the same arithmetic"),
    "mobilenetv3_small_100": ("mobilenet_v3_small", "depthwise", "timm's head is a 1x1 convolution after the pool where torchvision has a Linear of the same arithmetic"),
    "vit_base_patch16_224": ("vit_b_16", "vit", "timm's attention is q@k^T, softmax, @v (the math path), as torchvision's nn.MultiheadAttention runs in training under PyTorch 1.12"),
    "vit_base_patch32_224": ("vit_b_32", "vit", "timm's attention is q@k^T, softmax, @v (the math path), as torchvision's nn.MultiheadAttention runs in training under PyTorch 1.12"),
    "vit_large_patch16_224": ("vit_l_16", "vit", "timm's attention is q@k^T, softmax, @v (the math path), as torchvision's nn.MultiheadAttention runs in training under PyTorch 1.12"),
    "swin_tiny_patch4_window7_224": ("swin_t", "swin", "timm's default drop_path_rate is 0.1, torchvision's 0.2"),
    "convnext_tiny": ("convnext_tiny", "convnext", "timm's default drop_path_rate is 0, torchvision's 0.1"),
    "convnext_small": ("convnext_small", "convnext", "timm's default drop_path_rate is 0, torchvision's 0.4"),
    "convnext_base": ("convnext_base", "convnext", "timm's default drop_path_rate is 0, torchvision's 0.5"),
}

HEADER = ["id", "source", "path", "gpu", "system", "args", "throughput", "unit", "data", "exact", "tf32_matmul", "software", "notes"]


def rows(layout, path):
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    head = lines[0]
    col = {h: i for i, h in enumerate(head)}
    for n, rec in enumerate(lines[1:], start=2):
        name = rec[col["model"]]
        if name not in MODELS:
            continue
        zoo, family, differs = MODELS[name]
        batch = int(rec[col["train_batch_size"]])
        img = int(rec[col["train_img_size"]])
        args = [zoo, "--gpu", "rtx-3090", "--batch", str(batch), "--precision", "16-mixed",
                "--optimizer", "sgd", "--momentum", "0.9", "--image", str(img), "--torch", "1.13"]
        if layout == "nhwc":
            args += ["--memory-format", "channels_last"]
        notes = [
            f"family {family}",
            f"timm model {name}",
            f"cell train_samples_per_sec {rec[col['train_samples_per_sec']]} (train_step_time {rec[col['train_step_time']]} ms)",
            "benchmark.py --bench train --amp" + (" --channels-last" if layout == "nhwc" else "") +
            ": random input on the GPU, autocast forward and loss, backward, SGD momentum 0.9 Nesterov lr 1e-4 without GradScaler, synchronize every step",
            "PyTorch 1.12 (batchfit's nearest profile: 1.13)",
        ]
        if differs:
            notes.append(differs)
        yield [
            f"timm-pt112-{layout}-{zoo}-rtx3090-16-mixed-b{batch}",
            "timm benchmark results",
            f"{REPO}@{COMMIT}:{FILES[layout]} (line {n})",
            "rtx-3090",
            "GeForce RTX 3090",
            " ".join(args),
            rec[col["train_samples_per_sec"]],
            "images/s",
            "synthetic (random tensors on the GPU)",
            "true",
            "false",
            "pytorch-1.12-cu113",
            "; ".join(notes),
        ]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: throughput_timm.py NCHW_CSV NHWC_CSV")
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(HEADER)
    for layout, path in zip(("nchw", "nhwc"), sys.argv[1:]):
        for r in rows(layout, path):
            w.writerow(r)


if __name__ == "__main__":
    main()
