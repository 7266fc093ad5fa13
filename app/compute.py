"""The app's only door to the engine: one Engine per server, and its one result cache.

st.cache_resource holds the Engine. Derived results (target vectors, projections, separations,
layer metrics) are stored in the Engine's own cache (engine/cache.py) under a key naming the
function and its plain arguments, the same identity the engine uses: one owner with a lock, one
copy shared by every session, and moving a slider re-renders without re-running a model or a
projection. Cached numpy arrays are read-only; copy one before changing it.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import streamlit as st

from app.safe import safe_md
from engine.analysis import attention as att_analysis
from engine.analysis import geometry, occurrences as occ_analysis, projection, senses
from engine.analysis.model_cka import ModelCKA, compare_models
from engine.analysis.vectors import identical_groups, unit_rows
from engine.api import Engine, encoding_store
from engine.errors import EngineError, NeedsDownload, UnsupportedPrediction
from engine.families import FAMILIES, Family
from engine.registry import availability, canonical_id, catalogue
from engine.registry import default_model as registry_default
from engine.result import Encoding
from engine.text import occurrences_of, split_words



@st.cache_resource(show_spinner=False)
def get_engine():
    # encodings kept on disk too: a page opened again after a restart (the default preset at
    # every start) is drawn without loading a model
    # the page shows its own progress while a model loads; transformers' "Loading weights"
    # bars would only fill the server's terminal, once per model at every start
    return Engine(store=encoding_store(), library_bars=False)


def engine_cached(spinner: str | Callable[..., str] | None = None):
    """Cache a function's result in the Engine's result cache, keyed by its name and its
    (hashable) arguments; `spinner` (a text, or a function of the arguments giving one) is
    shown while a missing result is computed."""
    def wrap(fn):
        @functools.wraps(fn)
        def cached(*args, **kwargs):
            eng = get_engine()
            key = ("app", fn.__name__, *args, *sorted(kwargs.items()))
            if spinner is None or key in eng.results:
                return eng.cached(key, lambda: fn(*args, **kwargs))
            # a spinner is markdown, and its text may name a model's path or a typed word
            text = spinner(*args, **kwargs) if callable(spinner) else spinner
            with st.spinner(safe_md(text)):
                return eng.cached(key, lambda: fn(*args, **kwargs))
        return cached
    return wrap


# glibc keeps what a long sentence's run freed (torch's temporaries, chart JSON, CSV bytes) in
# its heaps, so the server's RSS stays ~0.5-1 GB above what it holds (SmolLM2-135M, four
# 128-word Arabic sentences: 3.0 GB with 0.8 GB of results); malloc_trim hands it back. Once,
# a few seconds after the last run, so a burst of reruns or sessions trims once.
TRIM_DELAY_S = 5.0
_trim_lock = threading.Lock()
_trim_timer: threading.Timer | None = None


def trim_heap() -> bool:
    """Return freed heap memory to the system (glibc's malloc_trim); False where there is no
    glibc."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return False
    return True


def trim_heap_soon() -> None:
    """trim_heap() TRIM_DELAY_S after the last call."""
    global _trim_timer
    with _trim_lock:
        if _trim_timer is not None:
            _trim_timer.cancel()
        _trim_timer = threading.Timer(TRIM_DELAY_S, trim_heap)
        _trim_timer.daemon = True
        _trim_timer.start()


def available_models(family: str) -> list[str]:
    """The models of a family a user can pick without a download: the registry's installed
    ones, the default first, then the model folders under CTXLENS_MODEL_DIRS and the hub models
    in the local Hugging Face cache (the engine takes those paths and ids as model ids)."""
    first = default_model(family)
    listed = [(e.id, where) for e, where in _catalogue(*_catalogue_sources())
              if e.family == family
              and where in ("bundled", "installed", "folder", "in the Hugging Face cache")]
    registry = sorted((i for i, w in listed if w in ("bundled", "installed")),
                      key=lambda i: (i != first, i))
    return registry + [i for i, w in listed if w not in ("bundled", "installed")]


def _catalogue_sources() -> tuple[str, str]:
    """Where the catalogue looks (the model directories, the Hugging Face cache): its cache
    key, so that pointing either elsewhere lists what is there, not what was."""
    from engine.hub import cache_root

    return os.environ.get("CTXLENS_MODEL_DIRS", ""), str(cache_root())


@st.cache_data(ttl=10, show_spinner=False)
def _catalogue(model_dirs: str, hub_cache: str):
    # a folder copied in, or a model downloaded elsewhere, shows within seconds
    return catalogue(get_engine().registry)


def model_note(model_id: str) -> str:
    """What a model is, where a page shows it: the registry's `note` (the bundled models trained
    here say how little they read), else nothing."""
    entry = get_engine().entry(model_id)
    return entry.note if entry is not None else ""


def canonical_model(model_id: str) -> str:
    """The one spelling of a typed or linked model id (a folder's resolved path), or the id as
    given when it names no usable folder (model_problem then says why)."""
    try:
        return canonical_id(model_id, get_engine().registry)
    except EngineError:
        return model_id


@dataclass(frozen=True)
class ModelProblem:
    """Why a model id cannot be shown, in one line, and whether a download would fix it (the
    box then offers one): known from the error's type or the model's availability, never from
    the message's words."""

    why: str
    download: bool = False


def model_problem(model_id: str, family: str) -> ModelProblem | None:
    """Why a typed or linked model id cannot be shown in `family`'s box (None: it can): unknown,
    refused, another family's, or not downloaded yet."""
    if not downloads_allowed() and _resolving_fetches(model_id):
        return ModelProblem(NOT_ON_THIS_SERVER)
    try:
        entry = get_engine().resolved(model_id)
    except EngineError as err:
        return ModelProblem(str(err).strip().splitlines()[0], isinstance(err, NeedsDownload))
    if entry.family != family:
        what = entry.description or entry.family
        return ModelProblem(f"this is {FAMILIES[entry.family].a_label} model ({what}); pick it "
                            f"in the {FAMILIES[entry.family].label} model box")
    if availability(entry) == "needs network":
        pickled = _pickled_only(entry)
        if pickled:
            return ModelProblem(pickled)
        if not downloads_allowed():
            return ModelProblem(NOT_ON_THIS_SERVER)
        refused = _checked_download(model_id)[2]
        return ModelProblem(refused) if refused else ModelProblem(
            "this model needs a download from huggingface.co before it can be shown", True)
    from engine.checkpoint import problems
    from engine.registry import local_path

    # a folder typed or linked that the lists mark broken: said before a load is tried
    folder = local_path(entry)
    why = problems(folder) if folder is not None and not entry.base else None
    return ModelProblem(why) if why else None


def _pickled_only(entry) -> str | None:
    """Why a hub model whose cached files hold pickled weights only (no safetensors: the cache
    does not count it as downloaded) cannot be shown, else None."""
    from engine import hub
    from engine.checkpoint import pickled_only

    snap = hub._config_only(entry.hub) if entry.hub else None   # the cached snapshot, if any
    name = pickled_only(snap) if snap is not None else None
    return (f"its files hold pickled weights only ({name}), which can run code when read; "
            "ctxlens loads safetensors only") if name else None


def _resolving_fetches(model_id: str) -> bool:
    """Whether resolving the id would ask the hub: a hub id whose config is not cached here
    (engine.hub.kind fetches it into the cache to read what the model is)."""
    from engine import hub
    from engine.registry import is_path

    return (model_id not in get_engine().registry and not is_path(model_id)
            and hub.looks_like_repo_id(model_id) and not hub.config_cached(model_id))


@st.cache_data(ttl=30, show_spinner=False)
def _listing(repo_id: str, endpoint: str, hub_cache: str):
    """The hub's listing of a download (engine.hub.DownloadPlan), or the line saying why there
    is none (offline, no such repo). Every rerun of a page showing the model box asks, and an
    unreachable hub takes seconds to say so; the hub and the cache are part of the key."""
    from engine import hub

    try:
        return hub.plan(repo_id)
    except EngineError as err:
        return str(err)


def _checked_download(model_id: str):
    """(the download's plan, or None where the hub cannot list it; the dtype its model runs
    in here; the one line refusing it, or None), checked for the memory the model takes as
    this server's engine loads it."""
    from engine import hub

    options = get_engine().options
    try:
        repo = get_engine().resolved(model_id).hub or model_id
        dtype, device = hub.runs_in(options.device, options.dtype)
    except EngineError:         # offline and not cached: model_problem says so
        return None, "", None
    todo = _listing(repo, hub.endpoint(), str(hub.cache_root()))
    if isinstance(todo, str):     # why the hub lists nothing to fetch (pickled weights only, ...)
        return None, dtype, todo
    try:
        hub.check(todo, dtype, device, advice="a smaller model")
    except EngineError as err:
        return todo, dtype, str(err)
    return todo, dtype, None


def download_plan(model_id: str) -> str | None:
    """What a download of a hub model fetches and the memory its model takes ("3 files,
    498.5 MB; about 0.4 GB of memory in float32"), or None: offline, refused, or a read-only
    server."""
    if not downloads_allowed():
        return None
    todo, dtype, refused = _checked_download(model_id)
    if todo is None or refused:
        return None
    return f"{todo.size()}; {todo.memory(dtype)}"


def download(model_id: str, bar) -> None:
    """Fetch a hub model into the local cache, file by file on the page's progress bar,
    checked first as the command line's downloads are (engine.hub.snapshot)."""
    from engine import hub

    if not downloads_allowed():
        raise EngineError(NOT_ON_THIS_SERVER)

    def step(name: str, done: int, total: int) -> None:
        bar.progress(min(1.0, done / max(total, 1)),
                     text=f"{safe_md(name)}: {done / 2**20:,.1f} of {total / 2**20:,.1f} MB")

    options = get_engine().options
    hub.snapshot(get_engine().resolved(model_id).hub or model_id, progress=False, on_file=step,
                 device=options.device, dtype=options.dtype)
    _catalogue.clear()


def default_model(family: str) -> str | None:
    reg = get_engine().registry
    try:   # the registry's `default = true` model of the family, else its first installed one
        return registry_default(family, reg)
    except Exception:  # no model of this family here: the sidebar offers "(none)"
        return None


def family(model_id: str) -> str:
    return get_engine().family(model_id)


def encodings(model_id: str, sentences: tuple[str, ...],
              attentions: bool = False) -> list[Encoding]:
    """Encodings from the engine's cache (no Streamlit element here: cached callers); attention
    maps only for the views that show them."""
    return get_engine().encode(model_id, list(sentences), attentions=attentions)


def prepare(model_ids: list[str], sentences: tuple[str, ...]) -> None:
    """Load and run each model once with visible progress, so later cached calls are instant.
    The progress box disappears once the models are ready."""
    eng = get_engine()
    todo = [m for m in model_ids
            if not eng.is_loaded(m) and not eng.has_encodings(m, sentences)]
    if not todo:
        for m in model_ids:
            eng.encode(m, list(sentences))
        return
    box = st.empty()
    try:
        with box.status(f"Loading {safe_md(', '.join(todo))} …", expanded=False) as status:
            for m in model_ids:
                status.update(label=f"Loading and running {safe_md(m)} (first use takes a "
                                    "while) …")
                eng.encode(m, list(sentences))
    finally:
        box.empty()        # a model refused: its refusal is shown, not "Loading ..." above it


@dataclass(frozen=True, eq=False)
class TargetVectors:
    """The target word's vectors: [layers, n, dim] for the sentences listed in `rows`."""

    model_id: str
    vectors: np.ndarray
    rows: tuple[int, ...]
    missing: tuple[int, ...]
    layer_names: tuple[str, ...]
    repeated: tuple[int, ...] = ()   # sentences holding the target more than once
    positions: tuple[int, ...] = ()  # the target's word position in each of `rows`, from 0

    def index_columns(self) -> dict:
        """Which occurrence each point is: its sentence and word position, from 0 (as
        `ctxlens neighbours` counts them)."""
        return {"sentence_index": list(self.rows), "position": list(self.positions)}

    def occurrence_columns(self, pool: str, layer: str) -> dict:
        """What a point is, for a CSV that has to be read without the page: index_columns,
        model, layer and pooling."""
        return {**self.index_columns(), "model": self.model_id, "layer": layer, "pooling": pool}


def target_missing(sentences: tuple[str, ...], target: str) -> tuple[int, ...]:
    """The sentences without the target as a whole word, read without a model (every model's
    words are split alike, so a page can say it once)."""
    return tuple(i for i, s in enumerate(sentences)
                 if not occurrences_of(split_words(s).words, target))


@engine_cached()
def target_vectors(model_id: str, sentences: tuple[str, ...], target: str,
                   pool: str) -> TargetVectors:
    encs = encodings(model_id, sentences)
    rows, missing, vecs, repeated, positions = [], [], [], [], []
    for i, enc in enumerate(encs):
        at = occurrences_of(enc.words, target)
        if not at:
            missing.append(i)
            continue
        if len(at) > 1:
            repeated.append(i)
        w = at[0]
        rows.append(i)
        positions.append(w)
        vecs.append(enc.word_vectors(pool)[:, w])
    names = encs[0].layer_names
    arr = np.stack(vecs, axis=1) if vecs else np.zeros((len(names), 0, 1), np.float32)
    return TargetVectors(model_id, arr, tuple(rows), tuple(missing), names, tuple(repeated),
                         tuple(positions))


@engine_cached("Projecting …")
def project(model_id: str, sentences: tuple[str, ...], target: str, pool: str, method: str,
            seed: int = 0) -> projection.Projection:
    tv = target_vectors(model_id, sentences, target, pool)
    return get_engine().project(tv.vectors, method=method, seed=seed)


@engine_cached()
def occurrences(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                scope: str = "target") -> occ_analysis.Occurrences:
    """The target word's occurrences (scope "target") or every word's ("all"), all layers."""
    encs = encodings(model_id, sentences)
    return occ_analysis.collect(encs, pool, target if scope == "target" else None)


@engine_cached("Projecting every layer …")
def grid_projection(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                    scope: str, method: str, dims: int = 2,
                    keep: tuple[int, ...] | None = None) -> projection.Projection:
    """Aligned projections of every layer at once (engine/analysis/projection.py), of all
    occurrences or only those in `keep` (isolating a selection re-projects just it)."""
    occ = occurrences(model_id, sentences, target, pool, scope)
    vectors = occ.vectors if keep is None else occ.vectors[:, list(keep)]
    return get_engine().project(vectors, method=method, seed=0, dims=dims)


@engine_cached()
def neighbours(model_id: str, sentences: tuple[str, ...], target: str, pool: str, scope: str,
               index: int, layer: int, k: int = 5) -> list[occ_analysis.Neighbour]:
    occ = occurrences(model_id, sentences, target, pool, scope)
    return occ_analysis.nearest(occ.vectors[layer], index, k)


@engine_cached()
def attention_row(model_id: str, sentence: str, position: int, layer: int):
    """Attention from one word to every word of its sentence at `layer` (1 = the first
    attention layer), per head: ([heads, words], [heads] to special tokens, words); None for
    a model without attention maps."""
    enc = encodings(model_id, (sentence,), attentions=True)[0]
    if enc.attentions is None or not 1 <= layer <= enc.attentions.shape[0]:
        return None
    rows, special = att_analysis.word_row(enc.attentions[layer - 1], enc.token_to_word,
                                          position, len(enc.words), tokens=enc.tokens)
    return rows, special, enc.words


@engine_cached()
def separation(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
               labels: tuple[str, ...], unlabelled: str = "?") -> senses.SenseSeparation:
    """Silhouette and nearest-centroid accuracy over the LABELLED sentences only: an
    unlabelled sentence is not a sense of its own."""
    tv = target_vectors(model_id, sentences, target, pool)
    keep = [i for i, r in enumerate(tv.rows) if labels[r] != unlabelled]
    return senses.sense_separation(tv.vectors[:, keep], [labels[tv.rows[i]] for i in keep])


@dataclass(frozen=True, eq=False)
class SuggestedSenses:
    """A clustering of the target's top-layer vectors, offered as sense labels."""

    rows: tuple[int, ...]        # the sentences holding the target (TargetVectors.rows)
    clusters: np.ndarray         # [rows]: a cluster number per sentence, from 0
    quality: senses.SplitQuality


@engine_cached()
def suggested_senses(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                     k: int, method: str) -> SuggestedSenses:
    """k clusters of the target's vectors at the model's top layer (seeded: a repeat gives
    the same split)."""
    top = target_vectors(model_id, sentences, target, pool)
    found = senses.suggest_senses(top.vectors[-1], k=k, method=method)
    return SuggestedSenses(top.rows, found, senses.split_quality(top.vectors[-1], found))


@engine_cached()
def learned_mix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                labels: tuple[str, ...], do_layer_norm: bool = False) -> senses.LearnedMix:
    """ELMo's scalar mix fitted to separate `labels` (one per sentence of TargetVectors.rows);
    SenseError below two senses."""
    tv = target_vectors(model_id, sentences, target, pool)
    return senses.learn_mix(tv.vectors, list(labels), do_layer_norm=do_layer_norm)


