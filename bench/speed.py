"""Speed and memory, each measured as a ratio within one run on this machine.

    python -m bench.speed [part]   (parts run in fresh subprocesses: rss, bank, app)

Targets (issue 5): warm analysis <= 0.2 s, cold <= 2 s; embedding >= 2x a naive loop;
ELMo fast >= 5x the per-time-step reference; <= 1.5 GB RSS with the bundled models loaded;
app start to first chart <= 15 s.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "assets" / "presets.toml"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


def bundled_models() -> list[str]:
    from engine.registry import availability, load_registry

    return [m for m, e in load_registry().items() if e.bundled and availability(e) == "bundled"]


def _subprocess_json(part: str, timeout: float) -> dict:
    """Run `python -m bench.speed part` in a fresh interpreter; its last stdout line is JSON."""
    try:
        done = subprocess.run([sys.executable, "-m", "bench.speed", part], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:300]}
    return json.loads(lines[-1])


# -- machine peak -----------------------------------------------------------------------------

def matmul_flops(n: int = 1024, seconds: float = 1.5) -> float:
    """Measured float32 matmul FLOP/s of this machine (torch, all its threads)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        reps += 1
    return 2 * n ** 3 * reps / (time.perf_counter() - start)


# -- embedding throughput ---------------------------------------------------------------------

def _naive_hf(path: Path, texts: list[str]) -> tuple[float, int, int]:
    """One sentence at a time through Hugging Face with output_hidden_states:
    (seconds, tokens, matmul parameters)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    # matmul parameters only: embedding tables are lookups, not FLOPs
    params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
    tokens = 0
    start = time.perf_counter()
    with torch.inference_mode():
        for t in texts:
            enc = tok(t, return_tensors="pt")
            tokens += int(enc["input_ids"].shape[1])
            out = model(**enc, output_hidden_states=True)
            [h.numpy() for h in out.hidden_states]
    return time.perf_counter() - start, tokens, params


def _batched_hf(path: Path, texts: list[str], batch_size: int) -> float:
    """Hidden states only, padded batches, the default (SDPA) attention: what the engine's
    embed path could cost if it skipped the attention maps."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModel.from_pretrained(str(path), local_files_only=True).eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            enc = tok([texts[j] for j in order[i:i + batch_size]], return_tensors="pt",
                      padding=True)
            out = model(**enc, output_hidden_states=True)
            torch.stack(out.hidden_states).numpy()
    return time.perf_counter() - start


# The plain Hugging Face program a user would write to get every layer's hidden states for a
# file of sentences: load, padded batches (shortest first), SDPA attention, save the arrays.
HF_PROGRAM = """
import sys, numpy as np, torch
from transformers import AutoModel, AutoTokenizer
path, src, out, bs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
texts = [l.strip() for l in open(src, encoding="utf-8") if l.strip()]
tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
model = AutoModel.from_pretrained(path, local_files_only=True).eval()
order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
states = {}
with torch.inference_mode():
    for i in range(0, len(order), bs):
        idx = order[i:i + bs]
        enc = tok([texts[j] for j in idx], return_tensors="pt", padding=True)
        hs = torch.stack(model(**enc, output_hidden_states=True).hidden_states, 1).numpy()
        for r, j in enumerate(idx):
            states[f"s{j}"] = hs[r, :, :int(enc["attention_mask"][r].sum())]
np.savez(out, **states)
"""


def embed_processes(model_id: str, texts: list[str], batch_size: int = 32,
                    repeats: int = 3) -> dict:
    """Whole process against whole process: `ctxlens embed` on a file of sentences against
    HF_PROGRAM on the same file (start-up, model load, run, writing the arrays), alternated,
    `repeats` times each, after one engine run in an empty cache (it traces the model's graph,
    engine/families/hf/traced.py: that first run is timed and reported on its own)."""
    import subprocess
    import tempfile

    from engine.registry import load_registry, local_path

    path = local_path(load_registry()[model_id])
    times: dict[str, list[float]] = {"engine": [], "hf": []}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "CTXLENS_CACHE": str(Path(tmp) / "cache")}
        src = Path(tmp) / "sentences.txt"
        src.write_text("\n".join(texts) + "\n", encoding="utf-8")
        commands = {
            "engine": [sys.executable, "-m", "engine", "embed", "--model", model_id, "--input",
                       str(src), "--output", str(Path(tmp) / "engine.npz"), "--batch-size",
                       str(batch_size)],
            "hf": [sys.executable, "-c", HF_PROGRAM, str(path), str(src),
                   str(Path(tmp) / "hf.npz"), str(batch_size)]}
        start = time.perf_counter()
        first = subprocess.run(commands["engine"], cwd=ROOT, env=env, check=True,
                               capture_output=True, text=True)
        first_s = time.perf_counter() - start
        for _ in range(repeats):
            for name, cmd in commands.items():
                start = time.perf_counter()
                subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
                times[name].append(time.perf_counter() - start)
    return {"model": model_id, "sentences": len(texts), "engine_s": times["engine"],
            "hf_s": times["hf"], "ratio": float(np.median(times["hf"]) /
                                                  np.median(times["engine"])),
            "engine_first_s": first_s, "first_traced": "tracing" in first.stderr}


