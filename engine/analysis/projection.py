"""2-D projections of one word's vectors across contexts, comparable from layer to layer.

PCA is fitted once on all layers together (each layer centred and scaled to unit RMS norm first,
so a layer with huge activations cannot own the axes). UMAP and t-SNE are fitted per layer and
each layer is rotated onto its predecessor (orthogonal Procrustes), so moving a layer slider moves
points instead of flipping or spinning the whole picture.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import orthogonal_procrustes

from engine.families.base import EngineError

METHODS: tuple[str, ...] = ("pca", "umap", "tsne")
MIN_POINTS = 3


class ProjectionError(EngineError):
    """Too few points (or an unknown method) for a projection."""


@dataclass(frozen=True, eq=False)
class Projection:
    """coords: [layers, points, 2]; note: one line on parameters adapted to few points."""

    method: str
    coords: np.ndarray
    note: str = ""
    explained: tuple[float, ...] = ()   # PCA: variance share of the two axes

    def __post_init__(self) -> None:
        if self.coords.ndim != 3 or self.coords.shape[2] != 2:
            raise ValueError("coords: must be [layers, points, 2]")


def check_points(n: int) -> None:
    if n < MIN_POINTS:
        what = "one sentence is" if n == 1 else f"{n} sentences are"
        raise ProjectionError(f"{what} not enough for a projection: add at least {MIN_POINTS}")


def standardise(vectors: np.ndarray) -> np.ndarray:
    """Centre each layer and scale it to unit RMS norm: [layers, n, dim] -> same shape."""
    x = vectors.astype(np.float64) - vectors.mean(axis=1, keepdims=True)
    rms = np.sqrt((x ** 2).sum(axis=2).mean(axis=1))[:, None, None]
    return x / np.where(rms > 0, rms, 1.0)


def tsne_perplexity(n: int) -> float:
    # sklearn requires perplexity < n; ~n/3 keeps a few neighbours per point for tiny sets
    return float(min(30.0, max(1.0, (n - 1) / 3)))


def umap_neighbors(n: int) -> int:
    return int(min(15, max(2, n - 1)))


def project(vectors: np.ndarray, method: str = "pca", seed: int = 0) -> Projection:
    """vectors: [layers, n, dim] (one word, n contexts) -> Projection with [layers, n, 2]."""
    if method not in METHODS:
        raise ProjectionError(f"unknown projection {method!r}: use one of {', '.join(METHODS)}")
    if vectors.ndim != 3:
        raise ValueError("vectors: must be [layers, points, dim]")
    check_points(vectors.shape[1])
    x = standardise(vectors)
    if method == "pca":
        return _pca_joint(x)
    fit = _umap if method == "umap" else _tsne
    per_layer = [fit(layer, seed) for layer in x]
    coords = align_layers(np.stack([c for c, _ in per_layer]))
    return Projection(method, coords.astype(np.float32), per_layer[0][1])


def _pca_joint(x: np.ndarray) -> Projection:
    layers, n, dim = x.shape
    flat = x.reshape(layers * n, dim)
    # SVD of the stacked, per-layer-centred points = PCA fitted on every layer at once
    _, s, vt = np.linalg.svd(flat, full_matrices=False)
    axes = vt[:2]
    coords = (flat @ axes.T).reshape(layers, n, -1)
    if coords.shape[2] < 2:  # dim == 1
        coords = np.concatenate([coords, np.zeros_like(coords)], axis=2)
    var = s ** 2
    explained = tuple(float(v) for v in (var[:2] / var.sum() if var.sum() > 0 else var[:2]))
    return Projection("pca", coords.astype(np.float32), "PCA fitted on all layers together",
                      explained)


def _umap(x: np.ndarray, seed: int) -> tuple[np.ndarray, str]:
    import umap

    n = x.shape[0]
    k = umap_neighbors(n)
    # spectral initialisation needs more points than components + 1; random init is safe
    init = "spectral" if n > 10 else "random"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(n_neighbors=k, n_components=2, metric="cosine", init=init,
                            random_state=seed, n_jobs=1)
        coords = reducer.fit_transform(x)
    note = f"UMAP n_neighbors={k} for {n} points" + (" (fewer than the usual 15)" if k < 15 else "")
    return np.asarray(coords, np.float64), note


def _tsne(x: np.ndarray, seed: int) -> tuple[np.ndarray, str]:
    from sklearn.manifold import TSNE

    n = x.shape[0]
    p = tsne_perplexity(n)
    coords = TSNE(n_components=2, perplexity=p, init="pca", random_state=seed,
                  metric="cosine", max_iter=500).fit_transform(x)
    note = f"t-SNE perplexity={p:g} for {n} points" + (" (lowered from 30)" if p < 30 else "")
    return np.asarray(coords, np.float64), note


def align_layers(coords: np.ndarray) -> np.ndarray:
    """Rotate/reflect (and rescale) each layer's 2-D layout onto the previous aligned layer."""
    out = np.empty_like(coords)
    out[0] = _normalise(coords[0])
    for i in range(1, len(coords)):
        cur = _normalise(coords[i])
        rot, _ = orthogonal_procrustes(cur, out[i - 1])
        out[i] = cur @ rot
    return out


def _normalise(c: np.ndarray) -> np.ndarray:
    c = c - c.mean(axis=0)
    scale = np.sqrt((c ** 2).sum(axis=1).mean())
    return c / scale if scale > 0 else c
