"""#20's "done when", on a slice CI can afford (1,611 Brown sentences of bench/sample plus 24
bank sentences written here): `ctxlens index` with the bundled minilm-l6, then `ctxlens
neighbours` for "bank" by a river finds river banks first."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.corpus import sources
from engine.corpus.brown import detokenize
from tests.conftest import SESSION_VARS

ROOT = Path(__file__).resolve().parents[3]
RIVER = ["The boat drifted toward the muddy bank of the river .",
         "We had a picnic on the grassy bank by the stream .",
         "Fishermen lined the bank of the river at dawn .",
         "The river overflowed its bank after the storm .",
         "Reeds grew thick along the east bank of the creek .",
         "He climbed up the steep bank from the water .",
         "Children played on the sandy bank of the lake .",
         "The canoe scraped against the rocky bank .",
         "Willows leaned over the bank into the current .",
         "A heron stood still on the far bank of the river .",
         "The flood washed away part of the river bank .",
         "They walked along the bank until the bridge ."]
MONEY = ["She deposited her salary at the bank on Friday .",
         "The bank approved the loan for the new house .",
         "He works as a teller at the bank downtown .",
         "The bank raised its interest rates again .",
         "I need to withdraw cash from the bank .",
         "The bank charged a fee for the transfer .",
         "Robbers broke into the bank vault last night .",
         "Her savings account at the bank earns little interest .",
         "The central bank cut rates to help the economy .",
         "He opened a checking account at a local bank .",
         "The bank closed early on the holiday .",
         "Investors worried that the bank would fail ."]

# slow by nature (make test-all): two CLI processes index 1,635 sentences with minilm-l6,
# 83-101 s
pytestmark = [pytest.mark.slow, pytest.mark.slow_by_nature]


def _slice(path: Path) -> tuple[int, int]:
    lines = []
    for row in (ROOT / "bench" / "sample" / "brown_tagged_sample.jsonl").read_text().splitlines():
        lines += [detokenize(s["tokens"]) for s in json.loads(row)["sentences"]]
    start = len(lines)
    lines += RIVER + MONEY
    path.write_text("\n".join(lines) + "\n")
    return start, len(lines)


def _cli(*args) -> subprocess.CompletedProcess:
    # a user's bare environment, with the test session's caches (tests/conftest.py)
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           **{k: os.environ[k] for k in SESSION_VARS}}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def test_index_then_neighbours_finds_river_banks_for_a_river_bank(tmp_path):
    corpus = tmp_path / "slice.txt"
    start, n = _slice(corpus)
    assert n <= 2000
    made = _cli("index", "--model", "minilm-l6", "--corpus", str(corpus), "--output",
                str(tmp_path / "idx"))
    assert made.returncode == 0, made.stderr[-500:]
    usable = len(sources.load(str(corpus)).sentences)     # a Brown line over the caps is left out
    assert f"{usable:,} sentences" in made.stdout and usable > n - 5
    got = _cli("neighbours", "--index", str(tmp_path / "idx"), "--text",
               "He sat on the bank of the river .", "--word", "bank", "--layer", "4", "--json")
    assert got.returncode == 0, got.stderr[-500:]
    hits = [json.loads(line) for line in got.stdout.splitlines()]
    assert len(hits) == 10 and {"sentence", "word", "position", "layer", "cosine"} <= set(hits[0])
    assert [h["cosine"] for h in hits] == sorted((h["cosine"] for h in hits), reverse=True)
    banks = [h for h in hits if h["word"].lower() == "bank"]
    river = sum(h["sentence"] in RIVER for h in banks)
    money = sum(h["sentence"] in MONEY for h in banks)
    assert len(banks) >= 8 and river > money, hits
    # the top three are river banks
    assert all(h["sentence"] in RIVER for h in hits[:3]), hits[:3]
