#!/usr/bin/env python3
"""Select the calibration set of published single-GPU training throughput.

Reads the two tables of published throughput (NVIDIA DeepLearningExamples
PyTorch READMEs and Lambda's deeplearning-benchmark tables, one CSV each,
columns source,path,gpu,model,batch,precision,img_or_seq,throughput,unit,
notes; every row names the repository@commit:file it was read from) and
writes testdata/throughput/throughput.csv: the rows whose model batchfit's
zoo builds and whose GPU is in batchfit's catalog, each with the batchfit
command line that reproduces the run.

    python3 validation/throughput_select.py DLE_CSV LAMBDA_CSV > testdata/throughput/throughput.csv

testdata/throughput/README.md says which rows are kept and why the others
are left out. Standard library only.
"""

import csv
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

# GPU names of the tables -> batchfit catalog names. Names not here are left
# out (README.md lists them): A100 PCIe, A40, Quadro/Titan/RTX 20xx and
# 30xx other than the 3090, V100 PCIe (Lambda's "V100 32GB", 250 W), the
# DGX-2H's 450 W V100 and the GH200 80GB are not in the catalog.
GPUS = {
    # NVIDIA DeepLearningExamples: DGX systems, SXM modules.
    "A100 80GB (DGX A100)": "a100-80gb",
    "A100 80GB": "a100-80gb",  # table 'NVIDIA A100 (8x A100 80GB)', a DGX A100
    "A100 40GB (DGX A100)": "a100-40gb",
    "V100 16GB (DGX-1)": "v100-16gb",
    "V100 16GB (DGX1)": "v100-16gb",
    "V100 16GB (DGX1V)": "v100-16gb",
    "V100 32GB (DGX-1)": "v100-32gb",
    "V100 32GB (DGX1)": "v100-32gb",
    # The DGX-2's V100s are SXM3 modules with the SXM2's peaks (125 TFLOP/s
    # tensor, 900 GB/s); the DGX-2H's run at 450 W and higher clocks.
    "V100 32GB (DGX-2)": "v100-32gb",
    "V100 32GB (DGX2)": "v100-32gb",
    # Lambda.
    "H100 80GB SXM5": "h100-80gb",
    "Dell H100 80GB SXM5": "h100-80gb",
    "DellTexas H100 80GB SXM5": "h100-80gb",
    "SMC H100 80GB SXM5": "h100-80gb",
    "1CC H100 80GB SXM5": "h100-80gb",
    "RAIDZ1 H100 80GB SXM5": "h100-80gb",
    "LambdaCloud 1x H100 80GB SXM5": "h100-80gb",
    "H100 80GB PCIe Gen5": "h100-pcie",
    "LambdaCloud H100 80GB PCIe Gen5": "h100-pcie",
    "H100 80GB PCIe": "h100-pcie",
    "LambdaCloud 1x H100 80GB PCIe": "h100-pcie",
    "A100 80GB SXM4": "a100-80gb",
    "A100 40GB SXM4": "a100-40gb",
    "RTX A6000": "a6000",
    "Lambda Cloud — RTX A6000": "a6000",
    "RTX 3090": "rtx-3090",
    "RTX 4090": "rtx-4090",
    "GH200 96GB": "gh200",
    "LambdaCloud 1x GH200 96GB": "gh200",
    "H200 140GB SXM": "h200",
    "B200 192GB": "b200",
    "LambdaCloud 1x B200 192GB SXM5": "b200",
    # Lambda Cloud's V100 instances report 300 W: the SXM2 module.
    "LambdaCloud V100 16GB": "v100-16gb",
    "LambdaCloud 1x V100 16GB": "v100-16gb",
    "LambdaCloud A10": "a10",
    "LambdaCloud 1x A10": "a10",
}

# The captured nnU-Net 2D of DeepLearningExamples' Task01 benchmark, a path
# from the repository's root (validation.ThroughputRequest reads it there).
NNUNET2D = "testdata/capture/nnunet2d-msd01.bfgraph.gz"

# GPUs before Ampere have no TF32: their FP32 tables are true float32.
PRE_AMPERE = {"v100-16gb", "v100-32gb", "t4"}


# Rows read correctly but not comparable, with the reason.
EXCLUDED = [
    # The table 'Training performance: NVIDIA DGX-1 (8x V100 32GB)' of DLE's
    # EfficientNet README gives efficientnet-b4 36 img/s (FP32) and 89 img/s
    # (AMP) on 1 GPU and 641 and 1565 on 8: a strong scaling of 17.6x, which
    # eight GPUs cannot reach; the 16GB table's 1-GPU figures are 83 and 204.
    (lambda r: r["model"].startswith("efficientnet-b4") and r["gpu"] == "V100 32GB (DGX-1)"
     and "efficientnet/README.md" in r["path"],
     "1-GPU figure inconsistent with the table's own 8-GPU scaling (17.6x)"),
]


