"""Sense-labelled usage examples from WordNet 3.0 (the Debian `wordnet-base` files).

A small reader of the WordNet database files (wndb(5WN)): index.<pos> gives a lemma's synsets
in sense order, data.<pos> holds each synset's gloss, whose quoted parts are usage examples.
NLTK's WordNetCorpusReader would need the `lexnames` file, which wordnet-base does not ship,
and NLTK refuses paths outside its data roots, hence this reader (no nltk.download).
"""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.text import split_words

WORDNET_DIR = Path("/usr/share/wordnet")
POS_FILES = {"n": "noun", "v": "verb"}
_EXAMPLE_RE = re.compile(r'"([^"]+)"')
_LEMMA_RE = re.compile(r"^[a-z]+$")
# "--" and "...": the shared word splitter makes each mark a word, but subword tokenisers merge
# them into one token that spans two words, which no model can then encode
_JOINED_PUNCT = re.compile(r"[^\w\s'][^\w\s']")


@dataclass(frozen=True)
class SenseExample:
    """One usage example of `lemma` in sense `sense` (a synset key such as "09213565-n");
    `word_index` is the position of the lemma's form among `engine.text.split_words(text)`."""

    lemma: str          # e.g. "bank.n"
    sense: str
    sense_rank: int     # 1 = WordNet's first (most frequent) sense
    text: str
    word_index: int


def _require_dir(root: Path) -> None:
    if not (root / "index.noun").exists():
        raise EngineError(f"WordNet not found in {root}: install the Debian package "
                          "wordnet-base (apt-get install wordnet-base) or `make install`")


def read_index(root: Path, pos: str) -> dict[str, list[str]]:
    """lemma -> synset offsets in WordNet sense order (wndb(5WN): index.pos lines)."""
    out = {}
    for line in (root / f"index.{POS_FILES[pos]}").read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):
            continue  # licence header lines start with two spaces
        f = line.split()
        synset_cnt, p_cnt = int(f[2]), int(f[3])
        offsets = f[4 + p_cnt + 2:]
        if len(offsets) == synset_cnt:
            out[f[0]] = offsets
    return out


@dataclass(frozen=True)
class Synset:
    """One data.<pos> record: its offset, words (underscores as spaces, adjective position
    markers such as "(p)" removed), definition and usage examples."""

    offset: str
    lemmas: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]


_ADJ_MARKER = re.compile(r"\((?:a|p|ip)\)$")
PARTS = ("noun", "verb", "adj", "adv")


def read_synsets(root: Path, part: str):
    """Every synset of data.<part> ("noun", "verb", "adj", "adv") in file order (wndb(5WN))."""
    _require_dir(root)
    with open(root / f"data.{part}", encoding="latin-1") as f:
        for line in f:
            if line.startswith(" ") or "|" not in line:
                continue  # licence header lines start with two spaces
            head, _, gloss = line.rstrip("\n").partition("|")
            fields = head.split()
            n_words = int(fields[3], 16)
            lemmas = tuple(dict.fromkeys(_ADJ_MARKER.sub("", fields[4 + 2 * i]).replace("_", " ")
                                         for i in range(n_words)))
            definition = re.sub(r"\s*;\s*(;\s*)*", "; ", _EXAMPLE_RE.sub("", gloss)).strip(" ;")
            yield Synset(fields[0], lemmas, definition,
                         tuple(e.strip() for e in _EXAMPLE_RE.findall(gloss)))


def read_examples(root: Path, pos: str) -> dict[str, list[str]]:
    """synset offset -> usage examples (the quoted parts of the gloss after '|')."""
    return {s.offset: list(s.examples) for s in read_synsets(root, POS_FILES[pos]) if s.examples}


def read_exceptions(root: Path, pos: str) -> dict[str, set[str]]:
    """base form -> irregular inflections (noun.exc / verb.exc: 'inflected base' lines)."""
    out: dict[str, set[str]] = defaultdict(set)
    path = root / f"{POS_FILES[pos]}.exc"
    if path.exists():
        for line in path.read_text(encoding="latin-1").splitlines():
            f = line.split()
            if len(f) >= 2:
                for base in f[1:]:
                    out[base].add(f[0])
    return out


def inflections(lemma: str, pos: str, irregular: set[str] = frozenset()) -> set[str]:
    """Regular English inflections of a noun (plural) or verb (-s, -ed, -ing), plus irregulars
    (the inverse of WordNet's morphy detachment rules)."""
    forms = {lemma, *irregular}
    es = lemma + ("es" if re.search(r"(s|x|z|ch|sh)$", lemma) else "s")
    forms.add(lemma[:-1] + "ies" if re.search(r"[^aeiou]y$", lemma) else es)
    if pos == "v":
        stem = lemma[:-1] if lemma.endswith("e") else lemma
        forms |= {stem + "ed", stem + "ing", lemma + "d" if lemma.endswith("e") else lemma + "ed"}
        if re.search(r"[^aeiou][aeiou][bdgklmnprt]$", lemma):
            forms |= {lemma + lemma[-1] + "ed", lemma + lemma[-1] + "ing"}
        if re.search(r"[^aeiou]y$", lemma):
            forms.add(lemma[:-1] + "ied")
    return forms


def _find(words: tuple[str, ...], forms: set[str]) -> int:
    hits = [i for i, w in enumerate(words) if w.lower() in forms]
    return hits[0] if len(hits) == 1 else -1   # ambiguous repeats are dropped


def sense_examples(root: Path = WORDNET_DIR, pos_tags: str = "nv", min_senses: int = 2,
                   min_examples_per_sense: int = 1) -> list[SenseExample]:
    """Usage examples of polysemous single-word lemmas whose text contains the lemma.

    Kept: lemmas with >= `min_senses` senses that each have >= `min_examples_per_sense`
    examples containing a form of the lemma exactly once.
    """
    _require_dir(root)
    out: list[SenseExample] = []
    for pos in pos_tags:
        index, examples = read_index(root, pos), read_examples(root, pos)
        irregular = read_exceptions(root, pos)
        for lemma, offsets in sorted(index.items()):
            if len(offsets) < 2 or not _LEMMA_RE.match(lemma):
                continue
            forms = inflections(lemma, pos, irregular.get(lemma, set()))
            found = []
            for rank, offset in enumerate(offsets, start=1):
                for text in examples.get(offset, []):
                    if _JOINED_PUNCT.search(text):
                        continue
                    words = split_words(text).words
                    i = _find(words, forms)
                    if i >= 0:
                        found.append(SenseExample(f"{lemma}.{pos}", f"{offset}-{pos}", rank,
                                                  text, i))
            counts = defaultdict(int)
            for ex in found:
                counts[ex.sense] += 1
            good = {s for s, c in counts.items() if c >= min_examples_per_sense}
            if len(good) >= min_senses:
                out.extend(ex for ex in found if ex.sense in good)
    return out


# the word-sense benchmark (bench, results/senses.md) samples its lemmas from these examples
BENCHMARK_MIN_EXAMPLES_PER_SENSE = 2


def benchmark_examples(root: Path = WORDNET_DIR) -> list[SenseExample]:
    """Every usage example the word-sense benchmark can sample (train and held-out lemmas)."""
    return sense_examples(root, min_examples_per_sense=BENCHMARK_MIN_EXAMPLES_PER_SENSE)