def embed_throughput(model_id: str, texts: list[str], batch_size: int = 32) -> dict:
    from engine.api import Engine
    from engine.registry import load_registry, local_path

    engine = Engine(cache_size=0, traced=True)       # as `ctxlens embed` runs it
    engine.hidden_state_encoder(model_id, progress=False)
    engine.encode(model_id, texts[:8])  # warm-up (first-call allocations)
    from engine.cli.embed import embed_pooled
    from engine.text import to_word_text

    start = time.perf_counter()
    # the `ctxlens embed` path (engine/cli/embed.py), text splitting included
    embed_pooled(engine, model_id, [to_word_text(t) for t in texts], batch_size, "mean")
    engine_s = time.perf_counter() - start
    path = local_path(load_registry()[model_id])
    naive_s, tokens, params = _naive_hf(path, texts)
    batched_s = _batched_hf(path, texts, batch_size)
    flops = matmul_flops()
    bound_s = 2 * params * tokens / flops
    return {"model": model_id, "sentences": len(texts), "tokens": tokens,
            "engine_s": engine_s, "naive_s": naive_s, "speedup": naive_s / engine_s,
            "matmul_gflops": flops / 1e9, "params_matmul": params, "flop_bound_s": bound_s,
            "engine_vs_bound": engine_s / bound_s, "batch_size": batch_size,
            "hf_batched_s": batched_s}


# -- GPU: batch embedding throughput and model FLOP utilisation -----------------------------

def gpu_embed() -> dict:
    """bench/gpu.py's run (the engine's embed path on CUDA against plain HF on the same GPU),
    its headline figures at the top level; skipped, with the reason, without a CUDA device."""
    from bench import gpu

    result = gpu.run(log=lambda m: None)
    return result if "skipped" in result else {**gpu.headline(result), "run": result}


# -- ELMo fast path vs reference loop ---------------------------------------------------------

def elmo_paths(sentences: list[list[str]], batch_size: int = 32, bilm=None,
               source: str = "", repeats: int = 3) -> dict:
    """The same biLM run with impl="fast" and impl="reference" on the same batches."""
    import torch

    from engine.families.elmo.chars import batch_char_ids

    if bilm is None:
        bilm, source = _elmo_bilm()
    batches = [torch.from_numpy(batch_char_ids(sentences[i:i + batch_size]))
               for i in range(0, len(sentences), batch_size)]
    times, outputs = {"reference": [], "fast": []}, {}
    with torch.inference_mode():
        for _ in range(repeats):  # interleaved, best of `repeats`: the machine is shared
            for impl in ("reference", "fast"):
                start = time.perf_counter()
                outputs[impl] = [bilm(b, impl=impl).layers for b in batches]
                times[impl].append(time.perf_counter() - start)
    times = {k: min(v) for k, v in times.items()}
    with torch.inference_mode():  # the reference loop one sentence at a time (no batching)
        start = time.perf_counter()
        for sent in sentences:
            bilm(torch.from_numpy(batch_char_ids([sent])), impl="reference")
        times["reference_unbatched"] = time.perf_counter() - start
    diff = max(float((f - r).abs().max()) for f, r in zip(outputs["fast"], outputs["reference"]))
    return {"model": source, "sentences": len(sentences), "batch_size": batch_size,
            "fast_s": times["fast"], "reference_s": times["reference"],
            "speedup": times["reference"] / times["fast"], "max_abs_diff": diff,
            "repeats": repeats, "reference_unbatched_s": times["reference_unbatched"],
            "speedup_vs_unbatched": times["reference_unbatched"] / times["fast"],
            "same_to_1e-5": diff <= 1e-5}


