"""Per-layer geometry of contextual word vectors: anisotropy, self-similarity, intra-sentence
similarity, maximum explainable variance (Ethayarajh 2019) and linear CKA (Kornblith et al. 2019).

Pure numpy on `Encoding.word_vectors`; no torch, so the app and the benchmarks share it.
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.analysis.bootstrap import SEED as RESAMPLE_SEED
from engine.analysis.bootstrap import resample_counts
from engine.analysis.vectors import EPS as _EPS
from engine.analysis.vectors import unit_rows
from engine.errors import EngineError
from engine.result import Encoding, Pooling, numbered_layers

# Only words with a letter or digit count as words here: punctuation would dominate the
# repeated-word statistics (every sentence has a "."), which Ethayarajh's word lists do not.
_WORDLIKE = re.compile(r"\w")


@dataclass(frozen=True)
class AdjustedMetrics:
    """Self-similarity and intra-sentence similarity minus the anisotropy baseline, per layer
    (Ethayarajh 2019, §3.4: "adjusting for anisotropy")."""

    self_similarity: np.ndarray
    intra_sentence: np.ndarray
    anisotropy: np.ndarray
    mev: np.ndarray | None = None    # MEV minus the MEV of random words' occurrence matrices


@dataclass(frozen=True, eq=False)
class LayerMetrics:
    """Ethayarajh (2019) statistics, one float per layer (index 0 = embedding layer).

    self_similarity, intra_sentence: raw (not baseline-subtracted); see `adjusted()`.
    mev: maximum explainable variance; NaN where no word occurs twice.
    mev_baseline: MEV of equally many randomly drawn word occurrences (mostly different words),
    so an anisotropic layer's common direction is not read as a word's static embedding.
    n_words_repeated: word types (exact forms, unless lowercase=True) with >= 2 occurrences,
    i.e. those behind self_similarity and mev (the same for every layer, hence an int).
    replicates: with layer_metrics(n_resamples=B), bootstrap replicates [B, layers] of
    "anisotropy" and "intra_sentence" (the unit is the encoding, i.e. the sentence) and of
    "self_similarity", "mev" and "mev_baseline" (the unit is the repeated word);
    engine.analysis.bootstrap.
    """

    anisotropy: np.ndarray
    self_similarity: np.ndarray
    intra_sentence: np.ndarray
    mev: np.ndarray
    n_words_repeated: int
    layer_names: tuple[str, ...] = ()
    mev_baseline: np.ndarray | None = None
    replicates: dict[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        n = self.anisotropy.shape
        for name in ("self_similarity", "intra_sentence", "mev"):
            if getattr(self, name).shape != n:
                raise ValueError(f"{name}: must have one value per layer like anisotropy {n}")
        if not self.layer_names:
            object.__setattr__(self, "layer_names", numbered_layers(n[0]))
        if len(self.layer_names) != n[0]:
            raise ValueError("layer_names: one name per layer")

    @property
    def n_layers(self) -> int:
        return int(self.anisotropy.shape[0])

    def adjusted(self) -> AdjustedMetrics:
        mev = None if self.mev_baseline is None else self.mev - self.mev_baseline
        return AdjustedMetrics(self_similarity=self.self_similarity - self.anisotropy,
                               intra_sentence=self.intra_sentence - self.anisotropy,
                               anisotropy=self.anisotropy, mev=mev)


@dataclass(frozen=True)
class _Occurrences:
    vectors: np.ndarray           # [layers, occurrences, dim], word-like words only
    word_ids: np.ndarray          # [occurrences] index into `vocab`
    sentence_ids: np.ndarray      # [occurrences]
    vocab: tuple[str, ...]


def _collect(encodings: Sequence[Encoding], pool: Pooling, lowercase: bool) -> _Occurrences:
    if not encodings:
        raise EngineError("layer_metrics needs at least one encoding")
    n_layers = {e.n_layers for e in encodings}
    if len(n_layers) != 1:
        raise EngineError(f"encodings mix models with different layer counts {sorted(n_layers)}")
    vocab: dict[str, int] = {}
    vecs, wids, sids = [], [], []
    for s, enc in enumerate(encodings):
        keep = [i for i, w in enumerate(enc.words) if _WORDLIKE.search(w)]
        if not keep:
            continue
        vecs.append(enc.word_vectors(pool)[:, keep])
        keys = [enc.words[i].lower() if lowercase else enc.words[i] for i in keep]
        wids += [vocab.setdefault(k, len(vocab)) for k in keys]
        sids += [s] * len(keep)
    if not vecs:
        raise EngineError("the encodings hold no words (only punctuation)")
    return _Occurrences(np.concatenate(vecs, axis=1), np.asarray(wids), np.asarray(sids),
                        tuple(vocab))


def _baseline_pairs(occ: _Occurrences, n_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    # Ethayarajh 2019 §3.4: baseline = mean cosine between uniformly sampled words from
    # different contexts; pairs of the same word or the same sentence are rejected.
    rng = np.random.default_rng(seed)
    n = len(occ.word_ids)
    a = rng.integers(0, n, size=n_pairs * 4)
    b = rng.integers(0, n, size=n_pairs * 4)
    ok = (occ.word_ids[a] != occ.word_ids[b]) & (occ.sentence_ids[a] != occ.sentence_ids[b])
    return a[ok][:n_pairs], b[ok][:n_pairs]


def _pair_cosines(unit: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[layers, pairs]. One layer at a time: gathering [layers, pairs, dim] at once costs 2-4x
    more (measured 54-74 ms vs 13-29 ms for 31 layers of 576 dims), as the rows stay in cache."""
    return np.stack([np.einsum("pd,pd->p", layer[a], layer[b]) for layer in unit])


