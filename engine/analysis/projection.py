"""2-D projections of one word's vectors across contexts, comparable from layer to layer.

PCA is fitted once on all layers together (each layer centred and scaled to unit RMS norm first,
so a layer with huge activations cannot own the axes). UMAP and t-SNE are fitted per layer and
each layer is rotated onto its predecessor (orthogonal Procrustes), so moving a layer slider moves
points instead of flipping or spinning the whole picture.
"""
from __future__ import annotations

import sys
import threading
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.linalg import orthogonal_procrustes
from threadpoolctl import threadpool_limits

from engine.errors import EngineError

METHODS: dict[str, str] = {"pca": "PCA", "umap": "UMAP", "tsne": "t-SNE"}   # -> its name for a reader
DIMS: tuple[int, ...] = (2, 3)
MIN_POINTS = 3


class ProjectionError(EngineError):
    """Too few points (or an unknown method) for a projection."""


@dataclass(frozen=True, eq=False)
class Projection:
    """coords: [layers, points, 2 or 3]; note: one line on parameters adapted to few points."""

    method: str
    coords: np.ndarray
    note: str = ""
    explained: tuple[float, ...] = ()   # PCA: variance share of each axis

    def __post_init__(self) -> None:
        if self.coords.ndim != 3 or self.coords.shape[2] not in DIMS:
            raise ValueError("coords: must be [layers, points, 2 or 3]")


def check_points(n: int) -> None:
    if n < MIN_POINTS:
        what = "one sentence is" if n == 1 else f"{n} sentences are"
        raise ProjectionError(f"{what} not enough for a projection: add at least {MIN_POINTS}")


