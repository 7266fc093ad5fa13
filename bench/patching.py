"""Activation patching (engine/components/patching.py, issue 55 part 3) on SmolLM2-135M.

Speed: a 12-token sentence pair, the whole residual grid (31 rows × 12 tokens) by
engine.components.patching.patch against nnsight 0.8 doing the same grid in the same run (the
model wrapped in nnsight.NNsight; the clean run's activations saved in one trace, then one trace
per chunk of the same rows per batch, each row's cell written into the layer's output), the
two interleaved run by run; each the median of its runs with a 95% bootstrap interval of the
median; the largest difference between the two grids. Peak memory: each in a fresh process,
the resident memory sampled every 2 ms during the run, against a plain forward of the same
ids (weights included; and what each adds on top of the loaded model).

Causal tracing (Meng et al. 2022): bench/sample/facts.txt, the facts SmolLM2 completes right
(its top-1 next token is the answer's first token), the subject's input embeddings noised
(3 × the embedding matrix's std, SEEDS seeds) and every residual / attention / mlp cell
restored from the clean run. Per fact, the restored share of f = log p(answer) —
(patched − corrupt) / (clean − corrupt) — averaged over the rows of the early, middle and late
third of the layers at the last subject token, at the last token and at the other positions;
means over facts with 95% bootstrap intervals (the fact as unit).

    python -m bench.patching [--quick] [--part speed|trace]   (writes results/patching.json)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
FACTS = Path(__file__).resolve().parent / "sample" / "facts.txt"
MODEL = "smollm2-135m"
CLEAN = "Mary and John went out, and John gave a book to"      # 12 tokens each
CORRUPT = "Mary and John went out, and Mary gave a book to"
TARGET = "Mary"
RUNS, QUICK_RUNS = 5, 2
SEEDS, QUICK_SEEDS = 5, 1
QUICK_FACTS = 4
REGIONS = ("early", "middle", "late")
# the sites traced, each with its window (rows restored at once); Meng et al.'s 10 of GPT-2
# XL's 48 layers is about 6 of SmolLM2's 30
WINDOW = 6
TRACED = {"residual": 1, "attention": 1, "mlp": 1, "attention_window": WINDOW,
          "mlp_window": WINDOW}
PLACES = ("last_subject", "other_subject", "after_subject", "last_token")


# -- speed --------------------------------------------------------------------------------
def _ids(adapter, text: str):
    import torch

    return torch.tensor([adapter.tokenizer(text)["input_ids"]],
                        device=next(adapter.model.parameters()).device)


def nnsight_grid(model, clean_ids, corrupt_ids, target_id: int, chunk: int) -> np.ndarray:
    """[layers + 1, tokens] log p(target) at the last token of the corrupted ids with each
    residual cell (row 0 the embeddings' output, row l block l's output) from the clean run,
    written with nnsight 0.8 (a Llama-style model: model.model.embed_tokens, .layers)."""
    import nnsight
    import torch

    nn = nnsight.NNsight(model)
    n, cols = len(model.model.layers), clean_ids.shape[1]

    def site(l):
        return nn.model.embed_tokens if l == 0 else nn.model.layers[l - 1]

    with torch.no_grad():
        with nn.trace(clean_ids):
            # a value bound in the body escapes it only when saved: the list is, its items
            # are appended raw
            clean = nnsight.save([])
            for l in range(n + 1):
                clean.append(site(l).output)
        clean = [c[0] if isinstance(c, tuple) else c for c in clean]
        cells = [(r, c) for r in range(n + 1) for c in range(cols)]
        out = []
        for lo in range(0, len(cells), chunk):
            part = np.array(cells[lo:lo + chunk])
            with nn.trace(corrupt_ids.expand(len(part), -1)):
                for l in range(n + 1):
                    rows = np.nonzero(part[:, 0] == l)[0]
                    if not len(rows):
                        continue
                    h = site(l).output
                    h = h[0] if isinstance(h, tuple) else h
                    pos = torch.from_numpy(part[rows, 1]).to(h.device)
                    h[torch.from_numpy(rows).to(h.device), pos] = clean[l][0, pos]
                logp = torch.log_softmax(nn.lm_head.output[:, -1].float(), -1)[:, target_id]
                f = logp.save()
            out.append(f.detach().double().cpu().numpy())
    return np.concatenate(out).reshape(n + 1, cols)


def speed(runs: int, log=print) -> dict:
    """Our grid and nnsight's, interleaved, each run in a fresh process (`measure`): the
    seconds, the peak memory and the grid of each; a plain forward's memory beside them."""
    from bench.attribution_speed import median_ci

    got: dict[str, list] = {"ours": [], "nnsight": []}
    for i in range(runs):
        for what in got:
            got[what].append(_measured(what))
        log(f"patching run {i + 1}/{runs}: ours {got['ours'][-1]['seconds']:.1f} s, "
            f"nnsight {got['nnsight'][-1]['seconds']:.1f} s")
    plain = _measured("plain")
    ours, theirs = (np.array(got[w][-1].pop("grid")) for w in ("ours", "nnsight"))
    for w in got:
        for r in got[w]:
            r.pop("grid", None)
    ours_s, theirs_s = ([r["seconds"] for r in got[w]] for w in ("ours", "nnsight"))
    peak = {w: float(np.median([r["peak_mb"] for r in got[w]])) for w in got}
    return {"model": MODEL, "clean": CLEAN, "corrupt": CORRUPT, "target": TARGET,
            "tokens": got["ours"][0]["tokens"], "cells": int(ours.size),
            "cells_left_alone": cells_left_alone(),
            "rows_per_batch": got["ours"][0]["rows_per_batch"], "device": plain["device"],
            "threads": torch_threads(), "ours_s": median_ci(ours_s),
            "nnsight_s": median_ci(theirs_s),
            "ours_over_nnsight": median_ci(np.array(ours_s) / np.array(theirs_s)),
            "max_abs_diff": float(np.abs(ours - theirs).max()),
            "clean_f": got["ours"][0]["clean_f"], "corrupt_f": got["ours"][0]["corrupt_f"],
            "memory": {"plain": plain, "ours": got["ours"], "nnsight": got["nnsight"],
                       "peak_over_plain": {w: peak[w] / plain["peak_mb"] for w in peak},
                       "added_over_plain": {
                           w: float(np.median([r["added_mb"] for r in got[w]]))
                           / max(plain["added_mb"], 1e-9) for w in got}}}


