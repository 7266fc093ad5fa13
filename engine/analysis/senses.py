"""Word senses in vector space: separation per layer, suggested sense labels, the ELMo scalar mix.

Nearest-sense-centroid classification follows Peters et al. 2018 (sec. 5.3, Table 5) and
Coenen et al. 2019: a context is assigned the sense whose mean vector is most cosine-similar.
The scalar mix is ELMo's task representation (Peters et al. 2018, eq. 1):
    ELMo = gamma * sum_j softmax(s)_j * h_j.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from engine.errors import EngineError
from engine.analysis.vectors import TIE_TOLERANCE, unit_rows
# one scalar mix for the whole project (numpy only: this module is imported by the app)
from engine.families.elmo.mix import mix_weights as softmax
from engine.families.elmo.mix import layer_norm, scalar_mix

__all__ = ["SenseError", "SenseSeparation", "LearnedMix", "silhouette",
           "nearest_centroid_accuracy", "sense_separation", "suggest_senses", "softmax",
           "scalar_mix", "learn_mix"]


class SenseError(EngineError):
    """Sense labels that cannot be used (too few senses or contexts)."""


@dataclass(frozen=True, eq=False)
class SenseSeparation:
    """Per layer: silhouette (cosine) and leave-one-out nearest-centroid accuracy; NaN where
    undefined (fewer than 2 senses, or a sense with a single context for leave-one-out)."""

    silhouette: np.ndarray
    nearest_centroid: np.ndarray


@dataclass(frozen=True, eq=False)
class LearnedMix:
    s: np.ndarray           # [layers] unnormalised scalar weights
    gamma: float
    weights: np.ndarray     # softmax(s)
    before: SenseSeparation  # uniform mix, gamma = 1
    after: SenseSeparation


def _codes(labels: Sequence) -> np.ndarray:
    _, codes = np.unique(np.asarray([str(l) for l in labels]), return_inverse=True)
    return codes


def silhouette(vectors: np.ndarray, labels: Sequence) -> float:
    """Mean silhouette with cosine distance (Rousseeuw 1987); NaN if it is undefined.

    The same numbers as sklearn.metrics.silhouette_score on these distances (a test holds them
    equal), computed here in numpy: the Polysemy page picks its opening tab by silhouette before
    it draws anything, and importing sklearn (scipy.stats with it) takes 1.9-2.4 s of a fresh
    server's first chart on 2 cores."""
    codes = _codes(labels)
    n, k = len(codes), len(set(codes.tolist()))
    if k < 2 or k > n - 1:
        return float("nan")
    u = unit_rows(vectors)
    dist = np.clip(1.0 - u @ u.T, 0.0, 2.0)
    # distances at float-rounding level are the same point: a context-free layer (or a mix
    # that leaves 1e-9 of the others) would otherwise get a silhouette from rounding noise
    dist[dist < TIE_TOLERANCE] = 0.0
    np.fill_diagonal(dist, 0.0)
    member = codes[:, None] == np.arange(k)                 # [n, k]
    counts = member.sum(axis=0)
    to_sense = dist @ member                                # summed distance to each sense
    own = counts[codes]
    rows = np.arange(n)
    a = to_sense[rows, codes] / np.maximum(own - 1, 1)      # mean distance within its sense
    mean_to = to_sense / counts
    mean_to[rows, codes] = np.inf
    b = mean_to.min(axis=1)                                 # the nearest other sense
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.nan_to_num((b - a) / np.maximum(a, b))       # 0/0: a and b both 0
    s[own == 1] = 0.0                                       # a sense of one context scores 0
    return float(s.mean())


def nearest_centroid_accuracy(vectors: np.ndarray, labels: Sequence) -> float:
    """Leave-one-out: each context is held out, centroids are computed from the others."""
    codes = _codes(labels)
    counts = np.bincount(codes)
    if len(counts) < 2 or counts.min() < 2:
        return float("nan")
    x = unit_rows(vectors.astype(np.float64))
    sums = np.stack([x[codes == c].sum(axis=0) for c in range(len(counts))])
    correct = 0
    for i, c in enumerate(codes):
        held = sums.copy()
        held[c] -= x[i]
        cents = held / np.maximum(counts - (np.arange(len(counts)) == c), 1)[:, None]
        # centroids tied for nearest (the same vector, as a context-free layer gives) share
        # the credit, as in bench.analysis.probes: argmax would pick by float rounding
        sims = unit_rows(cents) @ x[i]
        tied = sims >= sims.max() - TIE_TOLERANCE
        correct += tied[c] / tied.sum()
    return float(correct / len(codes))


def sense_separation(vectors: np.ndarray, labels: Sequence) -> SenseSeparation:
    """vectors: [layers, n, dim] -> per-layer silhouette and nearest-centroid accuracy."""
    if vectors.ndim == 2:
        vectors = vectors[None]
    if vectors.shape[1] != len(labels):
        raise ValueError("labels: one label per context is required")
    return SenseSeparation(np.array([silhouette(v, labels) for v in vectors]),
                           np.array([nearest_centroid_accuracy(v, labels) for v in vectors]))


