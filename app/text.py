"""Word splitting as the engine does it, for the pages: every model's words are split alike
(engine/text.py), so a page can find the target, mask a word or cap a text box without a model.
Pages import it from here, so engine/ is reached through the app's modules only
(tests/test_layering.py)."""
from __future__ import annotations

from engine.text import (JOINER_RE, MASK, MAX_CHARS, joined_forms, left_of_word, mask_word,
                         split_words, word_key)

__all__ = ["JOINER_RE", "MASK", "MAX_CHARS", "joined_forms", "left_of_word", "mask_word",
           "split_words", "word_key"]
