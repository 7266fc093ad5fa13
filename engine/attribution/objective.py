"""One prediction made a differentiable function of its input embeddings: the thing every
attribution method (methods.py) and the faithfulness measures (faithfulness.py) read, whatever
family built it (base.Explained: engine/families/hf/objective.py, elmo/objective.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import EngineError
from engine.text import MASK, TextError, WordText, split_words

KINDS = ("masked", "next", "previous")


@dataclass(frozen=True, eq=False)
class Objective:
    """f as a function of the attributed pieces' embeddings.

    x: (1, N, D) the input embeddings of the N attributed pieces: every piece of every word
    of the text except the blank; the special tokens, the blank and a decoder's own target
    pieces are held fixed inside `value`, so that target and contrast share one x.
    absent: (1, N, D) each of them replaced by the embedding that stands for "no word here"
    (IG's baseline, occlusion's and the faithfulness measures' replacement).
    value: (B, N, D) -> (B,) f for each row, in the model's graph (gradients flow).
    slots: (N,) the index in `pieces` of each attributed piece.
    """

    x: object
    absent: object
    value: Callable
    pieces: tuple[str, ...]
    piece_to_word: np.ndarray
    slots: np.ndarray
    words: tuple[str, ...]
    target_pieces: tuple[str, ...]
    f_means: str
    absent_means: str

    @property
    def slot_words(self) -> np.ndarray:
        """(N,) the word of each attributed piece."""
        return self.piece_to_word[self.slots]

    @property
    def scored_words(self) -> np.ndarray:
        """The words that have attributed pieces, in order (the blank and words a decoder's
        fill cut off have none)."""
        return np.unique(self.slot_words)


def one_word(word: str, what: str) -> str:
    """A target or contrast as one word of the shared split (engine.text), or a one-line error."""
    word = (word or "").strip()
    try:
        found = split_words(word).words if word else ()
    except TextError:
        found = ()
    if len(found) != 1 or found[0] == MASK:
        raise EngineError(f"the {what} must be one word (got {word!r})")
    return word


def check_pair(target: str, contrast: str | None) -> tuple[str, str | None]:
    target = one_word(target, "target")
    if contrast is None:
        return target, None
    contrast = one_word(contrast, "contrast")
    if contrast == target:
        raise EngineError(f"the contrast {contrast!r} is the target itself: choose another word")
    return target, contrast


def check_tokens(target: str, contrast: str | None, target_ids, contrast_ids) -> None:
    """A contrast the model reads as the very tokens of the target (an uncased model's 'BANK'
    for 'bank') would make f 0 and every map 0: refused, as check_pair refuses the same word.
    The ids are each word's pieces as the view reads them (all of them, not only the first)."""
    if contrast is None or list(target_ids) != list(contrast_ids):
        return
    n = "s" if len(target_ids) > 1 else ""
    raise EngineError(f"{target!r} and {contrast!r} are the same token{n} for this model: a "
                      "contrast must differ from the target")


def blank_of(text: WordText, kind: str) -> int | None:
    """The blank's word index for kind "masked" (exactly one [MASK]); None for "next" and
    "previous", whose text has no blank."""
    if kind == "masked":
        try:
            return text.one_mask()
        except TextError as err:
            raise EngineError(str(err)) from None
    if text.mask_indices:
        raise EngineError(f"the {kind} word is predicted from a text without {MASK}; "
                          f"to explain a blank, use kind 'masked'")
    return None


def replace_word(text: WordText, i: int, word: str) -> WordText:
    """The text with word i written as `word` (the spans after it shifted)."""
    s, e = text.spans[i]
    shift = len(word) - (e - s)
    spans = tuple(sp if k < i else (s, s + len(word)) if k == i else (sp[0] + shift,
                                                                    sp[1] + shift)
                  for k, sp in enumerate(text.spans))
    return WordText(text.text[:s] + word + text.text[e:],
                    text.words[:i] + (word,) + text.words[i + 1:], spans)


def f_means(kind: str, contrast: str | None, what: str) -> str:
    """f in words, for where it is shown: `what` is the log-probability the kind reads."""
    return f"{what} of the target − the same of the contrast" if contrast else \
        f"{what} of the target"
