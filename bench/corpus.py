"""Sentences the benchmarks encode: Brown held-out documents (tagged) and WordNet examples.

The Brown split comes from engine.corpus.brown (data/corpus/, not committed). When it is
absent the benchmark first tries to build it, then falls back to a small sample of the same
split committed in bench/sample/ and says so in the report.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.corpus.brown import detokenize

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "corpus"
SAMPLE = Path(__file__).resolve().parent / "sample" / "brown_tagged_sample.jsonl"
# Brown writes quotes as `` and ''; models see the ASCII quote a user would type (the same
# mapping as engine.corpus.brown, so every word is found in the detokenised text)
_QUOTES = {"``": '"', "''": '"', "`": "'"}
MAX_WORDS = 60


@dataclass(frozen=True)
class TaggedSentence:
    doc: str
    words: tuple[str, ...]
    tags: tuple[str, ...]
    text: str = ""    # running text, as the models were trained on (detokenize of the raw tokens)

    @property
    def running_text(self) -> str:
        return self.text or detokenize(self.words)


@dataclass(frozen=True)
class BrownSplit:
    train: tuple[TaggedSentence, ...]
    heldout: tuple[TaggedSentence, ...]
    source: str


def simplify_tag(tag: str) -> str:
    """Brown tag without its headline/title/foreign suffixes ("nn-tl" -> "nn") and without the
    negation star ("dod*" -> "dod"), close to the 45-tag PTB granularity of ELMo Table 6."""
    if tag.startswith("-") or tag == "*":
        return tag
    base = tag.split("-")[0]
    return base.rstrip("*") or base


def _sentences(rows: list[dict]) -> list[TaggedSentence]:
    out = []
    for row in rows:
        for s in row["sentences"]:
            words = tuple(_QUOTES.get(w, w) for w in s["tokens"])
            if 3 <= len(words) <= MAX_WORDS and len(" ".join(words)) < 900:
                # from the raw tokens: `` and '' say which way a quote faces
                out.append(TaggedSentence(row["doc"], words,
                                          tuple(simplify_tag(t) for t in s["tags"]),
                                          detokenize(tuple(s["tokens"]))))
    return out


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _try_build() -> bool:
    try:
        subprocess.run([sys.executable, "-m", "engine.corpus.brown"], cwd=ROOT, check=True,
                       timeout=120, capture_output=True)
    except (subprocess.SubprocessError, OSError):
        return False
    return (CORPUS / "brown_tagged_heldout.jsonl").exists()


def load_brown(build: bool = True) -> BrownSplit:
    held, train = CORPUS / "brown_tagged_heldout.jsonl", CORPUS / "brown_tagged_train.jsonl"
    if held.exists() and train.exists() or (build and _try_build()):
        return BrownSplit(tuple(_sentences(_read_jsonl(train))),
                          tuple(_sentences(_read_jsonl(held))),
                          "Brown corpus split of engine.corpus.brown (data/corpus/)")
    rows = _read_jsonl(SAMPLE)
    return BrownSplit(tuple(_sentences([r for r in rows if r["split"] == "train"])),
                      tuple(_sentences([r for r in rows if r["split"] == "heldout"])),
                      "SMALL BUNDLED SAMPLE (bench/sample/): data/corpus/ was absent and "
                      "could not be built offline")


def spread(items: tuple, n: int) -> list:
    """n items spread evenly over the sequence (every document gets its share, reproducibly)."""
    if len(items) <= n:
        return list(items)
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def write_sample(n_heldout_docs: int = 8, n_train_docs: int = 6) -> None:
    """Refresh bench/sample/ from data/corpus/ (run by hand; the sample is committed)."""
    rows = []
    for split, n in (("heldout", n_heldout_docs), ("train", n_train_docs)):
        docs = _read_jsonl(CORPUS / f"brown_tagged_{split}.jsonl")
        for row in spread(tuple(docs), n):
            rows.append({"split": split, **row})
    SAMPLE.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


if __name__ == "__main__":
    write_sample()
