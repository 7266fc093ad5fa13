"""Page scaffolding shared by every page: the error guard, model preparation, common messages."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Sequence, TypeVar

import numpy as np
import streamlit as st

from app import engine_access, state
from app.engine_access import EngineError, TextError, joined_forms, split_words, word_key
from app.safe import safe_md

T = TypeVar("T")


def one_line(exc: BaseException) -> str:
    """The exception's first line as safe_md makes it: error texts quote what was typed."""
    text = str(exc).strip().splitlines()
    return safe_md(text[0]) if text else type(exc).__name__


def show_error(exc: Exception) -> None:
    if isinstance(exc, (EngineError, TextError)):
        st.error(one_line(exc))
    else:
        st.error(f"Something went wrong ({type(exc).__name__}): {one_line(exc)}")


def shared_sidebar() -> None:
    """Called by the entrypoint before the page runs; pages then reuse its Inputs."""
    st.session_state["_via_navigation"] = True
    try:
        st.session_state["_inputs"] = state.sidebar()
    except Exception as exc:  # noqa: BLE001
        st.session_state["_inputs"] = None
        show_error(exc)


def run_page(render: Callable[[state.Inputs], None]) -> None:
    """Sidebar (unless the entrypoint drew it), then the page body; any error becomes one line
    on the page, never a traceback. A page file also runs on its own (tests)."""
    try:
        if st.session_state.get("_via_navigation"):
            inputs = st.session_state.get("_inputs")
            if inputs is None:
                return
        else:
            inputs = state.sidebar()
        render(inputs)
    except Exception as exc:  # noqa: BLE001 - the page must show one line, whatever failed
        show_error(exc)
    finally:
        state.write_url()
        state.settings_button()
        engine_access.trim_heap_soon()


