"""The engine's one result cache: LRU, read-only entries, one computation per key."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np
import pytest

from engine.cache import ResultCache


@dataclass(frozen=True)
class Result:
    coords: np.ndarray
    parts: tuple


def test_least_recently_used_entries_are_dropped_first():
    cache = ResultCache(size=2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1          # "a" is now the most recent
    cache.put("c", 3)
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2


def test_stored_arrays_are_read_only_however_deep():
    value = Result(np.zeros(3), (np.ones(2), {"x": np.arange(3)}))
    cache = ResultCache()
    cache.put("k", value)
    for arr in (value.coords, value.parts[0], value.parts[1]["x"]):
        with pytest.raises(ValueError):
            arr[0] = 5


def test_concurrent_requests_for_one_key_compute_it_once():
    cache = ResultCache()
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return np.arange(4)

    out = [None] * 6
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(
        i, cache.get_or_compute("key", slow))) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(o is out[0] for o in out)
    assert cache.misses == 1 and cache.hits == 5


def test_a_failed_computation_is_not_cached_and_frees_the_waiters():
    cache = ResultCache()
    with pytest.raises(RuntimeError):
        cache.get_or_compute("k", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert "k" not in cache
    assert cache.get_or_compute("k", lambda: 7) == 7


def test_size_zero_keeps_nothing():
    cache = ResultCache(size=0)
    assert cache.get_or_compute("k", lambda: 1) == 1 and len(cache) == 0


def test_the_engine_caches_encodings_read_only(zoo, tmp_path, monkeypatch):
    from engine.api import Engine

    path = zoo.copy("bert", tmp_path / "bert", masked_lm=False)
    monkeypatch.setenv("CTXLENS_MODEL_DIRS", str(tmp_path))
    engine = Engine(device="cpu")
    first = engine.encode(str(path), ["the cat sat"])[0]
    assert engine.encode(str(path), ["the cat sat"])[0] is first
    with pytest.raises(ValueError):
        first.hidden_states[0, 0, 0] = 1.0


MB = 2**20


def test_filling_past_the_byte_bound_drops_the_oldest_and_stays_within_it():
    cache = ResultCache(size=512, max_bytes=10 * MB)
    for i in range(8):                  # 8 x 3 MB: only the newest three fit in 10 MB
        cache.put(i, Result(np.zeros(3 * MB, np.uint8), ("a label",)))
        assert cache.nbytes <= 10 * MB
    assert [i for i in range(8) if i in cache] == [5, 6, 7]
    assert cache.nbytes == 3 * (3 * MB + len("a label"))


def test_a_result_larger_than_the_bound_is_returned_but_not_kept():
    cache = ResultCache(max_bytes=MB)
    cache.put("small", np.zeros(1000, np.uint8))
    big = np.zeros(2 * MB, np.uint8)
    assert cache.get_or_compute("big", lambda: big) is big
    assert "big" not in cache and "small" in cache and cache.nbytes == 1000


def test_replacing_an_entry_counts_its_bytes_once():
    cache = ResultCache(max_bytes=10 * MB)
    cache.put("k", np.zeros(MB, np.uint8))
    cache.put("k", np.zeros(2 * MB, np.uint8))
    assert len(cache) == 1 and cache.nbytes == 2 * MB
    cache.clear()
    assert cache.nbytes == 0


def test_an_array_shared_by_two_fields_counts_once_and_a_mapped_one_not_at_all(tmp_path):
    from engine.cache import nbytes

    shared = np.zeros(1000, np.float32)
    assert nbytes(Result(shared, (shared, {"x": shared}))) == 4000
    np.save(tmp_path / "a.npy", np.zeros(1000, np.float32))
    assert nbytes(np.load(tmp_path / "a.npy", mmap_mode="r")[10:]) == 0


def test_the_bound_is_read_from_the_environment(monkeypatch):
    from engine.cache import result_cache_bytes
    from engine.errors import EngineError

    monkeypatch.delenv("CTXLENS_RESULT_CACHE_MB", raising=False)
    assert ResultCache().max_bytes == 1024 * MB
    monkeypatch.setenv("CTXLENS_RESULT_CACHE_MB", "64")
    assert ResultCache().max_bytes == 64 * MB
    monkeypatch.setenv("CTXLENS_RESULT_CACHE_MB", "lots")
    with pytest.raises(EngineError, match="CTXLENS_RESULT_CACHE_MB"):
        result_cache_bytes()
