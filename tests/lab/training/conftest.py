"""A tiny corpus in the layout engine.corpus.brown writes, built in the test (no npm needed)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

SUBJECTS = ["The cat", "A dog", "The old man", "My sister", "The jury"]
VERBS = ["sat on", "looked at", "walked to", "talked about", "found"]
OBJECTS = ["the mat", "the river bank", "a small house", "the election", "the garden"]


def tiny_sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}."
            for _ in range(n)]


def write_corpus(root: Path, n_docs: int = 12, per_doc: int = 20) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for split, docs, seed in (("train", n_docs, 1), ("heldout", 2, 2)):
        rows = [{"doc": f"{split}{i}", "genre": "a",
                 "sentences": tiny_sentences(per_doc, seed * 100 + i)} for i in range(docs)]
        (root / f"brown_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (root / f"brown_{split}.txt").write_text(
            "\n".join(s for r in rows for s in r["sentences"]) + "\n")
    return root


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus"))