def suggest_senses(vectors: np.ndarray, k: int | None = None, method: str = "kmeans",
                   seed: int = 0) -> np.ndarray:
    """Cluster [n, dim] vectors (cosine geometry) into k senses; k=None picks 2..5 by silhouette."""
    from sklearn.cluster import AgglomerativeClustering, KMeans

    n = vectors.shape[0]
    if n < 3:
        raise SenseError("add at least 3 sentences to suggest senses")
    x = unit_rows(vectors.astype(np.float64))

    def fit(kk: int) -> np.ndarray:
        if method == "agglomerative":
            return AgglomerativeClustering(n_clusters=kk, metric="cosine",
                                           linkage="average").fit_predict(x)
        return KMeans(n_clusters=kk, n_init=10, random_state=seed).fit_predict(x)

    if k is not None:
        return fit(max(1, min(k, n)))
    best, best_score = fit(2), -np.inf
    for kk in range(2, min(5, n - 1) + 1):
        labels = fit(kk)
        score = silhouette(x, labels)
        if np.isfinite(score) and score > best_score:
            best, best_score = labels, score
    return best


WEAK_SILHOUETTE = 0.1


@dataclass(frozen=True)
class SplitQuality:
    """How a suggested split came out: cluster sizes (by label order), its silhouette, and
    whether it is weak (silhouette under WEAK_SILHOUETTE or undefined, or a cluster of one)."""

    sizes: tuple[int, ...]
    silhouette: float
    weak: bool


def split_quality(vectors: np.ndarray, labels: Sequence[int]) -> SplitQuality:
    codes = _codes(labels)
    sizes = tuple(int((codes == c).sum()) for c in sorted(set(codes.tolist())))
    sil = silhouette(vectors, labels)
    weak = not np.isfinite(sil) or sil < WEAK_SILHOUETTE or min(sizes) == 1
    return SplitQuality(sizes, float(sil), bool(weak))


# -- ELMo scalar mix (scalar_mix and softmax: engine.families.elmo.mix) --------------------

def _layer_rms(layers: np.ndarray) -> np.ndarray:
    x = layers - layers.mean(axis=1, keepdims=True)
    return np.sqrt((x ** 2).sum(axis=2).mean(axis=1))


def learn_mix(layers: np.ndarray, labels: Sequence, l2: float = 1e-2,
              seed: int = 0, do_layer_norm: bool = False) -> LearnedMix:
    """Fit s and gamma so the mixed vectors separate the labelled senses.

    Criterion: a soft nearest-centroid classifier (softmax over negative squared distances to
    the sense centroids, an identity-covariance Gaussian model); gamma scales the mix and so sets
    how sharp the classifier is. All layers are divided by one common RMS norm (so gamma is in
    sensible units) while the weights still apply to the raw layers, exactly as ELMo mixes them;
    a small L2 penalty keeps s near uniform when the layers are equally useful.
    do_layer_norm: the mix reads each layer through AllenNLP's layer norm (one mean and variance
    per layer over all its words), as scalar_mix(..., do_layer_norm=True) then applies it.
    """
    from scipy.optimize import minimize

    if do_layer_norm:
        layers = np.stack([layer_norm(layer) for layer in layers])

    codes = _codes(labels)
    n_senses = len(set(codes.tolist()))
    if n_senses < 2:
        raise SenseError("label at least two senses to learn the mix")
    x = layers.astype(np.float64) / max(float(_layer_rms(layers).mean()), 1e-12)
    onehot = np.eye(n_senses)[codes]
    counts = onehot.sum(axis=0)
    n_layers = x.shape[0]

    def loss(theta: np.ndarray) -> float:
        s, log_gamma = theta[:-1], theta[-1]
        mix = scalar_mix(x, s, np.exp(log_gamma), out_dtype=np.float64)     # [n, dim]
        cents = (onehot.T @ mix) / counts[:, None]                          # [senses, dim]
        d2 = ((mix[:, None, :] - cents[None]) ** 2).sum(axis=2)             # [n, senses]
        logits = -0.5 * d2
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        return float(-(onehot * logp).sum(axis=1).mean() + l2 * (s ** 2).sum()
                     + l2 * log_gamma ** 2)

    rng = np.random.default_rng(seed)
    theta0 = np.concatenate([rng.normal(0, 1e-3, n_layers), [0.0]])
    res = minimize(loss, theta0, method="L-BFGS-B",
                   bounds=[(-10, 10)] * n_layers + [(-5, 5)])
    s, gamma = res.x[:-1], float(np.exp(res.x[-1]))
    before = sense_separation(scalar_mix(layers, np.zeros(n_layers), 1.0)[None], labels)
    after = sense_separation(scalar_mix(layers, s, gamma)[None], labels)
    return LearnedMix(s, gamma, softmax(s), before, after)
