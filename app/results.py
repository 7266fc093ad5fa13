"""What the pages show, computed from encodings: the target's vectors and their projections,
every word's occurrences and neighbours, sense separations, scalar mixes, layer geometry, two
models compared, head statistics and attention as the views draw it.

Each result is kept once, in the Engine's result cache under its own key (engine_cached:
the function's name and its arguments), and computed from the results above it in the same
cache (encodings -> occurrences -> target vectors -> projections ...), so moving a slider
re-renders without re-running a model or a fit. The engine's numpy helpers a page applies to a
result it already holds (attention per word, rollout, the softmax of a mix's weights) are part
of this module's surface.
"""
from __future__ import annotations

import numpy as np

from app.engine_access import encodings, engine_cached
from engine.analysis import attention as att_analysis
from engine.analysis import geometry, occurrences as occ_analysis, projection, senses
from engine.analysis.attention import keep_tokens, rollout, word_attention, word_labels
from engine.analysis.model_cka import ModelCKA, compare_models
from engine.analysis.projection import METHODS, MIN_POINTS
from engine.analysis.senses import SplitQuality, softmax
from engine.analysis.vectors import identical_groups, unit_rows
from engine.families import FAMILIES
from engine.result import Encoding, MixedVectors, SuggestedSenses, TargetVectors
from engine.text import occurrences_of, split_words

__all__ = ["keep_tokens", "rollout", "word_attention", "word_labels", "MIN_POINTS",
           "SplitQuality", "softmax", "identical_groups", "TargetVectors", "PROJECTIONS"]

# the Projection radios' choices: the name a reader knows -> the engine's method
PROJECTIONS = {label: method for method, label in METHODS.items()}


# -- the target word and every word's occurrences ---------------------------------------------

def target_missing(sentences: tuple[str, ...], target: str) -> tuple[int, ...]:
    """The sentences without the target as a whole word, read without a model (every model's
    words are split alike, so a page can say it once)."""
    return tuple(i for i, s in enumerate(sentences)
                 if not occurrences_of(split_words(s).words, target))


@engine_cached()
def occurrences(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                scope: str = "target") -> occ_analysis.Occurrences:
    """The target word's occurrences (scope "target") or every word's ("all"), all layers."""
    encs = encodings(model_id, sentences)
    return occ_analysis.collect(encs, pool, target if scope == "target" else None)


@engine_cached()
def target_vectors(model_id: str, sentences: tuple[str, ...], target: str,
                   pool: str) -> TargetVectors:
    """The target's first occurrence in each sentence holding it (occurrences, scope
    "target", read from the same cache)."""
    occ = occurrences(model_id, sentences, target, pool)
    first: dict[int, int] = {}                     # sentence -> its first occurrence's column
    for i, s in enumerate(occ.sentence):
        first.setdefault(s, i)
    cols = list(first.values())
    counts = np.bincount(np.asarray(occ.sentence, dtype=int), minlength=len(sentences))
    return TargetVectors(
        model_id, occ.vectors[:, cols], tuple(first),
        tuple(i for i in range(len(sentences)) if i not in first), occ.layer_names,
        tuple(int(i) for i in np.flatnonzero(counts > 1)),
        tuple(occ.position[c] for c in cols))


@engine_cached("Projecting …")
def project(model_id: str, sentences: tuple[str, ...], target: str, pool: str, method: str,
            seed: int = 0) -> projection.Projection:
    # projected here, not through Engine.project: that would keep the same projection a
    # second time, under the vectors' hash, and count its bytes twice against the bound
    tv = target_vectors(model_id, sentences, target, pool)
    return projection.project(tv.vectors, method=method, seed=seed)


@engine_cached("Projecting every layer …")
def grid_projection(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                    scope: str, method: str, dims: int = 2,
                    keep: tuple[int, ...] | None = None) -> projection.Projection:
    """Aligned projections of every layer at once (engine/analysis/projection.py), of all
    occurrences or only those in `keep` (isolating a selection re-projects just it)."""
    occ = occurrences(model_id, sentences, target, pool, scope)
    vectors = occ.vectors if keep is None else occ.vectors[:, list(keep)]
    return projection.project(np.ascontiguousarray(vectors), method=method, seed=0, dims=dims)


@engine_cached()
def neighbours(model_id: str, sentences: tuple[str, ...], target: str, pool: str, scope: str,
               index: int, layer: int, k: int = 5) -> list[occ_analysis.Neighbour]:
    occ = occurrences(model_id, sentences, target, pool, scope)
    return occ_analysis.nearest(occ.vectors[layer], index, k)


@engine_cached()
def cosine_matrix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                  layer: int) -> np.ndarray:
    v = unit_rows(target_vectors(model_id, sentences, target, pool).vectors[layer])
    return v @ v.T


