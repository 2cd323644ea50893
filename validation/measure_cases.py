#!/usr/bin/env python3
"""validation/measure.py's case files: the keys a case has, their defaults, and
the loader that checks a file (JSON, or YAML where PyYAML is installed) and
names the file, the case and the key of what it refuses. Standard library only.
"""

import copy
import fnmatch
import json
import os

# The repository root: a case's hf_config is a path relative to it.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = ("mlp", "mlp-L1-H256", "mlp-L8-H512", "simpleconv",
          "resnet18", "resnet50", "vgg16", "vit_b_16", "gpt2",
          # reference.py's LoRA MLPs (peft's Linear in plain PyTorch): frozen base, adapters
          "lora-mlp-r8", "lora-mlp-r16-dropout",
          # a Hugging Face config.json (the case's "hf_config"), built by transformers'
          # AutoModelForCausalLM.from_config: a causal language model like gpt2
          "hf_config")
PRECISIONS = ("fp32", "amp_bf16", "amp_fp16", "bf16")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
ATTN_IMPLS = ("eager", "sdpa")
# torch.nn.attention.SDPBackend members by the names batchfit's --attention gives them.
SDPA_BACKENDS = ("math", "efficient", "flash", "cudnn")
# The models whose loss is a language model's (Trainer.loss) and that read seq_len.
LM_MODELS = ("gpt2", "hf_config")

# Case keys, with their defaults ("defaults" in the case file overrides these).
CASE_DEFAULTS = {
    "precision": "fp32",
    "optimizer": "adamw",
    "checkpoint": False,    # torch.utils.checkpoint, non-reentrant, one call per block
    "accum": 1,             # micro-batches per optimizer step
    "steps": 3,             # optimizer steps; with "batches", defaults to len(batches)
    "empty_cache": False,   # torch.cuda.empty_cache() after every step
    "snapshot": False,      # record the allocator history and dump a snapshot pickle
    "maxbatch": False,      # include in --maxbatch runs
    "seq_len": 512,         # gpt2 and hf_config only
    "attn_implementation": None,  # gpt2 and hf_config only: eager | sdpa (None: the library
                                  # default for gpt2, sdpa for hf_config)
    "hf_config": None,      # hf_config only: a config.json path relative to the repository root
    # gpt2 and hf_config under sdpa only: the forward and the backward of every micro-batch run
    # inside torch.nn.attention.sdpa_kernel(<this backend>) (None: PyTorch's dispatcher picks)
    "sdpa_backend": None,
    "foreach": None,        # optimizer foreach= (None: torch's default)
    "fused": None,          # optimizer fused= (None: torch's default)
    "cudnn_benchmark": False,
    "env": {},              # extra environment for the worker, e.g. PYTORCH_CUDA_ALLOC_CONF
    "note": "",
}
CASE_KEYS = set(CASE_DEFAULTS) | {"id", "model", "batch", "batches"}


# ==============================================================================================
# Case file


class CaseError(Exception):
    pass


