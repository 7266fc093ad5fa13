"""Attention maps: per-head statistics, hiding special tokens, attention rollout, word maps.

Maps are [layers, heads, T, T] with rows attending to columns (rows sum to 1), as in
engine.result.Encoding.attentions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True, eq=False)
class HeadStats:
    """Per head, [layers, heads] each.

    entropy: mean row entropy in bits (Clark et al. 2019, "What does BERT look at?", sec. 3).
    sink_share: mean attention mass on sink tokens ([CLS]/[SEP]/BOS, or the first token).
    previous_token: mean attention from token i to token i-1 (Clark et al. 2019, sec. 3:
        heads attending to the previous token); 1.0 for a shifted identity map.
    """

    entropy: np.ndarray
    sink_share: np.ndarray
    previous_token: np.ndarray


def _check(att: np.ndarray) -> None:
    if att.ndim != 4 or att.shape[2] != att.shape[3]:
        raise ValueError("attentions: must be [layers, heads, tokens, tokens]")


def head_entropy(att: np.ndarray) -> np.ndarray:
    _check(att)
    p = np.clip(att.astype(np.float64), 1e-12, 1.0)
    return -(att * np.log2(p)).sum(axis=-1).mean(axis=-1)


def sink_share(att: np.ndarray, sink: np.ndarray) -> np.ndarray:
    """sink: [T] bool mask of sink columns."""
    _check(att)
    return att[..., sink.astype(bool)].sum(axis=-1).mean(axis=-1)


def previous_token_score(att: np.ndarray) -> np.ndarray:
    _check(att)
    t = att.shape[-1]
    if t < 2:
        return np.zeros(att.shape[:2])
    rows = np.arange(1, t)
    return att[..., rows, rows - 1].mean(axis=-1)


def sink_mask(special: np.ndarray, first_token: bool) -> np.ndarray:
    """Special tokens; with first_token (a left-to-right model) also the first token, the usual
    attention sink (Xiao et al. 2023, "Efficient streaming language models with attention
    sinks")."""
    sink = special.astype(bool).copy()
    if first_token and len(sink):
        sink[0] = True
    return sink


def head_stats(att: np.ndarray, special: np.ndarray, left_to_right: bool) -> HeadStats:
    return HeadStats(head_entropy(att), sink_share(att, sink_mask(special, left_to_right)),
                     previous_token_score(att))


def keep_tokens(att: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Drop rows and columns of hidden tokens and renormalise rows so they sum to 1 again."""
    keep = keep.astype(bool)
    sub = att[..., keep, :][..., keep]
    total = sub.sum(axis=-1, keepdims=True)
    return (sub / np.where(total > 0, total, 1.0)).astype(np.float32)


def average_heads(att: np.ndarray) -> np.ndarray:
    """[layers, heads, T, T] -> [layers, T, T]."""
    _check(att)
    return att.mean(axis=1)


def rollout(att: np.ndarray, residual: bool = True) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema 2020, sec. 3): average heads, add the identity for the
    residual stream (0.5 A + 0.5 I), renormalise rows, multiply layer by layer.

    Returns [layers, T, T]: entry l is the rollout from the input up to layer l+1.
    """
    a = average_heads(att).astype(np.float64)
    t = a.shape[-1]
    if residual:
        a = 0.5 * a + 0.5 * np.eye(t)
        a = a / a.sum(axis=-1, keepdims=True)
    out = np.empty_like(a)
    acc = np.eye(t)
    for layer in range(a.shape[0]):
        acc = a[layer] @ acc
        out[layer] = acc
    return out.astype(np.float32)


# How a space piece reads once decoded: spaces or a line break; "▁" or "Ġ" where a tokenizer's
# raw pieces are passed; U+FFFD for a byte piece of a wide space (U+3000, U+2003, U+00A0), which
# a byte-level tokenizer splits into pieces that each decode to nothing readable.
_SPACE_TEXT = str.maketrans({"\u2581": " ", "\u0120": " ", "\ufffd": " "})


def entry_words(tokens: Sequence[str], token_to_word: np.ndarray) -> np.ndarray:
    """token_to_word as the word views group tokens: each space piece joins the word after it
    (the last word when none follows); the special tokens stay -1.

    The alignment (engine.text.align_offsets) gives a word only the tokens that spell it, so a
    tokenizer's lone space piece ("Ġ" before a piece its merges do not join it to, "▁" before
    "1990", the first of two spaces, a line break) is -1 there, like [CLS]. That is what a
    word's vector wants (Encoding.word_vectors pools the pieces that spell the word: a
    left-to-right model's "▁" before "1990" has read none of it), but in the word views such a
    token would be an unlabelled entry that is no word. Here it is a piece of the word it
    precedes, as a subword piece is: attention to it adds to the word's column, its row to the
    word's mean row.

    A space piece is a -1 token between two words' tokens (a text's own special tokens stand
    at its ends; one typed inside it spans several words and is refused when it is
    tokenised), or one whose text reads as spaces only (the ends: leading and trailing spaces).
    """
    t2w = np.asarray(token_to_word)
    if len(tokens) != len(t2w):
        raise ValueError("tokens: one per entry of token_to_word")
    out = t2w.copy()
    spelled = np.nonzero(t2w >= 0)[0]
    loose = np.nonzero(t2w < 0)[0]
    if len(spelled) == 0 or len(loose) == 0:
        return out
    inside = (loose > spelled[0]) & (loose < spelled[-1])
    blank = np.array([bool(tokens[t]) and not tokens[t].translate(_SPACE_TEXT).strip()
                      for t in loose], bool)
    pieces = loose[inside | blank]
    # the first token after each piece that spells a word, or the last one of the text
    after = np.minimum(np.searchsorted(spelled, pieces), len(spelled) - 1)
    out[pieces] = t2w[spelled[after]]
    return out


def word_row(att: np.ndarray, token_to_word: np.ndarray, word: int,
             n_words: int, tokens: Sequence[str] | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Where one word looks, word by word: att [heads, T, T] of one layer -> ([heads, n_words]
    attention from the word to each word, [heads] attention to special tokens). A word split
    into several tokens asks with the mean of its tokens' rows; the columns of a word's tokens
    add up (each row sums to 1 over words + specials). With the `tokens`, a space piece is a
    piece of the word after it (entry_words), not a special token."""
    if att.ndim != 3 or att.shape[1] != att.shape[2]:
        raise ValueError("att: must be [heads, tokens, tokens]")
    if tokens is not None:
        token_to_word = entry_words(tokens, token_to_word)
    rows = np.nonzero(token_to_word == word)[0]
    if rows.size == 0:
        raise ValueError(f"word {word} has no tokens")
    row = att[:, rows].astype(np.float64).mean(axis=1)              # [heads, T]
    out = np.zeros((att.shape[0], n_words))
    for t, w in enumerate(token_to_word):
        if w >= 0:
            out[:, w] += row[:, t]
    special = row[:, token_to_word < 0].sum(axis=1)
    return out, special


def word_entries(token_to_word: np.ndarray) -> np.ndarray:
    """[T] -> [T]: the entry of each token in the word view. The entries are the words and,
    each on its own, every -1 token (the special tokens [CLS], [SEP], BOS once entry_words has
    given each space piece its word), in reading order."""
    t2w = np.asarray(token_to_word)
    # a special token gets an id no word has (-1 - its position), so it stays an entry alone
    group = np.where(t2w >= 0, t2w, -1 - np.arange(len(t2w)))
    _, first, entry = np.unique(group, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first)] = np.arange(len(first))
    return rank[entry.reshape(-1)]


def word_labels(tokens: tuple[str, ...], words: tuple[str, ...],
                token_to_word: np.ndarray) -> tuple[list[str], np.ndarray]:
    """The word view's entry labels (a word, or a special token as written) and a [E] mask of
    the special tokens, in the order of word_entries; a space piece is part of the word after
    it (entry_words), so every entry is a word or a special token."""
    token_to_word = entry_words(tokens, token_to_word)
    entry = word_entries(token_to_word)
    labels = [""] * (int(entry.max()) + 1 if len(entry) else 0)
    special = np.zeros(len(labels), bool)
    for t, (e, w) in enumerate(zip(entry, token_to_word)):
        labels[e] = words[w] if w >= 0 else tokens[t]
        special[e] = w < 0
    return labels, special


def word_attention(att: np.ndarray, token_to_word: np.ndarray, n_words: int,
                   tokens: Sequence[str] | None = None) -> np.ndarray:
    """Token maps [layers, heads, T, T] -> word maps [layers, heads, E, E].

    Clark et al. 2019 ("What does BERT look at?", the word-level maps of their syntax
    probes): attention TO a word is the sum over its pieces (the pieces share the key's mass),
    attention FROM a word the mean over its pieces (each piece's row sums to 1, so the mean
    does too). Special tokens are not merged: each stays an entry of its own (word_entries),
    so a row still sums to 1 and [CLS] and [SEP], which heads treat very differently, stay
    apart. A causal map stays causal: no piece of a word sees a later word.

    `tokens` (the labels word_labels is given) tell a space piece from a special token: it is
    a piece of the word after it (entry_words), so the entries are the E of word_labels.
    Without them every token that spells no word is an entry of its own.
    """
    _check(att)
    t2w = np.asarray(token_to_word if tokens is None else entry_words(tokens, token_to_word))
    if t2w.shape != (att.shape[-1],):
        raise ValueError("token_to_word: one entry per token of the maps")
    if set(t2w[t2w >= 0].tolist()) != set(range(n_words)):
        raise ValueError(f"token_to_word: must name each of the {n_words} words at least once")
    entry = word_entries(t2w)
    member = np.zeros((int(entry.max()) + 1, len(t2w)))              # [E, T]
    member[entry, np.arange(len(t2w))] = 1.0
    to_keys = att.astype(np.float64) @ member.T                      # [L, H, T, E]: key sum
    queries = member / member.sum(axis=1, keepdims=True)             # query mean
    return (queries @ to_keys).astype(np.float32)
