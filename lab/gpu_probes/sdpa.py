"""Probe run once on a lent H100 (2026-11-26, 10:21 UTC), as `python lab/gpu_probes/sdpa.py OUT`:
the bare forward passes of bench.gpu's BERT-base shape (float16, 16,384 Brown sentences,
length-sorted batches) under each of SDPA's kernel choices, each over every batch shape for the
first time after three warm-up batches, as a file of sentences brings them; then the engine's
embed path (two chunks in flight, batch 1024) under the memory-efficient kernel, eager and
compiled. Results: results/gpu.md's notes. (Its set-up
is bench.gpu.bench_model's since; the measurement is unchanged.)
"""
import contextlib
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from lab.gpu_probes.common import mfu, setup  # noqa: E402

g, out, path, texts = setup()
from transformers import AutoModel, AutoTokenizer
tok = AutoTokenizer.from_pretrained(path)
tokens = sum(len(i) for i in tok(texts)["input_ids"])
model = AutoModel.from_pretrained(path, dtype=torch.float16, attn_implementation="sdpa").cuda().eval()
params = g.matmul_params(model)
order = sorted(texts, key=len)
res = {"tokens": tokens}
B = {"default": None, "efficient": [SDPBackend.EFFICIENT_ATTENTION],
     "math": [SDPBackend.MATH], "flash+efficient": [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]}
for bs in (512, 1024):
    encs = [tok(order[s:s + bs], padding=True, return_tensors="pt").to("cuda") for s in range(0, len(order), bs)]
    for name, be in B.items():
        ctx = sdpa_kernel(be) if be else contextlib.nullcontext()
        with ctx, torch.inference_mode():
            for e in encs[:3]: model(**e)
            torch.cuda.synchronize(); t = time.perf_counter()
            for e in encs: model(**e)
            torch.cuda.synchronize(); s = time.perf_counter() - t
        res[f"forward {name} batch={bs}"] = s
        res[f"forward {name} batch={bs} mfu"] = mfu(params, tokens, s)
        print(json.dumps(res), flush=True)
del model
for be_name in ("efficient",):
    for comp in (False, True):
        with sdpa_kernel(B[be_name]):
            r = g.engine_embed(path, texts, "float16", 1024, [12], compiled=comp, workers=2)
        res[f"engine {be_name} compiled={comp} workers=2 batch=1024"] = r["seconds"]
        res[f"engine {be_name} compiled={comp} mfu"] = mfu(params, tokens, r["seconds"])
        print(json.dumps(res), flush=True)
(out / "probe2.json").write_text(json.dumps(res, indent=1))
