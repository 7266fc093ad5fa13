"""Where the app looks for indexes: CTXLENS_INDEX_DIRS (os.pathsep-separated) and the user
cache; an index is any subfolder with a manifest.json. The app reads and builds indexes only
here, never at a path typed into the browser."""
from __future__ import annotations

import os
from pathlib import Path

from engine.corpus.index import Manifest
from engine.errors import EngineError

DEFAULT_DIR = Path.home() / ".cache" / "ctxlens" / "indexes"
# the model the Corpus page offers to index Brown with, as `make index` does (the Makefile's
# INDEX_MODEL): the bundled real pretrained encoder
BROWN_INDEX_MODEL = "minilm-l6"


def index_dirs() -> list[Path]:
    dirs = [Path(d.strip()).expanduser() for d in
            os.environ.get("CTXLENS_INDEX_DIRS", "").split(os.pathsep) if d.strip()]
    return dirs + [DEFAULT_DIR]


def list_indexes() -> list[tuple[Path, Manifest]]:
    out = []
    for root in index_dirs():
        if not root.is_dir():
            continue
        for d in sorted(p for p in root.iterdir() if (p / "manifest.json").is_file()):
            try:
                out.append((d, Manifest.read(d)))
            except (EngineError, ValueError, TypeError):
                continue                       # another format or a damaged manifest
    return out


def brown_index_model(registry) -> str | None:
    """BROWN_INDEX_MODEL when it is installed, else the registry's first installed model (every
    family gives hidden states, all an index needs); None when no model is installed."""
    from engine.registry import availability

    usable = [mid for mid, e in registry.items() if availability(e) in ("bundled", "installed")]
    if BROWN_INDEX_MODEL in usable:
        return BROWN_INDEX_MODEL
    return usable[0] if usable else None


def brown_index_path(model_id: str) -> Path:
    """Where the Corpus page (and `make index`) builds Brown for a bundled model."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_id)
    return DEFAULT_DIR / f"brown-{safe}"
