"""attribute(): one prediction's attribution, from the text and the words to the result with
its faithfulness; the function the Engine (and through it the CLI and the app) calls."""
from __future__ import annotations

import numpy as np

from engine.attribution.objective import KINDS, Objective, blank_of, check_pair
from engine.attribution.methods import METHODS
from engine.attribution.result import Attribution
from engine.errors import EngineError, UnsupportedPrediction
from engine.families.base import Explained
from engine.text import WordText

# the families' objectives and Captum's methods import torch: they load on the first
# attribution, so importing this module (the Engine does) costs nothing


def objective_of(adapter, text: WordText, target: str, contrast: str | None,
                 kind: str) -> Objective:
    """The prediction `kind` of `adapter` on `text`, as a function of its input embeddings."""
    if kind not in KINDS:
        raise EngineError(f"kind must be one of {KINDS}, not {kind!r}")
    if not isinstance(adapter, Explained):
        raise UnsupportedPrediction(f"{adapter.info.family} models give no prediction to "
                                    "explain")
    adapter.check_explained(kind)
    target, contrast = check_pair(target, contrast)
    words = [target] + ([contrast] if contrast else [])
    return adapter.objective(text, kind, blank_of(text, kind), words, contrast)


def attribute(adapter, text: WordText, target: str, contrast: str | None = None,
              method: str = "ig", kind: str = "masked", steps: int | None = None,
              faithful: bool = True) -> Attribution:
    """The attribution of `target` (rather than `contrast`) as `adapter`'s prediction `kind`
    on `text`, by `method`, with its faithfulness. steps: IG's step count (default: 32, raised
    to 64, 128, 256 until complete; methods.integrated_gradients); named, exactly that many. faithful=False skips the
    faithfulness measures (36 forward passes, most of a gradient × input's time): a caller
    that attributes every generated token may measure only the one shown."""
    from engine.attribution import faithfulness, methods

    if method not in METHODS:
        raise EngineError(f"method must be one of {tuple(METHODS)}, not {method!r}")
    if steps is not None and not 1 <= steps <= 4096:
        raise EngineError(f"steps must be between 1 and 4096, not {steps}")
    obj = objective_of(adapter, text, target, contrast, kind)
    f_x = float(methods.f_of(obj, obj.x)[0])
    if not np.isfinite(f_x):
        raise EngineError("f is not finite on this input (the model overflows), so no map "
                          "is drawn")
    word_groups = np.searchsorted(obj.scored_words, obj.slot_words)
    scores = METHODS[method].run(obj, word_groups, steps)
    piece, word = _pooled(obj, scores.pieces)
    if scores.words is not None:        # measured whole, not the sum of its pieces
        word = np.zeros(len(obj.words), np.float32)
        word[obj.scored_words] = scores.words
    ig = scores.ig
    faith = faithfulness.measure(obj, f_x, word) if faithful else faithfulness.UNMEASURED
    return Attribution(
        model_id=adapter.info.model_id, kind=kind, method=method, target=target.strip(),
        contrast=contrast.strip() if contrast else None, words=obj.words, scores=word,
        pieces=obj.pieces, piece_scores=piece, piece_to_word=obj.piece_to_word,
        target_pieces=obj.target_pieces, f=f_x, f_means=obj.f_means,
        absent=obj.absent_means, comprehensiveness=faith.comprehensiveness,
        sufficiency=faith.sufficiency,
        random_comprehensiveness=faith.random_comprehensiveness,
        random_sufficiency=faith.random_sufficiency,
        f_baseline=ig.f_baseline if ig else None, steps=ig.steps if ig else None,
        completeness_gap=ig.gap if ig else None, converged=ig.converged if ig else None,
        baseline=f"every word's pieces as {obj.absent_means}; special tokens and the blank "
                 "as they are" if ig else "")


def _pooled(obj: Objective, slot_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the attributed pieces placed among all pieces (0 elsewhere), and each word's
    sum of its pieces (float64 sums, stored float32)."""
    piece = np.zeros(len(obj.pieces), np.float64)
    piece[obj.slots] = slot_scores
    word = np.zeros(len(obj.words), np.float64)
    np.add.at(word, obj.slot_words, slot_scores.astype(np.float64))
    return piece.astype(np.float32), word.astype(np.float32)
