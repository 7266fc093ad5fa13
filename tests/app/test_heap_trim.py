"""#47 finding 2: what a long sentence's run freed goes back to the system a few seconds after
the last run (glibc kept it in its heaps: the server stayed ~1 GB above what it holds)."""
import ctypes
import os
import threading

import pytest

from app import engine_access
from tests.app.helpers import no_failures, page


def test_freed_heap_memory_is_handed_back_once_after_a_burst_of_runs(monkeypatch):
    """Each run asks for a trim TRIM_DELAY_S later; a later run cancels the earlier one's, so
    a burst of runs trims once, after the last. Checked on the timers themselves, not on how
    long a sleep lasts on shared cores."""
    timers, trims, done = [], [], threading.Event()
    real_timer = threading.Timer

    class Recorded(real_timer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            timers.append(self)

    monkeypatch.setattr(engine_access.threading, "Timer", Recorded)
    monkeypatch.setattr(engine_access, "TRIM_DELAY_S", 0.05)
    monkeypatch.setattr(engine_access, "trim_heap", lambda: trims.append(1) or done.set())
    for _ in range(3):
        engine_access.trim_heap_soon()
    assert done.wait(10)
    for t in timers:          # a timer not cancelled would run its trim before it ends
        t.join(10)
    assert len(timers) == 3 and [t.interval for t in timers] == [0.05] * 3
    assert len(trims) == 1


@pytest.mark.usefixtures("tiny_engine")
def test_every_page_run_asks_for_a_trim(monkeypatch):
    asked = []
    monkeypatch.setattr(engine_access, "trim_heap_soon", lambda: asked.append(1))
    at = page("attention").run()
    no_failures(at)
    at.run()
    assert len(asked) == 2


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_trim_hands_freed_heap_memory_back_to_the_system():
    """32 MB of small blocks freed in the middle of glibc's heap (a block allocated after them
    keeps the heap's top in use) stay resident until trim_heap() returns them: what the
    server's heap did after a long sentence's run (Linux with glibc, as the server runs)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n, size = 2048, 16 * 1024              # well under glibc's mmap threshold: heap blocks
    blocks = [libc.malloc(size) for _ in range(n)]
    for b in blocks:
        ctypes.memset(b, 1, size)          # touched, so resident
    pin = libc.malloc(64)
    try:
        for b in blocks:
            libc.free(b)
        freed = _resident_bytes()
        assert engine_access.trim_heap() is True
        returned = freed - _resident_bytes()
    finally:
        libc.free(pin)
    assert returned >= 0.75 * n * size, f"{returned / 2**20:.1f} MB came back of 32 MB freed"
