"""Pooling subword vectors into word vectors, checked against the per-word definition."""
from __future__ import annotations

import numpy as np
import pytest

from engine.result import Encoding, pool_index


@pytest.fixture
def enc():
    rng = np.random.default_rng(3)
    # [CLS] un ##believ ##able bank s [SEP]: word 0 has 3 pieces, word 1 one, word 2 one
    t2w = np.array([-1, 0, 0, 0, 1, 2, -1])
    return Encoding(model_id="m", family="bert", text="unbelievable bank s",
                    words=("unbelievable", "bank", "s"),
                    tokens=("[CLS]", "un", "##believ", "##able", "bank", "s", "[SEP]"),
                    token_to_word=t2w,
                    hidden_states=rng.normal(size=(3, 7, 5)).astype(np.float32))


@pytest.mark.parametrize("pool", ["first", "mean", "last"])
def test_pooling_matches_the_per_word_definition(enc, pool):
    hs = enc.hidden_states
    expected = np.stack([
        {"first": hs[:, idx[0]], "last": hs[:, idx[-1]], "mean": hs[:, idx].mean(axis=1)}[pool]
        for idx in (np.nonzero(enc.token_to_word == w)[0] for w in range(3))], axis=1)
    got = enc.word_vectors(pool)
    assert got.shape == (3, 3, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pool", ["first", "mean", "last"])
def test_a_padded_batch_pools_by_the_one_rule_each_text_does(enc, pool):
    """pool_index laid over a batch (rows at text x width + position, as the device pooling
    of engine/families/hf/pooling.py reads them) gives each text's word_vectors."""
    short = Encoding(model_id="m", family="bert", text="bank s", words=("bank", "s"),
                     tokens=("[CLS]", "bank", "s", "[SEP]"), token_to_word=np.array([-1, 0, 1, -1]),
                     hidden_states=enc.hidden_states[:, 2:6].copy())
    width = enc.hidden_states.shape[1]
    states = np.zeros((2 * width, 3, 5), np.float32)             # [texts x width, layers, dim]
    states[:width] = enc.hidden_states.transpose(1, 0, 2)
    states[width:width + 4] = short.hidden_states.transpose(1, 0, 2)
    rows, words, weights, n = pool_index([enc.token_to_word, short.token_to_word], [3, 2],
                                         width, pool)
    if words is None:
        pooled = states[rows]
    else:
        pooled = np.zeros((n, 3, 5), np.float32)
        np.add.at(pooled, words, states[rows] * weights[:, None, None])
    np.testing.assert_allclose(pooled[:3].transpose(1, 0, 2), enc.word_vectors(pool), atol=1e-6)
    np.testing.assert_allclose(pooled[3:].transpose(1, 0, 2), short.word_vectors(pool), atol=1e-6)


def test_pooled_vectors_are_fresh_arrays(enc):
    enc.hidden_states.flags.writeable = False      # as the engine's cache leaves them
    for pool in ("first", "mean", "last"):
        enc.word_vectors(pool)[0, 0, 0] = 1.0          # writable, and not a view of the cache
    assert enc.hidden_states[0, 1, 0] != 1.0


def test_identical_groups_finds_points_drawn_on_each_other():
    from engine.analysis.vectors import identical_groups

    a, b = np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])
    x = np.stack([a, b, a + 1e-9, a * 1.001, b, np.zeros(3), np.zeros(3)])
    assert identical_groups(x) == [[0, 2], [1, 4], [5, 6]]
    assert identical_groups(np.eye(3)) == []