def _elmo_bilm():
    """The project's trained ELMo when available, else a random biLM of ELMo-small's size."""
    from engine.api import Engine, EngineError
    from engine.families.elmo.modules import ElmoBiLm, ElmoOptions
    from engine.registry import availability

    engine = Engine(cache_size=0)
    for mid, entry in engine.registry.items():
        if entry.family == "elmo" and availability(entry) in ("bundled", "installed"):
            try:
                return engine.adapter(mid, progress=False).bilm, mid
            except EngineError:
                continue
    # AllenNLP elmo_2x1024_128_2048cnn_1xhighway (the "small" options)
    options = {"char_cnn": {"embedding": {"dim": 16}, "n_highway": 1, "activation": "relu",
                            "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256],
                                        [6, 512], [7, 1024]], "n_characters": 262,
                            "max_characters_per_token": 50},
               "lstm": {"dim": 1024, "projection_dim": 128, "n_layers": 2, "cell_clip": 3,
                        "proj_clip": 3, "use_skip_connections": True}}
    bilm = ElmoBiLm.from_options(ElmoOptions.from_dict(options), seed=0).eval()
    return bilm, "random biLM with ELMo-small options (no trained ELMo available)"


# -- fresh-process parts ----------------------------------------------------------------------

def part_rss() -> dict:
    """Peak RSS of a process that loads every bundled model and encodes one sentence each."""
    from engine.api import Engine

    engine = Engine()
    models = bundled_models()
    for m in models:
        engine.encode(m, ["The bank of the river was muddy."])
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"models": models, "peak_rss_gb": peak_kb / 1024 ** 2}


def bank_preset() -> tuple[str, list[str], list[str]]:
    p = tomllib.loads(PRESETS.read_text())["presets"]["bank"]
    return p["target"], [s for s, _ in p["sentences"]], [lab for _, lab in p["sentences"]]


def polysemy_analysis(engine, models: list[str], method: str = "umap") -> None:
    """What the clusters page computes for a preset: every layer's target vectors, a
    projection aligned across layers, sense separation and layer geometry, per model."""
    from engine.analysis import geometry, senses

    target, sentences, labels = bank_preset()
    for m in models:
        encs = engine.encode(m, sentences)
        rows = [(i, [w.lower() for w in e.words].index(target)) for i, e in enumerate(encs)
                if target in [w.lower() for w in e.words]]
        vecs = np.stack([encs[i].word_vectors("mean")[:, w] for i, w in rows], axis=1)
        engine.project(vecs, method=method, seed=0)
        senses.sense_separation(vecs, [labels[i] for i, _ in rows])
        geometry.layer_metrics(encs)


def part_bank() -> dict:
    """Load; the first analysis as the page opens (its default projection, PCA: scikit-learn
    and the rest imported on first use); then, the result cache emptied, the first UMAP call
    (import umap, its numba kernels from the disk cache or compiled when that is empty), the
    analysis with UMAP on inputs never seen (cold) and again with encodings cached (warm)."""
    from engine.analysis import projection
    from engine.api import Engine

    models = bundled_models()
    start = time.perf_counter()
    engine = Engine()
    for m in models:
        engine.adapter(m, progress=False)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    polysemy_analysis(engine, models, method="pca")
    first_view_s = time.perf_counter() - start
    engine.results.clear()
    start = time.perf_counter()
    projection.project(np.random.default_rng(0).normal(size=(2, 8, 16)), method="umap")
    jit_s = time.perf_counter() - start
    import umap.umap_

    # whether this process loaded UMAP's kernels from numba's disk cache or compiled them
    from_cache = sum(umap.umap_.smooth_knn_dist.stats.cache_hits.values()) > 0
    times = []
    for _ in range(3):
        start = time.perf_counter()
        polysemy_analysis(engine, models)
        times.append(time.perf_counter() - start)
    return {"models": models, "load_s": load_s, "first_view_s": first_view_s,
            "umap_jit_s": jit_s,
            "umap_from_disk_cache": from_cache, "cold_s": times[0],
            "warm_s": min(times[1:])}


def default_preset() -> tuple[str, list[str], list[str]]:
    """The preset the app opens with (the first in assets/presets.toml)."""
    p = next(iter(tomllib.loads(PRESETS.read_text())["presets"].values()))
    return p["target"], [s for s, _ in p["sentences"]], [lab for _, lab in p["sentences"]]


def _grid_projections(engine, models, sentences, target, method) -> int:
    """What the Layers-side-by-side page asks of the engine for a grid per model: every
    layer's occurrences and one aligned projection of all layers (not served from a cache).
    The figures are the app's and are not timed here: bench/ never imports app/, which ships
    without it. Returns the number of layers projected."""
    from engine.analysis import occurrences, projection

    layers = 0
    for m in models:
        occ = occurrences.collect(engine.encode(m, sentences), "mean", target)
        proj = projection.project(occ.vectors, method=method, seed=0)
        layers += len(proj.coords)
    return layers


