"""The shared word tokeniser and token -> word alignment."""
from __future__ import annotations

import numpy as np
import pytest

from engine.text import (MAX_CHARS, MAX_WORDS, TextError, align_many, align_offsets, from_words,
                         split_words, to_word_text)


def test_words_keep_contractions_hyphens_and_punctuation_runs_whole():
    wt = split_words('"Don\'t go -- it\'s well-known," she said...')
    assert wt.words == ('"', "Don't", "go", "--", "it's", "well-known", ',"', "she", "said",
                        "...")
    for w, (s, e) in zip(wt.words, wt.spans):
        assert wt.text[s:e] == w


def test_mask_is_one_word_even_next_to_punctuation():
    wt = split_words("x.[MASK]!")
    assert wt.words == ("x", ".", "[MASK]", "!")
    assert wt.mask_indices == [2]


def test_pretokenized_mode_takes_whitespace_tokens_as_given():
    wt = to_word_text("don't  stop-me now!", pretokenized=True)
    assert wt.words == ("don't", "stop-me", "now!")
    assert wt.text == "don't stop-me now!"
    assert [wt.text[s:e] for s, e in wt.spans] == list(wt.words)
    assert from_words(["a", "b"]).spans == ((0, 1), (2, 3))


@pytest.mark.parametrize("text, message", [
    ("", "the text is empty"),
    ("   ", "the text is empty"),
    ("x" * (MAX_CHARS + 1), f"the text has {MAX_CHARS + 1} characters; the cap is {MAX_CHARS}"),
    ("w " * (MAX_WORDS + 1), f"the text has {MAX_WORDS + 1} words; the cap is {MAX_WORDS}"),
])
def test_empty_and_overlong_texts_are_refused_with_the_cap(text, message):
    with pytest.raises(TextError) as err:
        split_words(text)
    assert str(err.value) == message


@pytest.mark.parametrize("text", ["x" * MAX_CHARS, "w " * (MAX_WORDS - 1) + "w"])
def test_a_text_at_the_caps_is_taken(text):
    assert len(split_words(text).words) in (1, MAX_WORDS)


def test_alignment_ignores_leading_spaces_and_marks_special_tokens():
    wt = split_words("The riverbank flooded.")
    # [CLS], "The", " river", "bank", " flooded", ".", [SEP] as a BPE/WordPiece would cut it
    offsets = [(0, 0), (0, 3), (3, 9), (9, 13), (13, 21), (21, 22), (0, 0)]
    assert align_offsets(offsets, wt.spans, wt.text).tolist() == [-1, 0, 1, 1, 2, 3, -1]


def test_a_whitespace_only_token_belongs_to_no_word():
    wt = split_words("a  b")
    got = align_offsets([(0, 1), (1, 2), (2, 4)], wt.spans, wt.text)
    assert got.tolist() == [0, -1, 1]
    assert got.dtype == np.int64


@pytest.mark.slow
def test_byte_level_bpe_runs_of_punctuation_align_in_smollm2():
    from engine.api import Engine

    enc = Engine().encode("smollm2-135m", ['He said -- twice -- "no."'])[0]
    assert enc.words == ("He", "said", "--", "twice", "--", '"', "no", '."')
    assert set(enc.token_to_word[enc.token_to_word >= 0].tolist()) == set(range(8))


def test_combining_marks_join_their_letter_and_control_characters_are_no_words():
    from engine.text import split_words

    wt = split_words("The mouse \u0308 cafe\u0301 ran\x07 \x00away .")
    assert wt.words == ("The", "mouse", "cafe\u0301", "ran", "away", ".")
    assert [wt.text[s:e] for s, e in wt.spans] == list(wt.words)


ALIGN_TEXTS = ["She sat on the riverbank, playing.", "Café au lait\u00a0costs 3\u2009€ — don't  you?",
               "\tTabs\tand  double  spaces ", "北京 is 很好 ", "emoji 🙂🙂 ok", "e\u0301t\u00e9 naïve",
               "a--b ... c.\"", "[MASK] is here .", "x", "¿Qué?", "well-known ' quotes '"]


@pytest.mark.parametrize("kind", ["wordpiece", "byte-level"])
def test_align_many_equals_align_offsets_text_by_text(kind, monkeypatch):
    # the batch alignment must place every token exactly as the per-text alignment does,
    # whether its texts take the fast path (tokens inside words) or fall back
    import engine.text as text_module
    from tests.zoo import GPT_CORPUS, byte_level_tokenizer, wordpiece_tokenizer

    tok = wordpiece_tokenizer() if kind == "wordpiece" else byte_level_tokenizer(GPT_CORPUS)
    wts = [split_words(t) for t in ALIGN_TEXTS * 3]
    offsets = tok([w.text for w in wts], return_offsets_mapping=True)["offset_mapping"]
    fallbacks = []
    monkeypatch.setattr(text_module, "align_offsets",
                        lambda *a: fallbacks.append(1) or align_offsets(*a))
    got = align_many(wts, offsets)
    assert len(fallbacks) < len(wts) / 2          # most texts take the vectorised path
    assert len(got) == len(wts)
    for w, o, g in zip(wts, offsets, got):
        np.testing.assert_array_equal(g, align_offsets(o, w.spans, w.text))
    assert any((g >= 0).sum() > len(w.words) for w, g in zip(wts, got))   # multi-token words
    assert align_many([], []) == []


