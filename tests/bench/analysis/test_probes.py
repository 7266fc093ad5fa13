"""Sense and POS probes on synthetic data with known answers."""
from __future__ import annotations

import numpy as np
import pytest

from bench.analysis.probes import (chance_accuracy, first_sense_accuracy, first_sense_hits,
                                    fit_threshold, learn_scalar_mix, linear_probe,
                                    nearest_centroid_accuracy, nearest_centroid_hits,
                                    pair_cosines, sense_pairs, threshold_accuracy)


def sense_clusters(n_lemmas=6, senses_per_lemma=2, per_sense=5, dim=32, noise=0.3, seed=0):
    """Each sense is a random direction; examples are that direction plus noise."""
    rng = np.random.default_rng(seed)
    vecs, senses, lemmas = [], [], []
    for lem in range(n_lemmas):
        for s in range(senses_per_lemma):
            centre = rng.normal(size=dim)
            spread = noise * np.linalg.norm(centre) / np.sqrt(dim)
            vecs.append(centre + spread * rng.normal(size=(per_sense, dim)))
            senses += [lem * senses_per_lemma + s] * per_sense
            lemmas += [lem] * per_sense
    return np.concatenate(vecs), np.array(senses), np.array(lemmas)


def test_nearest_centroid_is_perfect_on_separated_senses():
    x, s, l = sense_clusters()
    assert nearest_centroid_accuracy(x, s, l) == 1.0


def test_nearest_centroid_is_near_chance_on_random_vectors():
    x, s, l = sense_clusters(n_lemmas=40, noise=0.0)
    rng = np.random.default_rng(1)
    acc = nearest_centroid_accuracy(rng.normal(size=x.shape), s, l)
    assert 0.3 < acc < 0.7


def test_nearest_centroid_leaves_the_example_out():
    # two senses, one example each plus a twin: with the example itself in its centroid
    # the answer would always be right; left out, the lone twin decides
    x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]])
    senses = np.array([0, 0, 1, 1])     # each sense holds one x-ish and one y-ish vector
    lemmas = np.zeros(4, int)
    assert nearest_centroid_accuracy(x, senses, lemmas) == 0.0


def test_first_sense_baseline_answers_the_lowest_ranked_sense():
    senses = np.array([0, 0, 1, 1, 1, 2])   # sense 2 has one example: not scored
    lemmas = np.zeros(6, int)
    ranks = np.array([2, 2, 1, 1, 1, 3])     # sense 1 is WordNet's first sense
    assert first_sense_accuracy(senses, lemmas, ranks) == pytest.approx(3 / 5)


def test_chance_accuracy_is_one_over_the_number_of_senses():
    senses = np.array([0, 0, 1, 1, 2, 2, 3, 3, 3])
    lemmas = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1])   # lemma 1 has one sense: not scored
    assert chance_accuracy(senses, lemmas) == pytest.approx(1 / 3)


def test_sense_pairs_are_balanced_and_within_lemma():
    _, s, l = sense_clusters(n_lemmas=4)
    pairs, same = sense_pairs(s, l)
    assert same.sum() == (~same).sum() > 0
    assert np.all(l[pairs[:, 0]] == l[pairs[:, 1]])
    np.testing.assert_array_equal(same, s[pairs[:, 0]] == s[pairs[:, 1]])


def test_threshold_fitted_on_train_words_transfers_to_held_out_words():
    x, s, l = sense_clusters(n_lemmas=10)
    train, test = l < 5, l >= 5
    p_tr, y_tr = sense_pairs(s[train], l[train])
    p_te, y_te = sense_pairs(s[test], l[test])
    t = fit_threshold(pair_cosines(x[train], p_tr), y_tr)
    assert threshold_accuracy(pair_cosines(x[test], p_te), y_te, t) > 0.95


def test_learned_mix_puts_weight_on_the_informative_layer():
    x, s, l = sense_clusters(n_lemmas=8)
    rng = np.random.default_rng(2)
    stack = np.stack([rng.normal(size=x.shape), x, rng.normal(size=x.shape)])
    pairs, same = sense_pairs(s, l)
    mix = learn_scalar_mix(stack, pairs, same)
    assert mix.weights.sum() == pytest.approx(1.0)
    assert np.argmax(mix.weights) == 1
    assert mix.apply(stack).shape == x.shape


def test_linear_probe_beats_majority_on_separable_data():
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 16)) * 3
    y = rng.choice(4, size=600, p=[0.4, 0.3, 0.2, 0.1])
    x = centres[y] + rng.normal(size=(600, 16))
    score = linear_probe(x[:400], y[:400], x[400:], y[400:])
    assert score.majority_baseline == pytest.approx(np.mean(y[400:] == 0))
    assert score.accuracy > 0.95 > score.majority_baseline


def test_linear_probe_is_near_majority_on_noise():
    rng = np.random.default_rng(4)
    y = rng.choice(2, size=400, p=[0.8, 0.2])
    x = rng.normal(size=(400, 8))
    score = linear_probe(x[:300], y[:300], x[300:], y[300:])
    assert score.accuracy <= score.majority_baseline + 0.05


def test_per_lemma_hits_add_up_to_the_accuracies():
    # the sense benchmark's bootstrap resamples lemmas, so the accuracies must split by lemma
    x, s, l = sense_clusters(n_lemmas=5, noise=3.0, seed=4)
    ranks = np.array([1 + sense % 2 for sense in s])
    hits, total = nearest_centroid_hits(x, s, l)
    assert hits.shape == total.shape == (5,)
    assert hits.sum() / total.sum() == pytest.approx(nearest_centroid_accuracy(x, s, l))
    hits, total = first_sense_hits(s, l, ranks)
    assert hits.sum() / total.sum() == pytest.approx(first_sense_accuracy(s, l, ranks))


def test_linear_probe_reports_which_test_words_it_got_right():
    rng = np.random.default_rng(2)
    y = np.array(["a", "b"] * 30)
    x = rng.normal(size=(60, 4)) + (y == "a")[:, None] * 3.0
    score = linear_probe(x[:40], y[:40], x[40:], y[40:])
    assert score.correct.shape == (20,)
    assert score.correct.mean() == pytest.approx(score.accuracy)


def test_a_context_free_layer_scores_the_expected_value_of_a_tie_not_float_rounding():
    # one word form, three senses, the same vector for every example (a char-CNN layer): every
    # centroid ties, so each example earns 1/3 whatever rounding says; a small nudge off the
    # shared vector (beyond float noise) is a real difference and decides
    # (argmax would credit whichever sense comes first: 4/8 here)
    base = np.array([0.3, -1.2, 0.7, 2.0], dtype=np.float32)
    senses = np.array([0, 0, 0, 0, 1, 1, 2, 2])
    lemmas = np.zeros(8, dtype=int)
    for noise in (0.0, 1e-9):
        x = np.tile(base, (8, 1)) * (1 + noise * np.arange(8)[:, None])
        assert nearest_centroid_accuracy(x, senses, lemmas) == pytest.approx(1 / 3)
    x = np.tile(base, (8, 1))
    x[:4, 0] += 0.5                       # sense 0 differs: its examples find it, the rest tie
    hits, total = nearest_centroid_hits(x, senses, lemmas)
    assert total.sum() == 8 and hits.sum() == pytest.approx(4 + 4 / 2)
