"""The WordNet database reader on a tiny hand-written database, and on the installed one."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.analysis.wordnet import WORDNET_DIR, inflections, sense_examples
from engine.errors import EngineError

HEADER = "  1 This software and database is being provided to you, the LICENSEE, by\n"


def write_db(root: Path) -> None:
    # index: lemma pos synset_cnt p_cnt [ptrs] sense_cnt tagsense_cnt offsets (wndb(5WN))
    (root / "index.noun").write_text(HEADER + "bank n 2 1 @ 2 1 00000001 00000002\n"
                                     "lone n 1 0 1 0 00000003\n")
    (root / "data.noun").write_text(
        HEADER
        + '00000001 17 n 01 bank 0 000 | sloping land; "the bank of the river"; '
          '"banks of mud"; "no match here"\n'
        + '00000002 21 n 01 bank 0 000 | a financial institution; "the bank lent money"\n'
        + '00000003 03 n 01 lone 0 000 | one only; "a lone wolf"\n')
    (root / "index.verb").write_text(HEADER + "run v 2 0 2 0 00000011 00000012\n")
    (root / "data.verb").write_text(
        HEADER + '00000011 38 v 01 run 0 000 | move fast; "she ran home"; "running late"\n'
        + '00000012 41 v 01 run 0 000 | operate; "he runs a shop"\n')
    (root / "verb.exc").write_text("ran run\n")


def test_reads_examples_that_contain_a_form_of_the_lemma(tmp_path):
    write_db(tmp_path)
    ex = sense_examples(tmp_path)
    bank = [(e.sense, e.sense_rank, e.text, e.word_index) for e in ex if e.lemma == "bank.n"]
    assert bank == [("00000001-n", 1, "the bank of the river", 1),
                    ("00000001-n", 1, "banks of mud", 0),
                    ("00000002-n", 2, "the bank lent money", 1)]


def test_monosemous_lemmas_are_left_out(tmp_path):
    write_db(tmp_path)
    assert not [e for e in sense_examples(tmp_path) if e.lemma == "lone.n"]


def test_irregular_and_ing_forms_of_verbs_are_found(tmp_path):
    write_db(tmp_path)
    run = {e.text: e.word_index for e in sense_examples(tmp_path) if e.lemma == "run.v"}
    assert run == {"she ran home": 1, "running late": 0, "he runs a shop": 1}


def test_min_examples_per_sense_drops_thin_senses(tmp_path):
    write_db(tmp_path)
    ex = sense_examples(tmp_path, min_examples_per_sense=2)
    assert ex == []   # every lemma has only one sense with two examples


def test_inflections_cover_regular_morphology():
    assert {"city", "cities"} <= inflections("city", "n")
    assert {"stop", "stops", "stopped", "stopping"} <= inflections("stop", "v")
    assert {"bake", "bakes", "baked", "baking"} <= inflections("bake", "v")
    assert "boxes" in inflections("box", "n")


def test_missing_wordnet_gives_an_actionable_error(tmp_path):
    with pytest.raises(EngineError, match="wordnet-base"):
        sense_examples(tmp_path)


@pytest.mark.skipif(not (WORDNET_DIR / "index.noun").exists(), reason="wordnet-base absent")
def test_installed_wordnet_has_both_senses_of_bank():
    ex = [e for e in sense_examples(min_examples_per_sense=2) if e.lemma == "bank.n"]
    texts = {e.sense_rank: e.text for e in ex}
    assert "he cashed a check at the bank" in [e.text for e in ex if e.sense_rank == 2]
    assert set(texts) == {1, 2}