def _side_panel(engine, model_id: str, sentences, target, point: int) -> None:
    """What a click on a grid point computes: cosine neighbours at the top layer, the model's
    guesses at that position and the word's attention row (maps for that one sentence)."""
    from engine.analysis import occurrences
    from engine.analysis.attention import word_row
    from engine.text import left_of_word, mask_word

    occ = occurrences.collect(engine.encode(model_id, sentences), "mean", target)
    occurrences.nearest(occ.vectors[-1], point, 5)
    s, w = occ.sentence[point], occ.position[point]
    can = engine.resolved(model_id).capabilities
    if "masked_lm" in can:
        engine.predict_masked(model_id, mask_word(sentences[s], w), top_k=5)
    elif "next_word" in can and w > 0:
        engine.predict_next(model_id, left_of_word(sentences[s], w), top_k=5)
    if "attention" in can:
        enc = engine.encode(model_id, [sentences[s]], attentions=True)[0]
        word_row(enc.attentions[-1], enc.token_to_word, w, len(enc.words))


def part_grid() -> dict:
    """#19's targets, one fresh process, the app's default preset and models: all layers'
    aligned projections for the three models, warm (models loaded, preset encoded) with PCA and
    cold with UMAP (the first UMAP of the process: import, numba kernels from the disk cache);
    then a click's side panel for points not clicked before (median and worst)."""
    from engine.api import Engine
    from engine.registry import default_model

    target, sentences, _ = default_preset()
    models = []
    from engine.families import FAMILIES

    for fam in FAMILIES:
        try:
            models.append(default_model(fam))
        except Exception:  # noqa: BLE001 - a family with no model here is left out
            pass
    engine = Engine()
    for m in models:
        engine.encode(m, sentences)
    start = time.perf_counter()
    layers = _grid_projections(engine, models, sentences, target, "umap")
    umap_cold = time.perf_counter() - start
    pca = []
    for _ in range(10):
        start = time.perf_counter()
        _grid_projections(engine, models, sentences, target, "pca")
        pca.append(time.perf_counter() - start)
    clicks = {}
    for m in models:
        times = []
        for point in range(len(sentences)):
            start = time.perf_counter()
            _side_panel(engine, m, sentences, target, point)
            times.append(time.perf_counter() - start)
        clicks[m] = {"median_s": float(np.median(times)), "max_s": float(max(times)),
                     "times_s": times}
    return {"models": models, "target": target, "sentences": len(sentences), "layers": layers,
            "umap_cold_s": umap_cold, "pca_warm_s": float(np.median(pca)), "pca_times_s": pca,
            "clicks": clicks}


# the default page has settled when its last chart, sense separation under the tabs, is drawn
# (the page opens on its best tab; the other tabs' charts come first in the document, hidden)
SETTLED = ".st-key-sep-silhouette .js-plotly-plot >> visible=true"
APP_MARKS = (("sidebar_s", "[data-testid='stSidebar']"),
             ("first_chart_s", ".js-plotly-plot >> visible=true"),
             ("settled_s", SETTLED))
# the floor under the app's first chart on this machine: Streamlit and plotly alone
ONE_CHART_PAGE = ("import plotly.graph_objects as go\nimport streamlit as st\n\n"
                  "st.plotly_chart(go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2], "
                  "mode='markers')))\n")


def _app_visit(env: dict[str, str], timeout_s: float, script: Path | None = None,
               marks=APP_MARKS) -> dict:
    """One `streamlit run` and one headless Chromium visit to its page: seconds to the page
    served, then to each mark (for the app: the sidebar, the first plotly chart and the
    page settled)."""
    from playwright.sync_api import sync_playwright

    from bench.server import streamlit_server

    start = time.perf_counter()
    deadline = start + timeout_s
    with streamlit_server(stop_timeout=10, env=env, script=script) as (url, _), \
            sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        while True:  # the server needs a moment before it accepts connections
            try:
                page.goto(f"{url}/", timeout=5000)
                break
            except Exception:
                if time.perf_counter() > deadline:
                    raise
                time.sleep(0.25)
        out = {"page_served_s": time.perf_counter() - start}
        for name, selector in marks:
            remaining = max(1.0, deadline - time.perf_counter())
            page.wait_for_selector(selector, timeout=remaining * 1000)
            out[name] = time.perf_counter() - start
        browser.close()
    return out


