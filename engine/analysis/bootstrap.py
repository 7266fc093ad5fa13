"""Percentile bootstrap over a benchmark's natural unit (sentences, held-out lemmas).

One resampling scheme behind every interval in results/: draw the n units with replacement,
n_resamples times from a fixed seed, and give each statistic the multiplicity of every unit in
each resample. A mean over units becomes a weighted mean; a statistic over pairs of units
(anisotropy, self-similarity) weights a pair by the product of its units' multiplicities.
scipy.stats.bootstrap resamples the data array itself, so it cannot weight pairs that cross
units; hence this helper. Efron & Tibshirani 1993, ch. 13 (percentile interval).
"""
from __future__ import annotations

import warnings

import numpy as np

N_RESAMPLES = 1000
SEED = 0
LEVEL = 0.95


def resample_counts(n_units: int, n_resamples: int = N_RESAMPLES,
                    seed: int = SEED) -> np.ndarray:
    """[n_resamples, n_units] int: how often each unit is drawn in each resample (a row sums
    to n_units, as drawing n_units with replacement does)."""
    if n_units < 1:
        raise ValueError("n_units: the bootstrap needs at least one unit")
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=n_resamples)


def ratio_replicates(hits: np.ndarray, totals: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Resampled sum(hits) / sum(totals), e.g. an accuracy whose unit is a sentence.

    hits [units, ...] (say, correct words per sentence and layer), totals [units] (words per
    sentence), counts [n_resamples, units] -> [n_resamples, ...]; NaN where a resample has no
    total.
    """
    hits = np.asarray(hits, dtype=np.float64)
    num = np.tensordot(counts, hits, axes=(1, 0))
    den = (counts @ np.asarray(totals, dtype=np.float64)).reshape(-1, *([1] * (hits.ndim - 1)))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def interval(replicates: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """[2, ...]: the lower and upper percentile of replicates [n_resamples, ...] at `level`;
    NaN resamples are left out, an all-NaN column gives NaN."""
    tail = 100.0 * (1.0 - level) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN columns: NaN is the answer
        return np.nanpercentile(np.asarray(replicates, dtype=np.float64),
                                [tail, 100.0 - tail], axis=0)


def with_ci(value: float | None, ci=None) -> str:
    """'0.553 [0.541, 0.566]': a value and its 95% interval (the value alone without one);
    the form every results page and model card prints."""
    if value is None or not np.isfinite(value):
        return "n/a"
    if ci is None or len(ci) != 2 or not np.all(np.isfinite(ci)):
        return f"{value:.3f}"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
