"""Attention statistics and rollout on hand-built maps."""
import numpy as np
import pytest

from engine.analysis.attention import (average_heads, entry_words, head_stats, keep_tokens,
                                       previous_token_score, rollout, sink_mask, word_attention,
                                       word_entries, word_labels)


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


# [CLS] the river ##bank [SEP]: word 1 ("riverbank") is two pieces
TOKENS = ("[CLS]", "the", "river", "##bank", "[SEP]")
T2W = np.array([-1, 0, 1, 1, -1])


def test_word_maps_keep_each_special_token_apart_and_rows_sum_to_one():
    words = word_attention(_random_maps(), T2W, 2)
    assert words.shape == (3, 2, 4, 4)
    assert np.allclose(words.sum(-1), 1.0, atol=1e-6)
    assert word_entries(T2W).tolist() == [0, 1, 2, 2, 3]
    labels, special = word_labels(TOKENS, ("the", "riverbank"), T2W)
    assert labels == ["[CLS]", "the", "riverbank", "[SEP]"]
    assert special.tolist() == [True, False, False, True]


def test_a_word_of_one_piece_keeps_its_token_row_and_column():
    a = _random_maps()
    words = word_attention(a, T2W, 2)
    one = [0, 1, 4]                                 # [CLS], the, [SEP]: entries 0, 1, 3
    assert np.allclose(words[..., [0, 1, 3], :][..., [0, 1, 3]], a[..., one, :][..., one])
    # a one-piece query's row to the split word is the sum of its pieces' columns
    assert np.allclose(words[..., 1, 2], a[..., 1, 2] + a[..., 1, 3])
    # all words one piece each: the word maps are the token maps
    assert np.allclose(word_attention(a, np.array([-1, 0, 1, 2, -1]), 3), a)


def test_a_two_piece_word_sums_its_keys_and_averages_its_queries_by_hand():
    a = np.array([[0.1, 0.2, 0.3, 0.4, 0.0],
                  [0.0, 0.5, 0.1, 0.1, 0.3],
                  [0.2, 0.2, 0.2, 0.2, 0.2],
                  [0.4, 0.0, 0.0, 0.6, 0.0],
                  [0.0, 0.0, 0.5, 0.0, 0.5]], np.float32)[None, None]
    expected = np.array([[0.1, 0.2, 0.7, 0.0],
                         [0.0, 0.5, 0.2, 0.3],
                         [0.3, 0.1, 0.5, 0.1],             # mean of rows 2 and 3, keys summed
                         [0.0, 0.0, 0.5, 0.5]])
    assert np.allclose(word_attention(a, T2W, 2)[0, 0], expected, atol=1e-6)


def test_a_causal_map_stays_causal_at_word_level():
    # BOS the river ##bank ##s .: a causal model's pieces never look ahead
    t2w = np.array([-1, 0, 1, 1, 1, 2])
    rng = np.random.default_rng(1)
    a = np.tril(rng.random((2, 3, 6, 6)))
    a = (a / a.sum(-1, keepdims=True)).astype(np.float32)
    words = word_attention(a, t2w, 3)
    assert words.shape == (2, 3, 4, 4)
    assert np.allclose(np.triu(words, 1), 0.0)
    assert np.allclose(words.sum(-1), 1.0, atol=1e-6)
    # the split word's first piece sees only itself of the word; the mean keeps that share
    assert np.allclose(words[..., 2, 2], (a[..., 2, 2] + a[..., 3, 2:4].sum(-1)
                                          + a[..., 4, 2:5].sum(-1)) / 3)


def test_word_maps_refuse_an_alignment_that_does_not_fit():
    with pytest.raises(ValueError, match="token_to_word"):
        word_attention(_random_maps(), np.array([-1, 0, 1, -1]), 2)
    with pytest.raises(ValueError, match="each of the 3 words"):
        word_attention(_random_maps(), T2W, 3)


# <s> "▁" 1990 "▁" was <unk> ok "Ġ" "\ufffd" </s>: a space piece after BOS, one before a word,
# one the vocabulary spells <unk> (a line break) and, at the end, trailing spaces
SPACED = ("<s>", " ", "1990", " ", "was", "<unk>", "ok", "\u0120", "\ufffd", "</s>")
SPACED_T2W = np.array([-1, -1, 0, -1, 1, -1, 2, -1, -1, -1])


def test_a_space_piece_joins_the_word_after_it_and_special_tokens_stay_apart():
    assert entry_words(SPACED, SPACED_T2W).tolist() == [-1, 0, 0, 1, 1, 2, 2, 2, 2, -1]
    labels, special = word_labels(SPACED, ("1990", "was", "ok"), SPACED_T2W)
    assert labels == ["<s>", "1990", "was", "ok", "</s>"]
    assert special.tolist() == [True, False, False, False, True]
    # the same rule in the maps: five entries, rows still distributions
    words = word_attention(_random_maps(t=10), SPACED_T2W, 3, tokens=SPACED)
    assert words.shape == (3, 2, 5, 5)
    assert np.allclose(words.sum(-1), 1.0, atol=1e-6)
    # without the tokens, a token that spells no word is an entry of its own, as before
    assert word_attention(_random_maps(t=10), SPACED_T2W, 3).shape[-1] == 10
    # nothing to join: the alignment as it was
    assert entry_words(TOKENS, T2W).tolist() == T2W.tolist()
    with pytest.raises(ValueError, match="tokens"):
        entry_words(TOKENS[:-1], T2W)


def test_a_space_piece_adds_to_its_words_keys_and_queries_by_hand():
    # BOS "Ġ" 25 (word 0 is the space piece and "25"): the piece's column adds to the word's,
    # its row is averaged with the word's
    a = np.array([[1.0, 0.0, 0.0],
                  [0.5, 0.5, 0.0],
                  [0.2, 0.3, 0.5]], np.float32)[None, None]
    words = word_attention(a, np.array([-1, -1, 0]), 1, tokens=("<s>", " ", "25"))
    assert np.allclose(words[0, 0], [[1.0, 0.0], [0.35, 0.65]], atol=1e-6)