def part_app(timeout_s: float = 180) -> dict:
    """Seconds from `streamlit run` to a rendered plotly chart (and to the page settled) in
    headless Chromium: first with no encodings kept on disk (a first start, the app as it was
    before the store), then after one visit has filled the store (every later start); the
    models' own files and caches (converted GGUF, traced graphs) are in place for both. Beside
    them, in the same run, a page of one plotly chart and nothing else: what Streamlit and
    plotly take on this machine before any of the app's work."""
    off = _app_visit({"CTXLENS_ENCODING_CACHE_MB": "0"}, timeout_s)
    _app_visit({}, timeout_s)                      # fills the store if it is empty
    runs = [_app_visit({}, timeout_s) for _ in range(3)]
    best = min(runs, key=lambda r: r["first_chart_s"])
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "one_chart.py"
        script.write_text(ONE_CHART_PAGE)
        floor = [_app_visit({}, timeout_s, script, APP_MARKS[1:2]) for _ in range(3)]
    return {**best, "runs": runs, "no_store": off,
            "one_chart_page": min(floor, key=lambda r: r["first_chart_s"]),
            "one_chart_runs": floor}


PARTS = {"rss": part_rss, "bank": part_bank, "app": part_app, "grid": part_grid}


# -- the whole speed report -------------------------------------------------------------------

def run_speed(results: Path, quick: bool = False, log=print) -> dict:
    from bench.corpus import load_brown, spread
    from bench.speed_report import speed_report

    brown = load_brown()
    # 1,000 sentences rather than the 2,000 asked for: the naive loop alone takes minutes on 2
    # shared cores, and make bench must stay under 30 minutes
    n_embed, n_elmo = (200, 32) if quick else (1000, 128)
    texts = [" ".join(s.words) for s in spread(brown.heldout, n_embed)]
    out: dict = {}
    log("speed: bank preset analysis (fresh process)")
    out["bank"] = _subprocess_json("bank", 900)
    log("speed: peak RSS (fresh process)")
    out["rss"] = _subprocess_json("rss", 600)
    embed_model = "minilm-l6" if "minilm-l6" in bundled_models() else None
    if embed_model:
        log(f"speed: embedding throughput on {len(texts)} sentences")
        out["embed"] = embed_throughput(embed_model, texts)
        log("speed: ctxlens embed vs a plain HF program, whole processes")
        out["embed_process"] = embed_processes(embed_model, texts)
    log("speed: GPU batch embedding (skipped without CUDA)")
    out["gpu"] = gpu_embed()
    log("speed: ELMo fast vs reference")
    out["elmo"] = elmo_paths([list(s.words) for s in spread(brown.heldout, n_elmo)])
    log("speed: layers side by side (fresh process)")
    out["grid"] = _subprocess_json("grid", 600)
    log("speed: app start to first chart (headless Chromium)")
    out["app"] = _subprocess_json("app", 400)
    (results / "speed.json").write_text(json.dumps(out, indent=1))
    (results / "speed.md").write_text(speed_report(out))
    _print_targets(out, log)
    return out


def _print_targets(out: dict, log) -> None:
    from bench.speed_report import target_lines

    log("speed: targets (results/speed.md has every row and how each was measured)")
    for line in target_lines(out):
        print(line, flush=True)


def _embed_parts() -> dict:
    from bench.corpus import load_brown, spread

    texts = [" ".join(s.words) for s in spread(load_brown().heldout, 1000)]
    return {"embed": embed_throughput("minilm-l6", texts),
            "embed_process": embed_processes("minilm-l6", texts)}


# parts of the speed report that run on their own (python -m bench --only NAME): what each
# measures, merged into the last full speed.json under its keys
SOLO_PARTS = {
    "grid": lambda: {"grid": _subprocess_json("grid", 600)},
    "bank": lambda: {"bank": _subprocess_json("bank", 900)},
    "embed": _embed_parts,
    "app": lambda: {"app": _subprocess_json("app", 900)},
}


def run_part_only(results: Path, part: str, log=print) -> dict:
    """One part of the speed report, merged into the last full speed.json (its other rows keep
    the run that measured them; speed.md says which parts ran when)."""
    from bench.speed_report import speed_report

    path = results / "speed.json"
    out = json.loads(path.read_text()) if path.exists() else {}
    log(f"speed: {part} only (fresh processes where the part says so)")
    fresh = SOLO_PARTS[part]()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for key, value in fresh.items():
        value["measured"] = stamp
        out[key] = value
    path.write_text(json.dumps(out, indent=1))
    (results / "speed.md").write_text(speed_report(out))
    _print_targets(out, log)
    return out


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import warnings

    warnings.filterwarnings("ignore")
    print(json.dumps(PARTS[sys.argv[1]]()), flush=True)
