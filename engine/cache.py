"""The engine's one cache of computed results: encodings, projections and the app's analyses,
with encodings optionally kept on disk too (EncodingStore).

One owner (the Engine), one lock, one identity per entry: a tuple naming what was computed and
from what (model id, sentences, target, pooling, method, seed ...). The app keys its analyses
the same way, so a result computed for one page or one session is reused by every other.

Entries are shared between callers and threads, so every numpy array stored is made read-only:
a caller that wants to change one must copy it first, and an accidental in-place edit raises
instead of silently corrupting what the next caller gets.

The cache is bounded in entries and in bytes (CTXLENS_RESULT_CACHE_MB, default 1024): one long
sentence's attention maps alone take hundreds of MB (SmolLM2-135M, 600 tokens: 30 layers x 9
heads x 600² float32 = 370 MB), so a bound in entries alone would let memory grow without limit.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Hashable

import numpy as np

RESULT_CACHE_ENV = "CTXLENS_RESULT_CACHE_MB"
RESULT_CACHE_MB = 1024


def result_cache_bytes() -> int:
    """The result cache's bound in bytes: CTXLENS_RESULT_CACHE_MB, default 1024."""
    from engine.errors import EngineError

    raw = os.environ.get(RESULT_CACHE_ENV, str(RESULT_CACHE_MB)).strip()
    try:
        mb = float(raw)
    except ValueError:
        raise EngineError(f"{RESULT_CACHE_ENV}={raw!r} is not a number of megabytes") from None
    return max(0, int(mb * 2**20))


