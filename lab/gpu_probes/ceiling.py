"""Probe: how close can BERT-base forward passes on sentence-length inputs come to 40% MFU on
this GPU at all? `python lab/gpu_probes/ceiling.py OUT` (CTXLENS_PROBE_DEVICE=cpu
CTXLENS_PROBE_SENTENCES=600 is a dry run here). bench.gpu's BERT-base shape, float16:
1. the matrix products alone: one layer's four weight matmuls (QKV, output, FFN in and out)
   on a batch of T tokens (T = 512 sentences x the median length), cuBLAS through PyTorch;
2. one fixed batch shape (512 sentences padded to 32 tokens, the median batch), whole forward
   passes: eager SDPA, torch.compile (default mode, static shape) and torch.compile
   "max-autotune-no-cudagraphs" (inductor's tuned matmul templates and fused epilogues),
   and the same with CUDA graphs ("max-autotune");
3. the 16,384 Brown sentences in length-sorted padded batches of 512 and 2048, eager.
MFU as bench.gpu counts it: 2 x matmul parameters x real tokens / seconds / dense peak (a padded
position in (2) counts as real: the shape is fixed). Results: $OUT/ceiling.json.
Run once on a lent H200 (2026-11-26 22:40 UTC): matmuls alone 65.9%; the fixed shape 32.5% eager,
33.8% compiled, 31.1% max-autotune, 33.9% with CUDA graphs; Brown 29.2% / 27.6% eager
(results/gpu_probes.json, results/gpu.md's notes).
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
half = torch.float16 if dev == "cuda" else torch.float32
from transformers import AutoModel, AutoTokenizer  # noqa: E402

res = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
       "torch": torch.__version__}


def save():
    print(json.dumps(res), flush=True)
    (out / "ceiling.json").write_text(json.dumps(res, indent=1))


def timed(fn, repeats=20):
    """Median seconds of `repeats` calls after three warm-ups."""
    for _ in range(3):
        fn()
    g._sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        g._sync()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


tok = AutoTokenizer.from_pretrained(path)
ids = tok(texts)["input_ids"]
tokens = sum(map(len, ids))
model = AutoModel.from_pretrained(path, dtype=half, attn_implementation="sdpa").to(dev).eval()
params = g.matmul_params(model)
res |= {"tokens": tokens, "params_matmul": params,
        "median_tokens": sorted(map(len, ids))[len(ids) // 2]}

# 1. the weight matmuls of one layer alone, x 12 layers
T = 512 * 32
x = torch.randn(T, 768, device=dev, dtype=half)
ws = [torch.randn(768, 3 * 768, device=dev, dtype=half), torch.randn(768, 768, device=dev,
      dtype=half), torch.randn(768, 3072, device=dev, dtype=half),
      torch.randn(3072, 768, device=dev, dtype=half)]
h = torch.randn(T, 3072, device=dev, dtype=half)


def layer_matmuls():
    x @ ws[0]
    x @ ws[1]
    x @ ws[2]
    h @ ws[3]


s = timed(layer_matmuls)
per_layer = sum(w.numel() for w in ws)
res["matmuls alone: T"] = T
res["matmuls alone: MFU"] = 2 * per_layer * T / s / g.NOMINAL_PEAK["H100"]
save()

# 2. one fixed shape, whole forward passes (a CPU dry run: eager only, compiling takes minutes)
MODES = (("eager", None), ("compile default", "default"),
         ("compile max-autotune-no-cudagraphs", "max-autotune-no-cudagraphs"),
         ("compile max-autotune (CUDA graphs)", "max-autotune"))[:None if dev == "cuda" else 1]
xb = torch.randint(5, model.config.vocab_size, (512, 32), device=dev)
mask = torch.ones_like(xb)
mask[:, 28:] = 0                                    # a padded batch, as the engine sends it
with torch.inference_mode():
    for name, mode in MODES:
        try:
            fwd = model if mode is None else torch.compile(model, mode=mode, dynamic=False)
            t = time.perf_counter()
            fwd(input_ids=xb, attention_mask=mask)
            g._sync()
            res[f"fixed shape {name}: first call s"] = time.perf_counter() - t
            with pooling.batch_attention(torch.device(dev)):
                s = timed(lambda: fwd(input_ids=xb, attention_mask=mask))
            res[f"fixed shape {name}: MFU"] = mfu(params, xb.numel(), s)
        except Exception as exc:  # noqa: BLE001 - a failed mode must not lose the others
            res[f"fixed shape {name}: error"] = f"{type(exc).__name__}: {exc}"[:300]
        save()
        torch._dynamo.reset()

# 3. the whole Brown sample, eager, two batch sizes
items = [SimpleNamespace(input_ids=i) for i in ids]
for bs in (512, 2048):
    batches = [forward.pad_batch([items[i] for i in grp], tok.pad_token_id, dev)
               for grp in forward.batches(items, bs, 0)]
    with pooling.batch_attention(torch.device(dev)), torch.inference_mode():
        s = timed(lambda: [model(input_ids=x_, attention_mask=m_) for x_, m_ in batches],
                  repeats=3)
    res[f"Brown batches of {bs}, eager: s"] = s
    res[f"Brown batches of {bs}, eager: MFU"] = mfu(params, tokens, s)
    save()
