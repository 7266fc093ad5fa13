"""Linear CKA between two models' layers (geometry.cross_cka) and its bootstrap over sentences
(engine.analysis.model_cka), on synthetic vectors whose answers are known."""
from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.stats import ortho_group

from engine.analysis.bootstrap import resample_counts
from engine.analysis.geometry import cross_cka, linear_cka_matrix
from engine.analysis.model_cka import ModelCKA, cka_replicates, compare_models
from engine.errors import EngineError
from tests.engine.test_geometry import make_encoding


def two_models(n_sentences: int, seed: int = 0, words_per_sentence: int = 6):
    """Encodings of the same sentences by a 3-layer model of 12 dims and a 4-layer model of 9
    dims whose layers mix A's layer 1 with noise (so some pairs share geometry, some not)."""
    rng = np.random.default_rng(seed)
    encs_a, encs_b = [], []
    shared = rng.normal(size=(12, 9))
    for s in range(n_sentences):
        words = [f"w{s}_{i}" for i in range(words_per_sentence)]
        a = rng.normal(size=(3, words_per_sentence, 12))
        mix = a[1] @ shared
        b = np.stack([mix, mix + rng.normal(size=mix.shape), rng.normal(size=mix.shape),
                      3.0 * mix])
        encs_a.append(make_encoding(words, a))
        encs_b.append(make_encoding(words, b, family="bert"))
    return encs_a, encs_b


def test_cross_cka_of_a_model_with_itself_is_its_within_model_cka_matrix():
    x = np.random.default_rng(1).normal(size=(4, 40, 10))
    np.testing.assert_allclose(cross_cka(x, x), linear_cka_matrix(x), atol=1e-12)


def test_cross_cka_ignores_a_rotation_and_a_scaling_of_one_model():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 50, 8)), rng.normal(size=(3, 50, 6))
    b[0] = a[0, :, :6] + 0.1 * b[0]
    q = ortho_group.rvs(6, random_state=3)
    np.testing.assert_allclose(cross_cka(a, 2.5 * b @ q), cross_cka(a, b), atol=1e-12)
    assert cross_cka(a, b)[0, 0] > 0.5


def test_cross_cka_gram_and_feature_paths_agree():
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=(2, 30, 5)), rng.normal(size=(3, 30, 4))      # n > dims: features
    wide_a = np.concatenate([a, np.zeros((2, 30, 60))], axis=2)           # n < dims: Grams
    wide_b = np.concatenate([b, np.zeros((3, 30, 50))], axis=2)
    np.testing.assert_allclose(cross_cka(a, b), cross_cka(wide_a, wide_b), atol=1e-12)


def test_cross_cka_of_one_dimension_is_the_squared_correlation():
    # x = (0, 1, 2), y = (0, 0, 1): centred x.y = 1, |x|^2 = 2, |y|^2 = 2/3, so 1 / (4/3)
    x = np.array([0.0, 1.0, 2.0])[None, :, None]
    y = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])[:, :, None]
    np.testing.assert_allclose(cross_cka(x, y), [[0.75, 0.0]], atol=1e-12)


def test_models_of_different_word_counts_are_refused():
    with pytest.raises(EngineError, match="same words"):
        cross_cka(np.ones((1, 4, 2)), np.ones((1, 5, 2)))


