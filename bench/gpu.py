"""GPU batch embedding: tokens/s and model FLOP utilisation of the engine's embed path on CUDA,
against a plain Hugging Face loop on the same GPU, sentences, dtype and batch size.

`python -m bench.gpu [--out FILE]` prints one JSON object (and writes it to FILE); without a
CUDA device it says why it skipped. bench/speed.py's report reads the same numbers.

The model is bert-base-uncased when it is installed. On a machine that cannot reach the hub
(the lent GPU machines reach nothing) it is a BERT of the same shape with random weights
(seed 0; 12 layers, 768 dims, 12 heads, 3,072-wide feed-forward) and bert-brown-mlm's WordPiece
tokenizer, written to a temporary model folder: the FLOPs of a forward pass depend on the
shape, not on the weights, and the report names which model ran.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# dense bf16/fp16 tensor-core peaks (vendor data sheets, SXM parts), FLOP/s
NOMINAL_PEAK = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12}


def bert_base_shape(folder: Path) -> Path:
    """A BERT-base-shaped masked LM with random weights (seed 0) and bert-brown-mlm's tokenizer."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    tok_src = ROOT / "assets" / "models" / "bert-brown-mlm"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_src / name, folder / name)
    vocab = json.loads((tok_src / "tokenizer.json").read_text())["model"]["vocab"]
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab)))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def bench_model(tmp: Path, log=print) -> tuple[Path, str]:
    """The model the GPU bench runs and its label: bert-base-uncased where it is installed,
    else a BERT-base-shaped one written under `tmp` (made a configured model folder)."""
    from engine.registry import availability, load_registry, local_path

    os.environ["CTXLENS_MODEL_DIRS"] = str(tmp)
    entry = load_registry().get("bert-base-uncased")
    if entry is not None and availability(entry) == "installed" and local_path(entry):
        return local_path(entry), "bert-base-uncased"
    log("gpu: writing a BERT-base-shaped model with random weights")
    return bert_base_shape(tmp / "bert-base-shape"), (
        "BERT-base shape, random weights (seed 0), bert-brown-mlm's tokenizer: no hub on this "
        "machine")


def matmul_params(model) -> int:
    """Parameters that take part in a matmul per token: all but the embeddings and the head."""
    return sum(p.numel() for n, p in model.named_parameters()
               if "embeddings" not in n and "lm_head" not in n and "cls." not in n
               and p.dim() == 2)


DEVICE = "cuda"      # --device cpu: a dry run of the same code on a machine without a GPU


