"""Sense separation, suggested senses and the ELMo scalar mix."""
import subprocess
import sys

import numpy as np
import pytest

from engine.analysis.senses import (SenseError, learn_mix, nearest_centroid_accuracy,
                                    scalar_mix, sense_separation, silhouette, suggest_senses)


def _clusters(n=12, dim=20, spread=0.1, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(2, dim))
    labels = np.array(["a", "b"] * (n // 2))
    x = centres[(labels == "b").astype(int)] + spread * rng.normal(size=(n, dim))
    return x, labels


def test_nearest_centroid_accuracy_is_one_on_well_separated_clusters():
    x, labels = _clusters()
    assert nearest_centroid_accuracy(x, labels) == 1.0


def test_nearest_centroid_accuracy_is_near_chance_on_noise():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 50))
    labels = np.arange(200) % 2
    assert 0.3 < nearest_centroid_accuracy(x, labels) < 0.7


def test_nearest_centroid_is_nan_when_a_sense_has_one_context():
    x, _ = _clusters(n=4)
    assert np.isnan(nearest_centroid_accuracy(x, ["a", "a", "a", "b"]))


def test_silhouette_is_high_for_separated_and_nan_for_a_single_sense():
    x, labels = _clusters()
    assert silhouette(x, labels) > 0.8
    assert np.isnan(silhouette(x, ["a"] * len(x)))


def test_sense_separation_reports_one_value_per_layer():
    x, labels = _clusters()
    rng = np.random.default_rng(0)
    layers = np.stack([rng.normal(size=x.shape), x])
    sep = sense_separation(layers, labels)
    assert sep.silhouette.shape == (2,) and sep.nearest_centroid[1] == 1.0
    assert sep.silhouette[1] > sep.silhouette[0]


def test_suggested_senses_recover_the_true_partition():
    x, labels = _clusters(n=10)
    found = suggest_senses(x)
    # the same partition up to renaming
    assert len(set(zip(found.tolist(), labels.tolist()))) == 2
    agg = suggest_senses(x, k=2, method="agglomerative")
    assert len(set(zip(agg.tolist(), labels.tolist()))) == 2


def test_suggest_senses_needs_three_contexts():
    with pytest.raises(SenseError, match="at least 3"):
        suggest_senses(np.zeros((2, 4)))


def test_scalar_mix_is_gamma_times_softmax_weighted_sum():
    layers = np.stack([np.full((2, 3), 1.0), np.full((2, 3), 4.0)]).astype(np.float32)
    mixed = scalar_mix(layers, [0.0, np.log(3.0)], gamma=2.0)   # weights 1/4, 3/4
    assert np.allclose(mixed, 2.0 * (0.25 * 1.0 + 0.75 * 4.0))


def test_learned_mix_puts_most_weight_on_the_informative_layer():
    rng = np.random.default_rng(0)
    x, labels = _clusters(n=16, dim=20, spread=0.5)
    noise = lambda: rng.normal(size=x.shape) * np.linalg.norm(x, axis=1).mean() / np.sqrt(20)
    layers = np.stack([noise(), x, noise()]).astype(np.float32)
    mix = learn_mix(layers, labels)
    assert int(np.argmax(mix.weights)) == 1
    assert mix.weights[1] > 0.5
    assert np.isclose(mix.weights.sum(), 1.0)
    assert mix.after.silhouette[0] > mix.before.silhouette[0]


def test_learn_mix_with_layer_norm_reads_each_layer_at_one_scale():
    """AllenNLP's do_layer_norm: a loud, uninformative layer no longer drowns the informative
    one in the uniform mix, and the learned weights apply to the normed layers."""
    from engine.families.elmo.mix import layer_norm

    rng = np.random.default_rng(1)
    x, labels = _clusters(n=16, dim=20, spread=0.5)
    loud = rng.normal(size=x.shape) * 50 * np.linalg.norm(x, axis=1).mean()
    layers = np.stack([loud, x]).astype(np.float32)
    raw, normed = learn_mix(layers, labels), learn_mix(layers, labels, do_layer_norm=True)
    assert normed.before.silhouette[0] > raw.before.silhouette[0] + 0.05
    assert int(np.argmax(normed.weights)) == 1
    expected = scalar_mix(np.stack([layer_norm(l) for l in layers]), normed.s, normed.gamma)
    np.testing.assert_allclose(scalar_mix(layers, normed.s, normed.gamma, do_layer_norm=True),
                               expected, rtol=1e-5, atol=1e-6)