def song_debiased_cka(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """Song et al. 2012's unbiased HSIC written out on n x n Gram matrices, each word weighted
    by its copies w, whose pairs count as the diagonal, on the words centred on their weighted
    mean (the estimator needs no centring with w = 1): the reference."""
    x, y = x - w @ x / w.sum(), y - w @ y / w.sum()
    def hsic(k, l):
        k, l = k - np.diag(np.diag(k)), l - np.diag(np.diag(l))
        n = w.sum()
        return (w @ (k * l) @ w + (w @ k @ w) * (w @ l @ w) / ((n - 1) * (n - 2))
                - 2 * (w * (k @ w) * (l @ w)).sum() / (n - 2))
    k, l = x @ x.T, y @ y.T
    return hsic(k, l) / np.sqrt(hsic(k, k) * hsic(l, l))


def test_debiased_cross_cka_is_song_et_als_estimator_and_ignores_a_shift():
    rng = np.random.default_rng(9)
    a, b = rng.normal(size=(2, 25, 6)) + 3.0, rng.normal(size=(3, 25, 40))
    b[2, :, :6] += a[1]
    got = cross_cka(a, b, debiased=True)
    want = [[song_debiased_cka(x, y, np.ones(25)) for y in b] for x in a]
    np.testing.assert_allclose(got, want, atol=1e-10)
    np.testing.assert_allclose(cross_cka(a - 3.0, b, debiased=True), got, atol=1e-10)
    assert got[1, 2] > 0.3 and abs(got[0, 0]) < got[1, 2]
    np.testing.assert_allclose(np.diag(cross_cka(a, a, debiased=True)), 1.0)


def test_each_replicate_is_the_debiased_cka_of_its_resampled_sentences():
    rng = np.random.default_rng(5)
    lengths = np.array([3, 1, 4, 2, 5])
    a = rng.normal(size=(2, lengths.sum(), 7)) + 4.0        # off-centre
    b = rng.normal(size=(3, lengths.sum(), 3))
    b[1] += a[0, :, :3]
    counts = np.vstack([np.ones(5, np.int64), resample_counts(5, 6, seed=1)])
    reps = cka_replicates(a, b, lengths, counts)
    np.testing.assert_allclose(reps[0], cross_cka(a, b, debiased=True), atol=1e-10)
    for r, c in enumerate(counts):
        w = np.repeat(c, lengths).astype(float)
        want = [[song_debiased_cka(x, y, w) for y in b] for x in a]
        np.testing.assert_allclose(reps[r], want, atol=1e-10)


def test_plain_cka_of_unrelated_models_on_few_words_is_high_and_debiased_is_not():
    """Why the comparison is debiased: 40 words of independent 300-dim vectors."""
    rng = np.random.default_rng(10)
    a, b = rng.normal(size=(1, 40, 300)), rng.normal(size=(1, 40, 300))
    assert cross_cka(a, b)[0, 0] > 0.8
    assert abs(cross_cka(a, b, debiased=True)[0, 0]) < 0.1


def test_intervals_hold_the_estimate_and_narrow_with_more_sentences():
    encs_a, encs_b = two_models(8)
    few = compare_models(encs_a, encs_b, n_resamples=300)
    stacked = [np.concatenate([e.word_vectors() for e in encs], axis=1)
               for encs in (encs_a, encs_b)]
    np.testing.assert_allclose(few.cka, cross_cka(*stacked, debiased=True), atol=1e-10)
    many = compare_models(*two_models(80), n_resamples=300)
    for res in (few, many):
        assert isinstance(res, ModelCKA) and res.cka.shape == (3, 4)
        assert (res.low <= res.cka + 1e-12).all() and (res.cka <= res.high + 1e-12).all()
    assert np.mean(many.high - many.low) < 0.6 * np.mean(few.high - few.low)
    # B's layers 0 and 3 are a linear map of A's layer 1: far above A's unrelated layers
    assert many.low[1, 0] > many.high[0, 0] and many.cka[1, 3] == pytest.approx(many.cka[1, 0])


def test_result_says_what_it_compared_and_gives_one_csv_row_per_pair_of_layers():
    res = compare_models(*two_models(5), n_resamples=50)
    assert (res.n_words, res.n_sentences, res.n_resamples) == (30, 5, 50)
    assert res.layer_names_a == ("layer 0", "layer 1", "layer 2") and len(res.layer_names_b) == 4
    rows = res.rows()
    assert len(rows) == 12 and list(rows[0]) == [
        "model_a", "layer_a", "layer_a_name", "model_b", "layer_b", "layer_b_name", "cka",
        "ci_low", "ci_high", "n_words", "n_sentences"]
    assert rows[5]["layer_a"] == 1 and rows[5]["layer_b"] == 1
    assert rows[5]["cka"] == pytest.approx(res.cka[1, 1])


def test_one_sentence_or_different_sentences_are_refused():
    a, b = two_models(3)
    with pytest.raises(EngineError, match="at least 2 sentences"):
        compare_models(a[:1], b[:1])
    with pytest.raises(EngineError, match="4 words"):
        compare_models(*two_models(2, words_per_sentence=1))
    with pytest.raises(EngineError, match="not of the same sentences"):
        compare_models(a, b[::-1])


def test_a_thousand_resamples_of_three_hundred_words_take_seconds():
    rng = np.random.default_rng(6)
    lengths = rng.integers(5, 25, size=20)
    n = int(lengths.sum())
    a, b = rng.normal(size=(3, n, 1024)), rng.normal(size=(7, n, 384))   # ELMo x MiniLM sizes
    start = time.perf_counter()
    cka_replicates(a, b, lengths, resample_counts(20, 1000))
    assert time.perf_counter() - start < 10     # ~1 s measured on two shared cores
