"""Word tokenisation shared by every model, and token -> word alignment.

Every family sees the same list of words for a text, so word *i* means the same word for ELMo,
GPT and BERT. Transformer tokenisers run on the original text (their input is unchanged by our
word split); their tokens are mapped back to words through character offsets.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from itertools import chain
from typing import Sequence

import numpy as np
import regex

MASK = "[MASK]"

# A word is [MASK]; a run of letters and digits with the marks on them (below), joined by inner
# apostrophes or hyphens; or a run of punctuation. Keeping "don't" and
# "well-known" whole matches what a reader calls a word; keeping "--", "..." and '."' whole
# matters because byte-level BPE merges such runs into one token, and a token must not span two
# words.
# Every character a grapheme cluster extends its base with (UAX #29: marks Mn/Mc/Me, Extend,
# ZWJ) stays with the character before it: "cafe\u0301", Devanagari vowel signs and viramas,
# Arabic harakat, Hebrew niqqud, Thai tone marks, the ZWJ/ZWNJ inside Indic and Persian words,
# an emoji's skin tone and VS16. `regex`'s \X is not used as such: it also glues a Prepend
# character (U+0D4E) to the next cluster across a space. A stray mark, a joiner alone or a
# control character is no word at all (a tokenizer drops it, so no token could stand for it).
_LETTER = r"\p{L}\p{N}_"            # what `re`'s \w is for str (the regex module's \w has marks)
_EXTEND = r"\p{M}\p{gcb=Extend}\p{gcb=ZWJ}"
# Invisible format characters (Unicode Cf: zero-width space, byte-order mark, word joiner,
# direction marks, soft hyphen...): WordPiece drops them, so as a word of their own ("He said
# \u200b nothing") they would stop a corpus build at that line, and inside a word
# ("co\u00adoperate") they would split it. They are taken out of a text where it comes in
# (drop_invisible), not in the word split: the split stays the one existing indexes count
# positions in. Kept: the joiners U+200C/U+200D and the tag characters, which hold emoji
# sequences (a family, a flag) together.
_INVISIBLE = re.compile("[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b\u200e\u200f"
                        "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")
# Corpus indexes store words by position in this split: a change here changes what a position
# means, so it goes with a new engine/corpus/manifest.py MANIFEST_SCHEMA.
WORD_RE = regex.compile(rf"\[MASK\]|[{_LETTER}][{_LETTER}{_EXTEND}]*"
                        rf"(?:['’\-][{_LETTER}][{_LETTER}{_EXTEND}]*)*"
                        rf"|(?:(?!\[MASK\])[^{_LETTER}{_EXTEND}\s\p{{Cc}}][{_EXTEND}]*)+")

# Scripts written without spaces between words, by the name a note gives them. Their words are
# found only with a dictionary (UAX #29 leaves them to one), so the split above takes each run of
# them between spaces and punctuation as one word: deterministic, and the user's own spaces
# choose another split.
_UNSPACED = {"Thai": r"\p{Thai}", "Lao": r"\p{Lao}", "Khmer": r"\p{Khmer}",
             "Burmese": r"\p{Myanmar}", "Japanese": r"[\p{Hiragana}\p{Katakana}]",
             "Chinese": r"\p{Han}"}
_UNSPACED_RE = {name: regex.compile(rf"(?=\p{{L}}){pattern}")
                for name, pattern in _UNSPACED.items()}

MAX_WORDS = 128
MAX_CHARS = 1000


# a word or text of the user's said back in an error is cut after this many characters
ECHO_CHARS = 60


def quoted(value: str, limit: int = ECHO_CHARS) -> str:
    """repr(value), or for a longer value its first `limit` characters and its length:
    'aaaa…' (10,000 characters): how an error says a user's value back."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit] + '…'!r} ({len(value):,} characters)"


class TextError(ValueError):
    """Input text that cannot be analysed (empty, too long)."""


@dataclass(frozen=True)
class WordText:
    """A text and its words; `spans[i]` is the (start, end) character span of `words[i]`."""

    text: str
    words: tuple[str, ...]
    spans: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if len(self.words) != len(self.spans):
            raise ValueError("spans: one span per word is required")

    @property
    def mask_indices(self) -> list[int]:
        return [i for i, w in enumerate(self.words) if w == MASK]

    def one_mask(self) -> int:
        """The word index of the blank to fill: every fill-in-the-blank reads exactly one."""
        found = self.mask_indices
        if len(found) != 1:
            raise TextError(f"put exactly one {MASK} in the text (found {len(found)})")
        return found[0]


