"""The everyday cloze items (assets/cloze/) and how a filled blank is scored.

Read by bench.cloze (the benchmark) and by the training code that must keep its text and
labels apart from the items (lab.training.everyday, lab.training.mlm_teacher), which may
import bench/ (bench/ never imports the lab).
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from engine.registry import ASSETS

ITEMS_DIR = ASSETS / "cloze"
ITEMS = ITEMS_DIR / "everyday.tsv"
# a second set of everyday items, held out: every choice the benchmark reports (the
# re-scoring, the GPT prompt) is made on ITEMS alone, so this set says whether the numbers
# hold on sentences none of those choices read
REPLICATION = ITEMS_DIR / "everyday_replication.tsv"


@dataclass(frozen=True)
class ClozeItem:
    id: str
    sentence: str
    answers: tuple[str, ...]
    category: str


def load_items(path: Path = ITEMS) -> list[ClozeItem]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [ClozeItem(r["id"], r["sentence"], tuple(a.strip().lower() for a in
                                                    r["answers"].split("|")), r["category"])
            for r in rows]


def hit_rank(candidates: list[str], answers: tuple[str, ...]) -> int | None:
    """1-based rank of the first accepted answer among the candidates, or None."""
    for rank, token in enumerate(candidates, 1):
        if not token.startswith("##") and token.strip().lower() in answers:
            return rank
    return None


def wilson(k: int, n: int) -> tuple[float, float]:
    """95% Wilson interval of k successes in n independent trials."""
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def rate(ranks: list[int | None], k: int) -> dict:
    """Top-k hit rate of 1-based ranks (None: no hit) with its 95% Wilson interval."""
    hits = sum(1 for r in ranks if r is not None and r <= k)
    lo, hi = wilson(hits, len(ranks))
    return {"hits": hits, "n": len(ranks), "rate": hits / len(ranks), "ci": [lo, hi]}
