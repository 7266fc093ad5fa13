"""ELMo character ids: each word becomes a fixed-length row of byte ids, as AllenNLP's
ELMoCharacterMapper (and bilm-tf's UnicodeCharsVocabulary) build them.

A word is its UTF-8 bytes (ids 0..255) between a begin-of-word and an end-of-word marker,
padded with a padding character; the sentence boundaries <S> and </S> are one marker each.
Every id is then shifted by +1 so that 0 can mean "no token here" (batch padding): the char
embedding's row 0 is that all-zero padding row (Peters et al. 2018, section 3.4 / bilm-tf).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_CHARS = 50               # max_characters_per_token of every released ELMo
BOS_CHAR = 256               # sentence start <S>
EOS_CHAR = 257               # sentence end </S>
BOW_CHAR = 258               # begin of word
EOW_CHAR = 259               # end of word
PAD_CHAR = 260               # unused slots of a word (a real, learned embedding row)

BOS_TOKEN = "<S>"
EOS_TOKEN = "</S>"


def _marker_ids(char: int, max_chars: int) -> np.ndarray:
    ids = np.full(max_chars, PAD_CHAR, dtype=np.int64)
    ids[:3] = (BOW_CHAR, char, EOW_CHAR)
    return ids + 1


def word_char_ids(word: str, max_chars: int = MAX_CHARS) -> np.ndarray:
    """[max_chars] int64 ids of one word (after the +1 shift)."""
    if word == BOS_TOKEN:
        return _marker_ids(BOS_CHAR, max_chars)
    if word == EOS_TOKEN:
        return _marker_ids(EOS_CHAR, max_chars)
    # Truncate the bytes so that both word markers always fit (AllenNLP: max_word_length - 2);
    # "ignore" drops unencodable surrogates instead of failing on odd input.
    data = word.encode("utf-8", "ignore")[: max_chars - 2]
    ids = np.full(max_chars, PAD_CHAR, dtype=np.int64)
    ids[0] = BOW_CHAR
    ids[1:1 + len(data)] = np.frombuffer(data, dtype=np.uint8)
    ids[1 + len(data)] = EOW_CHAR
    return ids + 1  # the shift that frees id 0 for batch padding


def sentence_char_ids(words: Sequence[str], max_chars: int = MAX_CHARS,
                      boundaries: bool = True) -> np.ndarray:
    """[n (+2), max_chars] ids of a sentence, with <S> ... </S> around it by default."""
    tokens = [BOS_TOKEN, *words, EOS_TOKEN] if boundaries else list(words)
    return np.stack([word_char_ids(w, max_chars) for w in tokens])


def batch_char_ids(sentences: Sequence[Sequence[str]], max_chars: int = MAX_CHARS,
                   boundaries: bool = True) -> np.ndarray:
    """[batch, longest (+2), max_chars]; rows past a sentence's end are all 0 (no token)."""
    rows = [sentence_char_ids(s, max_chars, boundaries) for s in sentences]
    out = np.zeros((len(rows), max(len(r) for r in rows), max_chars), dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out
