"""The attribution of one prediction, as it crosses the engine boundary: CPU float32 numpy in a
frozen dataclass that checks its own shapes, with the conventions it was computed under."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.attribution.methods import METHODS


def _require(cond: bool, name: str, why: str) -> None:
    if not cond:
        raise ValueError(f"{name}: {why}")


@dataclass(frozen=True, eq=False)
class Attribution:
    """Scores of the words of a text for one value f of one prediction.

    f: the target's log-probability (natural log of the model's own softmax over its whole
    vocabulary, float32; a target of several pieces: the sum over its pieces), or, with a
    contrast, log p(target) − log p(contrast). `f_means` says which, for this model and kind.
    pieces: the input as the model reads it (special tokens and the blank included);
    piece_to_word: each piece's word, -1 for a special token. Pieces the method holds fixed
    (special tokens, the blank or the target's own pieces) score 0. scores[w]: the sum of word
    w's piece scores, except for a method that measures a word whole (occlusion: one run per
    word, and each piece alone, one run per piece; methods.Method.additive is False): a model
    is not additive, so there the two differ.
    IG only: f_baseline, steps, completeness_gap = |Σ piece_scores − (f − f_baseline)|,
    converged (gap ≤ 1% of |f − f_baseline|). Faithfulness (DeYoung et al. 2020, ERASER):
    AOPC over removing (comprehensiveness) or keeping only (sufficiency) the top 10/20/50% of
    the words by score, in units of f, and the same for random orders of the words.
    """

    model_id: str
    kind: str                     # masked | next | previous
    method: str                   # a name of methods.METHODS
    target: str
    contrast: str | None
    words: tuple[str, ...]
    scores: np.ndarray            # [words]
    pieces: tuple[str, ...]
    piece_scores: np.ndarray      # [pieces]
    piece_to_word: np.ndarray     # [pieces], -1 for special tokens
    target_pieces: tuple[str, ...]
    f: float
    f_means: str                  # what f is, in words
    absent: str                   # what a removed word's pieces are replaced by
    # None where the caller skipped the measures (faithfulness=False: 36 more forward passes)
    comprehensiveness: float | None
    sufficiency: float | None
    random_comprehensiveness: float | None
    random_sufficiency: float | None
    f_baseline: float | None = None
    steps: int | None = None
    completeness_gap: float | None = None
    converged: bool | None = None
    baseline: str = ""            # IG's baseline, in words

    def __post_init__(self) -> None:
        _require(self.method in METHODS, "method", f"must be one of {tuple(METHODS)}")
        _require(self.scores.shape == (len(self.words),) and self.scores.dtype == np.float32,
                 "scores", "must be float32, one per word")
        _require(self.piece_scores.shape == (len(self.pieces),)
                 and self.piece_scores.dtype == np.float32, "piece_scores",
                 "must be float32, one per piece")
        _require(self.piece_to_word.shape == (len(self.pieces),), "piece_to_word",
                 "one entry per piece")
        _require(bool(np.all((self.piece_to_word >= -1)
                             & (self.piece_to_word < len(self.words)))), "piece_to_word",
                 "entries must be -1 or a word index")
        numbers = [x for x in (self.f, self.comprehensiveness, self.sufficiency,
                               self.random_comprehensiveness, self.random_sufficiency)
                   if x is not None]
        _require(bool(np.isfinite(self.scores).all() and np.isfinite(self.piece_scores).all()
                      and np.isfinite(numbers).all()), "scores", "must be finite")
        ig = (self.f_baseline, self.steps, self.completeness_gap, self.converged)
        _require(all(v is None for v in ig) or None not in ig, "f_baseline",
                 "a path method (IG) reports f_baseline, steps, completeness_gap and "
                 "converged, every other method none of them")

    def to_json(self) -> dict:
        """The keys of issue #54 part 5: IG's three only for IG (the method that has them); the
        faithfulness numbers null where they were not measured."""
        out = {"words": list(self.words), "scores": self.scores.tolist(),
               "pieces": list(self.pieces), "piece_scores": self.piece_scores.tolist(),
               "method": self.method, "target": self.target, "contrast": self.contrast,
               "f": float(self.f)}
        if self.steps is not None:
            out.update(f_baseline=float(self.f_baseline), steps=int(self.steps),
                       completeness_gap=float(self.completeness_gap))
        out.update(comprehensiveness=self.comprehensiveness, sufficiency=self.sufficiency,
                   random_comprehensiveness=self.random_comprehensiveness,
                   random_sufficiency=self.random_sufficiency)
        return out