def model_of(name):
    """(zoo name, exact, size flag, optimizer args, note) or None."""
    if name.startswith("ResNet-50 v1.5"):
        # ResNet-50 v1.5 puts the stride on the 3x3 convolution, as
        # torchvision's resnet50 does. DLE ConvNets train with SGD,
        # momentum 0.875 (ConvNets/configs.yml); Lambda runs that code.
        return ("resnet50", True, "--image", ["--optimizer", "sgd", "--momentum", "0.875"],
                "SGD momentum 0.875 (DLE ConvNets configs.yml)")
    m = re.match(r"efficientnet-(b0|b4) \(DLE ConvNets\)", name)
    if m:
        # DLE's EfficientNet-B0/B4 are torchvision's architecture (MBConv
        # with squeeze-excitation and SiLU). ConvNets/configs.yml
        # (efficientnet_params) trains them with RMSprop (alpha 0.9, eps
        # 0.01, momentum 0.9), which batchfit has not: Adam keeps the same
        # two states per parameter and makes a few more passes over them.
        return ("efficientnet_" + m.group(1), True, "--image", ["--optimizer", "adam"],
                "RMSprop with momentum in DLE's configs.yml (efficientnet_params): approximated by Adam, "
                "the same two states per parameter")
    if name == "nnU-Net 2D (MSD Task01 BraTS)":
        # DLE's nnU-Net is MONAI's DynUNet: examples/capture/nnunet2d.py
        # builds it as nn_unet.py configures it for the 2D benchmark, and
        # validation/capture_zoo.py captures it into testdata/capture. The
        # README's patch is 192x160 with four modalities, which the capture
        # fixes (no size flag).
        return (NNUNET2D, True, None, ["--optimizer", "adamw", "--fused"],
                "apex FusedAdam (adam_w_mode on by default, weight decay 1e-4) in a PyTorch Lightning "
                "training loop; MONAI DynUNet and DiceCE loss, captured from examples/capture/nnunet2d.py")
    if name.startswith("BERT-base uncased, SQuAD") or name.startswith("BERT-large uncased, SQuAD") \
            or name == "BERT-large uncased fine-tuning SQuAD v1.1":
        zoo = "bert-base-uncased" if "base" in name else "bert-large-uncased"
        return (zoo, False, "--seq", ["--optimizer", "adamw", "--fused"],
                "SQuAD trains BertForQuestionAnswering (a hidden->2 Linear head); batchfit builds "
                "BertForMaskedLM, whose head (dense, LayerNorm, hidden->30522 decoder at every position) "
                "is extra work; DLE's run_squad.py trains FP16 with apex FusedAdam (multi-tensor, "
                "bias_correction=False) under apex amp (opt_level O2 in the releases read: an FP16 model "
                "with FP32 master weights) and FP32 with BertAdam: batchfit's fused AdamW under "
                "autocast is the closest")
    return None


def precision_of(p, gpu):
    """(batchfit precision, tf32 matmul, note)."""
    pl = p.lower()
    if pl.startswith("bf16"):
        return "bf16-mixed", False, "BF16 AMP"
    if pl.startswith("mixed precision"):
        return "16-mixed", False, "FP16 AMP"
    if gpu in PRE_AMPERE:
        return "32-true", False, "FP32 on a GPU without TF32"
    # Ampere and later: NGC containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1,
    # so float32 matmuls run in TF32 as well as convolutions (PyTorch's own
    # default since 1.12 keeps matmuls in FP32).
    return "32-true", True, "FP32 table on Ampere+ in an NGC container: TF32 convolutions and matmuls"


def size_of(s):
    m = re.match(r"\s*(\d+)", s)
    return m.group(1) if m else None


def lambda_version(source):
    if "(v0 " in source:
        return "v0"
    if "(v1 " in source:
        return "v1"
    if "(v2," in source:
        return "v2"
    return None  # the merged website table repeats v1 and v2


def software_of(notes, source):
    m = re.search(r"container (pytorch[-:][\w.\-]+|PyTorch [\d.]+)", notes)
    if m:
        return m.group(1)
    if "v0 era" in notes:
        return "NGC pytorch:20.01 (pre-Ampere) / 20.10+ (Ampere)"
    if "v1 era" in notes:
        return "NGC pytorch:22.09/22.10"
    if "(v2," in source:
        return "NGC pytorch:24.xx"
    return ""


