"""The app's door to corpus indexes (engine/corpus): the complete indexes in the configured
folders, Brown index builds of the app's own, the queries the Corpus page and the grid's side
panel ask, and what a read-only server refuses.

An opened index (engine.corpus.query.CorpusIndex: memory-mapped layer tables) is a resource,
one per folder and build, shared by every session (st.cache_resource). What is read from it
is a result like any other, in the Engine's cache under ("corpus-index", its name, the folder,
...), so deleting one index drops that index's results and no other's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import streamlit as st

from app.engine_access import READ_ONLY_ENV, changes_allowed, engine_cached, get_engine
from engine.analysis import projection, senses
from engine.errors import EngineError
from engine.result import LayerShape

# the first item of every key read from an index (engine_cached's kind); the folder is next
INDEX_RESULT = "corpus-index"

READ_ONLY_NOTE = ("This server builds and deletes no corpus indexes from the browser "
                  f"({READ_ONLY_ENV} is set): build them with 'make index' on the server.")

index_changes_allowed = changes_allowed


def from_index(spinner: str | None = None):
    """engine_cached for a result read from the index whose folder is the first argument."""
    return engine_cached(spinner, kind=INDEX_RESULT)


def corpus_indexes():
    """Complete indexes in the configured folders. Keyed by the manifests' modification
    times, so a rerun reads no JSON unless an index was added or finished since."""
    from engine.corpus.catalog import index_dirs, list_indexes

    stamps = []
    for root in index_dirs():
        if root.is_dir():
            stamps += [(str(m), m.stat().st_mtime_ns) for m in root.glob("*/manifest.json")]
    return get_engine().cached(("corpus-indexes", tuple(sorted(stamps))),
                               lambda: [(p, m) for p, m in list_indexes() if m.complete])


# -- Brown indexes of the app's own ----------------------------------------------------------------

def brown_index_models() -> list[str]:
    from engine.corpus.catalog import brown_index_models as models

    return models(get_engine().registry)


@engine_cached("Loading the model …")
def layer_shape(model_id: str) -> LayerShape:
    # one short sentence through the engine: the same names and width the index's manifest
    # records (it probes its first sentence the same way)
    enc = get_engine().encode(model_id, ["The bank ."])[0]
    return LayerShape(tuple(enc.layer_names), int(enc.hidden_states.shape[-1]))


def brown_index_path(model_id: str, layers=None, n_states: int | None = None):
    from engine.corpus.catalog import brown_index_path as path

    return path(model_id, layers, n_states)


def brown_default_layers(n_states: int) -> tuple[list[int], int]:
    """The layers a Brown index of a model with `n_states` takes unless others are chosen,
    and the most it takes by default (every layer up to that many, else that many evenly
    spaced)."""
    from engine.corpus.catalog import DEFAULT_MAX_LAYERS, default_layers

    return default_layers(n_states), DEFAULT_MAX_LAYERS


def brown_index_bytes(n_layers: int, dim: int) -> int:
    """About the bytes on disk of a Brown index of `n_layers` layers of width `dim`."""
    from engine.corpus.catalog import brown_index_bytes as size

    return size(n_layers, dim)


def free_bytes(folder) -> int:
    """Bytes free on the disk that holds (or will hold) `folder`."""
    from engine.corpus.catalog import free_bytes as free

    return free(folder)


def brown_index_state(folder) -> str:
    """"new", "partial" (a build stopped before the end: building continues it) or
    "complete" for the app's Brown index in `folder` (brown_index_path)."""
    from engine.corpus.manifest import Manifest

    try:
        return "complete" if Manifest.read(Path(folder)).complete else "partial"
    except (EngineError, ValueError, TypeError):      # none yet, or an older format (rebuilt)
        return "new"


def _refuse_index_changes() -> None:
    if not index_changes_allowed():
        raise EngineError(READ_ONLY_NOTE)


def build_brown_index(model_id: str, layers, folder, on_progress) -> None:
    from engine.corpus.index import build

    _refuse_index_changes()
    # the folder is the app's own: an index of an older format there is built again
    build(model_id, "brown", folder, layers=list(layers), progress=False, engine=get_engine(),
          on_progress=on_progress, replace_older=True)


def app_owned(folder: str) -> bool:
    """An index the app built (under its own folder), which it may delete; never one of the
    user's CTXLENS_INDEX_DIRS."""
    from engine.corpus import catalog

    return catalog.DEFAULT_DIR.resolve() in Path(folder).resolve().parents


