"""Attention rollout onto words for the position an attribution explains, for comparison
beside the gradient maps (Abnar & Zuidema 2020; engine/analysis/attention.py computes it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.analysis.attention import rollout
from engine.attribution.objective import blank_of
from engine.errors import UnsupportedPrediction
from engine.families.base import Transformer
from engine.result import Encoding
from engine.text import WordText


@dataclass(frozen=True, eq=False)
class RolloutScores:
    """Rollout of the top layer at one position: how much of that position's representation
    flows from each token (a row of the rollout, summing to 1), pooled onto words by sum.
    Not an attribution of f: it does not know the target."""

    words: tuple[str, ...]
    scores: np.ndarray          # [words] float32
    pieces: tuple[str, ...]
    piece_scores: np.ndarray    # [pieces] float32, special tokens included
    piece_to_word: np.ndarray
    position: int               # the piece whose row is read


def rollout_scores(adapter, text: WordText, kind: str,
                   encode: Callable[[WordText], Encoding] | None = None) -> RolloutScores:
    """kind "masked": the row of a masked LM's blank; "next": the row of a decoder's last
    token (the one that predicts the next word). `encode`: the text's encoding with its
    attention maps (the Engine passes its cached one, Engine.rollout); the adapter's own run
    where none is given."""
    if not (isinstance(adapter, Transformer) and adapter.own_kind == kind):
        raise UnsupportedPrediction("attention rollout is shown for a masked LM's blank and a "
                                    "decoder's next word (ELMo has no attention; a decoder's "
                                    "fill reads no single position)")
    blank = blank_of(text, kind)
    enc = (encode or (lambda t: adapter.encode([t], attentions=True)[0]))(text)
    t2w = enc.token_to_word
    pos = int(np.nonzero(t2w == blank)[0][0]) if kind == "masked" else len(t2w) - 1
    row = rollout(enc.attentions)[-1, pos].astype(np.float64)                # [tokens]
    words = np.zeros(len(enc.words), np.float64)
    np.add.at(words, t2w[t2w >= 0], row[t2w >= 0])
    return RolloutScores(enc.words, words.astype(np.float32), enc.tokens,
                         row.astype(np.float32), t2w, pos)
