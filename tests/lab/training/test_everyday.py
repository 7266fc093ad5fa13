"""Everyday text written by SmolLM2 for the MLM head: what is kept, and the cloze-leak guard."""
from __future__ import annotations

from pathlib import Path

from lab.training.everyday import cloze_guard, leaks, load_sentences, sentences_of
from lab.training.mlm_head import EXTRA_DOC_SENTENCES, extra_documents

CLOZE = Path(__file__).resolve().parents[3] / "assets" / "cloze" / "everyday.tsv"


def test_sentences_are_split_cleaned_and_filtered():
    sample = ("1. I made tea for my mother. Then we sat in the garden!\n"
              "Anna: Did you feed the cat this morning?\n"
              "- ok\n"
              "#### Heading with *markup* and numbers 12345 that is long enough\n"
              "This one has a url http://x.y/z in it and should go.\n")
    got = sentences_of(sample)
    assert got == ["I made tea for my mother.", "Then we sat in the garden!",
                   "Did you feed the cat this morning?"]


def test_a_cloze_item_or_six_of_its_words_in_a_row_is_a_leak():
    guard = cloze_guard(CLOZE)
    assert leaks("He locked the door with a key.", guard)              # item c001, filled in
    assert leaks("Yesterday he locked the door with a key again.", guard)   # 6-gram inside
    assert leaks("He locked the door with a chain.", guard)   # the item's own six words
    assert not leaks("He locked the gate with a chain.", guard)
    assert not leaks("She opened the window to let in some air.", guard)


def test_extra_documents_group_the_shards_in_tens_and_repeat(tmp_path):
    lines = [f"Sentence number {i} is here." for i in range(25)]
    (tmp_path / "shard-0000.txt").write_text("\n".join(lines[:20]) + "\n")
    (tmp_path / "shard-0001.txt").write_text("\n".join(lines[20:]) + "\n")
    assert load_sentences(tmp_path) == lines
    docs = extra_documents(tmp_path, 2)
    assert [len(d) for d in docs] == [EXTRA_DOC_SENTENCES, EXTRA_DOC_SENTENCES, 5] * 2
    assert docs[0][0] == lines[0] and docs[3] == docs[0]