def remove_index(folder: str) -> None:
    """Delete one of the app's indexes, the opened index and the results read from it; every
    other index's results stay (the Engine's cache is every session's)."""
    from engine.corpus.index import remove

    _refuse_index_changes()
    if not app_owned(folder):
        raise EngineError(f"{folder} is not one of the app's own indexes: delete it yourself")
    path = Path(folder).resolve()
    built = _built(path)
    remove(path)
    # what was read maps the deleted files: dropped, so their disk space is freed
    _opened.clear(str(path), built)
    get_engine().forget(lambda key: key[0] == INDEX_RESULT and Path(key[2]).resolve() == path)


# -- reading an index -----------------------------------------------------------------------------

def _built(path: Path) -> int:
    """When the index in `path` was last written (its manifest's time): a folder built again
    is opened again."""
    try:
        return (path / "manifest.json").stat().st_mtime_ns
    except OSError:
        return 0


@st.cache_resource(show_spinner=False, max_entries=32)
def _opened(path: str, built: int):
    from engine.corpus.query import CorpusIndex

    return CorpusIndex(Path(path))


def _index(folder: str):
    """The opened index in `folder`, one per folder and build for the whole server."""
    from engine.corpus.catalog import index_dirs

    path = Path(folder).resolve()
    if not any(d.resolve() in path.parents for d in index_dirs()):
        raise EngineError(f"{folder} is not under a configured index folder")
    return _opened(str(path), _built(path))


def corpus_manifest(folder: str):
    return _index(folder).manifest


@from_index("Reading the index …")
def corpus_occurrences(folder: str, word: str, layer: int, limit: int):
    return _index(folder).occurrences(word, layer, limit)


@from_index()
def corpus_count(folder: str, word: str, layer: int) -> int:
    return _index(folder).count(word, layer)


@from_index()
def corpus_texts(folder: str, ids: tuple[int, ...]) -> dict:
    return _index(folder).texts(ids)


@from_index("Clustering …")
def corpus_clusters(folder: str, word: str, layer: int, limit: int) -> np.ndarray:
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    return senses.suggest_senses(vec, k=None)


@from_index("Projecting …")
def corpus_projection(folder: str, word: str, layer: int, limit: int, method: str):
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    return projection.project(np.ascontiguousarray(vec[None]), method=method, seed=0).coords[0]


@from_index("Searching the corpus …")
def corpus_neighbours_of(folder: str, word: str, layer: int, limit: int, point: int, k: int):
    """Nearest contexts of point `point` of a word's map (corpus_occurrences with the same
    arguments); itself comes first. Its vector is the map's, already read: looking the row up
    again by sentence and position would scan the whole layer table (15-54 ms on Brown)."""
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    if not 0 <= point < len(vec):
        raise EngineError("that point is not on the map any more; click it again")
    return _index(folder).search(vec[point], layer, k)


@from_index("Reading every layer …")
def corpus_layer_occurrences(folder: str, word: str, limit: int):
    """The same occurrences at every layer of the index: ([layers, n, dim], ids, positions)."""
    return _index(folder).occurrences_at_layers(word, None, limit)


@from_index("Projecting every layer …")
def corpus_grid_projection(folder: str, word: str, limit: int, method: str) -> np.ndarray:
    """[layers, n, 2]: every layer's projection, aligned across layers as the Layers side by
    side page aligns them (engine/analysis/projection.py)."""
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    return projection.project(np.ascontiguousarray(vec), method=method, seed=0).coords


@from_index("Clustering …")
def corpus_grid_clusters(folder: str, word: str, limit: int, layer: int) -> np.ndarray:
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    return senses.suggest_senses(vec[_index(folder).manifest.layers.index(layer)], k=None)


@from_index("Searching the corpus …")
def corpus_grid_neighbours_of(folder: str, word: str, limit: int, point: int, panel: int,
                              k: int):
    """Nearest contexts of one point of the grid, at its panel's layer; itself comes first."""
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    if not (0 <= panel < vec.shape[0] and 0 <= point < vec.shape[1]):
        raise EngineError("that point is not on the map any more; click it again")
    return _index(folder).search(vec[panel, point], _index(folder).manifest.layers[panel], k)


@from_index("Searching the corpus …")
def corpus_search(folder: str, text: str, word: str, layer: int, k: int):
    from engine.corpus.query import neighbours

    return neighbours(get_engine(), _index(folder), text, word, layer, k)
