"""Verdicts on published findings: reproduced only when the interval of the claimed
difference excludes zero."""
from __future__ import annotations

import numpy as np
import pytest

from bench.findings import contrast_weights, contrasts, findings_rows


def elmo_result(pos_diff: dict) -> dict:
    return {"model": "elmo-brown", "family": "elmo",
            "pos": {"contrasts": {"accuracy": {"top_minus_l1": pos_diff}}}}


def verdict_of(diff: dict) -> list:
    rows = [r for r in findings_rows([elmo_result(diff)], "pos.md")]
    assert len(rows) == 1
    return rows[0]


def test_a_difference_whose_interval_excludes_zero_is_reproduced():
    row = verdict_of({"value": -0.01, "ci": [-0.02, -0.004]})
    assert row[4] == "yes" and "excludes 0" in row[5]


def test_the_right_direction_inside_the_interval_is_partly_and_names_the_likely_reason():
    row = verdict_of({"value": -0.01, "ci": [-0.02, 0.003]})
    assert row[4] == "partly"
    assert "includes 0" in row[5] and "800M" in row[5]


def test_the_opposite_direction_is_not_reproduced():
    assert verdict_of({"value": 0.02, "ci": [0.01, 0.03]})[4] == "no"
    assert verdict_of({"value": 0.001, "ci": [-0.01, 0.01]})[4] == "no"


def test_findings_apply_only_to_their_family():
    gpt = {"model": "gpt-brown", "family": "gpt"}
    assert findings_rows([gpt], "pos.md") == []


def test_a_result_without_intervals_is_marked_not_measured():
    row = findings_rows([{"model": "old", "family": "elmo", "pos": {}}], "pos.md")[0]
    assert row[4] == "n/a"


def test_contrast_halves_match_the_geometry_invariant():
    # 5 layers: embeddings, then contextual 1-2 (lower) and 3-4 (upper)
    np.testing.assert_allclose(contrast_weights("upper_minus_lower", 5),
                               [0, -0.5, -0.5, 0.5, 0.5])
    np.testing.assert_allclose(contrast_weights("upper_minus_lower", 3), [0, -1, 1])
    assert contrast_weights("top_minus_l1", 2) is None


def test_contrasts_are_paired_over_the_same_resamples():
    # layers move together across resamples: their difference has a narrow interval
    rng = np.random.default_rng(0)
    shared = rng.normal(size=(500, 1))
    reps = shared + np.array([0.0, 0.1, 0.2]) + 0.001 * rng.normal(size=(500, 3))
    c = contrasts(np.array([0.0, 0.1, 0.2]), reps)
    lo, hi = c["top_minus_l1"]["ci"]
    assert c["top_minus_l1"]["value"] == pytest.approx(0.1)
    assert 0.09 < lo < hi < 0.11
