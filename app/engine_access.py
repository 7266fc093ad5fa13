"""The app's door to the engine's models: one Engine per server, its result cache, the model
catalogue, downloads, what a model can do, encodings and predictions.

Only the three door modules import engine/ (this one, app/results.py, app/corpus_access.py;
tests/test_layering.py). The engine's pure rules a page applies without a model (how a text
splits into words, the [MASK] token, the poolings) and its error types are part of this
module's surface, so a page names one place for them.

st.cache_resource holds the Engine. Every result the app derives (app/results.py,
app/corpus_access.py) is kept in the Engine's own cache (engine/cache.py) under one key, the
function's name and its plain arguments bound to its signature, defaults filled in
(engine_cached): one owner with a lock and a bound in bytes, one copy shared by every session.
Cached numpy arrays are read-only; copy one before changing it.
"""
from __future__ import annotations

import ctypes
import functools
import inspect
import os
import threading
from typing import Callable, Mapping

import streamlit as st

from app.safe import safe_md
from engine.api import Engine, encoding_store
from engine.errors import EngineError, NeedsDownload, UnsupportedPrediction
from engine.families import FAMILIES, Family
from engine.registry import availability, canonical_id, catalogue
from engine.registry import default_model as registry_default
from engine.result import POOLINGS, Encoding, ModelProblem
from engine.text import (JOINER_RE, MASK, MAX_CHARS, MAX_WORDS, TextError, drop_invisible,
                         joined_forms, left_of_word, mask_word, split_lines, split_words,
                         unspaced_note, word_key)

__all__ = ["EngineError", "UnsupportedPrediction", "TextError", "Encoding", "ModelProblem",
           "work_cap",
           "POOLINGS", "JOINER_RE", "MASK", "MAX_CHARS", "MAX_WORDS", "drop_invisible",
           "joined_forms", "left_of_word", "mask_word", "split_lines", "split_words",
           "unspaced_note", "word_key"]


def work_cap() -> str:
    """The cap on one request's estimated work (engine/budget.py), as a caption says it."""
    from engine import budget

    try:
        cap = budget.duration(budget.max_seconds())
    except EngineError as exc:
        return str(exc)
    return (f"Each request is capped at about {cap} of estimated work on this server "
            f"({budget.MAX_WORK_S_ENV}); a longer one is refused before it starts, with "
            "its estimate.")


@st.cache_resource(show_spinner=False)
def get_engine():
    # encodings kept on disk too: a page opened again after a restart (the default preset at
    # every start) is drawn without loading a model
    # the page shows its own progress while a model loads; transformers' "Loading weights"
    # bars would only fill the server's terminal, once per model at every start
    return Engine(store=encoding_store(), library_bars=False)


