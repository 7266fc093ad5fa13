"""Probe run once on a lent H100 (2026-11-26, 10:19 UTC), as `python lab/gpu_probes/workers.py OUT`:
the engine's top-layer embed path (bench.gpu.engine_embed, float16, BERT-base shape, 16,384
Brown sentences) with one or two chunks in flight, eager and compiled, batches of 512 and 1024;
then torch.profiler's table of the CUDA kernels of eight warm forward passes of 512 sentences.
The engine then still let SDPA pick cuDNN's attention (engine/families/hf/pooling.py's
_batch_attention came after, from sdpa.py's numbers). Results: results/gpu.md's notes. (Its set-up
is bench.gpu.bench_model's since; the measurement is unchanged.)
"""
import json
import os
import sys

sys.path.insert(0, os.getcwd())
import torch  # noqa: E402

from lab.gpu_probes.common import setup  # noqa: E402

g, out, path, texts = setup()
res = {}
for comp in (False, True):
    for w in (1, 2):
        for bs in (512, 1024):
            r = g.engine_embed(path, texts, "float16", bs, [12], compiled=comp, workers=w)
            res[f"compiled={comp} workers={w} batch={bs}"] = r["seconds"]
            print(json.dumps(res), flush=True)
(out / "probe.json").write_text(json.dumps(res, indent=1))
# where a forward's GPU time goes
from transformers import AutoModel, AutoTokenizer
tok = AutoTokenizer.from_pretrained(path)
model = AutoModel.from_pretrained(path, dtype=torch.float16, attn_implementation="sdpa").cuda().eval()
order = sorted(texts, key=len)
encs = [tok(order[s:s + 512], padding=True, return_tensors="pt").to("cuda") for s in range(0, 4096, 512)]
from torch.profiler import ProfilerActivity, profile
with torch.inference_mode():
    for e in encs: model(**e)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for e in encs: model(**e)
        torch.cuda.synchronize()
t = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=18, max_name_column_width=60)
print(t)
(out / "profile.txt").write_text(t)
t2 = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60)
print(t2)
(out / "profile_cpu.txt").write_text(t2)
