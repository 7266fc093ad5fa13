"""Probe run once on a lent H200 (2026-11-26, 13:08 UTC), as `git apply
lab/gpu_probes/uniform.patch; python lab/gpu_probes/uniform.py OUT`: do batches of one token
length (no padding, so no attention mask, so SDPA's flash kernel) lift the forward passes and
the engine's embed path? bench.gpu's BERT-base shape, float16, 16,384 Brown sentences:
1. bare forward passes over length-sorted padded batches of 512 (a mask: the memory-efficient
   kernel) against hf.forward.batches(..., uniform=16) (texts of one length together, mask
   dropped), eager and through torch.compile, best of two passes;
2. the engine's top-layer embed path (two chunks in flight) with UNIFORM_BATCH 0 and 16.
The patch (hf.forward: `batches(..., uniform)`, UNIFORM_BATCH, the mask dropped for a batch of
one length) was reverted after it: one-length batches were slower everywhere (bare forward
0.26 -> 0.30 s eager, 0.22 -> 0.35 s compiled; engine at batch 1024 0.99 -> 2.60 s), because
Brown's 16k sentences padded to sorted batches of 512 carry only 7% padding, and splitting by
length makes 71 batches where 32 did. Results: results/gpu_probes.json, results/gpu.md's notes.
(CTXLENS_PROBE_DEVICE=cpu CTXLENS_PROBE_SENTENCES=600 runs it here as a dry run.)
"""
import json
import os
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from engine.families.hf import forward, pooling  # noqa: E402
from lab.gpu_probes.common import mfu, setup  # noqa: E402

g, out, path, texts = setup()
dev = g.DEVICE
from transformers import AutoModel, AutoTokenizer  # noqa: E402

tok = AutoTokenizer.from_pretrained(path)
ids = tok(texts)["input_ids"]
tokens = sum(map(len, ids))
res = {"tokens": tokens, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu"}


def save():
    print(json.dumps(res), flush=True)
    (out / "uniform.json").write_text(json.dumps(res, indent=1))


def inputs(groups, drop_uniform_mask):
    """The engine's padded batches (hf.forward.pad_batch), a one-length batch without its mask
    when asked."""
    made = []
    for grp in groups:
        batch = [items[i] for i in grp]
        x, m = forward.pad_batch(batch, tok.pad_token_id, dev)
        uniform = len({len(t.input_ids) for t in batch}) == 1
        made.append((x, None if (uniform and drop_uniform_mask) else m))
    return made


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


items = [SimpleNamespace(input_ids=i) for i in ids]
plans = {"padded": (forward.batches(items, 512, 0), False),
         "uniform16": (forward.batches(items, 512, 0, uniform=16), True)}
model = AutoModel.from_pretrained(path, dtype=torch.float16 if dev == "cuda" else torch.float32,
                                  attn_implementation="sdpa").to(dev).eval()
params = g.matmul_params(model)
for name, (groups, drop) in plans.items():
    batches = inputs(groups, drop)
    res[f"{name} batches"] = len(batches)
    res[f"{name} uniform batches"] = sum(m is None for _, m in batches)
    res[f"{name} padded tokens"] = sum(int(x.numel()) for x, _ in batches)
    for comp in (False, True):
        fwd = torch.compile(model, dynamic=True) if comp else model
        with pooling.batch_attention(torch.device(dev)), torch.inference_mode():
            t = time.perf_counter()
            for x, m in batches[:3] + batches[-3:]:
                fwd(input_ids=x, attention_mask=m)
            sync()
            res[f"{name} compiled={comp} warm-up s"] = time.perf_counter() - t
            best = None
            for _ in range(2):
                t = time.perf_counter()
                for x, m in batches:
                    fwd(input_ids=x, attention_mask=m)
                sync()
                s = time.perf_counter() - t
                best = s if best is None else min(best, s)
        res[f"forward {name} compiled={comp} s"] = best
        res[f"forward {name} compiled={comp} mfu"] = mfu(params, tokens, best)
        save()
    if name == "uniform16" and dev == "cuda":
        from torch.profiler import ProfilerActivity, profile
        with pooling.batch_attention(torch.device(dev)), torch.inference_mode(), \
                profile(activities=[ProfilerActivity.CUDA]) as prof:
            for x, m in batches[100:108]:
                model(input_ids=x, attention_mask=m)
            sync()
        res["uniform16 profile"] = prof.key_averages().table(
            sort_by="self_cuda_time_total", row_limit=14, max_name_column_width=60).splitlines()
        save()
del model
for comp, bs in ((False, 512), (False, 1024), (True, 1024)):
    for u in (0, 16):
        forward.UNIFORM_BATCH = u
        r = g.engine_embed(path, texts, "float16" if dev == "cuda" else "float32", bs, [12],
                           compiled=comp, workers=2)
        res[f"engine compiled={comp} uniform={u} batch={bs} s"] = r["seconds"]
        res[f"engine compiled={comp} uniform={u} batch={bs} mfu"] = \
            mfu(params, tokens, r["seconds"])
        save()
