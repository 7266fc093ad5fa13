"""WordNet's glosses and example sentences as training text (Debian package `wordnet-base`).

    apt-get install wordnet-base                      # `make install` does it
    python -m lab.training.wordnet                 # -> data/wordnet/shard-NNNN.txt

Brown is 1961 prose; the cloze blanks ask for everyday words that a sentence pins down ("He
locked the door with a [MASK] ."). WordNet 3.0 (Princeton, a permissive licence that allows
use, modification and distribution: /usr/share/doc/wordnet-base/copyright) defines every
sense of 155k English words in plain modern English and gives 48k short example sentences of
words in use. Each synset becomes one line per piece:

    key: metal device shaped in such a way that when it is inserted into the appropriate lock
    the lock's mechanism can be rotated.
    I left my keys inside the car and locked the doors.

so a masked word can be recovered from its definition and a defined word from its use. Lines
keep WordNet's order (synsets grouped by lexicographer file, so neighbours share a topic), in
the shard format lab/training/everyday.py writes, which `mlm_head --extra-text` reads.

Held out of the text, and counted in the manifest: every usage example the word-sense benchmark
can sample (results/senses.md scores models on WordNet's examples), and any line that overlaps
a cloze item (the item with an accepted answer filled in, or six of its words in a row, as for
the everyday text).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.analysis.wordnet import PARTS, WORDNET_DIR, Synset, benchmark_examples, read_synsets
from engine.corpus import brown as corpus
from lab.training.everyday import cloze_guard, leaks

SHARD_LINES = 20_000


def synset_lines(synset: Synset) -> list[str]:
    """The definition line and the example lines (of three words or more) of one synset."""
    lines = [f"{', '.join(synset.lemmas)}: {_sentence(synset.definition)}"] if synset.definition \
        else []
    return lines + [_sentence(e[:1].upper() + e[1:]) for e in synset.examples
                    if len(e.split()) >= 3]


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text[-1:] in ".!?" else text + "."


def run(args) -> dict:
    guard = cloze_guard(args.cloze)
    held = {" ".join(e.text.split()) for e in benchmark_examples(args.wordnet)}
    out: list[str] = []
    leaked = synsets = senses_held = 0
    for part in PARTS:
        for synset in read_synsets(args.wordnet, part):
            synsets += 1
            kept = [e for e in synset.examples if " ".join(e.split()) not in held]
            senses_held += len(synset.examples) - len(kept)
            for line in synset_lines(Synset(synset.offset, synset.lemmas, synset.definition,
                                            tuple(kept))):
                if leaks(line, guard):
                    leaked += 1
                else:
                    out.append(line)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("shard-*.txt"):
        old.unlink()
    shards = []
    for i in range(0, len(out), SHARD_LINES):
        name = f"shard-{i // SHARD_LINES:04d}.txt"
        (args.out / name).write_text("\n".join(out[i:i + SHARD_LINES]) + "\n", encoding="utf-8")
        shards.append({"file": name, "sentences": len(out[i:i + SHARD_LINES])})
    manifest = {"source": "WordNet 3.0 (Debian wordnet-base), glosses and examples",
                "licence": "WordNet 3.0 licence (Princeton University), permissive",
                "synsets": synsets, "lines": len(out),
                "words": sum(len(s.split()) for s in out), "cloze_leaks_dropped": leaked,
                "sense_benchmark_examples_dropped": senses_held, "shards": shards}
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return {k: v for k, v in manifest.items() if k != "shards"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wordnet", type=Path, default=WORDNET_DIR)
    ap.add_argument("--out", type=Path, default=corpus.DATA / "wordnet")
    ap.add_argument("--cloze", type=Path, default=corpus.ROOT / "assets" / "cloze" / "everyday.tsv")
    return ap


if __name__ == "__main__":
    print(json.dumps(run(parser().parse_args())))