def system_of(row):
    """The machine a figure came from: the DGX system of a DLE table; the
    GPU's name in Lambda's tables (machines of one catalog GPU are merged,
    their names joined)."""
    if not row["source"].startswith("NVIDIA"):
        return row["gpu"]
    m = re.search(r"table '([^']*)'", row["notes"])
    t = m.group(1) if m else row["gpu"]
    if re.search(r"DGX-?2", t):
        return "DGX-2"
    if re.search(r"DGX-?1", t):
        return "DGX-1"
    if "A100" in t:
        return "DGX A100"
    return t


def data_of(notes, zoo):
    if "synthetic" in notes:
        return "synthetic"
    if zoo == NNUNET2D:
        return "real (BraTS volumes preloaded to the GPU; DALI crops there, the benchmark mode)"
    if zoo.startswith("bert"):
        return "real (SQuAD v1.1 features, preprocessed)"
    return "real (ImageNet through the script's data loader; may be input-bound)"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: throughput_select.py DLE_CSV LAMBDA_CSV")
    out = []
    groups = OrderedDict()
    for path in sys.argv[1:]:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                gpu = GPUS.get(r["gpu"])
                mod = model_of(r["model"])
                if gpu is None or mod is None:
                    continue
                if any(f(r) for f, _ in EXCLUDED):
                    continue
                is_lambda = r["source"].startswith("Lambda")
                ver = lambda_version(r["source"]) if is_lambda else "dle"
                if ver is None:
                    continue
                notes = r["notes"]
                if "accumulated (global) batch" in notes or not r["batch"].isdigit():
                    continue
                zoo, exact, sizeflag, opt, optnote = mod
                prec, tf32, precnote = precision_of(r["precision"], gpu)
                size = size_of(r["img_or_seq"])
                # Lambda's v2 result sets of one workload on one GPU model
                # are different machines: their median is kept. DLE tables
                # of different README versions are kept apart when their
                # containers differ, merged when a later README repeats them.
                sysname = system_of(r) if ver == "dle" else ""
                key = (ver, gpu, zoo, prec, r["batch"], size, r["source"], software_of(notes, r["source"]), sysname)
                groups.setdefault(key, []).append((r, zoo, exact, sizeflag, opt, optnote, prec, tf32, precnote, size))
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["id", "source", "path", "gpu", "system", "args", "throughput", "unit", "data", "exact", "tf32_matmul", "software", "notes"])
    ids = defaultdict(int)
    for key, items in groups.items():
        ver, gpu, zoo, prec, batch, size, source, _, _ = key
        r, zoo, exact, sizeflag, opt, optnote, prec, tf32, precnote, size = items[0]
        vals = [float(it[0]["throughput"]) for it in items]
        value = statistics.median(vals)
        note = [precnote, optnote]
        if r["source"].startswith("NVIDIA"):
            note.append("DLE: " + r["notes"])
        else:
            note.append("Lambda: " + r["notes"])
        if len(items) > 1:
            note.append("median of %d result sets (%g to %g); path names the first" % (len(items), min(vals), max(vals)))
        args = [zoo, "--gpu", gpu, "--batch", batch, "--precision", prec] + opt
        if size and sizeflag:
            args += [sizeflag, size]
        if "memory_format=nhwc" in r["notes"]:
            # DeepLearningExamples' AMP runs convert the model and the batch
            # to channels-last (--memory-format nhwc in its configs)
            args += ["--memory-format", "channels_last"]
        name = "nnunet2d" if zoo == NNUNET2D else zoo
        base = "%s-%s-%s-%s-b%s" % (ver, name, gpu, prec, batch)
        m = re.search(r"(\d\d)\.(\d\d)", software_of(r["notes"], source))
        if ver == "dle" and m:
            dgx = system_of(r).lower().replace(" ", "").replace("-", "")
            base = "dle%s%s-%s-%s-%s-%s-b%s" % (m.group(1), m.group(2), dgx, name, gpu, prec, batch)
        ids[base] += 1
        rid = base if ids[base] == 1 else "%s-%d" % (base, ids[base])
        system = " / ".join(sorted({system_of(it[0]) for it in items}))
        unit = r["unit"]
        if zoo == NNUNET2D:
            unit = "images/s"  # the table's unit reads "images/s (2D) or volumes/s (3D)"
        w.writerow([rid, source, r["path"], gpu, system, " ".join(args), "%g" % value, unit,
                    data_of(r["notes"], zoo), "true" if exact else "false", "true" if tf32 else "false",
                    software_of(r["notes"], source), "; ".join(note)])


if __name__ == "__main__":
    main()
