"""Whole-word attention has one entry per word of the shared split plus the special tokens (#52
item 7), whatever the tokenizer: a lone space piece ("Ġ", "▁", a line break, the byte pieces of
a wide space) is no entry of its own but part of the word after it.

The tokenizers are the zoo's (tests/zoo.py, save_arch): their vocabularies are small, so "Ġ" and
"▁" stay apart from many words after them ("Ġ" "b" "y", "▁" "1" "9" "9" "0"), as a real Llama's
"▁" stays apart from every number and a real GPT-2's "Ġ" from the second of two spaces."""
from __future__ import annotations

import numpy as np
import pytest

from engine.analysis.attention import entry_words, word_attention, word_labels, word_row
from engine.families.hf import tokens
from engine.result import Encoding
from engine.text import split_words
from tests.zoo import arch_tokenizer

# 13 words; the zoo's byte-level and "▁" tokenizers give it lone space pieces before "by",
# "25", "percent" and "she" (byte-level) or "by", "25", "percent", "1990" and "she" ("▁")
SENTENCE = "The bank raised rates by 25 percent in 1990, she said."
SENTENCES = (
    SENTENCE,
    # leading, doubled and trailing spaces and a line break
    "  Money,  money: 42 banks\nkeep it safe ",
    # wide spaces: three byte pieces of U+3000 or U+2003 each ("\ufffd" alone), a no-break
    # space's two, or one <unk> where the vocabulary has no byte pieces
    "bank\u3000rates\u00a0and \u2003money",
)
# Ġ with <s> </s>, ▁ with <s> </s>, Ġ with no special token, ▁ after <s>, WordPiece
NAMES = ("roberta", "xlm-roberta", "gpt2", "llama", "bert")


@pytest.fixture(scope="module")
def tokenizers():
    return {name: arch_tokenizer(name) for name in NAMES}


def _tokenized(tokenizer, text: str):
    """The text's TokenizedText and which of its tokens the tokenizer added as special."""
    t = tokens.tokenize(tokenizer, split_words(text), 512)
    enc = tokenizer.backend_tokenizer.encode(text)
    assert list(enc.ids) == list(t.input_ids)
    return t, np.array(enc.special_tokens_mask, bool)