@dataclass(frozen=True, eq=False)
class MixedVectors:
    """The target's vectors through one scalar mix, and how well they separate the senses."""

    vectors: np.ndarray                  # [rows, dim]: gamma * sum_j softmax(s)_j h_j
    coords: np.ndarray                   # [rows, 2]: their PCA
    separation: senses.SenseSeparation   # of the mix
    top_separation: senses.SenseSeparation   # of the top layer alone, for comparison
    one_point: bool                      # every occurrence has the same mixed vector


@engine_cached()
def scalar_mix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
               s: tuple[float, ...], gamma: float, do_layer_norm: bool,
               labels: tuple[str, ...]) -> MixedVectors:
    """The mix gamma * sum_j softmax(s)_j h_j (Peters et al. 2018, eq. 1) of the target's
    layers; `labels` name the sense of each sentence of TargetVectors.rows."""
    tv = target_vectors(model_id, sentences, target, pool)
    mixed = senses.scalar_mix(tv.vectors, np.array(s), gamma, do_layer_norm=do_layer_norm)
    return MixedVectors(
        mixed, projection.project(mixed[None], "pca").coords[0],
        senses.sense_separation(mixed[None], list(labels)),
        senses.sense_separation(tv.vectors[-1][None], list(labels)),
        [list(range(len(mixed)))] == identical_groups(mixed))