def word_key(word: str) -> str:
    """How a typed word is compared with a sentence's words: case ignored, invisible characters
    read as absent (drop_invisible), and a typographic apostrophe (what phones and Macs type in
    "don’t") the same as a straight one, since the split above accepts both."""
    return drop_invisible(word).lower().replace("\u2019", "'")


def occurrences_of(words, word: str) -> list[int]:
    """Positions of `word` among `words`, matched whole, case (and apostrophe style) ignored."""
    key = word_key(word)
    return [i for i, w in enumerate(words) if word_key(w) == key]


# what joins the parts of one word in the split above ("bank's", "river-bank")
JOINER_RE = re.compile(r"['’\-]")


def joined_forms(words, word: str) -> list[str]:
    """The words (each once, in order) that hold `word` as a part joined by an apostrophe or a
    hyphen ("bank's", "river-bank"): the split keeps them whole, so they are not `word`."""
    key = word_key(word)
    return list(dict.fromkeys(w for w in words if word_key(w) != key and
                              key in (word_key(p) for p in JOINER_RE.split(w))))


def unspaced_scripts(texts: Sequence[str]) -> list[str]:
    """The scripts written without spaces (Thai, Lao, Khmer, Burmese, Japanese, Chinese) that
    `texts` hold letters of, in that order; Japanese text with kana is Japanese, not also
    Chinese, for its kanji."""
    # each pattern matches one letter, so the distinct characters stand for the texts: a whole
    # corpus (Brown's 57,000 sentences) is read in 0.06 s instead of 3.4 s
    chars = "".join(set("".join(texts)))
    found = [name for name, pattern in _UNSPACED_RE.items() if pattern.search(chars)]
    return [n for n in found if not (n == "Chinese" and "Japanese" in found)]


def unspaced_note(texts: Sequence[str]) -> str | None:
    """One line on how the split treats a script written without spaces, if `texts` hold one."""
    names = unspaced_scripts(texts)
    if not names:
        return None
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return (f"{listed} {'is' if len(names) == 1 else 'are'} written without spaces: ctxlens "
            "takes each run of it between spaces or punctuation as one word; put spaces between "
            "words to choose the split yourself")


def _check(text: str, n_words: int) -> None:
    if not text.strip() or n_words == 0:
        raise TextError("the text is empty")
    if len(text) > MAX_CHARS:
        raise TextError(f"the text has {len(text)} characters; the cap is {MAX_CHARS}")
    if n_words > MAX_WORDS:
        raise TextError(f"the text has {n_words} words; the cap is {MAX_WORDS}")


def split_words(text: str) -> WordText:
    """Split typed text into words (see WORD_RE); the text itself is kept unchanged."""
    matches = list(WORD_RE.finditer(text))
    _check(text, len(matches))
    return WordText(text, tuple(m.group() for m in matches), tuple(m.span() for m in matches))


def from_words(words: Sequence[str]) -> WordText:
    """Pretokenised mode: whitespace tokens taken as given, joined by single spaces."""
    words = tuple(w for w in words if w)
    spans, pos = [], 0
    for w in words:
        spans.append((pos, pos + len(w)))
        pos += len(w) + 1
    text = " ".join(words)
    _check(text, len(words))
    return WordText(text, words, tuple(spans))


# Control characters that separate words as spaces do (VT, FF, NEL, the information separators
# U+001C-U+001F): the split above reads them so, but WordPiece deletes every control character
# but tab, newline and CR, so "lends\x0bmoney" would become the one token "lendsmoney".
_CONTROL_SPACE = re.compile("[\x0b\x0c\x1c-\x1f\x85]")


def drop_invisible(text: str) -> str:
    """The text without invisible format characters (see _INVISIBLE) and with spacing control
    characters as plain spaces (_CONTROL_SPACE): what a typed sentence, a corpus line or a
    command's text is read as."""
    return _CONTROL_SPACE.sub(" ", _INVISIBLE.sub("", text))


def split_lines(text: str) -> list[str]:
    """A file's lines: split at "\\n" only, the "\\r" of a "\\r\\n" dropped. str.splitlines()
    also splits at U+2028, U+2029, U+0085, VT and FF, which a line of text may hold, and then
    neither the count of sentences nor a line number matches what an editor shows."""
    return [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]


def to_word_text(text: str, pretokenized: bool = False) -> WordText:
    return from_words(text.split()) if pretokenized else split_words(drop_invisible(text))