# -- senses and the scalar mix -----------------------------------------------------------------

@engine_cached()
def separation(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
               labels: tuple[str, ...], unlabelled: str = "?") -> senses.SenseSeparation:
    """Silhouette and nearest-centroid accuracy over the LABELLED sentences only: an
    unlabelled sentence is not a sense of its own."""
    tv = target_vectors(model_id, sentences, target, pool)
    keep = [i for i, r in enumerate(tv.rows) if labels[r] != unlabelled]
    return senses.sense_separation(tv.vectors[:, keep], [labels[tv.rows[i]] for i in keep])


@engine_cached()
def suggested_senses(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                     k: int, method: str) -> SuggestedSenses:
    """k clusters of the target's vectors at the model's top layer (seeded: a repeat gives
    the same split)."""
    top = target_vectors(model_id, sentences, target, pool)
    found = senses.suggest_senses(top.vectors[-1], k=k, method=method)
    return SuggestedSenses(top.rows, found, senses.split_quality(top.vectors[-1], found))


@engine_cached()
def learned_mix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                labels: tuple[str, ...], do_layer_norm: bool = False) -> senses.LearnedMix:
    """ELMo's scalar mix fitted to separate `labels` (one per sentence of TargetVectors.rows);
    SenseError below two senses."""
    tv = target_vectors(model_id, sentences, target, pool)
    return senses.learn_mix(tv.vectors, list(labels), do_layer_norm=do_layer_norm)


@engine_cached()
def scalar_mix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
               s: tuple[float, ...], gamma: float, do_layer_norm: bool,
               labels: tuple[str, ...]) -> MixedVectors:
    """The mix gamma * sum_j softmax(s)_j h_j (Peters et al. 2018, eq. 1) of the target's
    layers; `labels` name the sense of each sentence of TargetVectors.rows."""
    tv = target_vectors(model_id, sentences, target, pool)
    mixed = senses.scalar_mix(tv.vectors, np.array(s), gamma, do_layer_norm=do_layer_norm)
    return MixedVectors(
        mixed, projection.project(mixed[None], "pca").coords[0],
        senses.sense_separation(mixed[None], list(labels)),
        senses.sense_separation(tv.vectors[-1][None], list(labels)),
        [list(range(len(mixed)))] == identical_groups(mixed))


# -- layers and models compared ------------------------------------------------------------------

@engine_cached("Computing layer metrics …")
def layer_geometry(model_id: str, sentences: tuple[str, ...], pool: str):
    encs = encodings(model_id, sentences)
    metrics = geometry.layer_metrics(encs, pool=pool, seed=0)
    words = np.concatenate([e.word_vectors(pool) for e in encs], axis=1)
    return metrics, geometry.linear_cka_matrix(words)


@engine_cached("Comparing the two models' layers …")
def between_models(model_a: str, model_b: str, sentences: tuple[str, ...],
                   pool: str) -> ModelCKA:
    """Layer x layer CKA of two models on every word of the sentences, with bootstrap
    intervals over the sentences (EngineError below 2 sentences or 4 words)."""
    return compare_models(encodings(model_a, sentences), encodings(model_b, sentences), pool)


def layer_shares(enc: Encoding, pool: str) -> tuple[np.ndarray, tuple[str, ...]]:
    """Each layer's share of each word's vector norm [layers, words], i.e. its part of the
    uniform mix (for a model without attention maps), and the layers' names."""
    norms = np.linalg.norm(enc.word_vectors(pool), axis=2)              # [layers, words]
    shares = norms / np.maximum(norms.sum(axis=0, keepdims=True), 1e-12)
    return shares, enc.layer_names


# -- attention -------------------------------------------------------------------------------------

@engine_cached()
def head_stats(model_id: str, sentence: str) -> att_analysis.HeadStats | None:
    enc = encodings(model_id, (sentence,), attentions=True)[0]
    if enc.attentions is None:
        return None
    return att_analysis.head_stats(enc.attentions, enc.special_mask,
                                   FAMILIES[enc.family].left_to_right)


@engine_cached()
def attention_row(model_id: str, sentence: str, position: int, layer: int):
    """Attention from one word to every word of its sentence at `layer` (1 = the first
    attention layer), per head: ([heads, words], [heads] to special tokens, words); None for
    a model without attention maps."""
    enc = encodings(model_id, (sentence,), attentions=True)[0]
    if enc.attentions is None or not 1 <= layer <= enc.attentions.shape[0]:
        return None
    rows, special = att_analysis.word_row(enc.attentions[layer - 1], enc.token_to_word,
                                          position, len(enc.words), tokens=enc.tokens)
    return rows, special, enc.words


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