@engine_cached()
def cosine_matrix(model_id: str, sentences: tuple[str, ...], target: str, pool: str,
                  layer: int) -> np.ndarray:
    v = unit_rows(target_vectors(model_id, sentences, target, pool).vectors[layer])
    return v @ v.T


@engine_cached("Computing layer metrics …")
def layer_geometry(model_id: str, sentences: tuple[str, ...], pool: str):
    encs = encodings(model_id, sentences)
    metrics = geometry.layer_metrics(encs, pool=pool, seed=0)
    words = np.concatenate([e.word_vectors(pool) for e in encs], axis=1)
    return metrics, geometry.linear_cka_matrix(words)


@engine_cached("Comparing the two models' layers …")
def between_models(model_a: str, model_b: str, sentences: tuple[str, ...],
                   pool: str) -> ModelCKA:
    """Layer x layer CKA of two models on every word of the sentences, with bootstrap
    intervals over the sentences (EngineError below 2 sentences or 4 words)."""
    return compare_models(encodings(model_a, sentences), encodings(model_b, sentences), pool)


@engine_cached()
def head_stats(model_id: str, sentence: str) -> att_analysis.HeadStats | None:
    enc = encodings(model_id, (sentence,), attentions=True)[0]
    if enc.attentions is None:
        return None
    return att_analysis.head_stats(enc.attentions, enc.special_mask,
                                   FAMILIES[enc.family].left_to_right)