def align_offsets(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]],
                  text: str) -> np.ndarray:
    """Map each token's character span to the word it overlaps most; -1 for special tokens.

    Byte-level BPE offsets may include the leading space ("Ġbank" -> " bank"), so overlap is
    counted on non-space characters only.
    """
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    ends = np.array([e for _, e in spans], dtype=np.int64)
    offs = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    tok_start, tok_end = offs[:, 0].copy(), offs[:, 1]
    for t in np.nonzero(tok_end > tok_start)[0]:
        s = int(tok_start[t])
        while s < tok_end[t] and text[s].isspace():
            s += 1
        tok_start[t] = s
    out = np.full(len(offs), -1, dtype=np.int64)
    real = np.nonzero(tok_end > tok_start)[0]
    if len(real) == 0 or len(starts) == 0:
        return out
    # one (tokens x words) overlap table instead of a search per token
    overlap = (np.minimum(ends[None, :], tok_end[real, None])
               - np.maximum(starts[None, :], tok_start[real, None]))
    best = overlap.argmax(axis=1)
    found = overlap[np.arange(len(real)), best] > 0
    out[real[found]] = best[found]
    for t in real[~found]:
        # a token between words (e.g. a stray byte of a multi-byte char): take the next word
        after = np.nonzero(starts >= tok_end[t])[0]
        out[t] = int(after[0]) if len(after) else len(spans) - 1
    return out


@functools.cache
def _space_codepoints() -> np.ndarray:
    # every code point str.isspace() accepts, so the vectorised strip below agrees with it
    return np.array([c for c in range(0x3001) if chr(c).isspace()], np.uint32)


def align_many(texts: Sequence[WordText], offsets: Sequence[Sequence[tuple[int, int]]]
               ) -> list[np.ndarray]:
    """align_offsets() for many texts at once, the same results: a token that lies inside one
    word (almost all of them) is placed by one sorted search over every text's words; a text
    with any other token (one spanning two words or between words) goes through
    align_offsets. A per-text call for every text takes most of batch embedding's host time."""
    if not texts:
        return []
    sep = "\n"                          # never inside a token's span
    bases = np.cumsum([0] + [len(t.text) + len(sep) for t in texts[:-1]])
    codes = np.frombuffer(sep.join(t.text for t in texts).encode("utf-32-le"), np.uint32)
    space = np.isin(codes, _space_codepoints())
    # next_char[i]: the first character at or after i that is not a space
    idx = np.where(space, len(codes), np.arange(len(codes)))
    next_char = np.minimum.accumulate(np.append(idx, len(codes))[::-1])[::-1]
    n_tok = np.array([len(o) for o in offsets], np.int64)
    offs = np.fromiter(chain.from_iterable(chain.from_iterable(offsets)), np.int64,
                       2 * int(n_tok.sum())).reshape(-1, 2)
    text_of_tok = np.repeat(np.arange(len(texts)), n_tok)
    start = offs[:, 0] + bases[text_of_tok]
    end = offs[:, 1] + bases[text_of_tok]
    real = end > start
    start = np.where(real, np.minimum(next_char[np.minimum(start, len(codes))], end), start)
    real = end > start
    n_words = np.array([len(t.spans) for t in texts], np.int64)
    spans = np.fromiter(chain.from_iterable(chain.from_iterable(t.spans for t in texts)),
                        np.int64, 2 * int(n_words.sum())).reshape(-1, 2)
    first_word = np.cumsum(n_words) - n_words
    w_start = spans[:, 0] + np.repeat(bases, n_words)
    w_end = spans[:, 1] + np.repeat(bases, n_words)
    cand = np.searchsorted(w_start, start, side="right") - 1
    ok = cand >= 0
    cand_c = np.maximum(cand, 0)
    inside = ok & (end <= w_end[cand_c]) & (start >= w_start[cand_c]) & \
        (cand_c >= first_word[text_of_tok]) & (cand_c < first_word[text_of_tok] + n_words[text_of_tok])
    word = np.where(real, cand_c - first_word[text_of_tok], -1)
    bad_text = np.zeros(len(texts), bool)
    bad_text[text_of_tok[real & ~inside]] = True
    out, pos = [], 0
    for i, t in enumerate(texts):
        k = int(n_tok[i])
        out.append(align_offsets(offsets[i], t.spans, t.text) if bad_text[i]
                   else word[pos:pos + k])
        pos += k
    return out


def mask_word(text: str, word: int) -> str:
    """The text with word `word` (as split_words counts) replaced by the mask token."""
    wt = split_words(text)
    if not 0 <= word < len(wt.words):
        raise TextError(f"the text has {len(wt.words)} words, so there is no word {word + 1}")
    s, e = wt.spans[word]
    return text[:s] + MASK + text[e:]


def left_of_word(text: str, word: int) -> str:
    """The text before word `word`, without trailing spaces: what a left-to-right model has
    read when it predicts that word."""
    wt = split_words(text)
    if not 0 <= word < len(wt.words):
        raise TextError(f"the text has {len(wt.words)} words, so there is no word {word + 1}")
    return text[:wt.spans[word][0]].rstrip()
