#!/usr/bin/python3
"""Eval under autocast CPU reference: the memory of forwards under torch.no_grad() (or
torch.inference_mode()) with bfloat16 autocast, as cached_cast decides.

Run with the interpreter that has torch (Debian: /usr/bin/python3):

    /usr/bin/python3 validation/autocast.py            # writes testdata/reference/torch-cpu-autocast.json
    /usr/bin/python3 validation/autocast.py --check    # regenerates in memory and diffs

CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16)) goes through the same cached_cast
(aten/src/ATen/autocast_mode.cpp) as CUDA's: a float32 leaf that requires grad and is not a view
(a parameter, under no_grad or inference_mode alike: the flag is the tensor's) is cast once per
autocast region and kept in cached_casts until the outermost autocast exits (autocast.__exit__:
autocast_decrement_nesting() == 0, then clear_autocast_cache()); with cache_enabled=False, and for
every other tensor (the batch, activations), the cast is a new tensor at each use, freed when the
op returns. Small models (an MLP, a transformer block, a conv net; the ones
validation/autocast_test.go builds op for op) run FORWARDS batches in eval mode:

    with torch.no_grad():                         # or torch.inference_mode()
        for k in range(FORWARDS):
            x = torch.randn(batch)                # the previous batch goes when x is rebound
            with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=CACHE):
                out = model(x)                    # the previous output goes when out is rebound

or, with the region around the loop ("loop"), autocast entered once before the loop and left
after it.

How it is measured: as validation/step.py does (its start_profiler and memory_events): c10's CPU
allocator reports every allocation and free to the profiler; each forward (with its batch) is a
user scope, and so is the autocast exit after a loop. Bytes are what c10 was asked for, the CUDA
allocator's "requested" figure. The model is built before profiling starts; its parameters and
buffers are alive throughout.

Output (deterministic): per case, the parameter and buffer bytes, per forward ``peak`` (the
largest bytes alive within it) and ``end`` (alive when it returns), and ``exit`` (alive after the
autocast region of a loop ends; for "each", the last forward's end).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("GLOG_minloglevel", "2")

OUT = os.path.join(HERE, "..", "testdata", "reference", "torch-cpu-autocast.json")
SEED = 0
FORWARDS = 3
# the model's dimensions: the MLP's widths, the block's (tokens, width, MLP width, outputs), the
# conv net's (image side, channels, classes)
MLP = (64, 128, 10)
BLOCK = (6, 32, 64, 10)
CONV = (8, 4, 8, 10)
BATCH = 4
MODELS = ("mlp", "block", "conv")
MODES = ("no_grad", "inference_mode")
REGIONS = ("each", "loop")


def build(name):
    import torch
    from torch import nn
    torch.manual_seed(SEED)
    if name == "mlp":
        i, h, o = MLP
        return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, o)).eval()
    if name == "block":
        T, E, F, O = BLOCK

        class Block(nn.Module):
            """Pre-norm attention and MLP, one head. Layer norm reads the float32 residual
            stream: on torch 1.13's CPU, layer_norm is on no autocast list and its kernel refuses
            a bfloat16 input with float32 weights."""

            def __init__(self):
                super().__init__()
                self.ln1 = nn.LayerNorm(E)
                self.q = nn.Linear(E, E)
                self.k = nn.Linear(E, E)
                self.v = nn.Linear(E, E)
                self.o = nn.Linear(E, E)
                self.ln2 = nn.LayerNorm(E)
                self.fc1 = nn.Linear(E, F)
                self.fc2 = nn.Linear(F, E)
                self.head = nn.Linear(E, O)

            def forward(self, x):                      # [B, T, E] float32
                h = self.ln1(x)                        # float32
                q, k, v = self.q(h), self.k(h), self.v(h)   # bfloat16 (h cast at each use)
                del h
                s = q @ k.transpose(-1, -2)            # [B, T, T] bfloat16
                del q, k
                p = s.softmax(-1)                      # bfloat16 on the CPU (float32 on CUDA)
                del s
                a = p @ v
                del p, v
                o = self.o(a)
                del a
                x = x + o                              # bfloat16 + float32 → float32
                del o
                # every tensor is released at its last use, as the simulator's graph has it
                # (a local would otherwise live until its name is rebound)
                h = self.ln2(x)
                f = self.fc1(h)
                del h
                r = torch.relu(f)
                del f
                h = self.fc2(r)
                del r
                x = x + h
                del h
                return self.head(x)                    # [B, T, O] bfloat16

        return Block().eval()
    if name == "conv":
        S, C, C2, O = CONV

        class Conv(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(3, C, 3, padding=1)
                self.c2 = nn.Conv2d(C, C2, 3, padding=1)
                self.fc = nn.Linear(C2 * (S // 2) * (S // 2), O)

            def forward(self, x):
                x = torch.relu(self.c1(x))
                x = torch.max_pool2d(x, 2)
                x = torch.relu(self.c2(x))
                return self.fc(x.flatten(1))

        return Conv().eval()
    raise ValueError(name)


def in_shape(name):
    if name == "mlp":
        return (BATCH, MLP[0])
    if name == "block":
        return (BATCH, BLOCK[0], BLOCK[1])
    return (BATCH, 3, CONV[0], CONV[0])


def run(name, mode, region, cache):
    import contextlib
    import torch
    from torch.autograd import _disable_profiler
    import step

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    model = build(name)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    grad = torch.no_grad() if mode == "no_grad" else torch.inference_mode()

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache)

    torch.manual_seed(1)
    x = out = None
    with grad:
        step.start_profiler()
        outer = autocast() if region == "loop" else contextlib.nullcontext()
        outer.__enter__()
        for k in range(FORWARDS):
            h = enter("forward%d" % k, None)
            x = torch.randn(in_shape(name))
            with (autocast() if region == "each" else contextlib.nullcontext()):
                out = model(x)
            leave(h)
        h = enter("exit", None)
        outer.__exit__(None, None, None)
        leave(h)
        roots = _disable_profiler().experimental_event_tree()
    alive = x.numel() * x.element_size() + out.numel() * out.element_size()
    return summarize(roots, params + buffers, alive), params, buffers


def summarize(roots, base, alive_end):
    import step
    live = base
    forwards, exit_ = [], None
    for r in sorted(roots, key=lambda n: (n.start_time_ns, n.id)):
        if r.name == "[memory]":
            raise Inconsistent("memory events outside the scopes")
        cur = {"peak": live}
        for m in step.memory_events(r):
            live += m.extra_fields.alloc_size
            cur["peak"] = max(cur["peak"], live)
        cur["end"] = live
        if r.name.startswith("forward"):
            forwards.append(cur)
        elif r.name == "exit":
            exit_ = live
    if live != base + alive_end:
        raise Inconsistent("running sum %d, but Python counts %d alive" % (live, base + alive_end))
    return {"forwards": forwards, "exit": exit_}


class Inconsistent(RuntimeError):
    pass


def run_checked(*args, tries=3):
    # as generate.py: a recording whose running sum disagrees with what Python counts (the
    # profiler has been seen to miss an event on a loaded machine) is made again
    for attempt in range(tries):
        try:
            return run(*args)
        except Inconsistent as e:
            if attempt == tries - 1:
                raise
            print("autocast.py: %s recorded again: %s" % (args, e), file=sys.stderr)


def generate():
    import torch
    import step
    step.selfcheck()
    cases = {}
    for name in MODELS:
        for mode in MODES:
            for region in REGIONS:
                for cache in (True, False):
                    res, params, buffers = run_checked(name, mode, region, cache)
                    cid = "%s/%s/%s/cache-%s" % (name, mode, region, "on" if cache else "off")
                    cases[cid] = dict(res, model=name, mode=mode, region=region, cache_enabled=cache,
                                      param_bytes=params, buffer_bytes=buffers)
    return {"torch": torch.__version__.split("+")[0], "forwards": FORWARDS, "batch": BATCH,
            "mlp": list(MLP), "block": list(BLOCK), "conv": list(CONV), "cases": cases}


def main():
    import step
    return step.one_file_main(__doc__, OUT, generate)


if __name__ == "__main__":
    sys.exit(main())