def query_key(model_id: str, text: str, layer: int):
    """engine.result.QueryKey (the Engine caches it)."""
    return get_engine().query_key(model_id, text, layer)


def _asking(kind: str, model_id: str, text: str, top_k: int = 10, sides: str = "both",
            rescore: bool = False) -> str:
    return (f"Asking {model_id}, then scoring each candidate's sentence …" if rescore
            else f"Asking {model_id} …")


@engine_cached(_asking)
def predict(kind: str, model_id: str, text: str, top_k: int = 10, sides: str = "both",
            rescore: bool = False):
    # cached like every page's results: a rerun with the same blank asks no model (a GPT's
    # re-ranked fill runs it once per candidate, seconds on a CPU)
    eng = get_engine()
    if kind == "masked":
        return eng.predict_masked(model_id, text, top_k=top_k, sides=sides, rescore=rescore)
    fn = {"next": eng.predict_next, "previous": eng.predict_previous}[kind]
    return fn(model_id, text, top_k=top_k)


@engine_cached(lambda model_id, text: f"Reading {model_id}'s layers …")
def logit_lens(model_id: str, text: str):
    return get_engine().logit_lens(model_id, text)


def family_rows() -> dict[str, Family]:
    """The engine's family table, in its order: what each family's models can do at most, and
    how pages name it (read at each call: a family may register late)."""
    return dict(FAMILIES)


