"""The one bootstrap helper behind every interval in results/."""
from __future__ import annotations

import numpy as np
import pytest

from engine.analysis.bootstrap import interval, ratio_replicates, resample_counts


def test_each_resample_draws_every_unit_count_once_in_total():
    counts = resample_counts(7, n_resamples=50, seed=3)
    assert counts.shape == (50, 7)
    assert (counts.sum(axis=1) == 7).all() and (counts >= 0).all()


def test_resamples_are_fixed_by_the_seed():
    np.testing.assert_array_equal(resample_counts(5, 20, seed=1), resample_counts(5, 20, seed=1))
    assert not np.array_equal(resample_counts(5, 20, seed=1), resample_counts(5, 20, seed=2))


def test_ratio_of_one_unit_counted_twice_is_its_own_ratio():
    hits = np.array([[3.0, 1.0], [0.0, 2.0]])     # two units, two layers
    totals = np.array([4.0, 2.0])
    counts = np.array([[1, 1], [2, 0], [0, 2]])
    reps = ratio_replicates(hits, totals, counts)
    np.testing.assert_allclose(reps, [[3 / 6, 3 / 6], [3 / 4, 1 / 4], [0.0, 1.0]])


def test_ratio_is_nan_where_a_resample_has_no_total():
    reps = ratio_replicates(np.array([1.0, 2.0]), np.array([0.0, 3.0]), np.array([[2, 0]]))
    assert np.isnan(reps[0])


def test_interval_is_the_central_percentiles():
    reps = np.arange(1001, dtype=float)[:, None]        # 0..1000
    lo, hi = interval(reps, level=0.95)
    assert lo[0] == pytest.approx(25.0) and hi[0] == pytest.approx(975.0)


def test_interval_of_a_mean_covers_the_mean_of_the_sample():
    rng = np.random.default_rng(0)
    x = rng.normal(loc=2.0, size=200)
    reps = ratio_replicates(x, np.ones_like(x), resample_counts(len(x)))
    lo, hi = interval(reps)
    assert lo < x.mean() < hi
    # the textbook width, 2 * 1.96 * sd / sqrt(n), within 20%
    assert hi - lo == pytest.approx(2 * 1.96 * x.std() / np.sqrt(len(x)), rel=0.2)


def test_interval_leaves_out_nan_resamples():
    reps = np.array([[np.nan, np.nan], [1.0, np.nan], [3.0, np.nan]])
    ci = interval(reps)
    assert 1.0 <= ci[0, 0] <= ci[1, 0] <= 3.0
    assert np.isnan(ci[:, 1]).all()