@pytest.mark.parametrize("text,words", [
    ("\ufeffthe bank .", ("the", "bank", ".")),                 # a byte-order mark
    ("he said \u200b nothing .", ("he", "said", "nothing", ".")),  # a zero-width space
    ("we co\u00adoperate \u2060now", ("we", "cooperate", "now")),  # soft hyphen, word joiner
    ("a family 👨\u200d👩\u200d👧 .", ("a", "family", "👨\u200d👩\u200d👧", ".")),  # kept
])
def test_invisible_format_characters_are_read_as_absent(text, words):
    """WordPiece drops them: as words of their own they stopped every encoding of their text,
    inside a word they split it. The word split itself is unchanged (indexes' positions)."""
    assert to_word_text(text).words == words
    assert split_words(text).text == text          # split_words takes a text as it is


@pytest.mark.parametrize("model", ["minilm-l6", "smollm2-135m"])
def test_invisible_characters_reach_no_model(model):
    """Not merely no word: SmolLM2 gives a zero-width space byte tokens, which the aligner
    gave to the next word (its vector with pool=first was the ZWSP's)."""
    from engine.api import Engine
    from tests.engine.test_bundled_models import require

    eng = Engine(cache_size=0)
    model = require(model)
    plain, odd = eng.encode(model, ["He said  nothing .", "He said \u200b noth\u00ading ."])
    assert odd.words == plain.words and odd.tokens == plain.tokens
    assert odd.text == plain.text         # the same input, so the same vectors (to batch noise)
    assert np.allclose(odd.hidden_states, plain.hidden_states, atol=1e-4)


@pytest.mark.parametrize("text,words", [
    ("यह किताब अच्छी है", ("यह", "किताब", "अच्छी", "है")),                 # Hindi: matras, virama
    ("है", ("है",)),                                                         # one vowel sign
    ("क्\u200dष", ("क्\u200dष",)),                                           # ZWJ inside a conjunct
    ("தமிழ் மொழி", ("தமிழ்", "மொழி")),                                     # Tamil
    ("بِسْمِ ٱللَّهِ", ("بِسْمِ", "ٱللَّهِ")),                                     # harakat
    ("שָׁלוֹם עוֹלָם", ("שָׁלוֹם", "עוֹלָם")),                                     # niqqud
    ("ภาษาไทย ง่าย", ("ภาษาไทย", "ง่าย")),                                  # a Thai tone mark
    ("می\u200cخواهم بروم", ("می\u200cخواهم", "بروم")),                      # Persian ZWNJ
    ("a family 👨\u200d👩\u200d👧 🇫🇷 👍🏽 .", ("a", "family", "👨\u200d👩\u200d👧", "🇫🇷",
                                               "👍🏽", ".")),
])
def test_combining_marks_and_joiners_stay_in_their_word(text, words):
    """'यह किताब अच्छी है' was 12 words (क, ि, त, ा, ब, ...): every vowel sign, virama and
    tone mark a word of its own."""
    wt = split_words(text)
    assert wt.words == words
    assert [wt.text[s:e] for s, e in wt.spans] == list(wt.words)


def test_a_hindi_target_is_found_in_its_sentence():
    from engine.text import occurrences_of

    assert occurrences_of(split_words("यह किताब अच्छी है").words, "किताब") == [1]


def test_english_and_punctuation_split_as_before():
    wt = split_words("It's 3½ o'clock -- the well-known café (naïve) said: \"no...\" [MASK]!")
    assert wt.words == ("It's", "3½", "o'clock", "--", "the", "well-known", "café", "(", "naïve",
                        ")", "said", ":", '"', "no", '..."', "[MASK]", "!")


@pytest.mark.parametrize("texts,scripts", [
    (["The bank .", "यह किताब अच्छी है", "שָׁלוֹם"], []),
    (["ภาษาไทย ง่าย"], ["Thai"]),
    (["日本語のテキスト", "我爱北京"], ["Japanese"]),       # kanji in Japanese text: Japanese
    (["我爱北京。", "ສະບາຍດີ", "ខ្មែរ", "မြန်မာ"], ["Lao", "Khmer", "Burmese", "Chinese"]),
])
def test_scripts_written_without_spaces_are_named(texts, scripts):
    from engine.text import unspaced_note, unspaced_scripts

    assert unspaced_scripts(texts) == scripts
    note = unspaced_note(texts)
    assert (note is None) == (not scripts)
    if note:
        assert len(note.splitlines()) == 1 and "put spaces between words" in note
        assert note.startswith(scripts[0]) and " without spaces" in note


def test_a_script_without_spaces_is_split_at_spaces_and_punctuation_only():
    assert split_words("我爱北京。你好").words == ("我爱北京", "。", "你好")
    assert split_words("我 爱 北京").words == ("我", "爱", "北京")


@pytest.mark.slow
def test_minilm_takes_a_hindi_sentence_with_a_vowel_sign_word():
    """Its uncased tokenizer strips marks, so 'ै' as a word of its own had no token and every
    sentence holding it was refused."""
    from engine.api import Engine
    from tests.engine.test_bundled_models import require

    enc = Engine(cache_size=0).encode(require("minilm-l6"), ["यह किताब अच्छी है ."])[0]
    assert enc.words == ("यह", "किताब", "अच्छी", "है", ".")
    assert enc.word_vectors("mean").shape[1] == 5
    assert set(enc.token_to_word[enc.token_to_word >= 0].tolist()) == set(range(5))


def test_spacing_control_characters_are_read_as_spaces():
    """WordPiece deletes VT, FF and NEL: 'lends\x0bmoney' was the one token 'lendsmoney', so the
    text was refused once a file line could hold them."""
    wt = to_word_text("lends\x0bmoney\x0c.\x85the\x1fend")
    assert wt.text == "lends money . the end"
    assert wt.words == ("lends", "money", ".", "the", "end")


def test_file_lines_split_at_newlines_only():
    from engine.text import split_lines

    assert split_lines("a\u2028b\r\nc\u2029d\x0be\x0cf\x85g\n\nh\r") == [
        "a\u2028b", "c\u2029d\x0be\x0cf\x85g", "", "h"]