def _mev(raw: np.ndarray) -> np.ndarray:
    """[layers, k, dim] -> [layers]: sigma_1^2 / sum sigma_i^2 (NaN for an all-zero matrix)."""
    sv = np.linalg.svd(raw.astype(np.float64), compute_uv=False)  # [layers, k]
    power = (sv ** 2).sum(axis=1)
    return np.where(power > _EPS, sv[:, 0] ** 2 / np.maximum(power, _EPS), np.nan)


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    """Column means over rows, ignoring NaN; NaN where a column has no finite value."""
    return np.array([np.nanmean(col) if np.isfinite(col).any() else np.nan for col in x.T])


def _self_similarity_and_mev(unit: np.ndarray, raw: np.ndarray,
                             groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per repeated word ([words, layers] each): its self-similarity and its MEV."""
    n_layers = unit.shape[0]
    sims = np.empty((len(groups), n_layers))
    mevs = np.empty((len(groups), n_layers))
    for g, idx in enumerate(groups):
        k = len(idx)
        # Ethayarajh 2019 §3.3 Def. 1: mean pairwise cosine over the k(k-1) ordered pairs,
        # computed as (|sum of unit vectors|^2 - k) / (k(k-1)).
        total = unit[:, idx].sum(axis=1)
        sims[g] = ((total * total).sum(axis=-1) - k) / (k * (k - 1))
        # Ethayarajh 2019 §3.3 Def. 3: MEV = sigma_1^2 / sum sigma_i^2 of the (uncentred)
        # occurrence matrix.
        mevs[g] = _mev(raw[:, idx])
    return sims, mevs


def _mev_baseline(raw: np.ndarray, groups: list[np.ndarray], seed: int) -> np.ndarray:
    """[words, layers]: for each repeated word, the MEV of as many randomly drawn occurrences
    (of mostly different words) as it has. Ethayarajh 2019 §3.4 adjusts MEV for anisotropy
    with this: the same statistic where no word is shared."""
    rng = np.random.default_rng(seed + 2)
    n = raw.shape[1]
    rows = [_mev(raw[:, rng.choice(n, size=len(idx), replace=False)]) for idx in groups]
    return np.stack(rows) if rows else np.empty((0, raw.shape[0]))


def _intra_sentence(raw: np.ndarray, unit: np.ndarray,
                    sentence_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-sentence values [sentences, layers], their sentence ids) for sentences of >= 2
    words. Ethayarajh 2019 §3.3 Def. 2: the cosine between each word's vector and the mean of
    the sentence's RAW word vectors (not of their unit vectors: a long vector pulls the mean
    its way), averaged over the sentence's words."""
    values, ids = [], []
    for s in np.unique(sentence_ids):
        idx = np.nonzero(sentence_ids == s)[0]
        if len(idx) < 2:
            continue
        centre = unit_rows(raw[:, idx].astype(np.float64).mean(axis=1))   # [layers, dim]
        values.append(np.einsum("lwd,ld->lw", unit[:, idx], centre).mean(axis=1))
        ids.append(s)
    return np.array(values).reshape(len(ids), raw.shape[0]), np.array(ids, dtype=np.int64)


def layer_metrics(encodings: Sequence[Encoding], pool: Pooling = "mean", seed: int = 0,
                  n_pairs: int = 1000, max_occurrences: int = 200,
                  lowercase: bool = False, n_resamples: int = 0,
                  resample_seed: int = RESAMPLE_SEED) -> LayerMetrics:
    """Ethayarajh (2019) statistics per layer over a set of encoded sentences.

    Word identity is the exact surface form, under which a case-sensitive context-free layer
    such as ELMo's char CNN has self-similarity exactly 1 ("The" and "the" get different
    char-CNN vectors); lowercase=True groups "The" with "the". Every caller (the Compare layers
    page, `ctxlens stats`, bench/layers.py) uses the exact form, so their numbers agree. Words
    without a letter or digit are skipped.
    A word seen more than `max_occurrences` times contributes a seeded random sample of
    its occurrences (this bounds the SVDs behind MEV for words like "the").
    n_resamples > 0 adds bootstrap replicates of anisotropy and intra-sentence similarity
    (resampling sentences) and of self-similarity, MEV and MEV's baseline (resampling the
    repeated words, the units they average) to the result.
    """
    occ = _collect(encodings, pool, lowercase)
    unit = unit_rows(occ.vectors)
    rng = np.random.default_rng(seed + 1)
    by_word: dict[int, list[int]] = defaultdict(list)
    for i, w in enumerate(occ.word_ids.tolist()):
        by_word[w].append(i)
    groups = []
    for idx in by_word.values():
        if len(idx) >= 2:
            idx = np.asarray(idx)
            if len(idx) > max_occurrences:
                idx = np.sort(rng.choice(idx, size=max_occurrences, replace=False))
            groups.append(idx)
    word_sims, word_mevs = _self_similarity_and_mev(unit, occ.vectors, groups)
    word_mev_base = _mev_baseline(occ.vectors, groups, seed)
    nan = np.full(unit.shape[0], np.nan)
    self_sim = word_sims.mean(axis=0) if groups else nan
    mev = _nanmean_rows(word_mevs) if groups else nan
    a, b = _baseline_pairs(occ, n_pairs, seed)
    cosines = _pair_cosines(unit, a, b)                                  # [layers, pairs]
    intra, intra_ids = _intra_sentence(occ.vectors, unit, occ.sentence_ids)
    replicates = None
    if n_resamples:
        counts = resample_counts(len(encodings), n_resamples, resample_seed)
        # self-similarity and MEV are means over words, so their unit is the word: resampling
        # sentences would drop a word seen twice from every resample missing one of its
        # sentences and so weigh frequent (context-specific) words more than the estimate
        # does, biasing the interval low (on Brown, intervals that exclude their own estimate)
        words = (resample_counts(len(groups), n_resamples, resample_seed) if groups
                 else np.zeros((n_resamples, 0), np.int64))
        replicates = {
            "anisotropy": _weighted_mean(cosines.T, counts[:, occ.sentence_ids[a]]
                                         * counts[:, occ.sentence_ids[b]]),
            "self_similarity": _weighted_mean(word_sims, words),
            # the baseline of the same resampled words, so mev - mev_baseline pairs them
            "mev": _weighted_mean(word_mevs, words),
            "mev_baseline": _weighted_mean(word_mev_base, words),
            "intra_sentence": _weighted_mean(intra, counts[:, intra_ids])}
    return LayerMetrics(
        anisotropy=cosines.mean(axis=1) if len(a) else nan,
        self_similarity=self_sim,
        intra_sentence=intra.mean(axis=0) if len(intra_ids) else nan,
        mev=mev,
        n_words_repeated=len(groups),
        layer_names=encodings[0].layer_names,
        mev_baseline=_nanmean_rows(word_mev_base) if groups else nan,
        replicates=replicates,
    )


# -- bootstrap ----------------------------------------------------------------------------

def _weighted_mean(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """values [items, layers], weights [resamples, items] -> [resamples, layers]; a NaN value
    (an item without one at that layer, e.g. an all-zero MEV) is left out of its layer's mean,
    as _nanmean_rows leaves it out of the estimate."""
    finite = np.isfinite(values)
    total = weights.astype(np.float64) @ finite
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (weights @ np.where(finite, values, 0.0))
                        / np.where(total > 0, total, 1), np.nan)


def _hsic_matrix(centred: list[np.ndarray]) -> np.ndarray:
    """Unnormalised linear HSIC ||X_i^T X_j||_F^2 for every pair of layers, through whichever of
    the n x n Gram matrices or the d x d cross-covariances is smaller."""
    n, d = centred[0].shape
    n_layers = len(centred)
    if n <= d:
        grams = np.stack([x @ x.T for x in centred]).reshape(n_layers, -1)
        return grams @ grams.T
    out = np.empty((n_layers, n_layers))
    for i in range(n_layers):
        for j in range(i, n_layers):
            cross = centred[i].T @ centred[j]
            out[i, j] = out[j, i] = float((cross * cross).sum())
    return out


def linear_cka_matrix(word_vectors: np.ndarray) -> np.ndarray:
    """Linear CKA between every pair of layers (Kornblith et al. 2019, Eq. 4 with linear kernel):
    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) on column-centred X, Y.

    word_vectors: [layers, n, dim] (the same n words at every layer). Returns [layers, layers],
    symmetric, 1 on the diagonal; invariant to orthogonal transforms and isotropic scaling.
    """
    x = np.asarray(word_vectors, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] < 2:
        raise EngineError("linear CKA needs word vectors [layers, n >= 2, dim]")
    centred = [layer - layer.mean(axis=0, keepdims=True) for layer in x]
    hsic = _hsic_matrix(centred)
    return cka_from_hsic(hsic, np.diag(hsic), np.diag(hsic))


def cka_from_hsic(hsic: np.ndarray, self_a: np.ndarray, self_b: np.ndarray) -> np.ndarray:
    """HSIC(X_i, Y_j) / sqrt(HSIC(X_i, X_i) HSIC(Y_j, Y_j)) over the last two axes; NaN where
    a layer has no variance (all its words one vector)."""
    denom = np.sqrt(np.maximum(self_a, 0.0))[..., :, None] * \
        np.sqrt(np.maximum(self_b, 0.0))[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > _EPS, hsic / np.where(denom > _EPS, denom, 1.0), np.nan)


def _centred_layers(word_vectors: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(word_vectors, dtype=np.float64)
    if x.ndim != 3 or x.shape[1] < 2:
        raise EngineError(f"{name}: linear CKA needs word vectors [layers, n >= 2, dim]")
    return x - x.mean(axis=1, keepdims=True)


def _self_hsic(centred: np.ndarray) -> np.ndarray:
    """[layers]: ||X^T X||_F^2 = ||X X^T||_F^2, through the smaller of the two matrices."""
    _, n, d = centred.shape
    small = centred @ centred.transpose(0, 2, 1) if n <= d else \
        centred.transpose(0, 2, 1) @ centred
    return (small * small).sum(axis=(1, 2))


def _cross_hsic(xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """||X_i^T Y_j||_F^2 [La, Lb] between the layers of two models, and each layer's own
    ||X^T X||_F^2 ([La], [Lb]), through the n x n Gram matrices (one per layer, then one dot
    product per pair) or the da x db cross-covariances (one per pair), whichever costs fewer
    multiplications and fits in memory."""
    (la, n, da), (lb, _, db) = xs.shape, ys.shape
    gram_cost = n * n * (la * da + lb * db + la * lb)
    if gram_cost <= la * lb * n * da * db and (la + lb) * n * n <= _MAX_GRAM_ENTRIES:
        gx = (xs @ xs.transpose(0, 2, 1)).reshape(la, -1)
        gy = (ys @ ys.transpose(0, 2, 1)).reshape(lb, -1)
        return gx @ gy.T, (gx * gx).sum(axis=1), (gy * gy).sum(axis=1)
    out = np.empty((la, lb))
    # one 2-D product per layer of A: a matmul broadcast over B's layers would skip BLAS
    ys_wide = ys.transpose(1, 0, 2).reshape(n, lb * db)
    for i in range(la):
        cross = (xs[i].T @ ys_wide).reshape(da, lb, db)
        out[i] = (cross * cross).sum(axis=(0, 2))
    return out, _self_hsic(xs), _self_hsic(ys)


# Gram matrices of every layer of both models at once: 2^26 float64 entries are 512 MiB
_MAX_GRAM_ENTRIES = 2 ** 26


def debiased_hsic(t1: np.ndarray, t2: np.ndarray, t3: np.ndarray, n) -> np.ndarray:
    """Song et al. 2012 (Eq. 5) unbiased HSIC, times n(n-3) (a factor CKA's ratio cancels),
    from t1 = tr(K~L~), t2 = 1'K~L~1 and t3 = (1'K~1)(1'L~1), K~ and L~ the Gram matrices with
    their diagonals zeroed: a word paired with itself (|x|^2 |y|^2) does not count as
    shared structure, which lifts plain CKA far above its population value with few words."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 3, t1 + t3 / ((n - 1) * (n - 2)) - 2 * t2 / (n - 2), np.nan)


def cross_cka(a: np.ndarray, b: np.ndarray, debiased: bool = False) -> np.ndarray:
    """Linear CKA between every layer of one model and every layer of another on the same words
    (Kornblith et al. 2019, Eq. 4 with a linear kernel; their Fig. 5 compares two networks).

    a: [La, n, da], b: [Lb, n, db]: row k of every layer is the same word k (the word split is
    shared by every model), the widths may differ. Returns [La, Lb]; cross_cka(x, x) equals
    linear_cka_matrix(x). debiased: from the unbiased HSIC estimator (debiased_hsic; Kornblith
    et al.'s code offers it too), needing n >= 4 words.
    """
    xs, ys = _centred_layers(a, "a"), _centred_layers(b, "b")
    n = xs.shape[1]
    if n != ys.shape[1]:
        raise EngineError(f"the two models hold different words ({n} vs {ys.shape[1]}): CKA "
                          "compares the same words")
    cross, self_a, self_b = _cross_hsic(xs, ys)
    if debiased:
        # on centred words K1 = 0, so K~1 = -diag(K) and 1'K~1 = -tr(K): the squared norms
        # carry every correction
        ka, kb = (xs * xs).sum(axis=-1), (ys * ys).sum(axis=-1)          # [L, n]: diag(K)
        kl = ka @ kb.T
        cross = debiased_hsic(cross - kl, kl, np.outer(ka.sum(1), kb.sum(1)), n)
        self_a = debiased_hsic(self_a - (ka * ka).sum(1), (ka * ka).sum(1), ka.sum(1) ** 2, n)
        self_b = debiased_hsic(self_b - (kb * kb).sum(1), (kb * kb).sum(1), kb.sum(1) ** 2, n)
    return cka_from_hsic(cross, self_a, self_b)