def nbytes(value: Any, seen: set[int] | None = None) -> int:
    """The bytes a result holds in memory: its numpy arrays and strings, reached through
    dataclass fields, tuples, lists and dicts; an array two fields share is counted once, a view
    as if it were a copy (an upper bound). Arrays mapped from a file (an opened corpus index)
    are the page cache's, not counted."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        return 0 if _mapped(value) else value.nbytes
    if isinstance(value, (str, bytes)):
        return len(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(nbytes(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v, seen) for v in value)
    if isinstance(value, dict):
        return sum(nbytes(v, seen) for v in value.values())
    return 0


def _mapped(arr: np.ndarray) -> bool:
    while arr is not None:
        if isinstance(arr, np.memmap):
            return True
        base = arr.base
        if isinstance(base, mmap.mmap):
            return True
        arr = base if isinstance(base, np.ndarray) else None
    return False


def freeze(value: Any) -> Any:
    """Mark every numpy array reachable through dataclass fields, tuples, lists and dicts
    read-only (in place); returns `value`."""
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            freeze(getattr(value, f.name))
    elif isinstance(value, (tuple, list)):
        for v in value:
            freeze(v)
    elif isinstance(value, dict):
        for v in value.values():
            freeze(v)
    return value


class ResultCache:
    """A thread-safe LRU of computed results, bounded by entries (`size`) and by the bytes
    their arrays hold (`max_bytes`, default result_cache_bytes()); the least recently used
    go first, and a result larger than the whole bound is returned but not kept. Concurrent
    requests for the same missing key compute it once: the first caller computes, the others
    wait for its result (several sessions opening the same preset run each model once, not
    once per session)."""

    def __init__(self, size: int = 512, max_bytes: int | None = None):
        self.size = size
        self.max_bytes = result_cache_bytes() if max_bytes is None else max_bytes
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._bytes: dict[Hashable, int] = {}
        self.nbytes = 0                     # bytes held by the entries, <= max_bytes
        self._pending: dict[Hashable, threading.Event] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes.clear()
            self.nbytes = 0

    def drop_where(self, match: Callable[[Hashable], bool]) -> int:
        """Drop every entry whose key `match`es; returns how many went."""
        with self._lock:
            gone = [k for k in self._items if match(k)]
            for k in gone:
                self._drop(k)
        return len(gone)

    def get(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                self.hits += 1
                return self._items[key]
        return default

    def put(self, key: Hashable, value: Any) -> Any:
        if self.size <= 0:          # nothing is kept, so nothing is shared: no need to freeze
            return value
        freeze(value)
        size = nbytes(value)
        with self._lock:
            self._drop(key)
            if size > self.max_bytes:
                return value
            self._items[key] = value
            self._bytes[key] = size
            self.nbytes += size
            while len(self._items) > self.size or self.nbytes > self.max_bytes:
                self._drop(next(iter(self._items)))
        return value

    def _drop(self, key: Hashable) -> None:
        if key in self._items:
            del self._items[key]
            self.nbytes -= self._bytes.pop(key)

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        while True:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    self.hits += 1
                    return self._items[key]
                waiting = self._pending.get(key)
                if waiting is None:
                    self._pending[key] = threading.Event()
                    self.misses += 1
                    break
            waiting.wait()   # another thread computes it; then look again (it may have failed)
        try:
            return self.put(key, compute())
        finally:
            with self._lock:
                self._pending.pop(key).set()


class EncodingStore:
    """Encodings kept on disk between processes, so a page opened again (the app's default
    preset at every start) is drawn without importing torch or loading a model.

    One file per encoding, named by a hash of everything the encoding depends on (the caller's
    key: model files, library and engine versions, text, words, options); a file that cannot be
    read, or that describes another text, is a miss and is removed. Files are written whole and
    renamed into place, and the folder is held under `max_bytes` by dropping the files least
    recently read. Arrays are read with allow_pickle=False: a file here is data, never code.
    """

    def __init__(self, folder: Path, max_bytes: int):
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._total: int | None = None      # bytes in the folder, counted on the first write

    @staticmethod
    def name(key: tuple) -> str:
        return hashlib.sha256(repr(key).encode()).hexdigest()[:32]

    def _path(self, key: tuple) -> Path:
        return self.folder / f"{self.name(key)}.npz"

    def exists(self, key: tuple) -> bool:
        return self._path(key).is_file()

    def get(self, key: tuple, expect_text: str, expect_words: tuple[str, ...]):
        from engine.result import Encoding

        path = self._path(key)
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                enc = Encoding(
                    model_id=meta["model_id"], family=meta["family"], text=meta["text"],
                    words=tuple(meta["words"]), tokens=tuple(meta["tokens"]),
                    token_to_word=z["token_to_word"], hidden_states=z["hidden_states"],
                    attentions=z["attentions"] if "attentions" in z.files else None,
                    layer_names=tuple(meta["layer_names"]))
        except FileNotFoundError:
            return None
        except Exception:  # noqa: BLE001 - a torn or foreign file: compute again
            path.unlink(missing_ok=True)
            return None
        if enc.text != expect_text or enc.words != tuple(expect_words):
            path.unlink(missing_ok=True)
            return None
        try:
            os.utime(path)              # read recently: pruned last
        except OSError:
            pass
        return enc

    def put(self, key: tuple, enc) -> None:
        if nbytes(enc) > self.max_bytes:
            return                      # a file over the whole cap would be pruned at once
        meta = {"model_id": enc.model_id, "family": enc.family, "text": enc.text,
                "words": list(enc.words), "tokens": list(enc.tokens),
                "layer_names": list(enc.layer_names)}
        arrays = {"meta": np.array(json.dumps(meta)), "token_to_word": enc.token_to_word,
                  "hidden_states": enc.hidden_states}
        if enc.attentions is not None:
            arrays["attentions"] = enc.attentions
        target = self._path(key)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".enc-", suffix=".npz", dir=self.folder)
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            size = os.path.getsize(tmp)
            os.replace(tmp, target)
        except OSError:                 # a full or read-only disk: the result is still returned
            return
        with self._lock:
            if self._total is None:
                self._total = sum(p.stat().st_size for p in self.folder.glob("*.npz"))
            else:
                self._total += size
            if self._total > self.max_bytes:
                self._prune()

    def _prune(self) -> None:
        """Drop the least recently read files until the folder is at 3/4 of its cap."""
        files = []
        for p in self.folder.glob("*.npz"):
            try:
                st = p.stat()
            except OSError:
                continue
            files.append((st.st_mtime_ns, st.st_size, p))
        files.sort()
        total = sum(s for _, s, _ in files)
        for _, size, p in files:
            if total <= self.max_bytes * 3 // 4:
                break
            p.unlink(missing_ok=True)
            total -= size
        self._total = total