def family_row(name: str) -> Family:
    return FAMILIES[name]


def capabilities(model_id: str) -> frozenset[str]:
    """What this model can do (engine.families.CAPABILITIES), as its entry says: its
    checkpoint's own set within its family's row, known before it loads."""
    return get_engine().resolved(model_id).capabilities


def cannot(model_id: str) -> Mapping[str, str]:
    """What this model's architecture rules out though its family can (capability -> why),
    said where the view would be."""
    return get_engine().resolved(model_id).cannot


def models_that(capability: str, current: str | None = None) -> list[str]:
    """Installed models that can do `capability` (local model folders and cached hub models
    included): `current` first when it can, then in the registry's fill_order
    (assets/models.toml: the best first), then the rest, by id."""
    eng = get_engine()
    able = [m for name, row in FAMILIES.items() if capability in row.capabilities
            for m in available_models(name) if capability in capabilities(m)]

    def rank(m: str) -> tuple:
        entry = eng.entry(m)
        order = entry.fill_order if entry is not None and entry.fill_order > 0 else 10 ** 6
        return (m != current, order, m)
    return sorted(able, key=rank)


# -- corpus mode (engine/corpus): indexes under the configured folders only ------------------

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


def brown_index_models() -> list[str]:
    from engine.corpus.catalog import brown_index_models as models

    return models(get_engine().registry)


