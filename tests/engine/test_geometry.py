"""Geometry statistics on synthetic vectors whose answers are known analytically."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import ortho_group

from engine.analysis.geometry import layer_metrics, linear_cka_matrix
from engine.errors import EngineError
from engine.result import Encoding


def make_encoding(words: list[str], hidden: np.ndarray, family: str = "elmo") -> Encoding:
    """One token per word, hidden [layers, words, dim]."""
    return Encoding(model_id="synthetic", family=family, text=" ".join(words),
                    words=tuple(words), tokens=tuple(words),
                    token_to_word=np.arange(len(words)),
                    hidden_states=np.ascontiguousarray(hidden, dtype=np.float32))


SENTENCES = [["the", "bank", "of", "the", "river"], ["a", "bank", "loan", "."],
             ["The", "river", "was", "high"], ["we", "loan", "money", "to", "a", "bank"]]


def static_and_contextual(dim: int = 16, seed: int = 0) -> list[Encoding]:
    """Layer 0: one fixed vector per lowercased word (context-independent);
    layer 1: that vector plus large random noise per occurrence (context-specific)."""
    rng = np.random.default_rng(seed)
    vocab = {w.lower(): rng.normal(size=dim) for s in SENTENCES for w in s}
    encs = []
    for s in SENTENCES:
        static = np.stack([vocab[w.lower()] for w in s])
        contextual = static + 3.0 * rng.normal(size=static.shape)
        encs.append(make_encoding(s, np.stack([static, contextual])))
    return encs


def test_context_independent_layer_has_self_similarity_exactly_one():
    m = layer_metrics(static_and_contextual())
    assert m.self_similarity[0] == pytest.approx(1.0, abs=1e-12)


def test_noisy_layer_is_less_self_similar_than_static_layer():
    m = layer_metrics(static_and_contextual())
    assert m.self_similarity[1] < 0.9


def test_rank_one_occurrences_have_mev_one():
    # every occurrence of every word is a positive multiple of one direction per word
    rng = np.random.default_rng(1)
    base = {w.lower(): rng.normal(size=8) for s in SENTENCES for w in s}
    encs = [make_encoding(s, np.stack([np.stack([base[w.lower()] * rng.uniform(0.5, 2)
                                                 for w in s])])) for s in SENTENCES]
    m = layer_metrics(encs)
    assert m.mev[0] == pytest.approx(1.0, abs=1e-9)


def test_mev_of_two_orthogonal_equal_norm_occurrences_is_one_half():
    e1, e2 = np.eye(4)[0], np.eye(4)[1]
    encs = [make_encoding(["x", "y"], np.stack([np.stack([e1, e2])])),
            make_encoding(["x", "z"], np.stack([np.stack([e2, e1])]))]
    m = layer_metrics(encs)
    assert m.n_words_repeated == 1
    assert m.mev[0] == pytest.approx(0.5)
    assert m.self_similarity[0] == pytest.approx(0.0)


def test_self_similarity_counts_lowercased_words_seen_at_least_twice():
    m = layer_metrics(static_and_contextual())
    # the (The x3), bank x3, river x2, a x2, loan x2; "." is not a word
    assert m.n_words_repeated == 5


def test_intra_sentence_is_one_when_all_words_of_a_sentence_coincide():
    rng = np.random.default_rng(2)
    encs = [make_encoding(s, np.tile(rng.normal(size=(1, 1, 6)), (1, len(s), 1)))
            for s in SENTENCES]
    assert layer_metrics(encs).intra_sentence[0] == pytest.approx(1.0)


def test_intra_sentence_of_two_orthogonal_words_is_cos_45_degrees():
    encs = [make_encoding(["up", "right"], np.eye(2)[None])]
    assert layer_metrics(encs).intra_sentence[0] == pytest.approx(np.sqrt(0.5))


def test_intra_sentence_centre_is_the_mean_of_the_raw_vectors():
    # Ethayarajh 2019 Def. 2 averages the RAW vectors: (10, 0) and (0, 1) have the mean
    # (5, 0.5), so the cosines are 5/sqrt(25.25) and 0.5/sqrt(25.25), mean 2.75/sqrt(25.25)
    # = 0.5473. Averaging unit vectors instead would centre on (1, 1) and give cos 45° = 0.7071.
    encs = [make_encoding(["long", "short"], np.array([[[10.0, 0.0], [0.0, 1.0]]]))]
    assert layer_metrics(encs).intra_sentence[0] == pytest.approx(2.75 / np.sqrt(25.25))


def test_intra_sentence_averages_sentences_not_words():
    long_short = make_encoding(["long", "short"], np.array([[[10.0, 0.0], [0.0, 1.0]]]))
    same = make_encoding(["a", "b", "c", "d"], np.ones((1, 4, 2)))
    value = layer_metrics([long_short, same]).intra_sentence[0]
    assert value == pytest.approx((2.75 / np.sqrt(25.25) + 1.0) / 2)


def test_bootstrap_replicates_cover_the_estimates_and_keep_context_free_words_at_one():
    m = layer_metrics(static_and_contextual(), n_resamples=200)
    for name in ("anisotropy", "self_similarity", "intra_sentence"):
        reps = m.replicates[name]
        assert reps.shape == (200, 2)
        assert np.nanmin(reps, axis=0)[1] <= getattr(m, name)[1] <= np.nanmax(reps, axis=0)[1]
    # layer 0 is context-free: every resample's self-similarity is exactly 1 (NaN where a
    # resample of these four sentences holds no word twice)
    layer0 = m.replicates["self_similarity"][:, 0]
    np.testing.assert_allclose(layer0[np.isfinite(layer0)], 1.0, atol=1e-6)


def test_self_similarity_replicate_of_every_word_once_is_the_estimate():
    """A resample that draws every repeated word once reproduces the estimate: the replicates
    are the same mean over words, reweighted."""
    from engine.analysis.geometry import _self_similarity_and_mev, _weighted_mean

    rng = np.random.default_rng(9)
    unit = rng.normal(size=(1, 5, 4))
    unit /= np.linalg.norm(unit, axis=-1, keepdims=True)
    groups = [np.array([0, 1, 2]), np.array([3, 4])]
    cos = unit[0] @ unit[0].T
    sims, _ = _self_similarity_and_mev(unit, unit, groups)
    np.testing.assert_allclose(sims[:, 0], [(cos[0, 1] + cos[0, 2] + cos[1, 2]) / 3, cos[3, 4]])
    reps = _weighted_mean(sims, np.array([[1, 1], [2, 0]]))
    assert reps[0, 0] == pytest.approx(sims[:, 0].mean())
    assert reps[1, 0] == pytest.approx(sims[0, 0])


def test_anisotropy_is_one_when_every_vector_points_the_same_way():
    rng = np.random.default_rng(3)
    direction = rng.normal(size=5)
    encs = [make_encoding(s, (direction * rng.uniform(1, 3, size=(1, len(s), 1))))
            for s in SENTENCES]
    assert layer_metrics(encs).anisotropy[0] == pytest.approx(1.0)


def test_anisotropy_of_random_high_dimensional_vectors_is_near_zero():
    rng = np.random.default_rng(4)
    encs = [make_encoding([f"w{i}_{j}" for j in range(20)], rng.normal(size=(1, 20, 512)))
            for i in range(20)]
    assert abs(layer_metrics(encs).anisotropy[0]) < 0.02


def test_adjusted_subtracts_the_anisotropy_baseline():
    m = layer_metrics(static_and_contextual())
    adj = m.adjusted()
    np.testing.assert_allclose(adj.self_similarity, m.self_similarity - m.anisotropy)
    np.testing.assert_allclose(adj.intra_sentence, m.intra_sentence - m.anisotropy)


def test_metrics_are_deterministic_for_a_seed():
    a = layer_metrics(static_and_contextual(), seed=7)
    b = layer_metrics(static_and_contextual(), seed=7)
    np.testing.assert_array_equal(a.anisotropy, b.anisotropy)


def test_mixing_layer_counts_is_refused():
    encs = static_and_contextual()
    odd = make_encoding(["a", "b"], np.zeros((3, 2, 16)))
    with pytest.raises(EngineError):
        layer_metrics(encs + [odd])


def test_cka_is_one_under_orthogonal_transform_and_scaling():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(50, 10))
    q = ortho_group.rvs(10, random_state=6)
    cka = linear_cka_matrix(np.stack([x, x @ q, 2.0 * x]))
    np.testing.assert_allclose(cka, np.ones((3, 3)), atol=1e-10)


def test_cka_of_independent_features_is_small_and_matrix_symmetric():
    rng = np.random.default_rng(7)
    stack = rng.normal(size=(3, 400, 8))
    cka = linear_cka_matrix(stack)
    np.testing.assert_allclose(cka, cka.T)
    np.testing.assert_allclose(np.diag(cka), 1.0)
    assert cka[0, 1] < 0.1


def test_cka_gram_and_feature_paths_agree():
    # n < dim uses Gram matrices, n > dim cross-covariances; the same data both ways
    rng = np.random.default_rng(8)
    x = rng.normal(size=(2, 30, 12))
    y = np.concatenate([x, np.zeros((2, 30, 40))], axis=2)     # pad dims: n < dim now
    np.testing.assert_allclose(linear_cka_matrix(x), linear_cka_matrix(y), atol=1e-10)


def test_cka_of_partly_shared_features_matches_closed_form():
    # X = [A, B], Y = [A, C] with A, B, C orthogonal blocks of equal energy: CKA = 1/2
    n = 8
    h = np.eye(n) - 1.0 / n            # centring projection: its top singular vectors are
    cols = np.linalg.svd(h)[0][:, :3]  # orthonormal and centred
    a, b, c = cols[:, :1], cols[:, 1:2], cols[:, 2:3]
    x, y = np.hstack([a, b]), np.hstack([a, c])
    assert linear_cka_matrix(np.stack([x, y]))[0, 1] == pytest.approx(0.5)


def test_adjusted_mev_is_zero_when_every_vector_points_the_same_way():
    # one common direction: a word's first component explains everything, but so does a
    # random set of words', so nothing is left once the baseline is subtracted
    rng = np.random.default_rng(10)
    direction = rng.normal(size=6)
    encs = [make_encoding(s, direction * rng.uniform(1, 2, size=(1, len(s), 1)))
            for s in SENTENCES]
    m = layer_metrics(encs)
    assert m.mev[0] == pytest.approx(1.0)
    assert m.adjusted().mev[0] == pytest.approx(0.0, abs=1e-9)


def test_mev_baseline_of_random_isotropic_vectors_is_below_static_mev():
    m = layer_metrics(static_and_contextual(dim=64))
    assert m.mev_baseline[0] < m.mev[0] == pytest.approx(1.0)


def test_case_sensitive_identity_keeps_a_case_sensitive_static_layer_at_one():
    # a char-CNN-like layer: "The" and "the" get different vectors
    rng = np.random.default_rng(11)
    vocab = {w: rng.normal(size=8) for s in SENTENCES for w in s}
    encs = [make_encoding(s, np.stack([np.stack([vocab[w] for w in s])])) for s in SENTENCES]
    assert layer_metrics(encs).self_similarity[0] == pytest.approx(1.0, abs=1e-12)  # the default
    assert layer_metrics(encs, lowercase=True).self_similarity[0] < 1.0 - 1e-6


def rare_coherent_frequent_noisy(n_sentences: int = 300, dim: int = 16, seed: int = 4):
    """Each sentence: two of 30 frequent words (about 20 occurrences each, a fresh random
    vector every time: self-similarity near 0) and one rare word that occurs in exactly two
    sentences with nearly the same vector (self-similarity near 1); as in real text, where
    function words are the most context-specific (Ethayarajh 2019, fig. 3)."""
    rng = np.random.default_rng(seed)
    rare = {i: rng.normal(size=dim) for i in range(n_sentences // 2)}
    encs = []
    for s in range(n_sentences):
        words = [f"f{(2 * s) % 30}", f"f{(2 * s + 1) % 30}", f"w{s // 2}"]
        vecs = np.stack([rng.normal(size=dim), rng.normal(size=dim),
                         rare[s // 2] + 0.05 * rng.normal(size=dim)])
        encs.append(make_encoding(words, vecs[None]))
    return encs


def test_self_similarity_interval_contains_its_estimate_when_word_frequency_matters():
    """Self-similarity is a mean over words, so its interval resamples words. Resampling
    sentences instead drops a word seen twice from every resample that misses one of its two
    sentences (three in five), weighting the frequent words more than the estimate does: here
    that put the whole interval below the estimate."""
    from engine.analysis.bootstrap import interval

    m = layer_metrics(rare_coherent_frequent_noisy(), n_resamples=400)
    lo, hi = interval(m.replicates["self_similarity"])[:, 0]
    assert lo < m.self_similarity[0] < hi
    # MEV averages the same words and resamples them too, its baseline with them
    lo_m, hi_m = interval(m.replicates["mev"])[:, 0]
    assert lo_m < m.mev[0] < hi_m
    base = m.replicates["mev_baseline"][:, 0]
    assert np.nanmin(base) <= m.mev_baseline[0] <= np.nanmax(base)
    # an interval over the 180 words (150 near 1, 30 near 0; sd ~0.37):
    # about 2 x 1.96 x 0.37 / sqrt(180) ~ 0.11 wide
    assert 0.06 < hi - lo < 0.2