def _row_stochastic(t: int, layers: int = 2, heads: int = 3, causal: bool = False, seed=0):
    a = np.random.default_rng(seed).random((layers, heads, t, t))
    if causal:
        a = np.tril(a)
    return (a / a.sum(-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("text", SENTENCES)
@pytest.mark.parametrize("name", NAMES)
def test_one_entry_per_word_and_per_special_token(tokenizers, name, text):
    t, special = _tokenized(tokenizers[name], text)
    words = t.text.words
    if name != "bert":     # the test is about pieces that spell no word: there are some
        assert ((t.token_to_word < 0) & ~special).any()
    labels, is_special = word_labels(t.tokens, words, t.token_to_word)
    assert len(labels) == len(words) + int(special.sum())
    # the words in their order, each labelled with itself, between the special tokens
    assert [lab for lab, s in zip(labels, is_special) if not s] == list(words)
    assert [lab for lab, s in zip(labels, is_special) if s] == \
        [tok for tok, s in zip(t.tokens, special) if s]
    assert "" not in labels and all(lab.strip() for lab in labels)

    maps = _row_stochastic(len(t.tokens), causal=name in ("gpt2", "llama"))
    merged = word_attention(maps, t.token_to_word, len(words), tokens=t.tokens)
    assert merged.shape == maps.shape[:2] + (len(labels),) * 2
    np.testing.assert_allclose(merged.sum(-1), 1.0, atol=1e-5)
    if name in ("gpt2", "llama"):           # a space piece precedes its word: still causal
        assert np.allclose(np.triu(merged, 1), 0.0)


@pytest.mark.parametrize("name", ("roberta", "llama", "gpt2"))
def test_attention_to_a_space_piece_goes_to_the_word_after_it(tokenizers, name):
    t, special = _tokenized(tokenizers[name], SENTENCE)
    pieces = np.nonzero((t.token_to_word < 0) & ~special)[0]
    words = t.text.words
    joined = entry_words(t.tokens, t.token_to_word)
    for p in pieces:
        after = int(t.token_to_word[p + 1:][t.token_to_word[p + 1:] >= 0][0])
        assert joined[p] == after
        # every token looks at the space piece alone: the word view sees the word after it
        maps = np.zeros((1, 1, len(t.tokens), len(t.tokens)), np.float32)
        maps[..., p] = 1.0
        merged = word_attention(maps, t.token_to_word, len(words), tokens=t.tokens)
        labels, _ = word_labels(t.tokens, words, t.token_to_word)
        column = labels.index(words[after])
        assert labels.count(words[after]) == 1
        np.testing.assert_allclose(merged[0, 0, :, column], 1.0, atol=1e-6)
    # the special tokens stay as they were, each an entry of its own
    assert (joined[special] == -1).all() and (joined[~special] >= 0).all()
    # one word's row in the occurrences view: its space piece's share is the word's, not
    # the special tokens'
    att = _row_stochastic(len(t.tokens), layers=1)[0]
    rows, to_special = word_row(att, t.token_to_word, 0, len(words), tokens=t.tokens)
    first = np.nonzero(joined == 0)[0]
    np.testing.assert_allclose(to_special, att[:, first][..., special].sum(-1).mean(1),
                               atol=1e-6)
    np.testing.assert_allclose(rows.sum(1) + to_special, 1.0, atol=1e-6)


def test_word_vectors_still_pool_only_the_tokens_that_spell_the_word(tokenizers):
    # A word's vector is unchanged: a space piece's state is no part of it (a left-to-right
    # model's "▁" before "1990" has read none of "1990"), only its attention joins the word.
    t, special = _tokenized(tokenizers["llama"], SENTENCE)
    n_tok = len(t.tokens)
    hidden = np.random.default_rng(0).random((2, n_tok, 4)).astype(np.float32)
    loose = (t.token_to_word < 0) & ~special
    hidden[:, loose] = 1e6                  # would show in any word that pooled one
    enc = Encoding(model_id="m", family="gpt", text=SENTENCE, words=t.text.words,
                   tokens=t.tokens, token_to_word=t.token_to_word, hidden_states=hidden)
    for pool in ("first", "mean", "last"):
        assert enc.word_vectors(pool).max() < 1.0


# the command's and the Attention page's word maps, from a real checkpoint of each tokenizer
@pytest.mark.parametrize("name", ("roberta", "llama", "gpt2"))
def test_the_cli_and_the_page_show_one_entry_per_word(zoo, tokenizers, tmp_path, monkeypatch,
                                                      name):
    from app.results import viewed_maps
    from engine.api import Engine
    from engine.cli.attention import word_maps

    folder = zoo.copy(f"arch:{name}", tmp_path / name)
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    monkeypatch.setenv("CTXLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    enc = Engine(device="cpu").encode(str(folder), [SENTENCE], attentions=True)[0]
    n_special = int(_tokenized(tokenizers[name], SENTENCE)[1].sum())
    assert len(enc.words) == 13

    arrays = word_maps(enc)
    assert [lab for lab, s in zip(arrays["word_labels"].tolist(), arrays["word_special"])
            if not s] == list(enc.words)
    assert arrays["word_attentions"].shape[-1] == 13 + n_special
    assert int(arrays["word_special"].sum()) == n_special
    np.testing.assert_allclose(arrays["word_attentions"].sum(-1), 1.0, atol=1e-5)

    maps, labels = viewed_maps(enc, words=True, hide=False)
    assert len(labels) == maps.shape[-1] == 13 + n_special
    maps, labels = viewed_maps(enc, words=True, hide=True)
    assert labels == list(enc.words) and maps.shape[-1] == 13
    np.testing.assert_allclose(maps.sum(-1), 1.0, atol=1e-5)
