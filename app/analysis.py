"""Numpy helpers a page applies to results it already holds (no model runs, no torch): attention
maps per word or without special tokens as the Attention page shows them, rollout, each layer's
share of a word's vector, coinciding points, the ELMo mix's weights. Pages import them from
here, so engine/ is reached through the app's modules only (tests/test_layering.py)."""
from __future__ import annotations

import numpy as np

from engine.analysis.attention import keep_tokens, rollout, word_attention, word_labels
from engine.analysis.projection import METHODS, MIN_POINTS
from engine.analysis.senses import SplitQuality, softmax
from engine.analysis.vectors import identical_groups
from engine.result import Encoding

__all__ = ["keep_tokens", "rollout", "word_attention", "word_labels", "MIN_POINTS",
           "SplitQuality", "softmax", "identical_groups", "viewed_maps", "viewed_rollout",
           "layer_shares", "PROJECTIONS"]

# the Projection radios' choices: the name a reader knows -> the engine's method
PROJECTIONS = {label: method for method, label in METHODS.items()}


def viewed_maps(enc: Encoding, words: bool, hide: bool, layers: slice = slice(None),
                ) -> tuple[np.ndarray, list[str]]:
    """The maps [L, H, n, n] of `layers` the head view, heatmap and model view draw and their
    labels: per token, or per word (engine.analysis.attention.word_attention), special entries
    hidden on request. Only the layers a view shows: a long sentence's maps of every layer
    are hundreds of MB."""
    labels, special = list(enc.tokens), enc.special_mask
    maps = enc.attentions[layers]
    if words:
        labels, special = word_labels(enc.tokens, enc.words, enc.token_to_word)
        maps = word_attention(maps, enc.token_to_word, len(enc.words), tokens=enc.tokens)
    if hide:
        maps = keep_tokens(maps, ~special)
    return maps, [t for t, s in zip(labels, special) if not (s and hide)]


def viewed_rollout(enc: Encoding, hide: bool) -> tuple[np.ndarray, list[str]]:
    """Attention rollout to every layer [L, n, n], per token, and the tokens it shows: special
    tokens hidden on request (their rows and columns out, the rest renormalised)."""
    keep = ~enc.special_mask
    rolled = rollout(enc.attentions)                                    # [L, n, n]
    if hide:
        rolled = keep_tokens(rolled, keep)
    return rolled, [t for t, k in zip(enc.tokens, keep) if k or not hide]


def layer_shares(enc: Encoding, pool: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each layer's share of each word's vector norm [layers, words], i.e. its part of the
    uniform mix (for a model without attention maps), and the layers' names."""
    norms = np.linalg.norm(enc.word_vectors(pool), axis=2)              # [layers, words]
    shares = norms / np.maximum(norms.sum(axis=0, keepdims=True), 1e-12)
    return shares, enc.layer_names
