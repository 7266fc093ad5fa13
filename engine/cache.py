"""The engine's one cache of computed results: encodings, projections and the app's analyses.

One owner (the Engine), one lock, one identity per entry: a tuple naming what was computed and
from what (model id, sentences, target, pooling, method, seed ...). The app keys its analyses
the same way, so a result computed for one page or one session is reused by every other.

Entries are shared between callers and threads, so every numpy array stored is made read-only:
a caller that wants to change one must copy it first, and an accidental in-place edit raises
instead of silently corrupting what the next caller gets.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np


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
    """A thread-safe LRU of computed results. Concurrent requests for the same missing key
    compute it once: the first caller computes, the others wait for its result (several
    sessions opening the same preset run each model once, not once per session)."""

    def __init__(self, size: int = 512):
        self.size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
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
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

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
