#!/usr/bin/python3
"""Generation CPU reference: the memory of greedy decoding with a dynamic key/value cache.

Run with the interpreter that has torch (Debian: /usr/bin/python3):

    /usr/bin/python3 validation/generate.py            # writes testdata/reference/torch-cpu-generate.json
    /usr/bin/python3 validation/generate.py --check    # regenerates in memory and diffs

A toy decoder written in plain PyTorch runs the loop of transformers' generate() with the cache
of its DynamicCache (cache_utils.DynamicLayer: the cache starts as torch.tensor([]) and every
update, the first too, is ``torch.cat([cache, key_states], dim=-2)``; the old tensor goes when the
attribute is rebound) under ``torch.no_grad()`` with the model in eval mode:

    ids = prompt                                  # [B, P] int64
    for step in range(NEW_TOKENS):                # the prefill, then one token at a time
        logits = model(ids, cache)                # [B, L, V]
        nxt = logits[:, -1, :].to(torch.float32, copy=True)
        ids = nxt.argmax(-1, keepdim=True)        # the next input, [B, 1]

The model (embedding, then per layer single-head attention with q, k, v and o projections and a
residual, then the LM head) is the one validation/generate_test.go builds with graph.Builder, op
for op, so that the simulator's figures for the same computation can be compared with these.

How it is measured: as validation/step.py does (its start_profiler and memory_events): c10's CPU
allocator reports every allocation and free to the profiler; each forward is a user scope, and so
is each cache update. Bytes are what c10 was asked for, the CUDA allocator's "requested" figure.
The model is built before profiling starts; its parameters are alive throughout, so the bytes
alive at any moment are the parameter bytes plus the running sum of the events since.

Output (deterministic): per case, the parameter bytes and per forward ``peak`` (the largest
bytes alive within it), ``end`` (alive when it returns) and ``cache`` (the events of its cache
updates in order, positive for an allocation, negative for a free).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("GLOG_minloglevel", "2")

OUT = os.path.join(HERE, "..", "testdata", "reference", "torch-cpu-generate.json")
SEED = 0
VOCAB, EMBED, LAYERS = 32, 16, 2
# (batch, prompt, new tokens)
CASES = ((1, 4, 3), (3, 5, 4), (2, 9, 6))


def build():
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(EMBED, EMBED)
            self.k = nn.Linear(EMBED, EMBED)
            self.v = nn.Linear(EMBED, EMBED)
            self.o = nn.Linear(EMBED, EMBED)

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(VOCAB, EMBED)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
            self.head = nn.Linear(EMBED, VOCAB)

        def forward(self, ids, cache, enter, leave):
            x = self.embed(ids)                                  # [B, L, E]
            for i, layer in enumerate(self.layers):
                q = layer.q(x).unsqueeze(1)                      # [B, 1, L, E], a view
                k = layer.k(x).unsqueeze(1)
                v = layer.v(x).unsqueeze(1)
                h = enter("cache", None)
                k = cache.update(2 * i, k)
                v = cache.update(2 * i + 1, v)
                leave(h)
                # every tensor is released at its last use, as the
                # simulator's graph has it (locals would otherwise live
                # until the name is rebound)
                s = q @ k.transpose(-1, -2)                      # [B, 1, L, S]
                del q
                p = s.softmax(-1)
                del s
                a = (p @ v).squeeze(1)                           # [B, L, E], a view
                del p, k, v
                o = layer.o(a)
                del a
                x = x + o
                del o
            return self.head(x)                                  # [B, L, V]

    torch.manual_seed(SEED)
    return Toy().eval()


class Cache:
    """DynamicLayer's update, one tensor per slot (keys and values of each layer)."""

    def __init__(self, torch):
        self.torch = torch
        self.t = {}

    def update(self, slot, states):
        torch = self.torch
        if slot not in self.t:
            self.t[slot] = torch.tensor([], dtype=states.dtype)  # lazy_initialization: no storage
        self.t[slot] = torch.cat([self.t[slot], states], dim=-2)
        return self.t[slot]


def run(batch, prompt, tokens):
    import torch
    from torch.autograd import _disable_profiler
    import step

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False
    model = build()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    enter = torch.ops.profiler._record_function_enter_new
    leave = torch.ops.profiler._record_function_exit._RecordFunction
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (batch, prompt))  # made before profiling, like the prompt on the host
    cache = Cache(torch)
    nxt = None
    with torch.no_grad():
        step.start_profiler()
        h = enter("start", None)
        ids = ids.clone()  # the prompt lands: counted, as the simulator's batch is
        leave(h)
        for k in range(tokens):
            h = enter("forward%d" % k, None)
            logits = model(ids, cache, enter, leave)
            nxt = logits[:, -1, :].to(torch.float32, copy=True)
            del logits
            leave(h)
            h = enter("pick%d" % k, None)
            ids = nxt.argmax(-1, keepdim=True)
            leave(h)
        roots = _disable_profiler().experimental_event_tree()
    alive = sum(t.numel() * t.element_size() for t in cache.t.values())
    alive += nxt.numel() * nxt.element_size() + ids.numel() * ids.element_size()
    return summarize(roots, params, alive)


def summarize(roots, params, alive_end):
    import step
    live = params
    out = {"param_bytes": params, "forwards": []}
    cur = None
    for r in sorted(roots, key=lambda n: (n.start_time_ns, n.id)):
        if r.name == "[memory]":
            raise RuntimeError("memory events outside the scopes")
        mems = step.memory_events(r)
        if r.name.startswith("forward"):
            cur = {"peak": live, "end": 0, "cache": []}
            caches = [c for c in r.children if c.name == "cache"]
            in_cache = {id(m) for c in caches for m in step.memory_events(c)}
            for m in mems:
                live += m.extra_fields.alloc_size
                cur["peak"] = max(cur["peak"], live)
                if id(m) in in_cache:
                    cur["cache"].append(m.extra_fields.alloc_size)
            cur["end"] = live
            out["forwards"].append(cur)
        else:
            for m in mems:
                live += m.extra_fields.alloc_size
    if live != params + alive_end:
        raise Inconsistent("running sum %d, but Python counts %d alive" % (live, params + alive_end))
    return out


class Inconsistent(RuntimeError):
    pass


def run_checked(batch, prompt, tokens, tries=3):
    # On a heavily loaded machine the profiler has been seen to miss one
    # small allocation event (8 bytes) of a run, which summarize's running
    # sum catches. Such a recording is thrown away and the case recorded
    # again in a fresh profiling session; a case that never agrees fails.
    for attempt in range(tries):
        try:
            return run(batch, prompt, tokens)
        except Inconsistent as e:
            if attempt == tries - 1:
                raise
            print("generate.py: b%d-p%d-t%d recorded again: %s" % (batch, prompt, tokens, e), file=sys.stderr)


def generate():
    import torch
    import step
    step.selfcheck()
    cases = {}
    for b, p, t in CASES:
        cases["b%d-p%d-t%d" % (b, p, t)] = dict(run_checked(b, p, t), batch=b, prompt=p, new_tokens=t)
    return {"torch": torch.__version__.split("+")[0], "vocab": VOCAB, "embed": EMBED, "layers": LAYERS, "cases": cases}


def main():
    import step
    return step.one_file_main(__doc__, OUT, generate)


if __name__ == "__main__":
    sys.exit(main())