def load_cases(path):
    """Read the case file and return the fully resolved cases (defaults applied)."""
    with open(path, encoding="utf-8") as f:
        if path.endswith((".yaml", ".yml")):
            import yaml  # only needed for YAML case files
            doc = yaml.safe_load(f)
        else:
            doc = json.load(f)
    if isinstance(doc, list):
        doc = {"cases": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
        raise CaseError("%s: expected {\"defaults\": {...}, \"cases\": [...]}" % path)
    extra = set(doc) - {"comment", "defaults", "cases"}
    if extra:
        raise CaseError("%s: unknown top-level keys: %s" % (path, ", ".join(sorted(extra))))
    defaults = dict(CASE_DEFAULTS)
    file_defaults = doc.get("defaults", {})
    unknown = set(file_defaults) - set(CASE_DEFAULTS)
    if unknown:
        raise CaseError("%s: unknown keys in defaults: %s" % (path, ", ".join(sorted(unknown))))
    defaults.update(file_defaults)
    errors, cases, seen = [], [], set()
    for i, raw in enumerate(doc["cases"]):
        where = "case %d (%s)" % (i, raw.get("id", "?") if isinstance(raw, dict) else "?")
        if not isinstance(raw, dict):
            errors.append("%s: not an object" % where)
            continue
        case = copy.deepcopy(defaults)
        case.update(raw)
        if "batches" in raw and "steps" not in raw:
            case["steps"] = len(raw["batches"]) if isinstance(raw["batches"], list) else 0
        errs = validate_case(case, raw)
        if case.get("id") in seen:
            errs.append("duplicate id")
        seen.add(case.get("id"))
        errors += ["%s: %s" % (where, e) for e in errs]
        cases.append(case)
    if errors:
        raise CaseError("%s:\n  %s" % (path, "\n  ".join(errors)))
    return cases


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def validate_case(case, raw):
    errs = []
    unknown = set(raw) - CASE_KEYS
    if unknown:
        errs.append("unknown keys: %s" % ", ".join(sorted(unknown)))
    if not isinstance(case.get("id"), str) or not case["id"]:
        errs.append("id must be a non-empty string")
    elif not all(c.isalnum() or c in "-_." for c in case["id"]):
        errs.append("id may contain only letters, digits, '-', '_', '.'")
    if case.get("model") not in MODELS:
        errs.append("model must be one of %s" % ", ".join(MODELS))
    has_b, has_bs = "batch" in case, "batches" in case
    if has_b == has_bs:
        errs.append("give exactly one of batch, batches")
    if has_b and (not _is_int(case["batch"]) or case["batch"] < 1):
        errs.append("batch must be a positive integer")
    if has_bs and (not isinstance(case["batches"], list) or not case["batches"]
                   or not all(_is_int(b) and b >= 1 for b in case["batches"])):
        errs.append("batches must be a non-empty list of positive integers")
    if case["precision"] not in PRECISIONS:
        errs.append("precision must be one of %s" % ", ".join(PRECISIONS))
    if case["optimizer"] not in OPTIMIZERS:
        errs.append("optimizer must be one of %s" % ", ".join(OPTIMIZERS))
    for k in ("checkpoint", "empty_cache", "snapshot", "maxbatch", "cudnn_benchmark"):
        if not isinstance(case[k], bool):
            errs.append("%s must be true or false" % k)
    for k in ("foreach", "fused"):
        if case[k] is not None and not isinstance(case[k], bool):
            errs.append("%s must be true, false or null" % k)
    for k in ("accum", "steps"):
        if not _is_int(case[k]) or case[k] < 1:
            errs.append("%s must be a positive integer" % k)
    if case.get("model") == "hf_config":
        errs += _check_hf_config(case)
    elif not _is_int(case["seq_len"]) or not 2 <= case["seq_len"] <= 1024:
        errs.append("seq_len must be an integer in [2, 1024] (GPT-2 has 1024 positions)")
    if case["attn_implementation"] not in (None,) + ATTN_IMPLS:
        errs.append("attn_implementation must be null or one of %s" % ", ".join(ATTN_IMPLS))
    if case.get("model") not in LM_MODELS:
        for k in ("seq_len", "attn_implementation"):
            if k in raw:
                errs.append("%s applies to gpt2 and hf_config only" % k)
    if case.get("model") != "hf_config" and case["hf_config"] is not None:
        errs.append("hf_config applies to model \"hf_config\" only")
    if case["sdpa_backend"] is not None:
        if case["sdpa_backend"] not in SDPA_BACKENDS:
            errs.append("sdpa_backend must be null or one of %s" % ", ".join(SDPA_BACKENDS))
        elif case.get("model") not in LM_MODELS:
            errs.append("sdpa_backend applies to gpt2 and hf_config only")
        elif attn_implementation(case) != "sdpa":
            errs.append("sdpa_backend needs attn_implementation \"sdpa\"%s" % (
                " (gpt2's library default is not named)" if case.get("model") == "gpt2" else ""))
    if not isinstance(case["env"], dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in case["env"].items()):
        errs.append("env must map strings to strings")
    if case["maxbatch"] and has_bs:
        errs.append("maxbatch needs a fixed batch, not a schedule")
    if case["fused"] and case["optimizer"] not in ("adam", "adamw"):
        errs.append("fused applies to adam/adamw only")
    return errs


def attn_implementation(case):
    """The attn_implementation a case's model is built with (None: the library default)."""
    if case.get("model") == "hf_config":
        return case["attn_implementation"] or "sdpa"
    return case["attn_implementation"]


def hf_config_path(case):
    """The absolute path of a case's hf_config."""
    return os.path.join(ROOT, *case["hf_config"].split("/"))


def _check_hf_config(case):
    """An hf_config case names a readable config.json under the repository root, by a
    relative path with forward slashes, and a seq_len its position table holds."""
    p = case["hf_config"]
    if not isinstance(p, str) or not p:
        return ["model \"hf_config\" needs hf_config, a config.json path relative to the "
                "repository root (e.g. testdata/hf/llama-gqa-small/config.json)"]
    parts = p.split("/")
    if p.startswith("/") or "\\" in p or ".." in parts or "" in parts or "." in parts \
            or not p.endswith(".json"):
        return ["hf_config %r must be a relative path with forward slashes, without '.' or "
                "'..', to a .json file under the repository root" % p]
    try:
        with open(hf_config_path(case), encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        return ["hf_config %r: %s" % (p, e)]
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model_type"), str):
        return ["hf_config %r: not a Hugging Face config.json (no model_type)" % p]
    limit = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    if not _is_int(case["seq_len"]) or case["seq_len"] < 2 or (
            _is_int(limit) and case["seq_len"] > limit):
        return ["seq_len must be an integer in [2, %s] (the config's max_position_embeddings)"
                % limit]
    return []


def case_batches(case):
    """Batch size of every step."""
    if "batches" in case:
        bs = case["batches"]
        return [bs[i % len(bs)] for i in range(case["steps"])]
    return [case["batch"]] * case["steps"]


def select_cases(cases, patterns, maxbatch=False):
    if patterns:
        out = [c for c in cases if any(fnmatch.fnmatchcase(c["id"], p) for p in patterns)]
        missing = [p for p in patterns
                   if not any(fnmatch.fnmatchcase(c["id"], p) for c in cases)]
        if missing:
            raise CaseError("no case matches: %s" % ", ".join(missing))
        return out
    if maxbatch:
        return [c for c in cases if c["maxbatch"]]
    return list(cases)
