"""Word occurrences across sentences (engine/analysis/occurrences.py), word-level attention
rows and the text helpers the linked views use."""
import numpy as np
import pytest

from engine.analysis import occurrences
from engine.analysis.attention import word_row
from engine.result import Encoding
from engine.text import TextError, left_of_word, mask_word


def _enc(words, seed, layers=3, dim=4):
    rng = np.random.default_rng(seed)
    t = len(words)
    return Encoding(model_id="m", family="bert", text=" ".join(words), words=tuple(words),
                    tokens=tuple(words), token_to_word=np.arange(t),
                    hidden_states=rng.normal(size=(layers, t, dim)).astype(np.float32))


def test_collect_keeps_every_occurrence_of_the_target_with_its_sentence_and_position():
    encs = [_enc(["The", "bank", "and", "the", "Bank"], 0), _enc(["No", "match"], 1),
            _enc(["a", "bank"], 2)]
    occ = occurrences.collect(encs, target="bank")
    assert occ.ids == ((0, 1), (0, 4), (2, 1))
    assert occ.word == ("bank", "Bank", "bank")
    assert np.array_equal(occ.vectors[:, 1], encs[0].hidden_states[:, 4])
    every = occurrences.collect(encs)
    assert len(every) == 9 and every.index((1, 1)) == 6 and every.index((1, 7)) is None
    sub = every.subset([6, 0])
    assert sub.ids == ((1, 1), (0, 0)) and np.array_equal(sub.vectors[:, 0], every.vectors[:, 6])


def test_nearest_is_by_cosine_leaves_the_point_out_and_sorts_nearest_first():
    v = np.array([[1.0, 0.0], [10.0, 1.0], [0.0, 1.0], [-1.0, 0.0], [1.0, 1.0]])
    near = occurrences.nearest(v, 0, k=3)
    assert [n.index for n in near] == [1, 4, 2]
    assert near[0].cosine == pytest.approx(10 / np.sqrt(101))
    assert near[1].cosine == pytest.approx(1 / np.sqrt(2))
    with pytest.raises(IndexError):
        occurrences.nearest(v, 5)


def test_word_row_averages_a_words_tokens_and_adds_its_columns():
    # tokens: [CLS] a b## c [SEP] -> words 0 (a, b##) and 1 (c); two heads
    t2w = np.array([-1, 0, 0, 1, -1])
    att = np.random.default_rng(0).random((2, 5, 5))
    att /= att.sum(-1, keepdims=True)
    rows, special = word_row(att, t2w, 0, 2)
    mean = att[:, [1, 2]].mean(axis=1)
    assert np.allclose(rows[:, 0], mean[:, 1] + mean[:, 2])
    assert np.allclose(rows[:, 1], mean[:, 3])
    assert np.allclose(special, mean[:, 0] + mean[:, 4])
    assert np.allclose(rows.sum(1) + special, 1.0)


def test_mask_word_and_left_of_word_follow_the_word_split():
    text = "The bat, he said, flew."
    assert mask_word(text, 1) == "The [MASK], he said, flew."
    assert left_of_word(text, 4) == "The bat, he"       # punctuation is a word
    assert left_of_word(text, 0) == ""
    with pytest.raises(TextError, match="no word 9"):
        mask_word(text, 8)