@dataclass(frozen=True)
class LayerShape:
    """What a Brown index of a model would hold: its layers' names and width."""
    names: tuple[str, ...]
    dim: int


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
    "complete" for the app's Brown index in `folder` (compute.brown_index_path)."""
    from engine.corpus.index import Manifest

    try:
        return "complete" if Manifest.read(Path(folder)).complete else "partial"
    except (EngineError, ValueError, TypeError):      # none yet, or an older format (rebuilt)
        return "new"


READ_ONLY_ENV = "CTXLENS_READ_ONLY"


def index_changes_allowed() -> bool:
    """False on a shared server (CTXLENS_READ_ONLY=1): any visitor could otherwise start a
    build of many GiB and hours, or delete the indexes others use. The CLI still builds."""
    return os.environ.get(READ_ONLY_ENV, "").strip().lower() not in ("1", "true", "yes", "on")


READ_ONLY_NOTE = ("This server builds and deletes no corpus indexes from the browser "
                  f"({READ_ONLY_ENV} is set): build them with 'make index' on the server.")


NOT_ON_THIS_SERVER = ("this model is not available on this server: it is not in the server's "
                      "Hugging Face cache, and the server downloads nothing named in the "
                      f"browser ({READ_ONLY_ENV} is set)")


def downloads_allowed() -> bool:
    """False on a shared server (CTXLENS_READ_ONLY=1): any visitor could otherwise make the
    server fetch whatever repo they type onto its disk (its config, to read what it is, and its
    weights on Download)."""
    return index_changes_allowed()


def _refuse_index_changes() -> None:
    if not index_changes_allowed():
        raise EngineError(READ_ONLY_NOTE)


def build_brown_index(model_id: str, layers, folder, on_progress) -> None:
    from engine.corpus.index import build

    _refuse_index_changes()
    # the folder is the app's own: an index of an older format there is built again
    build(model_id, "brown", folder, layers=list(layers), progress=False, engine=get_engine(),
          on_progress=on_progress, replace_older=True)


