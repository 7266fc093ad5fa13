"""Word occurrences across sentences, every layer at once, and their nearest neighbours.

An occurrence is (sentence, word position): the same id in every model, because every family
splits a text into the same words (engine/text.py). That is what lets a selection made on one
model's grid be shown on another's, and what the side panel's neighbours refer to.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.analysis.vectors import unit_rows
from engine.result import Encoding
from engine.text import word_key

SCOPES = ("target", "all")


@dataclass(frozen=True, eq=False)
class Occurrences:
    """vectors: [layers, n, dim]; sentence[i], position[i], word[i] name occurrence i."""

    vectors: np.ndarray
    sentence: tuple[int, ...]
    position: tuple[int, ...]
    word: tuple[str, ...]
    layer_names: tuple[str, ...]

    def __post_init__(self) -> None:
        n = self.vectors.shape[1]
        if not len(self.sentence) == len(self.position) == len(self.word) == n:
            raise ValueError("one sentence, position and word per occurrence")

    def __len__(self) -> int:
        return len(self.sentence)

    @property
    def ids(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self.sentence, self.position))

    def index(self, occurrence: tuple[int, int]) -> int | None:
        try:
            return self.ids.index(tuple(occurrence))
        except ValueError:
            return None

    def subset(self, keep: Sequence[int]) -> "Occurrences":
        keep = list(keep)
        return Occurrences(self.vectors[:, keep], tuple(self.sentence[i] for i in keep),
                           tuple(self.position[i] for i in keep),
                           tuple(self.word[i] for i in keep), self.layer_names)


def collect(encodings: Sequence[Encoding], pool: str = "mean",
            target: str | None = None) -> Occurrences:
    """Every word of every sentence (target=None), or only the words equal to `target`
    (case ignored; every occurrence in a sentence, not just the first)."""
    want = word_key(target) if target else None
    vecs, sent, pos, words = [], [], [], []
    for s, enc in enumerate(encodings):
        wv = enc.word_vectors(pool)                       # [layers, words, dim]
        for w, word in enumerate(enc.words):
            if want is not None and word_key(word) != want:
                continue
            vecs.append(wv[:, w])
            sent.append(s)
            pos.append(w)
            words.append(word)
    first = encodings[0] if encodings else None
    names = first.layer_names if first is not None else ()
    dim = first.hidden_states.shape[-1] if first is not None else 1
    arr = (np.stack(vecs, axis=1) if vecs
           else np.zeros((len(names), 0, dim), np.float32))
    return Occurrences(arr, tuple(sent), tuple(pos), tuple(words), names)


@dataclass(frozen=True)
class Neighbour:
    index: int          # into the Occurrences
    cosine: float


def nearest(vectors: np.ndarray, i: int, k: int = 5) -> list[Neighbour]:
    """The k occurrences nearest to occurrence i by cosine in the model's own space
    (vectors: [n, dim] at one layer), nearest first; i itself is left out, ties keep order."""
    if not 0 <= i < len(vectors):
        raise IndexError(f"occurrence {i} is not among {len(vectors)}")
    u = unit_rows(vectors)
    cos = u @ u[i]
    order = [j for j in np.argsort(-cos, kind="stable") if j != i][:k]
    return [Neighbour(int(j), float(cos[j])) for j in order]