def cells_left_alone() -> int:
    """How many cells of the speed pair's residual grid the corruption leaves as they are
    (engine.components.patching.unchanged): ctxlens does not run them, nnsight's grid does."""
    from engine.api import Engine
    from engine.attribution.explain import objective_of
    from engine.components import patching
    from engine.text import to_word_text

    adapter = Engine().adapter(MODEL)
    sites = adapter.parts()
    runs = []
    for text in (CLEAN, CORRUPT):
        obj = objective_of(adapter, to_word_text(text), TARGET, None, "next")
        runs.append(patching.record(sites.model, sites, "residual", obj.value, obj.x)[1])
    return int(patching.unchanged(runs[0], runs[1],
                                  patching.Layout.single(len(obj.pieces))).sum())


def torch_threads() -> int:
    return int(os.environ.get("BENCH_THREADS", "2"))


def _rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure(what: str) -> dict:
    """In this (fresh) process: the model loaded, then one plain forward, our grid or
    nnsight's, timed, with the resident memory sampled every 2 ms (on CUDA the allocator's
    peak): memory before (the loaded model), at the peak, and what the run added."""
    import nnsight  # noqa: F401 - imported before the clock starts, as a caller would have
    import torch

    from engine.api import Engine
    from engine.components import patching

    adapter = Engine().adapter(MODEL)
    model = adapter.model
    clean, corrupt = _ids(adapter, CLEAN), _ids(adapter, CORRUPT)
    n = clean.shape[1]
    chunk = patching.chunk_size(model, n, (adapter.parts().n_layers + 1) * n)
    out: dict = {"device": str(clean.device), "tokens": int(n), "rows_per_batch": chunk}

    def ours():
        p = patching.patch(adapter, CLEAN, CORRUPT, TARGET, site="residual")
        out.update(clean_f=p.clean, corrupt_f=p.corrupt)
        return p.patched

    run = {"plain": lambda: model(clean, use_cache=False).logits[0, -1],
           "ours": ours,
           "nnsight": lambda: nnsight_grid(model, clean, corrupt,
                                           adapter.tokenizer(" " + TARGET)["input_ids"][0],
                                           chunk)}[what]
    with torch.no_grad():     # the weights paged in (they load lazily) before the baseline
        model(clean[:, :1], use_cache=False)
    cuda = clean.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss()
    peak, done = [base], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.002)

    watcher = threading.Thread(target=sample, daemon=True)
    if not cuda:
        watcher.start()
    t = time.perf_counter()
    with torch.no_grad():
        grid = run()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    done.set()
    if cuda:
        peak[0] = torch.cuda.max_memory_allocated()
    else:
        watcher.join()
        peak[0] = max(peak[0], _rss())
    if what != "plain":
        out["grid"] = np.asarray(grid).tolist()
    return {**out, "seconds": seconds, "loaded_mb": base / 2**20, "peak_mb": peak[0] / 2**20,
            "added_mb": (peak[0] - base) / 2**20,
            "memory_is": "CUDA allocated" if cuda else "resident (RSS)"}