def _door(fn, spinner: str | Callable[..., str] | None, key_of: Callable[..., tuple],
          keep: bool):
    """fn behind the app's one cached call: its arguments bound to its signature with the
    defaults filled in, so a call that writes a default out and one that leaves it out (or
    passes by keyword what another passes by position) ask for one result under one key,
    key_of(those arguments). `keep`: the door keeps the result under that key (engine_cached);
    else the Engine keeps it itself and the key only says whether it is missing
    (engine_spinner). `spinner` (a text, or a function of the arguments giving one) is shown
    while a missing result is computed."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def door(*args, **kwargs):
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        key = key_of(**call.arguments)
        eng = get_engine()

        def compute():
            return eng.cached(key, lambda: fn(*args, **kwargs)) if keep else fn(*args, **kwargs)
        if spinner is None or eng.has_result(key):
            return compute()
        # a spinner is markdown, and its text may name a model's path or a typed word
        text = spinner(*args, **kwargs) if callable(spinner) else spinner
        with st.spinner(safe_md(text)):
            return compute()
    return door


def engine_cached(spinner: str | Callable[..., str] | None = None, kind: str = "app"):
    """Cache a function's result in the Engine's result cache under (kind, its name, every
    argument in its signature's order, defaults included); `spinner` (a text, or a function
    of the arguments giving one) is shown while a missing result is computed. `kind` groups
    keys that are dropped together (app/corpus_access.py: the results read from one index)."""
    def wrap(fn):
        return _door(fn, spinner, lambda **bound: (kind, fn.__name__, *bound.values()),
                     keep=True)
    return wrap


def engine_spinner(key_of: Callable[..., tuple], spinner: Callable[..., str]):
    """For a function whose result the Engine keeps itself, under `key_of(args)`: the spinner
    while that result is missing, and no second copy of it in the cache (engine_cached would
    store the same object again under the app's key, counting its bytes twice). The door's
    defaults, not key_of's, are what the Engine is asked with."""
    def wrap(fn):
        return _door(fn, spinner, key_of, keep=False)
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


# -- what this server may change: downloads here, corpus indexes in app/corpus_access.py ----

READ_ONLY_ENV = "CTXLENS_READ_ONLY"

NOT_ON_THIS_SERVER = ("this model is not available on this server: it is not in the server's "
                      "Hugging Face cache, and the server downloads nothing named in the "
                      f"browser ({READ_ONLY_ENV} is set)")


def changes_allowed() -> bool:
    """False on a shared server (CTXLENS_READ_ONLY=1): any visitor could otherwise make the
    server fetch whatever repo they type onto its disk, start an index build of many GiB and
    hours, or delete the indexes others use. The CLI still downloads and builds."""
    return os.environ.get(READ_ONLY_ENV, "").strip().lower() not in ("1", "true", "yes", "on")


downloads_allowed = changes_allowed


# -- the model catalogue ----------------------------------------------------------------------

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


def default_model(family: str) -> str | None:
    reg = get_engine().registry
    try:   # the registry's `default = true` model of the family, else its first installed one
        return registry_default(family, reg)
    except Exception:  # no model of this family here: the sidebar offers "(none)"
        return None


def family_name(model_id: str) -> str:
    return get_engine().family_name(model_id)


def family_rows() -> dict[str, Family]:
    """The engine's family table, in its order: what each family's models can do at most, and
    how pages name it (read at each call: a family may register late)."""
    return dict(FAMILIES)


def family_row(name: str) -> Family:
    return FAMILIES[name]


# -- what a model can do ----------------------------------------------------------------------

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


# -- why a model cannot be shown, and downloads -----------------------------------------------

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


# -- what the models compute --------------------------------------------------------------------

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
    _with_progress(todo, model_ids, "Loading and running {} (first use takes a while) …",
                   lambda m: eng.encode(m, list(sentences)))


def load(model_ids: list[str]) -> None:
    """Load each model once with visible progress, encoding nothing: for a page that reads
    predictions, not encodings (an encoding of every sentence by every model would be work
    and cache space nothing on it shows)."""
    eng = get_engine()
    todo = [m for m in model_ids if not eng.is_loaded(m)]
    _with_progress(todo, todo, "Loading {} (first use takes a while) …", eng.load)


def _with_progress(todo: list[str], model_ids: list[str], label: str,
                   run: Callable[[str], object]) -> None:
    """run(m) for each of `model_ids`, in a progress box that names `todo`, the models not
    ready yet, while there are any; the box disappears once they are."""
    # the box's place is taken on every run, loading or not: the elements after it keep their
    # places when the models are ready, so Streamlit updates them where they are instead of
    # drawing them anew (a tab drawn anew comes back on the first tab, and the view the user
    # chose goes to the back)
    box = st.empty()
    if not todo:
        for m in model_ids:
            run(m)
        return
    try:
        with box.status(f"Loading {safe_md(', '.join(todo))} …", expanded=False) as status:
            for m in model_ids:
                status.update(label=label.format(safe_md(m)))
                run(m)
    finally:
        box.empty()        # a model refused: its refusal is shown, not "Loading ..." above it


def query_key(model_id: str, text: str, layer: int):
    """engine.result.QueryKey (the Engine caches it)."""
    return get_engine().query_key(model_id, text, layer)


def _asking(kind: str, model_id: str, text: str, top_k: int = 10, sides: str = "both",
            rescore: bool = False, ablate: str | None = None, ablate_mode: str = "zero") -> str:
    off = f" with {ablate} off" if ablate else ""
    return (f"Asking {model_id}{off}, then scoring each candidate's sentence …" if rescore
            else f"Asking {model_id}{off} …")


@engine_cached(_asking)
def predict(kind: str, model_id: str, text: str, top_k: int = 10, sides: str = "both",
            rescore: bool = False, ablate: str | None = None, ablate_mode: str = "zero"):
    # cached like every page's results: a rerun with the same blank asks no model (a GPT's
    # re-ranked fill runs it once per candidate, seconds on a CPU)
    eng = get_engine()
    off = {"ablate": ablate, "ablate_mode": ablate_mode} if ablate else {}
    if kind == "masked":
        return eng.predict_masked(model_id, text, top_k=top_k, sides=sides, rescore=rescore,
                                  **off)
    fn = {"next": eng.predict_next, "previous": eng.predict_previous}[kind]
    return fn(model_id, text, top_k=top_k, **off)


@engine_cached(lambda model_id, text: f"Reading {model_id}'s layers …")
def logit_lens(model_id: str, text: str):
    return get_engine().logit_lens(model_id, text)
