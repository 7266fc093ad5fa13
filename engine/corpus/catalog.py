"""Where the app looks for indexes: CTXLENS_INDEX_DIRS (os.pathsep-separated) and the user
cache (CTXLENS_CACHE/indexes, by default ~/.cache/ctxlens/indexes); an index is any subfolder
with a manifest.json. The app reads and builds indexes only here, never at a path typed into
the browser."""
from __future__ import annotations

import os
from pathlib import Path

from engine.corpus.manifest import Manifest
from engine.errors import EngineError
from engine.registry import cache_dir

# the app's own indexes live with the rest of ctxlens's cache (CTXLENS_CACHE)
DEFAULT_DIR = cache_dir() / "indexes"
# the model the Corpus page offers first to index Brown with, as `make index` does (the
# Makefile's INDEX_MODEL): the bundled real pretrained encoder
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


# Brown as the engine splits it into words (the rows of one layer table; results/corpus.md)
BROWN_OCCURRENCES = 1_156_281
# every layer for a model up to this many; a deeper one (smollm2-135m: 31, 41 GB at every
# layer) gets this many, evenly spaced from the embedding layer to the top
DEFAULT_MAX_LAYERS = 7


def default_layers(n_states: int) -> list[int]:
    """The layers a Brown index of a model with n_states hidden states (embedding layer
    included) holds unless the user picks others."""
    if n_states <= DEFAULT_MAX_LAYERS:
        return list(range(n_states))
    step = (n_states - 1) / (DEFAULT_MAX_LAYERS - 1)
    return sorted({round(i * step) for i in range(DEFAULT_MAX_LAYERS)})


def bytes_per_row(dim: int) -> int:
    """About what one occurrence at one layer takes on disk: its float16 vector, its 1-bit
    RaBitQ code in the ANN index, and 37 bytes of the other columns and indexes (fitted on the
    Brown index of minilm-l6, 853 bytes at 384 dims)."""
    return 2 * dim + dim // 8 + 37


def free_bytes(folder: Path) -> int:
    """Free space on the disk that `folder` is (or would be) on."""
    import shutil

    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return shutil.disk_usage(folder).free


def brown_index_bytes(n_layers: int, dim: int) -> int:
    """About what a Brown index of n_layers layers of dim dimensions takes on disk."""
    return BROWN_OCCURRENCES * n_layers * bytes_per_row(dim)


def brown_index_models(registry) -> list[str]:
    """Every installed model can index Brown (all families give hidden states): the one the
    page suggests first, then the rest in the registry's order."""
    from engine.registry import availability

    usable = [mid for mid, e in registry.items() if availability(e) in ("bundled", "installed")]
    return sorted(usable, key=lambda mid: mid != BROWN_INDEX_MODEL)


def brown_index_path(model_id: str, layers=None, n_states: int | None = None) -> Path:
    """Where the Corpus page (and `make index`) builds Brown for a bundled model: brown-MODEL
    for every layer (layers None, or all n_states of them), brown-MODEL-L0-5-10 for some, so
    two choices of layers never meet in one folder."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model_id)
    chosen = sorted(set(layers)) if layers is not None else None
    if chosen is None or (n_states is not None and chosen == list(range(n_states))):
        return DEFAULT_DIR / f"brown-{safe}"
    return DEFAULT_DIR / f"brown-{safe}-L{'-'.join(map(str, chosen))}"
