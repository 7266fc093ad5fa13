"""Hooks on a model's modules for the calling thread only: the app's sessions share one loaded
model, and another session's forward pass on it meanwhile must run as if no hook were there.
Every view that reads or rewrites what a module computes (the HF families' parts, their
layers read one by one, their output head, ELMo's char CNN, the component views) goes
through `on_this_thread`."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable

# what a hook is on: before the module runs, fn(module, args, kwargs) -> None or the (args,
# kwargs) to call it with instead; after it, fn(module, args, output) -> None or the output
# to use instead
BEFORE, AFTER = "before", "after"
Hook = tuple[object, str, Callable]


@contextmanager
def on_this_thread(*hooks: Hook):
    """While inside, each (module, BEFORE | AFTER, fn) runs on forward passes of this thread;
    on another thread's the module runs as it is."""
    me = threading.get_ident()
    handles = []

    def guarded(fn):
        return lambda *args: fn(*args) if threading.get_ident() == me else None

    try:
        for module, when, fn in hooks:
            if when == BEFORE:
                handles.append(module.register_forward_pre_hook(guarded(fn), with_kwargs=True))
            elif when == AFTER:
                handles.append(module.register_forward_hook(guarded(fn)))
            else:
                raise ValueError(f"a hook runs {BEFORE!r} or {AFTER!r} a module, not {when!r}")
        yield
    finally:
        for h in handles:
            h.remove()
