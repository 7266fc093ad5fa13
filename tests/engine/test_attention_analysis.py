"""Attention statistics and rollout on hand-built maps."""
import numpy as np

from engine.analysis.attention import (average_heads, head_stats, keep_tokens,
                                       previous_token_score, rollout, sink_mask)


def _random_maps(layers=3, heads=2, t=5, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.random((layers, heads, t, t))
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


def test_previous_token_score_is_one_for_a_shifted_identity_map():
    t = 6
    shifted = np.zeros((1, 1, t, t), np.float32)
    shifted[0, 0, 0, 0] = 1.0
    shifted[0, 0, np.arange(1, t), np.arange(t - 1)] = 1.0
    assert np.isclose(previous_token_score(shifted)[0, 0], 1.0)
    assert np.isclose(previous_token_score(np.eye(t, dtype=np.float32)[None, None])[0, 0], 0.0)


def test_entropy_is_zero_for_one_hot_rows_and_log2_t_for_uniform_rows():
    t = 8
    uniform = np.full((1, 1, t, t), 1.0 / t, np.float32)
    stats = head_stats(np.stack([uniform[0], np.eye(t, dtype=np.float32)[None]]),
                       np.zeros(t, bool), "bert")
    assert np.isclose(stats.entropy[0, 0], 3.0, atol=1e-5)
    assert np.isclose(stats.entropy[1, 0], 0.0, atol=1e-5)


def test_sink_share_counts_special_tokens_and_the_gpt_first_token():
    t = 4
    to_first = np.zeros((1, 1, t, t), np.float32)
    to_first[..., 0] = 1.0
    special = np.array([False, False, False, True])
    assert np.isclose(head_stats(to_first, special, True).sink_share[0, 0], 1.0)
    assert np.isclose(head_stats(to_first, special, False).sink_share[0, 0], 0.0)
    assert sink_mask(special, True).tolist() == [True, False, False, True]


def test_rollout_rows_sum_to_one_at_every_layer():
    roll = rollout(_random_maps())
    assert roll.shape == (3, 5, 5)
    assert np.allclose(roll.sum(-1), 1.0, atol=1e-5)


def test_rollout_of_identity_attention_is_identity():
    eye = np.broadcast_to(np.eye(4, dtype=np.float32), (2, 3, 4, 4)).copy()
    assert np.allclose(rollout(eye)[-1], np.eye(4), atol=1e-6)


def test_rollout_first_layer_is_half_attention_plus_half_identity():
    a = _random_maps(layers=1)
    expected = 0.5 * average_heads(a)[0] + 0.5 * np.eye(5)
    assert np.allclose(rollout(a)[0], expected, atol=1e-6)


def test_hiding_tokens_renormalises_rows():
    a = _random_maps()
    kept = keep_tokens(a, np.array([False, True, True, True, False]))
    assert kept.shape == (3, 2, 3, 3)
    assert np.allclose(kept.sum(-1), 1.0, atol=1e-5)