def _sync():
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def hf_loop(path: Path, texts: list[str], dtype: str, batch_size: int,
            to_cpu: bool = True, compiled: bool = False) -> dict:
    """What a user writes by hand: length-sorted batches, the fast tokenizer, SDPA attention,
    the top layer's token vectors (to the CPU with `to_cpu`). With `compiled`, the forward
    passes alone are timed again through torch.compile (dynamic shapes), after a warm-up that
    compiles them."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, dtype=getattr(torch, dtype),
                                      attn_implementation="sdpa").to(DEVICE).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    batches = [[texts[i] for i in order[s:s + batch_size]]
               for s in range(0, len(order), batch_size)]

    def run(bs):
        out = []
        with torch.inference_mode():
            for b in bs:
                enc = tok(b, padding=True, return_tensors="pt").to(DEVICE)
                h = model(**enc).last_hidden_state
                out.append(h.float().cpu() if to_cpu else h)
        return out

    run(batches[:2])
    _sync()
    start = time.perf_counter()
    run(batches)
    _sync()
    seconds = time.perf_counter() - start
    # forward passes alone, inputs already on the GPU: what the framework can reach
    encs = [tok(b, padding=True, return_tensors="pt").to(DEVICE) for b in batches]
    _sync()
    with torch.inference_mode():
        start = time.perf_counter()
        for e in encs:
            model(**e)
        _sync()
        forward_s = time.perf_counter() - start
    result = {"seconds": seconds, "forward_only_s": forward_s,
              "params_matmul": matmul_params(model), "n_layers": model.config.num_hidden_layers}
    if compiled:
        fast = torch.compile(model, dynamic=True)
        with torch.inference_mode():
            start = time.perf_counter()
            for e in encs[:2] + encs[-2:]:
                fast(**e)
            _sync()
            result["compile_s"] = time.perf_counter() - start
            start = time.perf_counter()
            for e in encs:
                fast(**e)
            _sync()
            result["forward_compiled_s"] = time.perf_counter() - start
        del fast
    del model, encs
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return result


def _via_encodings(engine, model: str, texts, batch_size: int, pool: str,
                   layers=None) -> list:
    """The embed path before v2: every token's vectors to the host, one Encoding per text,
    pooled there (kept here as the same-run baseline)."""
    encs = engine.encode_words(model, texts, batch_size=batch_size, layers=layers)
    return [e.word_vectors(pool) for e in encs]


def engine_embed(path: Path, texts: list[str], dtype: str, batch_size: int,
                 layers=None, profile: bool = False, via: str = "engine",
                 compiled: bool = False, workers: int | None = None) -> dict:
    import torch

    from engine.api import Engine
    from engine.cli.embed import embed_pooled
    from engine.text import to_word_text

    embed = _via_encodings if via == "encodings" else (
        lambda *a, **k: embed_pooled(*a, **k, workers=workers))
    engine = Engine(device=DEVICE, dtype=dtype, cache_size=0, traced=not compiled,
                    compile=compiled)
    words = [to_word_text(t) for t in texts]
    engine.hidden_state_encoder(str(path), progress=False, layers=layers)
    start = time.perf_counter()
    # the warm-up (and, compiled, the compile): the shortest and the longest texts
    ends = sorted(words, key=lambda w: len(w.text))
    embed(engine, str(path), ends[:batch_size] + ends[-batch_size:], batch_size, "mean",
          layers=layers)
    _sync()
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    out = embed(engine, str(path), words, batch_size, "mean", layers=layers)
    _sync()
    seconds = time.perf_counter() - start
    result = {"seconds": seconds, "words": int(sum(v.shape[1] for v in out)),
              "warm_up_s": warm_s}
    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        embed(engine, str(path), words, batch_size, "mean", layers=layers)
        _sync()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
        result["profile"] = buf.getvalue()[-6000:]
    del engine
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return result


def agreement(path: Path, texts: list[str], dtype: str, compiled: bool = False) -> dict:
    """The engine's top-layer word vectors on CUDA (dtype) and on CUDA float32 against the CPU
    float32 engine on the same texts (and, with `compiled`, CUDA dtype through torch.compile)."""
    import numpy as np

    from engine.api import Engine
    from engine.cli.embed import embed_pooled
    from engine.text import to_word_text

    words = [to_word_text(t) for t in texts]
    top = None
    vecs = {}
    plan = [("cpu", "cpu", "float32", False), ("cuda32", DEVICE, "float32", False),
            ("cuda", DEVICE, dtype, False)] + ([("compiled", DEVICE, dtype, True)] if compiled
                                               else [])
    for name, dev, dt, comp in plan:
        engine = Engine(device=dev, dtype=dt, cache_size=0, compile=comp)
        # the reference: CPU float32 through per-text encodings (the path before v2)
        embed = _via_encodings if name == "cpu" else embed_pooled
        out = embed(engine, str(path), words, 16, "mean")
        top = out[0].shape[0] - 1
        vecs[name] = np.concatenate([v[top] for v in out])
    ref = vecs["cpu"]

    def cos_min(a):
        num = (a * ref).sum(1)
        return float((num / (np.linalg.norm(a, axis=1) * np.linalg.norm(ref, axis=1))).min())

    more = ({f"cuda_{dtype}_compiled_max_abs_diff": float(np.abs(vecs["compiled"] - ref).max()),
             f"cuda_{dtype}_compiled_min_cosine": cos_min(vecs["compiled"])}
            if compiled else {})
    return more | {"layer": top, "words": len(ref),
            "cuda_fp32_max_abs_diff": float(np.abs(vecs["cuda32"] - ref).max()),
            f"cuda_{dtype}_max_abs_diff": float(np.abs(vecs["cuda"] - ref).max()),
            f"cuda_{dtype}_min_cosine": cos_min(vecs["cuda"]),
            "ref_max_abs": float(np.abs(ref).max())}


def texts_for(n: int) -> list[str]:
    from bench.corpus import load_brown

    brown = load_brown(build=False)
    pool = [" ".join(s.words) for s in brown.heldout + brown.train]
    return [pool[i % len(pool)] for i in range(n)]


def _row(path: Path, texts: list[str], tokens: int, peak, dtype: str, bs: int, log,
         profile: bool = False,
         kinds=("engine_all_layers", "engine_top_layer", "encodings_top_layer")) -> dict:
    """Plain HF and the engine on the same texts, dtype and batch size: seconds, tokens/s, MFU."""
    log(f"gpu: plain HF, {dtype}, batch {bs}")
    compiled = any(k.endswith("_compiled") for k in kinds)
    try:
        hf = hf_loop(path, texts, dtype, bs, compiled=compiled)
    except Exception as exc:  # noqa: BLE001 - the compiled forward may fail; keep the rest
        log(f"gpu: compiled forward failed ({type(exc).__name__}: {exc}); eager only")
        hf = hf_loop(path, texts, dtype, bs) | {"forward_compiled_error": str(exc)[:300]}
    flops = 2 * hf["params_matmul"] * tokens
    row = {"dtype": dtype, "batch_size": bs, "hf_s": hf["seconds"],
           "hf_forward_only_s": hf["forward_only_s"], "params_matmul": hf["params_matmul"]}
    for k in ("forward_compiled_s", "compile_s", "forward_compiled_error"):
        if k in hf:
            row[f"hf_{k}"] = hf[k]
    top = [hf["n_layers"]]
    plans = {"engine_all_layers": (None, "engine", False),
             "engine_top_layer": (top, "engine", False),
             "encodings_top_layer": (top, "encodings", False),
             "engine_top_layer_compiled": (top, "engine", True)}
    profiled = next((k for k in ("engine_top_layer_compiled", "engine_top_layer") if k in kinds),
                    None)
    for key in kinds:
        layers, via, comp = plans[key]
        log(f"gpu: {via}, {dtype}, batch {bs}, {key}")
        try:
            eng = engine_embed(path, texts, dtype, bs, layers, via=via, compiled=comp,
                               profile=profile and key == profiled)
            row[f"{key}_s"] = eng["seconds"]
            row[f"{key}_warm_up_s"] = eng["warm_up_s"]
            if "profile" in eng:
                row[f"{key}_profile"] = eng["profile"]
        except Exception as exc:  # noqa: BLE001 - one failed row must not lose the rest
            row[f"{key}_error"] = f"{type(exc).__name__}: {exc}"[:500]
    for k in ("hf", "hf_forward_only", "hf_forward_compiled") + tuple(kinds):
        if f"{k}_s" in row:
            row[f"{k}_tokens_per_s"] = tokens / row[f"{k}_s"]
            row[f"{k}_mfu"] = flops / row[f"{k}_s"] / peak if peak else None
    log(json.dumps({k: v for k, v in row.items() if "profile" not in k}))
    return row


ALL_KINDS = ("engine_all_layers", "engine_top_layer", "encodings_top_layer",
             "engine_top_layer_compiled")


def run(n_sentences: int = 16384, batch_sizes=(512, 2048), dtypes=("bfloat16", "float16"),
        log=print, kinds=ALL_KINDS) -> dict:
    import torch

    from bench.meta import meta

    if DEVICE == "cuda" and not torch.cuda.is_available():
        return {"skipped": "no CUDA device here (torch.cuda.is_available() is False)"}
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (dry run)"
    peak = next((v for k, v in NOMINAL_PEAK.items() if k in name), None)
    out: dict = {"device": name, "peak_tflops": peak / 1e12 if peak else None,
                 "torch": torch.__version__,
                 "meta": meta("python -m bench.gpu " + " ".join(sys.argv[1:]))}
    tmp = Path(tempfile.mkdtemp(prefix="ctxlens-gpu-"))
    path, out["model"] = bench_model(tmp, log)
    texts = texts_for(n_sentences)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    tokens = sum(len(ids) for ids in tok(texts)["input_ids"])
    out.update(sentences=len(texts), tokens=tokens)
    rows = []
    # every batch size in the first dtype, the first batch size in the others
    runs = [(d, b) for d in dtypes for b in batch_sizes if d == dtypes[0] or b == batch_sizes[0]]
    for dtype, bs in runs:
        rows.append(_row(path, texts, tokens, peak, dtype, bs, log, kinds=kinds,
                         profile=(dtype, bs) == runs[0]))
    # five sentences a text (~135 tokens): longer inputs, where the matmuls take a larger share
    # than the per-text host work
    paragraphs = [" ".join(texts[i:i + 5]) for i in range(0, len(texts), 5)]
    lengths = [len(ids) for ids in tok(paragraphs)["input_ids"]]
    cap = min(512, tok.model_max_length)
    paragraphs = [p for p, n in zip(paragraphs, lengths) if n <= cap]
    para_tokens = sum(n for n in lengths if n <= cap)
    rows.append(_row(path, paragraphs, para_tokens, peak, dtypes[0], max(batch_sizes) // 4,
                     log, kinds=tuple(k for k in kinds if k.startswith("engine_top"))) |
                {"texts": f"five sentences a text, those of at most {cap} tokens",
                 "sentences": len(paragraphs),
                 "tokens": para_tokens})
    out["rows"] = rows
    for dtype in dtypes:
        try:
            out[f"agreement_{dtype}"] = agreement(path, texts[:256], dtype,
                                                  "engine_top_layer_compiled" in kinds)
        except Exception as exc:  # noqa: BLE001
            out[f"agreement_{dtype}"] = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        out["nvidia_smi"] = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,"
                                            "power.limit,memory.total", "--format=csv"],
                                           capture_output=True, text=True,
                                           timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def headline(result: dict) -> dict:
    """The figures the speed report judges: the engine's best top-layer batch embedding of
    sentences (tokens/s, MFU; eager or --compile, whichever was faster), beside the plain-HF
    loop and its forward passes alone."""
    best, key = None, None
    for r in result.get("rows", []):
        if "texts" in r:
            continue
        for k in ("engine_top_layer", "engine_top_layer_compiled"):
            if r.get(f"{k}_mfu") is not None and (best is None or
                                                  r[f"{k}_mfu"] > best[f"{key}_mfu"]):
                best, key = r, k
    if best is None:
        return {}
    return {"model": result["model"], "device": result["device"], "dtype": best["dtype"],
            "batch_size": best["batch_size"], "path": key,
            "tokens_per_s": best[f"{key}_tokens_per_s"],
            "mfu": best[f"{key}_mfu"], "hf_mfu": best["hf_mfu"],
            "forward_only_mfu": best["hf_forward_only_mfu"],
            "forward_compiled_mfu": best.get("hf_forward_compiled_mfu"),
            "vs_hf_loop": best["hf_s"] / best[f"{key}_s"],
            "vs_encodings": (best["encodings_top_layer_s"] / best[f"{key}_s"]
                             if "encodings_top_layer_s" in best else None)}


def report(result: dict) -> str:
    """results/gpu.md: every row of one run."""
    from bench.tables import table

    if "skipped" in result:
        return f"# GPU batch embedding\n\nSkipped: {result['skipped']}\n"
    pct = (lambda v: f"{v * 100:.1f}%" if v is not None else "n/a")
    lines = ["# GPU batch embedding (bench/gpu.py)", "",
             f"{result['device']}, torch {result['torch']}; nominal dense peak "
             f"{result['peak_tflops']:.0f} TFLOP/s. Model: {result['model']}. "
             f"{result['sentences']:,} Brown sentences ({result['tokens']:,} tokens, the sample "
             "sentences repeated). MFU = 2 x matmul parameters x real tokens (padding not "
             "counted) / seconds / peak. Every path gives the top layer's vectors on the host.",
             "", "- plain HF loop: length-sorted batches, fast tokenizer, SDPA, "
             "last_hidden_state (every token) to the host;",
             "- forward alone: the same batches already on the GPU, nothing copied back (what "
             "the framework reaches; no path that returns vectors can beat it);",
             "- engine: `Engine.word_vectors` (the `ctxlens embed` path): words' vectors pooled "
             "on the GPU; encodings: the path before it (every token to the host, one Encoding "
             "a text).", "",
             "No confidence intervals: each row is one timed pass over all the sentences (after "
             "a warm-up), because a lent GPU gives minutes, not repeats. What varies is the host "
             "side between machines (the notes below quote other runs of the same code); compare "
             "rows of one run, not runs.", ""]
    rows = []
    for r in result["rows"]:
        what = (f"{r['texts']} ({r['sentences']:,} texts, {r['tokens']:,} tokens)"
                if "texts" in r else "sentences") + f", {r['dtype']}, batch {r['batch_size']}"
        for key, name in (("hf", "plain HF loop"), ("hf_forward_only", "forward alone"),
                          ("hf_forward_compiled", "forward alone, torch.compile"),
                          ("engine_top_layer", "engine, top layer"),
                          ("engine_top_layer_compiled", "engine, top layer, --compile"),
                          ("encodings_top_layer", "encodings, top layer"),
                          ("engine_all_layers", "engine, all 13 layers")):
            if f"{key}_s" in r:
                rows.append([what, name, f"{r[f'{key}_s']:.3f}",
                             f"{r[f'{key}_tokens_per_s']:,.0f}", pct(r.get(f"{key}_mfu"))])
    lines.append(table(["texts", "path", "seconds", "tokens/s", "MFU"], rows))
    for key, a in result.items():
        if key.startswith("agreement_") and "error" not in a:
            dt = key.removeprefix("agreement_")
            lines.append(f"\nAgreement ({a['words']:,} words, layer {a['layer']}, against the CPU "
                         f"float32 engine): CUDA float32 max |diff| "
                         f"{a['cuda_fp32_max_abs_diff']:.1e}; CUDA {dt} max |diff| "
                         f"{a[f'cuda_{dt}_max_abs_diff']:.3f} (values up to "
                         f"{a['ref_max_abs']:.1f}), min cosine {a[f'cuda_{dt}_min_cosine']:.6f}"
                         + (f"; compiled {dt} max |diff| "
                            f"{a[f'cuda_{dt}_compiled_max_abs_diff']:.3f}, min cosine "
                            f"{a[f'cuda_{dt}_compiled_min_cosine']:.6f}"
                            if f"cuda_{dt}_compiled_min_cosine" in a else "") + ".")
    if result.get("notes"):
        # what a run's numbers mean, written beside them in its JSON when the run is recorded
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--sentences", type=int, default=16384)
    ap.add_argument("--batch-sizes", default="512,2048")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--kinds", default=",".join(ALL_KINDS),
                    help="engine paths to time, of " + ", ".join(ALL_KINDS))
    ap.add_argument("--report", type=Path, metavar="JSON",
                    help="write results/gpu.md and gpu.json from a run's JSON, run nothing")
    a = ap.parse_args(argv)
    if a.report:
        result = json.loads(a.report.read_text())
        results = ROOT / "results"
        (results / "gpu.json").write_text(json.dumps(result, indent=1))
        (results / "gpu.md").write_text(report(result))
        return 0
    global DEVICE
    DEVICE = a.device
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    result = run(a.sentences, tuple(int(x) for x in a.batch_sizes.split(",")),
                 tuple(a.dtypes.split(",")), log=lambda m: print(m, file=sys.stderr, flush=True),
                 kinds=tuple(a.kinds.split(",")))
    text = json.dumps(result, indent=1)
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