def _measured(what: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.patching", "--measure", what],
                         cwd=ROOT, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"bench.patching --measure {what}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- causal tracing -------------------------------------------------------------------------
def load_facts(path: Path = FACTS) -> list[tuple[str, str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            prompt, subject, answer = (p.strip() for p in line.split("|"))
            rows.append((prompt, subject, answer))
    return rows


def known(adapter, facts) -> list[tuple[str, str, str]]:
    """The facts whose answer's first token is the model's top-1 next token."""
    import torch

    kept = []
    for prompt, subject, answer in facts:
        with torch.no_grad():
            logits = adapter.model(_ids(adapter, prompt), use_cache=False).logits[0, -1]
        if int(logits.argmax()) == adapter.tokenizer(" " + answer)["input_ids"][0]:
            kept.append((prompt, subject, answer))
    return kept


def subject_span(adapter, prompt: str, subject: str) -> tuple[int, int]:
    """The positions (among the pieces read) of the subject's first and last piece."""
    from engine.attribution.explain import objective_of
    from engine.components.patching import noised_slots
    from engine.text import to_word_text

    text = to_word_text(prompt)
    obj = objective_of(adapter, text, "x", None, "next")
    slots = obj.slots[noised_slots(obj, text, subject)]
    return int(slots[0]), int(slots[-1])


def regions(restored: np.ndarray, first: int, last: int) -> dict:
    """Mean restored share per third of the rows at Meng et al.'s places: the subject's last
    piece, its other pieces, the pieces after it but the last, and the last piece (the
    positions before the subject are the corrupted run's, exactly)."""
    rows, cols = restored.shape
    edges = np.linspace(0, rows, 4).round().astype(int)
    places = {"last_subject": [last], "other_subject": list(range(first, last)),
              "after_subject": list(range(last + 1, cols - 1)), "last_token": [cols - 1]}
    return {name: {place: float(restored[lo:hi][:, at].mean()) if at else float("nan")
                   for place, at in places.items()}
            for name, lo, hi in zip(REGIONS, edges[:-1], edges[1:])}


def trace(n_facts: int | None, seeds: int, log=print, save=lambda part: None,
          done: list[dict] | None = None) -> dict:
    """The causal traces of the known facts; `save` gets the result so far after each fact
    (a run stopped early keeps the facts it finished); `done`: facts traced by an earlier run
    with the same seeds, kept rather than traced again."""
    from engine.api import Engine
    from engine.components import patching

    adapter = Engine().adapter(MODEL)
    facts = load_facts()
    kept = known(adapter, facts)
    log(f"SmolLM2 knows {len(kept)} of {len(facts)} facts")
    chosen = kept[:n_facts] if n_facts else kept
    per_fact: list[dict] = [f for f in done or () if (f["prompt"], f["subject"], f["answer"])
                            in chosen]
    for f in per_fact:         # an earlier run's grids, read with today's places
        f["subject_span"] = list(subject_span(adapter, f["prompt"], f["subject"]))
        for site in TRACED:
            if site in f:
                f[site]["regions"] = regions(np.array(f[site]["restored"]),
                                             *f["subject_span"])
    head = {"model": MODEL, "facts": len(facts), "known": len(kept),
            "known_facts": [k[0] + " → " + k[2] for k in kept], "chosen": len(chosen),
            "seeds": seeds, "noise": f"{patching.NOISE_SCALE:g} × the embedding matrix's std"}
    for i, (prompt, subject, answer) in enumerate(chosen):
        row = next((f for f in per_fact if f["prompt"] == prompt), None)
        if row is None:
            first, last = subject_span(adapter, prompt, subject)
            row = {"prompt": prompt, "subject": subject, "answer": answer,
                   "subject_span": [first, last]}
            per_fact.append(row)
        todo = [(name, w) for name, w in TRACED.items() if name not in row]
        for name, window in todo:
            t = time.perf_counter()
            p = patching.patch(adapter, prompt, None, answer, site=name.split("_")[0],
                               kind="next", noise_words=subject, seeds=seeds, window=window)
            row[name] = {"clean": p.clean, "corrupt": p.corrupt,
                         "regions": regions(p.restored, *row["subject_span"]),
                         "restored": np.round(p.restored, 4).tolist()}
            log(f"fact {i + 1}/{len(chosen)} {name}: {time.perf_counter() - t:.0f} s")
        if todo:
            save({**head, "traced": len(per_fact), "summary": summarise(per_fact),
                  "per_fact": per_fact})
    return {**head, "traced": len(per_fact), "summary": summarise(per_fact),
            "per_fact": per_fact}


def mean_ci(values) -> dict:
    """Mean of the finite values with a 95% percentile-bootstrap interval (the fact as unit),
    as bench/attribution.py's (not imported: bench.views, which bench.attribution imports,
    imports this module)."""
    from engine.analysis.bootstrap import interval, ratio_replicates, resample_counts

    x = np.array(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {"mean": None, "ci": None, "n": 0}
    lo, hi = interval(ratio_replicates(x, np.ones(len(x)), resample_counts(len(x))))
    return {"mean": float(x.mean()), "ci": [float(lo), float(hi)], "n": int(len(x))}


# Meng et al. 2022's findings as differences per fact (site, third of the layers, place,
# minus place): the restored share at the last subject piece beats the other pieces from the
# subject on in the middle layers, in the residual stream and the MLPs; late, the last piece
# beats the last subject piece (the "late site"), in the residual stream and the attention
CLAIMS = (("residual", "middle", "last_subject", "others"),
          ("mlp", "middle", "last_subject", "others"),
          ("mlp_window", "middle", "last_subject", "others"),
          ("residual", "late", "last_token", "last_subject"),
          ("attention", "late", "last_token", "last_subject"),
          ("attention_window", "late", "last_token", "last_subject"))


def _place(f: dict, site: str, region: str, place: str) -> float:
    """One fact's mean restored share over a third of the rows at a place; "others": every
    piece from the subject's first to the one before the last, but the last subject piece."""
    restored = np.array(f[site]["restored"])
    first, last = f["subject_span"]
    rows, cols = restored.shape
    edges = np.linspace(0, rows, 4).round().astype(int)
    lo, hi = edges[REGIONS.index(region)], edges[REGIONS.index(region) + 1]
    at = {"last_subject": [last], "last_token": [cols - 1],
          "others": [c for c in range(first, cols - 1) if c != last]}[place]
    return float(restored[lo:hi][:, at].mean()) if at else float("nan")


def summarise(per_fact: list[dict]) -> dict:
    """site -> third of the layers -> place -> mean over facts with its 95% interval; and
    each of CLAIMS: the mean difference with its interval, reproduced when the interval is
    above 0."""
    traced = [site for site in TRACED if all(site in f for f in per_fact)]
    out = {site: {reg: {place: mean_ci([f[site]["regions"][reg][place] for f in per_fact])
                        for place in PLACES} for reg in REGIONS}
           for site in traced}
    claims = []
    for site, region, a, b in CLAIMS:
        if site not in traced:
            continue
        d = mean_ci([_place(f, site, region, a) - _place(f, site, region, b)
                     for f in per_fact])
        claims.append({"claim": f"{site}, {region} layers: {a} − {b} > 0", "difference": d,
                       "reproduced": bool(d["ci"] and d["ci"][0] > 0)})
    out["claims"] = claims
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.patching", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} speed runs; "
                    f"{QUICK_FACTS} facts, {QUICK_SEEDS} seed")
    ap.add_argument("--part", choices=("speed", "trace"), help="only this part")
    ap.add_argument("--facts", type=int, help="trace this many of the known facts (those of "
                    "an earlier run with the same seeds are kept)")
    ap.add_argument("--seeds", type=int, help="noise draws per fact")
    ap.add_argument("--summarise", action="store_true", help="only summarise the traced "
                    "facts of results/patching.json again")
    ap.add_argument("--measure", choices=("plain", "ours", "nnsight"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(torch_threads())
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    log = lambda s: print(s, file=sys.stderr, flush=True)          # noqa: E731
    if args.summarise:          # the stored grids read again (a run stopped early, say)
        path = RESULTS / "patching.json"
        result = json.loads(path.read_text())
        result["trace"]["summary"] = summarise(result["trace"]["per_fact"])
        path.write_text(json.dumps(result, indent=1) + "\n")
        return 0
    if args.part in (None, "speed"):
        _write("speed", speed(QUICK_RUNS if args.quick else RUNS, log), args.quick)
    if args.part in (None, "trace"):
        seeds = args.seeds or (QUICK_SEEDS if args.quick else SEEDS)
        path = RESULTS / "patching.json"
        before = (json.loads(path.read_text()).get("trace") or {}) if path.exists() else {}
        done = before.get("per_fact") if before.get("seeds") == seeds else None
        _write("trace", trace(args.facts or (QUICK_FACTS if args.quick else None), seeds, log,
                              lambda part: _write("trace", part, args.quick), done),
               args.quick)
    log(f"wrote {RESULTS / 'patching.json'}")
    return 0


def _write(part: str, value: dict, quick: bool) -> None:
    """results/patching.json with `part` replaced, read just before writing (the two parts
    may run side by side)."""
    path = RESULTS / "patching.json"
    result = json.loads(path.read_text()) if path.exists() else {}
    from bench.meta import meta

    result[part] = {**value, "quick": quick,
                    "meta": meta(" ".join(["python -m bench.patching", *sys.argv[1:]]))}
    path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