def test_learn_mix_needs_two_senses():
    with pytest.raises(SenseError, match="two senses"):
        learn_mix(np.zeros((3, 4, 5), np.float32), ["a"] * 4)


def test_scalar_mix_is_the_elmo_family_implementation_with_the_same_numbers():
    from engine.families.elmo import mix as elmo_mix

    assert scalar_mix is elmo_mix.scalar_mix
    layers = np.random.default_rng(0).normal(size=(3, 5, 8)).astype(np.float32)
    s, gamma = np.array([0.3, -1.2, 2.0]), 0.7
    w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()   # the copy senses.py used to keep
    old = (gamma * np.tensordot(w, layers.astype(np.float64), axes=1)).astype(np.float32)
    np.testing.assert_array_equal(scalar_mix(layers, s, gamma), old)


def test_importing_senses_does_not_import_torch():
    # the app imports engine.analysis.senses and must never load torch
    code = ("import sys, engine.analysis.senses, engine.analysis.geometry; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("seed,labels", [
    (3, "aaaabbbccc"), (4, "abababab"), (5, "aaaaaab"), (6, "abcdaabbccd"), (7, "abcabcabca")])
def test_silhouette_equals_sklearns_cosine_silhouette(seed, labels):
    """engine's silhouette is numpy (sklearn's import held the first chart); sklearn's is the
    reference, singleton senses included (they score 0 in both)."""
    from sklearn.metrics import silhouette_score

    vectors = np.random.default_rng(seed).normal(size=(len(labels), 12))
    assert silhouette(vectors, list(labels)) == pytest.approx(
        silhouette_score(vectors, list(labels), metric="cosine"), abs=1e-12)


def test_the_silhouette_imports_no_sklearn():
    code = ("import sys, numpy as np\nfrom engine.analysis.senses import silhouette\n"
            "silhouette(np.eye(4), list('aabb'))\nsys.exit('sklearn' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_split_quality_says_when_a_suggested_split_is_weak():
    from engine.analysis.senses import split_quality

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 8)) + 10 * np.eye(8)[0], rng.normal(size=(3, 8)) + 10 * np.eye(8)[1]
    clear = split_quality(np.vstack([a, b]), [0, 0, 0, 1, 1, 1])
    assert clear.sizes == (3, 3) and clear.silhouette > 0.5 and not clear.weak
    lone = split_quality(np.vstack([a, b]), [0, 0, 0, 0, 0, 1])
    assert lone.sizes == (5, 1) and lone.weak                    # a sense of one sentence
    noise = split_quality(rng.normal(size=(8, 8)), [0, 1] * 4)
    assert noise.silhouette < 0.1 and noise.weak


def test_points_equal_up_to_rounding_separate_nothing():
    """A context-free layer gives every occurrence one vector; ELMo's "Layer 0 only" mix leaves
    ~1e-9 of the other layers on it. Rounding noise is not a separation: silhouette 0, and the
    tied centroids share the nearest-centroid credit (chance, 1 / number of senses)."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=16)
    x = base + 1e-9 * rng.normal(size=(8, 16))
    labels = ["a", "b"] * 4
    assert silhouette(x, labels) == 0.0
    assert nearest_centroid_accuracy(x, labels) == pytest.approx(0.5)
    three = np.tile(base, (9, 1))
    assert nearest_centroid_accuracy(three, ["a", "b", "c"] * 3) == pytest.approx(1 / 3)
