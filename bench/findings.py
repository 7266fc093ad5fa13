"""Published findings the per-layer benchmarks echo, and whether each measured model
reproduces them.

A finding is a claimed difference between layers (or against a baseline). It counts as
reproduced ("yes") only when the 95% bootstrap interval of that difference excludes zero on the
claimed side; "partly" when the point estimate points the claimed way but the interval
includes zero (or one of a finding's two parts holds); "no" otherwise. The differences
(contrasts) are computed from the bootstrap replicates in bench/layers.py and stored with each
model's result, so the verdicts can be rebuilt from results/layers.json alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.analysis.bootstrap import interval

NEAR_ONE = 0.9   # "near 1": the lower end of the top layer's anisotropy interval (GPT-2: 0.978)

# Why a bundled model may not show what the published models showed.
CAVEATS = {
    "elmo-brown": ("read 1.1M words of Brown (18M with repetition, then 2.2M with its top layer "
                   "taught by MiniLM-L6's word senses, then the average of six runs that continued "
                   "that training for 1.0-3.7M words each); published ELMo read 800M"),
    "gpt-brown": "read 1.1M words of Brown (18M with repetition); GPT-2 read 40 GB of WebText",
    "bert-brown-mlm": "read 1.1M words of Brown (18M with repetition); BERT-base read 3.3B "
                      "words",
    "minilm-l6": "a distilled 6-layer model fine-tuned for sentence embeddings, not "
                 "BERT-base's masked LM",
    "smollm2-135m": "a Llama-style, instruction-tuned, 4-bit quantised model, not GPT-2",
}
CANONICAL = {"gpt": "gpt2", "bert": "bert-base-uncased", "elmo": "elmo-original"}


# -- contrasts between layers -----------------------------------------------------------------

def contrast_weights(name: str, n_layers: int) -> np.ndarray | None:
    """Weights over layers whose dot product with per-layer values is the named difference;
    None where the model has too few layers for it. Layer 0 is the embedding layer; the
    contextual layers 1..top split into a lower and an upper half (the upper half takes the
    extra layer of an odd count, as in bench.views.geometry_invariants)."""
    w = np.zeros(n_layers)
    if n_layers < 3:
        return None
    if name == "top_minus_l0":
        w[-1], w[0] = 1.0, -1.0
    elif name == "top_minus_l1":
        w[-1], w[1] = 1.0, -1.0
    elif name == "upper_minus_lower":
        half = n_layers // 2
        w[1:half + 1] = -1.0 / half
        w[half + 1:] = 1.0 / (n_layers - 1 - half)
    else:
        raise ValueError(f"unknown contrast {name!r}")
    return w


CONTRASTS = ("top_minus_l0", "top_minus_l1", "upper_minus_lower")


def contrasts(values: np.ndarray, replicates: np.ndarray) -> dict[str, dict]:
    """{name: {"value", "ci": [lo, hi]}} for every contrast, from per-layer values [L] and
    their bootstrap replicates [B, L] (the same resamples for every layer: a paired test)."""
    values, replicates = np.asarray(values, float), np.asarray(replicates, float)
    out = {}
    for name in CONTRASTS:
        w = contrast_weights(name, len(values))
        if w is not None:
            out[name] = difference(float(w @ values), replicates @ w)
    return out


def difference(value: float, replicates: np.ndarray) -> dict:
    return {"value": value, "ci": interval(replicates).tolist()}


# -- verdicts ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    verdict: str      # yes | partly | no
    measured: str     # the difference and its interval
    reason: str


@dataclass(frozen=True)
class Finding:
    paper: str
    claim: str
    report: str                       # the results/*.md that shows it
    families: tuple[str, ...]
    judge: Callable[[dict], Verdict]


def _ci(c: dict) -> str:
    lo, hi = c["ci"]
    return f"{c['value']:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def _side(c: dict, sign: int) -> str:
    """yes / partly / no for a claimed difference of the given sign."""
    lo, hi = c["ci"]
    if sign * lo > 0 and sign * hi > 0:
        return "yes"
    return "partly" if sign * c["value"] > 0 else "no"


def _why(c: dict, sign: int) -> str:
    lo, hi = c["ci"]
    verdict = _side(c, sign)
    if verdict == "yes":
        return "the 95% CI excludes 0"
    if verdict == "partly":
        return "right direction, but the 95% CI includes 0"
    if -sign * lo > 0 and -sign * hi > 0:
        return "the opposite holds (the CI excludes 0)"
    return "no difference (the CI includes 0)"


def _verdict(r: dict, verdict: str, measured: str, why: str) -> Verdict:
    """A verdict other than yes also names the likely reason the model differs."""
    if verdict != "yes" and r["model"] in CAVEATS:
        why = f"{why}; {CAVEATS[r['model']]}"
    return Verdict(verdict, measured, why)


def _one_contrast(section: str, metric: str, name: str, sign: int) -> Callable[[dict], Verdict]:
    def judge(r: dict) -> Verdict:
        c = r[section]["contrasts"][metric][name]
        return _verdict(r, _side(c, sign), _ci(c), _why(c, sign))
    return judge


def _anisotropy_rises_to_one(r: dict) -> Verdict:
    g = r["geometry"]
    rise = g["contrasts"]["anisotropy"]["upper_minus_lower"]
    top, (lo, hi) = g["anisotropy"][-1], g["ci"]["anisotropy"][-1]
    parts = (_side(rise, +1), "yes" if lo >= NEAR_ONE else "no")
    verdict = "yes" if parts == ("yes", "yes") else ("no" if parts == ("no", "no") else "partly")
    measured = f"upper − lower {_ci(rise)}; top layer {top:.3f} [{lo:.3f}, {hi:.3f}]"
    why = (("rises (CI excludes 0)" if parts[0] == "yes" else "no clear rise")
           + (f", top layer ≥ {NEAR_ONE}" if parts[1] == "yes" else ", top layer far from 1"))
    return _verdict(r, verdict, measured, why)


FINDINGS = (
    Finding("Ethayarajh 2019", "anisotropy rises with depth and is near 1 in the top layer "
            "(GPT-2)", "geometry.md", ("gpt",), _anisotropy_rises_to_one),
    Finding("Ethayarajh 2019", "upper layers are more context-specific (adjusted "
            "self-similarity: upper half − lower half < 0)", "geometry.md",
            ("elmo", "bert", "gpt"),
            _one_contrast("geometry", "self_similarity_adjusted", "upper_minus_lower", -1)),
    Finding("Peters et al. 2018", "the top biLM layer is best for word sense (nearest "
            "centroid: top − layer 1 > 0)", "senses.md", ("elmo",),
            _one_contrast("senses", "centroid", "top_minus_l1", +1)),
    Finding("Peters et al. 2018", "the lower biLM layer is best for POS (probe: top − layer "
            "1 < 0)", "pos.md", ("elmo",), _one_contrast("pos", "accuracy", "top_minus_l1", -1)),
    Finding("Coenen et al. 2019", "BERT separates senses (top-layer nearest centroid − "
            "first-sense baseline > 0)", "senses.md", ("bert",),
            _one_contrast("senses", "centroid", "top_minus_first_sense", +1)),
    Finding("Coenen et al. 2019", "sense accuracy rises through the layers (nearest centroid: "
            "top − layer 0 > 0)", "senses.md", ("bert",),
            _one_contrast("senses", "centroid", "top_minus_l0", +1)),
)

HEADERS = ["paper", "finding", "model", "measured difference (95% CI)", "reproduced?", "reason"]


def findings_rows(results: list[dict], report: str | None = None) -> list[list[str]]:
    """One row per (finding, measured model of the finding's family); report=None: all."""
    rows = []
    for f in FINDINGS:
        if report is not None and f.report != report:
            continue
        for r in results:
            if r["family"] not in f.families:
                continue
            try:
                v = f.judge(r)
            except KeyError:    # a result from before the intervals existed, or no WordNet
                rows.append([f.paper, f.claim, r["model"], "n/a", "n/a", "not measured"])
                continue
            rows.append([f.paper, f.claim, r["model"], v.measured, v.verdict, v.reason])
    return rows


def canonical_note(results: list[dict], report: str | None = None) -> str:
    """Which published checkpoints of the report's findings the results leave out."""
    families = {fam for f in FINDINGS if report in (None, f.report) for fam in f.families}
    measured = {r["model"] for r in results}
    missing = [m for fam, m in CANONICAL.items() if fam in families and m not in measured]
    if not missing:
        return ""
    return (f"The published checkpoints themselves ({', '.join(missing)}) are in the registry "
            "but not bundled and were not downloaded for this run, so the findings are checked "
            "on the bundled models only.")