def _index(folder: str):
    """An opened index, one per folder and server (the Engine's cache owns it)."""
    from engine.corpus.catalog import index_dirs
    from engine.corpus.query import CorpusIndex

    path = Path(folder).resolve()
    if not any(d.resolve() in path.parents for d in index_dirs()):
        raise EngineError(f"{folder} is not under a configured index folder")
    return get_engine().cached(("corpus-index", str(path)), lambda: CorpusIndex(path))


def app_owned(folder: str) -> bool:
    """An index the app built (under its own folder), which it may delete; never one of the
    user's CTXLENS_INDEX_DIRS."""
    from engine.corpus import catalog

    return catalog.DEFAULT_DIR.resolve() in Path(folder).resolve().parents


def remove_index(folder: str) -> None:
    from engine.corpus.index import remove

    _refuse_index_changes()
    if not app_owned(folder):
        raise EngineError(f"{folder} is not one of the app's own indexes: delete it yourself")
    remove(Path(folder))
    # the opened index and every result read from it are keyed by the folder, which a build may
    # fill again: drop them all (a delete is rare; the encodings stay on disk)
    get_engine().results.clear()


def corpus_manifest(folder: str):
    return _index(folder).manifest


@engine_cached("Reading the index …")
def corpus_occurrences(folder: str, word: str, layer: int, limit: int):
    return _index(folder).occurrences(word, layer, limit)


@engine_cached()
def corpus_count(folder: str, word: str, layer: int) -> int:
    return _index(folder).count(word, layer)


@engine_cached()
def corpus_texts(folder: str, ids: tuple[int, ...]) -> dict:
    return _index(folder).texts(ids)


@engine_cached("Clustering …")
def corpus_clusters(folder: str, word: str, layer: int, limit: int) -> np.ndarray:
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    return senses.suggest_senses(vec, k=None)


@engine_cached("Projecting …")
def corpus_projection(folder: str, word: str, layer: int, limit: int, method: str):
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    return get_engine().project(vec[None], method=method, seed=0).coords[0]


@engine_cached("Searching the corpus …")
def corpus_neighbours_of(folder: str, word: str, layer: int, limit: int, point: int, k: int):
    """Nearest contexts of point `point` of a word's map (corpus_occurrences with the same
    arguments); itself comes first. Its vector is the map's, already read: looking the row up
    again by sentence and position would scan the whole layer table (15-54 ms on Brown)."""
    vec, _, _ = corpus_occurrences(folder, word, layer, limit)
    if not 0 <= point < len(vec):
        raise EngineError("that point is not on the map any more; click it again")
    return _index(folder).search(vec[point], layer, k)


@engine_cached("Reading every layer …")
def corpus_layer_occurrences(folder: str, word: str, limit: int):
    """The same occurrences at every layer of the index: ([layers, n, dim], ids, positions)."""
    return _index(folder).occurrences_at_layers(word, None, limit)


@engine_cached("Projecting every layer …")
def corpus_grid_projection(folder: str, word: str, limit: int, method: str) -> np.ndarray:
    """[layers, n, 2]: every layer's projection, aligned across layers as the Layers side by
    side page aligns them (engine/analysis/projection.py)."""
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    return get_engine().project(vec, method=method, seed=0).coords


@engine_cached("Clustering …")
def corpus_grid_clusters(folder: str, word: str, limit: int, layer: int) -> np.ndarray:
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    return senses.suggest_senses(vec[_index(folder).manifest.layers.index(layer)], k=None)


@engine_cached("Searching the corpus …")
def corpus_grid_neighbours_of(folder: str, word: str, limit: int, point: int, panel: int,
                              k: int):
    """Nearest contexts of one point of the grid, at its panel's layer; itself comes first."""
    vec, _, _ = corpus_layer_occurrences(folder, word, limit)
    if not (0 <= panel < vec.shape[0] and 0 <= point < vec.shape[1]):
        raise EngineError("that point is not on the map any more; click it again")
    return _index(folder).search(vec[panel, point], _index(folder).manifest.layers[panel], k)


@engine_cached("Searching the corpus …")
def corpus_search(folder: str, text: str, word: str, layer: int, k: int):
    from engine.corpus.query import neighbours

    return neighbours(get_engine(), _index(folder), text, word, layer, k)
