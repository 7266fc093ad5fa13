"""WordNet glosses and examples as MLM training text: the lines it writes, and what it holds out
(the word-sense benchmark's examples, the cloze items)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.analysis.wordnet import benchmark_examples, read_synsets
from lab.training.everyday import load_sentences
from lab.training.wordnet import run, synset_lines

CLOZE = Path(__file__).resolve().parents[3] / "assets" / "cloze" / "everyday.tsv"
HEADER = "  1 This software and database is being provided to you, the LICENSEE, by\n"


def write_db(root: Path) -> None:
    # "bank" has two senses with two examples each: the sense benchmark can sample them
    (root / "index.noun").write_text(HEADER + "bank n 2 0 2 0 00000001 00000002\n")
    (root / "data.noun").write_text(
        HEADER
        + '00000001 17 n 02 bank 0 riverbank 0 000 | sloping land beside water; '
          '"they sat on the bank of the river"; "the bank was muddy"\n'
        + '00000002 21 n 01 bank 0 000 | a financial institution; "the bank lent him money"; '
          '"she works at the bank"\n'
        + '00000003 06 n 01 key 0 000 | metal device that opens a lock; "he locked the door '
          'with a key"; "a spare key"; "keys"\n')
    (root / "index.verb").write_text(HEADER)
    (root / "data.verb").write_text(HEADER)
    (root / "data.adj").write_text(
        HEADER + '00000004 00 a 01 galore(ip) 0 000 | in great numbers; "there were '
                 'bargains galore"\n')
    (root / "data.adv").write_text(HEADER)


def test_a_synset_gives_its_definition_with_its_words_then_its_examples(tmp_path):
    write_db(tmp_path)
    key = next(s for s in read_synsets(tmp_path, "noun") if s.offset == "00000003")
    # "keys" (one word) is too short to teach anything and is left out
    assert synset_lines(key) == ["key: metal device that opens a lock.",
                                 "He locked the door with a key.", "A spare key."]
    galore = next(read_synsets(tmp_path, "adj"))
    assert synset_lines(galore)[0] == "galore: in great numbers."   # "(ip)" marker removed
    bank = next(read_synsets(tmp_path, "noun"))
    assert synset_lines(bank)[0] == "bank, riverbank: sloping land beside water."


def test_sense_benchmark_examples_and_cloze_leaks_are_held_out(tmp_path):
    write_db(tmp_path)
    held = {e.text for e in benchmark_examples(tmp_path)}
    assert held == {"they sat on the bank of the river", "the bank was muddy",
                    "the bank lent him money", "she works at the bank"}
    out = tmp_path / "out"
    report = run(argparse.Namespace(wordnet=tmp_path, out=out, cloze=CLOZE))
    lines = load_sentences(out)
    assert lines == ["bank, riverbank: sloping land beside water.",
                     "bank: a financial institution.",
                     "key: metal device that opens a lock.", "A spare key.",
                     "galore: in great numbers.", "There were bargains galore."]
    # cloze item c001 filled in ("He locked the door with a key .") never becomes training text
    assert report["cloze_leaks_dropped"] == 1
    assert report["sense_benchmark_examples_dropped"] == 4
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["lines"] == len(lines) and manifest["words"] == sum(
        len(s.split()) for s in lines)
