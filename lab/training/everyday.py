"""Everyday English written by the bundled SmolLM2: training text a registry does not ship.

    python -m lab.training.everyday --minutes 30 --threads 2     # resumes; appends shards

Brown (1961 prose, 1.1M words) is the only licensed running text here, and the masked LM it
trains misses everyday blanks ("He locked the door with a [MASK] ." -> door, lock, gun...).
SmolLM2-135M read trillions of tokens of recent web text; sampling from it (sequence-level
knowledge distillation, Kim & Rush 2016) turns what it knows about ordinary life into sentences
the MLM head can read. SmolLM2 is Apache-2.0, so text it writes can train a shipped model.

The prompts ask for a KIND of text (a diary, a conversation, a story for children, household
instructions...), never a topic or a word, so nothing here is steered towards the cloze set
(assets/cloze/everyday.tsv). Sentences that overlap a cloze item anyway (the item with any
answer filled in, or any 6 consecutive words of it) are dropped and counted (`leaks` in the
manifest). Kept: sentences of 4-40 words, mostly letters, each distinct sentence once.

Shards (`shard-NNNN.txt`, one sentence a line) are written as they fill and never rewritten,
so a stopped run resumes where it was; `manifest.json` says how each shard was made.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from engine.corpus import brown as corpus

TEACHER_ID = "smollm2-135m"
# What kind of text to write, not what about: the sampling picks the topics.
PROMPTS = (
    "Here is a page from my diary about an ordinary day:\n",
    "A short conversation between two friends:\n",
    "A simple story for young children:\n",
    "Some everyday instructions, written in plain English:\n",
    "A letter to my grandmother about what we did this week:\n",
    "Sentences for people learning English, one per line:\n",
    "A description of a normal morning at home:\n",
    "What happened at work today, told to a friend:\n",
)
SHARD_SENTENCES = 2000
MIN_WORDS, MAX_WORDS = 4, 40
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_CLEAN = re.compile(r"^[A-Za-z0-9\"'(][A-Za-z0-9 ,.;:!?\"'()\-]*[.!?\"']$")


def cloze_guard(path: Path) -> tuple[set[str], set[tuple[str, ...]]]:
    """The cloze items with every accepted answer filled in (normalised), and their 6-grams."""
    from bench.analysis.cloze import load_items

    full, grams = set(), set()
    for item in load_items(path):
        for answer in item.answers:
            words = _norm(item.sentence.replace("[MASK]", answer)).split()
            full.add(" ".join(words))
            grams |= {tuple(words[i:i + 6]) for i in range(len(words) - 5)}
    return full, grams


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def sentences_of(text: str) -> list[str]:
    """Clean one-line sentences out of a sample (list markers and speaker names removed)."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\s*(?:[-*•]|\d+[.)]|[A-Z][a-z]+:)\s*", "", line).strip()
        for s in _SENTENCE_END.split(line):
            s = s.strip()
            if MIN_WORDS <= len(s.split()) <= MAX_WORDS and _CLEAN.match(s):
                out.append(s)
    return out


def leaks(sentence: str, guard) -> bool:
    full, grams = guard
    words = _norm(sentence).split()
    return " ".join(words) in full or any(tuple(words[i:i + 6]) in grams
                                          for i in range(len(words) - 5))


def run(args) -> dict:
    import torch

    from engine.api import Engine

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = (json.loads(manifest_path.read_text()) if manifest_path.exists() else
                {"teacher": TEACHER_ID, "prompts": PROMPTS, "shards": [], "leaks": 0,
                 "duplicates": 0, "samples": 0, "steps": 0})
    seen = {_norm(s) for f in sorted(args.out.glob("shard-*.txt"))
            for s in f.read_text(encoding="utf-8").splitlines()}
    guard = cloze_guard(args.cloze)
    adapter = Engine().adapter(TEACHER_ID)
    model, tok = adapter.model.eval(), adapter.tokenizer
    tok.padding_side = "left"
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    pending: list[str] = []
    start = time.time()
    while time.time() - start < args.minutes * 60:
        manifest["steps"] += 1          # every batch its own seed, across resumed runs too
        step = manifest["steps"]
        torch.manual_seed(args.seed * 1_000_003 + step)
        prompts = [PROMPTS[(step * args.batch + i) % len(PROMPTS)] for i in range(args.batch)]
        enc = tok(prompts, return_tensors="pt", padding=True)
        with torch.inference_mode():
            out = model.generate(**enc, do_sample=True, temperature=args.temperature,
                                 top_p=0.95, max_new_tokens=args.new_tokens, pad_token_id=pad)
        texts = tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        manifest["samples"] += len(texts)
        for text in texts:
            for s in sentences_of(text):
                key = _norm(s)
                if key in seen:
                    manifest["duplicates"] += 1
                elif leaks(s, guard):
                    manifest["leaks"] += 1
                else:
                    seen.add(key)
                    pending.append(s)
        while len(pending) >= SHARD_SENTENCES:
            shard = args.out / f"shard-{len(manifest['shards']):04d}.txt"
            shard.write_text("\n".join(pending[:SHARD_SENTENCES]) + "\n", encoding="utf-8")
            pending = pending[SHARD_SENTENCES:]
            manifest["shards"].append({"file": shard.name, "sentences": SHARD_SENTENCES,
                                       "temperature": args.temperature,
                                       "new_tokens": args.new_tokens, "seed": args.seed})
        manifest_path.write_text(json.dumps(manifest, indent=1))
        kept = len(manifest["shards"]) * SHARD_SENTENCES + len(pending)
        print(f"everyday text: {kept:,} sentences ({len(pending)} not yet in a shard), "
              f"{manifest['samples']:,} samples, {(time.time() - start) / 60:.1f} min",
              flush=True)
    words = sum(len(s.split()) for f in sorted(args.out.glob("shard-*.txt"))
                for s in f.read_text(encoding="utf-8").splitlines())
    return {"shards": len(manifest["shards"]), "words": words, "leaks": manifest["leaks"],
            "duplicates": manifest["duplicates"], "left_unsaved": len(pending)}


def load_sentences(folder: Path) -> list[str]:
    """Every sentence of every finished shard, in order."""
    return [s for f in sorted(folder.glob("shard-*.txt"))
            for s in f.read_text(encoding="utf-8").splitlines() if s]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=corpus.DATA / "everyday")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=160)
    ap.add_argument("--temperature", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cloze", type=Path, default=corpus.ROOT / "assets" / "cloze" / "everyday.tsv")
    return ap


if __name__ == "__main__":
    print(json.dumps(run(parser().parse_args())))