@contextmanager
def guarded(note: str | None = None):
    """One view's error as one line in its place (a tab's, say); the views after it still
    draw. With `note`, the line is a caption, "note: the error" (a part of a panel that can
    be missing)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - a view must show one line, whatever failed
        if note is None:
            show_error(exc)
        else:
            st.caption(f"{note}: {one_line(exc)}")


def attempt(fn: Callable[..., T], *args, **kwargs) -> tuple[T | None, str | None]:
    """(fn's result, None), or (None, its error in one line) whatever it raised: where the
    failure is said elsewhere or later (a button's callback runs before the page and its
    guard; a model's own tab says why it fails)."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - the caller says it, in one line
        return None, one_line(exc)


def chosen_models(inputs: state.Inputs, families: tuple[str, ...] | None = None,
                  ) -> list[tuple[str, str]]:
    """The sidebar's models of `families`, not loaded yet; says what to do when there are none."""
    if not inputs.sentences:
        st.info("Type some sentences in the sidebar (one per line), or pick a preset.")
        return []
    families = state.shown_families() if families is None else families
    chosen = [(f, m) for f, m in inputs.models if f in families]
    if not chosen:
        names = " or ".join(state.family_name(f) for f in families)
        if any(engine_access.available_models(f) for f in families):
            article = "an" if names[0] in "AEIOU" else "a"
            st.info(f"Choose {article} {names} model in the sidebar.")
        else:
            st.info(f"No {names} model is installed here (see `ctxlens models`).")
    return chosen


def target_models(inputs: state.Inputs) -> list[tuple[str, str]]:
    """The chosen models for a page about one target word; says what is missing (the word,
    sentences, models) and returns [] when something is."""
    if not inputs.target:
        st.info("Type a target word in the sidebar.")
        return []
    return chosen_models(inputs)


def prepared(model_id: str, inputs: state.Inputs, encode: bool = True) -> bool:
    """Load and run one model (only load it where not `encode`: a page that reads no
    encoding); a model that fails is reported in one line (False)."""
    try:
        if encode:
            engine_access.prepare([model_id], inputs.sentences)
        else:
            engine_access.load([model_id])
        return True
    except Exception as exc:  # noqa: BLE001 - one model failing must not hide the others
        st.error(f"{safe_md(model_id)}: {one_line(exc)}")
        return False


def ready_models(inputs: state.Inputs, families: tuple[str, ...] | None = None,
                 encode: bool = True) -> list[tuple[str, str]]:
    """Load and run the chosen models (only load them where not `encode`); a model that fails
    is reported in one line and skipped."""
    return [(f, m) for f, m in chosen_models(inputs, families) if prepared(m, inputs, encode)]


PROJECTION_HELP = ("How vectors of hundreds of dimensions are drawn flat. PCA keeps the "
                   "directions in which the points spread most (fast; the same every time). "
                   "UMAP and t-SNE keep each point's nearest neighbours near it, so groups show "
                   "more clearly, but distances between groups mean little.")

# Plotly's mode bar, less what the charts do not need: ten buttons a chart cover the titles
# on a phone and make about forty Tab stops before the sidebar on the clusters page. Kept:
# the camera, zoom, pan, box and lasso select (how points are chosen), reset.
CHART_CONFIG = {"displaylogo": False,
                "modeBarButtonsToRemove": ["zoomIn2d", "zoomOut2d", "autoScale2d"]}


# A chart goes to the browser as one websocket message, and Streamlit replaces a message over
# server.maxMessageSize (200 MB) by an exception box after the script has run, where no page
# can catch it; a chart of tens of MB already stalls the browser. Larger charts are not sent.
MAX_CHART_MB = 32
# the traces' fields that grow with the data (the layout stays small)
DATA_FIELDS = ("x", "y", "z", "text", "customdata", "hovertext", "ids", "texttemplate")


def plotly_chart(fig, **kwargs):
    """st.plotly_chart with the app's mode bar; a chart too large to send is one line saying
    so instead (and None)."""
    size, limit = chart_bytes(fig), chart_limit()
    if size > limit:
        st.info(f"This chart is too large to send to the browser ({size / 2**20:,.0f} MB; at "
                f"most {limit / 2**20:,.0f} MB): the input is too long for this view.")
        return None
    return st.plotly_chart(fig, config=CHART_CONFIG, **kwargs)


def chart_limit() -> int:
    """Bytes a chart may take: MAX_CHART_MB, or half the server's message limit if lower."""
    server = float(st.get_option("server.maxMessageSize")) * 1e6
    return int(min(MAX_CHART_MB * 2**20, server / 2))


def chart_bytes(fig) -> int:
    """About the size of a figure's JSON, from its traces' data (those of its animation frames
    too), without serialising it: numeric arrays travel as base64 (4/3 of their bytes)."""
    traces = list(fig.data) + [t for frame in (fig.frames or ()) for t in frame.data]
    return sum(_json_bytes(getattr(t, name, None)) for t in traces for name in DATA_FIELDS)


def _json_bytes(value) -> int:
    if value is None:
        return 0
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return value.nbytes * 4 // 3
        value = value.ravel()
    if isinstance(value, str):
        return len(value.encode()) + 3
    if isinstance(value, (list, tuple, np.ndarray)):
        # long lists (a head view's line ends and labels) by a sample of 256 of their items
        step = max(1, len(value) // 256)
        sample = value[::step]
        return int(sum(map(_json_bytes, sample)) * len(value) / max(1, len(sample))) + len(value)
    return 20           # a number as JSON text


def missing_target_note(target: str, missing: tuple[int, ...],
                        sentences: Sequence[str]) -> bool:
    """Say which sentences lack the target word; False when none has it."""
    if not missing:
        return True
    n = len(sentences)
    hint = _inside_longer_words(target, [sentences[i] for i in missing])
    quoted = safe_md(target)
    if len(missing) == n:
        st.error(f"The target word '{quoted}' is in none of the sentences (words are matched "
                 f"whole, ignoring case){hint}.")
        return False
    where = ", ".join(str(i + 1) for i in missing)
    plural = "s" if len(missing) > 1 else ""
    st.warning(f"The target word '{quoted}' is missing from sentence{plural} {where} "
               f"(of {n}); {'they are' if plural else 'it is'} left out{hint}.")
    return True


# endings that make another form of the same word ("bats", "batted", "batting"), not any
# longer word ("bath", "diet")
ENDINGS = ("s", "es", "d", "ed", "ing", "er", "ers")


def _with_ending(word: str, key: str) -> bool:
    w = word_key(word)
    rest = w[len(key):]
    return (w.startswith(key) and bool(rest) and
            (rest in ENDINGS or (rest[0] == key[-1:] and rest[1:] in ENDINGS)))


def _inside_longer_words(target: str, sentences: Sequence[str]) -> str:
    """" ('Bats' is another word here ...)" when the target is part of a word joined by an
    apostrophe or a hyphen ("bank's", which the models and the word split read as one word)
    or carries an ending ("Bats"): the sentence has it, just not as a whole word."""
    key = word_key(target)
    found: dict[str, str] = {}
    n_sentences = 0
    for sentence in sentences:
        words = split_words(sentence).words
        hits = joined_forms(words, target) + [w for w in words if _with_ending(w, key)]
        for w in hits:
            found.setdefault(word_key(w), w)
        n_sentences += bool(hits)
    if not found:
        return ""
    listed = ", ".join(f"'{safe_md(w)}'" for w in list(found.values())[:3])
    what = "is another word" if len(found) == 1 else "are other words"
    which = "it" if len(found) == 1 else "one"
    edit = "the sentence, to include it" if n_sentences == 1 else "the sentences, to include them"
    return (f" ({listed} {what} here: words are matched whole, so type {which} as the target, "
            f"or edit {edit})")


def repeated_target_note(target: str, repeated: tuple[int, ...]) -> None:
    """One point a sentence, labelled by the sentence's sense: a second occurrence of the
    target in a sentence is left out, and the user is told so instead of silently."""
    if repeated:
        where = ", ".join(str(i + 1) for i in repeated)
        plural = "s" if len(repeated) > 1 else ""
        st.caption(f"'{safe_md(target)}' occurs more than once in sentence{plural} {where}: "
                   "this page plots its first occurrence in each sentence (Layers side by side "
                   "plots every one).")


def build_progress(bar, label: str, clock=time.perf_counter):
    """on_progress(done, total) for an index build's st.progress bar: sentences done, the rate
    since the build's first report (a resumed build's earlier sentences are not counted in it)
    and the time left."""
    first = []

    def update(done: int, total: int) -> None:
        now = clock()
        if not first:
            first.append((now, done))
        t0, done0 = first[0]
        if done >= total:
            bar.progress(1.0, text=f"All {total:,} sentences embedded; building the search "
                                   "indexes (a few minutes) …")
            return
        line = f"{safe_md(label)}: {done:,} of {total:,} sentences"
        if done > done0 and now > t0:
            rate = (done - done0) / (now - t0)
            line += f", {rate:,.0f} a second, about {duration((total - done) / rate)} left"
        bar.progress(done / total, text=line)
    return update


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"