def standardise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Centre each layer and scale it to unit RMS norm: [layers, n, dim] -> same shape, plus a
    [layers] mask of constant layers (all points equal, e.g. ELMo's context-free layer 0 for one
    word), which are left at the origin: t-SNE on identical points divides by zero."""
    x = vectors.astype(np.float64) - vectors.mean(axis=1, keepdims=True)
    rms = np.sqrt((x ** 2).sum(axis=2).mean(axis=1))
    size = np.sqrt((vectors.astype(np.float64) ** 2).sum(axis=2).mean(axis=1))
    constant = rms <= 1e-6 * np.maximum(size, 1e-30)
    scale = np.where(constant, 1.0, rms)[:, None, None]
    return np.where(constant[:, None, None], 0.0, x / scale), constant


def tsne_perplexity(n: int) -> float:
    # sklearn requires perplexity < n; ~n/3 keeps a few neighbours per point for tiny sets
    return float(min(30.0, max(1.0, (n - 1) / 3)))


def umap_neighbors(n: int) -> int:
    return int(min(15, max(2, n - 1)))


def project(vectors: np.ndarray, method: str = "pca", seed: int = 0,
            dims: int = 2) -> Projection:
    """vectors: [layers, n, dim] (one word, n contexts) -> Projection with [layers, n, dims].
    Seeded: the same input always gives the same output (Engine.project caches it)."""
    if method not in METHODS:
        raise ProjectionError(f"unknown projection {method!r}: use one of {', '.join(METHODS)}")
    if dims not in DIMS:
        raise ProjectionError(f"a projection has 2 or 3 axes, not {dims}")
    if vectors.ndim != 3:
        raise ValueError("vectors: must be [layers, points, dim]")
    check_points(vectors.shape[1])
    x, constant = standardise(vectors)
    if method == "pca":
        proj = _pca_joint(x, dims)
    else:
        fit = _umap if method == "umap" else _tsne
        coords, note = np.zeros((*x.shape[:2], dims)), ""
        for i in np.nonzero(~constant)[0]:
            coords[i], note = fit(x[i], seed, dims)
        proj = Projection(method, align_layers(coords).astype(np.float32), note)
    if constant.any():
        which = ", ".join(str(i) for i in np.nonzero(constant)[0])
        note = f"layer {which}: every context gives the same vector (all points coincide)"
        proj = Projection(proj.method, proj.coords, "; ".join(filter(None, [proj.note, note])),
                          proj.explained)
    return proj


def _pca_joint(x: np.ndarray, dims: int = 2) -> Projection:
    layers, n, dim = x.shape
    flat = x.reshape(layers * n, dim)
    # SVD of the stacked, per-layer-centred points = PCA fitted on every layer at once. One BLAS
    # thread: a few hundred points gain nothing from a second, and in the app's server the
    # second waits on the core the browser draws with (SmolLM2's 31 layers: 0.06 s on one
    # thread, 0.8-2.1 s on two while Chromium renders the page, 2 cores)
    with threadpool_limits(1, user_api="blas"):
        _, s, vt = np.linalg.svd(flat, full_matrices=False)
    axes = vt[:dims]
    coords = (flat @ axes.T).reshape(layers, n, -1)
    if coords.shape[2] < dims:  # fewer dimensions (or points) than axes asked for
        pad = np.zeros((layers, n, dims - coords.shape[2]), coords.dtype)
        coords = np.concatenate([coords, pad], axis=2)
    var = s ** 2
    explained = tuple(float(v) for v in (var[:dims] / var.sum() if var.sum() > 0
                                         else var[:dims]))
    return Projection("pca", coords.astype(np.float32), "PCA fitted on all layers together",
                      explained)


_umap_lock = threading.Lock()
_umap_kernels_cached = False


def _import_umap():
    """Import umap with numba's on-disk cache switched on for its and pynndescent's kernels.

    umap-learn marks few of its numba functions cache=True, so every new process would compile
    the rest again before its first UMAP (14.5 s on the benchmark machine, against a 2 s target for
    the whole analysis). Module-level functions are what numba can cache safely; a kernel that
    has compiled already keeps its in-memory code, and numba picks the cache folder itself
    (beside the package, or a per-user folder when that is read-only).
    """
    global _umap_kernels_cached
    with _umap_lock:
        import umap
        if _umap_kernels_cached:
            return umap
        from numba.core.caching import NullCache
        from numba.core.registry import CPUDispatcher

        for name, module in list(sys.modules.items()):
            if name.partition(".")[0] not in ("umap", "pynndescent") or module is None:
                continue
            for obj in list(vars(module).values()):
                if isinstance(obj, CPUDispatcher) and isinstance(obj._cache, NullCache):
                    try:
                        obj.enable_caching()
                    except RuntimeError:  # no writable cache folder: compile per process
                        pass
        _umap_kernels_cached = True
    return umap


def warm_umap() -> float:
    """Compile (or load from numba's cache) UMAP's kernels now; returns the seconds taken.
    `make install` calls this so the first UMAP a user asks for does not pay for compilation."""
    import time

    start = time.perf_counter()
    _umap(np.random.default_rng(0).normal(size=(12, 8)), seed=0)
    return time.perf_counter() - start


def _umap(x: np.ndarray, seed: int, dims: int = 2) -> tuple[np.ndarray, str]:
    umap = _import_umap()

    n = x.shape[0]
    k = umap_neighbors(n)
    # spectral initialisation needs more points than components + 1; random init is safe
    init = "spectral" if n > 10 else "random"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reducer = umap.UMAP(n_neighbors=k, n_components=dims, metric="cosine", init=init,
                            random_state=seed, n_jobs=1)
        coords = reducer.fit_transform(x)
    note = f"UMAP n_neighbors={k} for {n} points" + (" (fewer than the usual 15)" if k < 15 else "")
    return np.asarray(coords, np.float64), note


def _tsne(x: np.ndarray, seed: int, dims: int = 2) -> tuple[np.ndarray, str]:
    from sklearn.manifold import TSNE

    n = x.shape[0]
    p = tsne_perplexity(n)
    # exact gradients: for the few hundred points typed here they are faster than Barnes-Hut
    # and avoid its OpenMP pool, which is slow to start in Streamlit's per-run threads
    coords = TSNE(n_components=dims, perplexity=p, init="pca", random_state=seed,
                  metric="cosine", max_iter=500,
                  method="exact" if n <= 300 else "barnes_hut").fit_transform(x)
    note = f"t-SNE perplexity={p:.3g} for {n} points" + (" (lowered from 30)" if p < 30 else "")
    return np.asarray(coords, np.float64), note


def align_layers(coords: np.ndarray) -> np.ndarray:
    """Rotate/reflect (and rescale) each layer's 2-D or 3-D layout onto the previous aligned layer
    (skipping layers whose points all coincide, which carry no orientation)."""
    out = np.empty_like(coords)
    ref = None
    for i in range(len(coords)):
        cur = _normalise(coords[i])
        if ref is not None and np.abs(cur).sum() > 0:
            rot, _ = orthogonal_procrustes(cur, ref)
            cur = cur @ rot
        out[i] = cur
        if np.abs(cur).sum() > 0:
            ref = cur
    return out


def _normalise(c: np.ndarray) -> np.ndarray:
    c = c - c.mean(axis=0)
    scale = np.sqrt((c ** 2).sum(axis=1).mean())
    return c / scale if scale > 0 else c
