"""The docs' and Benchmarks page's views of results/patching.json (bench/patching.py): the
patching grid's speed beside nnsight, and the causal traces against Meng et al. (2022)."""
from __future__ import annotations

import numpy as np

from bench.patching import PLACES, REGIONS, TRACED, WINDOW


def _time(s: dict) -> "Est":
    from bench.view_types import Est

    return Est(s["median"], *s["ci"], digits=2, unit=" s")


def speed_view(data: dict | None):
    """The docs' and Benchmarks page's view of results/patching.json's speed part."""
    from bench.view_types import Est, Table, View, _measured

    sp = (data or {}).get("speed")
    if not sp:
        return View()
    mem = sp["memory"]
    peak = {w: float(np.median([r["peak_mb"] for r in mem[w]])) for w in ("ours", "nnsight")}
    added = {w: float(np.median([r["added_mb"] for r in mem[w]])) for w in ("ours", "nnsight")}
    ratio = sp["ours_over_nnsight"]
    rows = [["ctxlens (engine.components.patching.patch, the whole call)", _time(sp["ours_s"]),
             f"{peak['ours']:.0f} MB", f"{mem['peak_over_plain']['ours']:.2f}×"],
            ["nnsight 0.8.1, same grid and batches", _time(sp["nnsight_s"]),
             f"{peak['nnsight']:.0f} MB", f"{mem['peak_over_plain']['nnsight']:.2f}×"],
            ["a plain forward pass, same ids", "", f"{mem['plain']['peak_mb']:.0f} MB",
             "1.00×"],
            ["ctxlens / nnsight", Est(ratio["median"], *ratio["ci"], digits=2, unit="×"),
             "", ""]]
    runs = len(sp["ours_s"]["runs"])
    return View([Table(
        "The residual patching grid beside nnsight",
        ["what", "time (median)", "peak memory", "peak / plain forward"], rows,
        f"{sp['model']}, “{sp['clean']}” / “{sp['corrupt']}” ({sp['tokens']} tokens each) → "
        f"“{sp['target']}”: {sp['cells']} cells, {sp['rows_per_batch']} rows per batch, on "
        f"{sp['device']} with {sp['threads']} threads. Median of {runs} runs each, "
        "interleaved, each in a fresh process, 95% bootstrap interval of the median; peak "
        f"memory: {mem['plain']['memory_is']}, weights included (what the runs add to the "
        f"loaded model: ctxlens {added['ours']:.0f} MB, nnsight {added['nnsight']:.0f} MB, the "
        f"plain forward {mem['plain']['added_mb']:.0f} MB). ctxlens does not run the "
        f"{sp['cells_left_alone']} cells whose activation the corruption leaves as it is (the "
        "positions before the first changed token, the embeddings of unchanged tokens): "
        "their f is the corrupted run's. The two grids differ by at most "
        f"{sp['max_abs_diff']:.1e}.")], measured=_measured([sp]))


def trace_view(data: dict | None):
    """The docs' and Benchmarks page's view of results/patching.json's causal-tracing part."""
    from bench.view_types import Est, Table, View, _measured

    tr = (data or {}).get("trace")
    if not tr or not tr.get("per_fact"):
        return View()
    sm = tr["summary"]

    def est(d: dict, signed: bool = False):
        return Est(d["mean"], *(d["ci"] or (None, None)), digits=2, signed=signed)

    found = [[c["claim"], est(c["difference"], True), "yes" if c["reproduced"] else "no"]
             for c in sm["claims"]]
    means = [[site, reg, *(est(sm[site][reg][p]) for p in PLACES)]
             for site in TRACED if site in sm for reg in REGIONS]
    how = (f"{tr['model']}: it completes {tr['known']} of the {tr['facts']} facts of "
           f"bench/sample/facts.txt right (top-1 next token); {tr['traced']} traced, the "
           f"subject's input embeddings noised ({tr['noise']}, {tr['seeds']} seed"
           f"{'s' if tr['seeds'] > 1 else ''}). Restored share of f = log p(answer): "
           "(patched − corrupted) / (clean − corrupted), one cell at a time; Meng et al. "
           "restore windows of 10 layers for attention and MLPs, and the sites named "
           f"attention_window and mlp_window restore {WINDOW} layers from each row on. "
           "Means over facts, 95% bootstrap intervals, the fact as unit.")
    return View([Table("Meng et al. (2022)'s findings", ["finding", "difference", "reproduced?"],
                       found, how),
                 Table("Restored share by site, third of the layers and place",
                       ["site", "layers", "last subject piece", "other subject pieces",
                        "pieces after the subject", "last piece"], means,
                       "Places as Meng et al. name them; the last piece is where the answer is "
                       "read.")], measured=_measured([tr]))
