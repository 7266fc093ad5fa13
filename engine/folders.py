"""The atomic write of a cache folder, shared by every cache the engine writes from a model's
files (converted GGUF models, traced graphs): standard library only, so that a family may use it."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

STALE_TMP_S = 3600            # a cache write this old was abandoned by a killed process


def publish(final: Path, write: Callable[[Path], None], marker: str) -> bool:
    """Write a cache folder atomically: `write(folder)` fills a temporary folder beside `final`,
    which is renamed into place only when complete, so an interruption never leaves half a
    folder; older siblings (other keys of the same item) and temporary folders abandoned by
    killed processes are removed. `marker` is the file whose presence says a folder is
    complete. False when another process published first."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=final.parent))
    won = True
    try:
        write(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / marker).exists():        # not a lost race with another process
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            won = False
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    now = time.time()
    for old in final.parent.iterdir():
        if old == final or not old.is_dir():
            continue
        # a temporary folder is another process's write in progress, unless it is old: then
        # its writer was killed (a conversion takes under a minute)
        if not old.name.startswith(".tmp-") or now - old.stat().st_mtime > STALE_TMP_S:
            shutil.rmtree(old, ignore_errors=True)
    return won
