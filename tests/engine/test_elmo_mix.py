"""ELMo's scalar mix with AllenNLP's do_layer_norm option, numpy and torch, against a hand
computation."""
from __future__ import annotations

import numpy as np
import pytest

from engine.families.elmo.mix import layer_norm, scalar_mix

# two layers of one "batch": 2 sentences x 2 positions x 2 dims; position (1, 1) is padding
LAYERS = np.array([[[[1.0, 3.0], [5.0, 7.0]], [[1.0, 3.0], [99.0, -99.0]]],
                   [[[2.0, 2.0], [2.0, 2.0]], [[6.0, 6.0], [0.0, 0.0]]]])
MASK = np.array([[True, True], [True, False]])


def test_layer_norm_uses_one_mean_and_variance_over_the_real_elements():
    # layer 0's real elements: 1, 3, 5, 7, 1, 3 -> mean 10/3, variance (mean of squares 94/6)
    # - (10/3)^2 = 47/3 - 100/9 = 41/9
    mean, std = 10 / 3, np.sqrt(41 / 9)
    out = layer_norm(LAYERS[0], MASK)
    np.testing.assert_allclose(out[0, 0], [(1 - mean) / std, (3 - mean) / std])
    np.testing.assert_allclose(out[1, 1], [(99 - mean) / std, (-99 - mean) / std])  # padding too
    assert out[MASK].mean() == pytest.approx(0.0, abs=1e-12)
    assert out[MASK].std() == pytest.approx(1.0, abs=1e-9)


def test_scalar_mix_with_layer_norm_matches_the_hand_computation():
    # layer 1's real elements: 2, 2, 2, 2, 6, 6 -> mean 10/3, variance 32/9
    s, gamma = np.array([0.0, np.log(3.0)]), 2.0            # weights 1/4, 3/4
    l0 = (LAYERS[0] - 10 / 3) / np.sqrt(41 / 9)
    l1 = (LAYERS[1] - 10 / 3) / np.sqrt(32 / 9)
    expected = gamma * (0.25 * l0 + 0.75 * l1)
    got = scalar_mix(LAYERS, s, gamma, do_layer_norm=True, mask=MASK)
    np.testing.assert_allclose(got[MASK], expected[MASK], rtol=1e-6)


def test_scalar_mix_without_layer_norm_ignores_the_mask():
    np.testing.assert_allclose(scalar_mix(LAYERS, mask=MASK), LAYERS.mean(axis=0), rtol=1e-6)


def test_layer_norm_without_a_mask_takes_every_position():
    x = np.arange(12, dtype=float).reshape(2, 3, 2)
    np.testing.assert_allclose(layer_norm(x), (x - x.mean()) / x.std())


def test_layer_norm_rejects_a_mask_of_the_wrong_shape():
    with pytest.raises(ValueError, match="mask"):
        layer_norm(LAYERS[0], MASK[0])


def test_torch_module_layer_norm_agrees_with_numpy():
    torch = pytest.importorskip("torch")
    from engine.families.elmo.mix import ScalarMix

    mix = ScalarMix(2, s=[0.0, float(np.log(3.0))], gamma=2.0, do_layer_norm=True)
    got = mix(torch.tensor(LAYERS, dtype=torch.float64), torch.tensor(MASK)).detach().numpy()
    want = scalar_mix(LAYERS, [0.0, np.log(3.0)], 2.0, do_layer_norm=True, mask=MASK)
    np.testing.assert_allclose(got[MASK], want[MASK], rtol=1e-6)
    plain = ScalarMix(2)(torch.tensor(LAYERS)).detach().numpy()
    np.testing.assert_allclose(plain, LAYERS.mean(axis=0))
