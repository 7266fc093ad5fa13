"""Results files shared by the benchmarks: a run over some models updates theirs only."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def merge(path: Path, fresh: list[dict], key: Callable[[dict], object]) -> list[dict]:
    """The results stored at `path` with every entry that `fresh` re-measured (same key)
    replaced in place, and fresh entries the file did not have appended: `--models a,b`
    re-runs two models without dropping the others' stored results."""
    old = json.loads(path.read_text()) if path.exists() else []
    new = {key(r): r for r in fresh}
    out = [new.pop(key(r), r) for r in old]
    return out + [r for r in fresh if key(r) in new]
