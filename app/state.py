"""The user's choices: sidebar inputs, sense labels, presets, and their mirror in the URL.

Every widget whose value belongs in a shared link has a URL key: the sidebar's are sidebar_keys(),
and a page adds its own with url_key(), recorded in that session's state (never in module state:
sessions run in threads of one process, and a key one session registered must not change what
another restores). On the first run of a session the keys are read from st.query_params, and
every run writes them back, so a copied address reopens the same sentences, target word, models,
pooling, page and layer.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import streamlit as st

from app import engine_access
from app.engine_access import (MAX_WORDS, POOLINGS, TextError, drop_invisible, family_rows,
                               split_lines, split_words, unspaced_note)
from app.export import manifest_json
from app.safe import safe_md

PRESETS_FILE = Path(__file__).resolve().parent.parent / "assets" / "presets.toml"
MAX_SENTENCES = 24
MAX_TARGET_CHARS = 40


def shown_families() -> tuple[str, ...]:
    """The engine's family table, in its order (read at each call: a family may register late)."""
    return tuple(family_rows())


def family_name(family: str) -> str:
    return engine_access.family_row(family).label
NONE = "(none)"
CUSTOM = "(custom)"
UNLABELLED = "?"
MANIFEST_SCHEMA = "ctxlens-settings/1"

def sidebar_keys() -> Mapping[str, type]:
    """The sidebar's URL keys -> type (read-only; page widgets add theirs per session through
    url_key())."""
    return MappingProxyType({"preset": str, "sentences": str, "target": str, "pool": str,
                             **{f"model_{name}": str for name in family_rows()}, "labels": str})


@dataclass(frozen=True)
class Preset:
    target: str
    sentences: tuple[str, ...]
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Inputs:
    sentences: tuple[str, ...]
    target: str
    models: tuple[tuple[str, str], ...]     # (family, model id), families without a model left out
    pool: str

    def model(self, family: str) -> str | None:
        return dict(self.models).get(family)

    def settings(self, **extra) -> dict:
        """The settings manifest, one schema for every export: what produced a figure (its
        own settings in `extra`), or the whole session (current_settings)."""
        return {"manifest": MANIFEST_SCHEMA, "sentences": list(self.sentences),
                "target": self.target, "models": dict(self.models), "pooling": self.pool,
                "labels": sense_labels(self.sentences), "seed": 0, **extra}


@lru_cache(maxsize=1)
def presets() -> dict[str, Preset]:
    with open(PRESETS_FILE, "rb") as f:
        raw = tomllib.load(f)["presets"]
    return {name: Preset(p["target"], tuple(s for s, _ in p["sentences"]),
                         tuple(label for _, label in p["sentences"])) for name, p in raw.items()}


def url_key(key: str, kind=int, default=None, choices=None, bounds=None,
            max_chars: int | None = None) -> str:
    """Register a page widget key for the URL, restore it once from the query string, and give
    it a default (widgets then take no value= argument, which Streamlit would warn about).
    `bounds` (low, high) are the widget's: a linked value outside them (or NaN) keeps the
    default, where Streamlit would replace the whole page with StreamlitValueAboveMaxError.
    `max_chars` is a text box's cap (url_text_input passes the box's own): a box shows a linked
    or handed-over value whole, past its cap, so the value is cut to it here."""
    url_keys()[key] = kind
    restored = st.session_state.setdefault("_restored", set())
    raw = _link_value(key) if key not in restored else None
    if raw is not None:
        try:
            value = _parse(kind, raw)
            inside = bounds is None or bounds[0] <= value <= bounds[1]  # False for NaN
            if (choices is None or value in choices) and inside and value == value:
                st.session_state[key] = value
        except ValueError:
            pass  # a hand-edited link with a bad value: keep the default
    restored.add(key)
    # a page widget is reset when the user leaves its page; bring back the last value
    if key not in st.session_state and f"_kept_{key}" in st.session_state:
        st.session_state[key] = st.session_state[f"_kept_{key}"]
    if default is not None:
        st.session_state.setdefault(key, default)
    # whatever put it there (a hand-edited link, an older session's value), a widget's value has
    # its declared type: a str where an int belongs raises "'>=' not supported between
    # instances of 'str' and 'int'" on every page until the tab is reloaded
    if isinstance(kind, type) and key in st.session_state and \
            not isinstance(st.session_state[key], kind):
        try:
            st.session_state[key] = _parse(kind, st.session_state[key])
        except (TypeError, ValueError):
            if default is not None:
                st.session_state[key] = default
            else:
                del st.session_state[key]
    if max_chars is not None and isinstance(st.session_state.get(key), str):
        st.session_state[key] = st.session_state[key][:max_chars]
    return key


def url_text_input(where, label: str, key: str, max_chars: int, default: str = "",
                   **kwargs) -> str:
    """A text box in the URL: one cap for what is typed and what a link or another page puts
    there."""
    return where.text_input(label, key=url_key(key, str, default=default, max_chars=max_chars),
                            max_chars=max_chars, **kwargs)


def _link_value(key: str) -> str | None:
    """The key's value in the address, or else in the link the session opened with: a click on
    a page link clears the address, so a shared link's settings for a page not visited yet are
    kept in the session until that page registers them."""
    if key in st.query_params:
        return st.query_params[key]
    return st.session_state.get("_link", {}).get(key)


def _parse(kind, value):
    """A URL value (always text) as `kind`; bool("False") would be True."""
    if kind is bool and isinstance(value, str):
        if value not in ("True", "False", "true", "false", "1", "0"):
            raise ValueError(value)
        return value in ("True", "true", "1")
    return kind(value)


def _apply_preset(name: str) -> None:
    p = presets()[name]
    st.session_state["sentences"] = "\n".join(p.sentences)
    st.session_state["target"] = p.target
    st.session_state["labels"] = "|".join(p.labels)
    st.session_state["_labels_for"] = p.sentences


# what a preset replaces; the user's own are kept aside and come back with (custom)
TYPED_KEYS = ("sentences", "target", "labels", "_labels_for")


def _typed_own() -> bool:
    """The sidebar holds something other than a preset as it was applied."""
    now = (st.session_state.get("sentences", ""), st.session_state.get("target", ""),
           st.session_state.get("labels", ""))
    return all(now != ("\n".join(p.sentences), p.target, "|".join(p.labels))
               for p in presets().values())


def _on_preset() -> None:
    if st.session_state["preset"] != CUSTOM:
        if _typed_own():
            st.session_state["_typed"] = {k: st.session_state[k] for k in TYPED_KEYS
                                          if k in st.session_state}
        _apply_preset(st.session_state["preset"])
    elif "_typed" in st.session_state:
        for key in TYPED_KEYS:
            if key in st.session_state["_typed"]:
                st.session_state[key] = st.session_state["_typed"][key]
            else:
                st.session_state.pop(key, None)


def _edited() -> None:
    """Edited sentences are the user's own, not a preset's."""
    st.session_state["preset"] = CUSTOM


def _init_session() -> None:
    if st.session_state.get("_initialised"):
        return
    params = st.query_params
    st.session_state["_link"] = {k: params[k] for k in params}
    # a hand-edited link may give a key twice: Streamlit reads the last value; say so once
    st.session_state["_repeated_keys"] = {
        k: len(params.get_all(k)) for k in params if len(params.get_all(k)) > 1}
    preset = params.get("preset", CUSTOM)
    if preset not in presets() and "sentences" not in params:
        preset = "mouse"      # a first visit (or an unknown preset): start from an example
    st.session_state["preset"] = preset if preset in presets() else CUSTOM
    if preset in presets():
        _apply_preset(preset)
    for key in ("sentences", "target", "labels"):
        if key in params:
            st.session_state[key] = params[key]
    # the box's own cap holds for a link too (a link can hold a 100-character target)
    st.session_state["target"] = st.session_state.get("target", "")[:MAX_TARGET_CHARS]
    if "labels" in params:   # a link's labels belong to the link's sentences, line by line
        st.session_state["_labels_for"] = sentence_lines()
    st.session_state["pool"] = params.get("pool", "mean")
    for family in shown_families():
        default = engine_access.default_model(family) or NONE
        st.session_state[f"model_{family}"] = params.get(f"model_{family}", default)
    st.session_state["_initialised"] = True


def sentence_lines() -> tuple[str, ...]:
    # invisible characters (a zero-width space pasted from the web) are read as absent; the
    # box keeps what was typed; a line ends at "\n" only (a pasted U+2028 is inside a line)
    lines = [drop_invisible(ln).strip()
             for ln in split_lines(st.session_state.get("sentences", ""))]
    return tuple(ln for ln in lines if ln)


def sidebar() -> Inputs:
    _init_session()
    sb = st.sidebar
    sb.selectbox("Preset", [CUSTOM, *presets()], key="preset", on_change=_on_preset,
                 help="Sentences with sense labels for a polysemous word")
    sb.text_area("Sentences, one per line", key="sentences", height=180, on_change=_edited,
                 help=f"max {MAX_SENTENCES} sentences, {MAX_WORDS} words each")
    sb.caption(f"max {MAX_SENTENCES} sentences, {MAX_WORDS} words each")
    if note := unspaced_note(sentence_lines()):       # Thai, Chinese, ...: how they are split
        sb.caption(f"{note}.")
    sb.text_input("Target word", key="target", max_chars=MAX_TARGET_CHARS)
    models = [(family, m) for family in shown_families()
              if (m := model_box(sb, family)) is not None]
    if st.session_state.get("pool") not in POOLINGS:
        st.session_state["pool"] = "mean"
    sb.radio("Subword pooling", POOLINGS, key="pool", horizontal=True,
             help="How a word split into several tokens becomes one vector")
    inputs = _session_inputs(tuple(models))
    # filled by settings_button once the page has registered its widgets: built here, the file
    # would lack the settings of a page on its first visit ("widgets": {})
    st.session_state["_settings_slot"] = sb.empty()
    for key, times in st.session_state.get("_repeated_keys", {}).items():
        sb.warning(f"The link gives '{safe_md(str(key)[:40])}' {times} times; the last one "
                   "is used.")
    for i, (_, why) in enumerate(checked_lines(), 1):
        if why is not None:
            # the line itself is not quoted (it may be a whole pasted page)
            sb.warning(f"Line {i} is left out: {safe_md(why)}.")
    usable = sum(why is None for _, why in checked_lines())
    if usable > MAX_SENTENCES:
        sb.warning(f"{usable} sentences: only the first {MAX_SENTENCES} are used")
    return inputs


def model_box(sb, family: str) -> str | None:
    """One family's model box: the models here, and any hub id or folder the user types or a
    link names (kept in the box as asked, never swapped for another). The model chosen, or
    None where the box says (once, under it) why the asked model cannot be used."""
    key = f"model_{family}"
    label = family_name(family)
    here = engine_access.available_models(family)
    asked = st.session_state.get(key)
    if asked is None:
        asked = st.session_state[key] = here[0] if here else NONE
    if asked not in here and asked != NONE:
        # a folder is named by its resolved path from here on: what the pages show and use
        asked = st.session_state[key] = engine_access.canonical_model(asked)
    options = [*here, *([asked] if asked not in here and asked != NONE else []), NONE]
    sb.selectbox(f"{label} model", options, key=key, accept_new_options=True,
                 help="A model here, or type a Hugging Face hub id (org/name) or a folder under "
                      "CTXLENS_MODEL_DIRS; see `ctxlens models`")
    chosen = st.session_state[key]
    if chosen == NONE or chosen in here:
        return None if chosen == NONE else chosen
    problem = engine_access.model_problem(chosen, family)
    if problem is None:
        return chosen
    sb.error(f"{label} model '{safe_md(chosen[:80])}': {safe_md(problem.why)}")
    plan = engine_access.download_plan(chosen) if problem.download else None
    if plan is not None and sb.button(f"Download {plan}", key=f"download_{family}"):
        engine_access.download(chosen, sb.progress(0.0, text="downloading ..."))
        st.rerun()
    return None


def _session_inputs(models: tuple[tuple[str, str], ...] | None = None) -> Inputs:
    if models is None:
        models = tuple((f, st.session_state[f"model_{f}"]) for f in shown_families()
                       if st.session_state.get(f"model_{f}") not in (None, NONE))
    usable = [line for line, why in checked_lines() if why is None]
    return Inputs(tuple(usable[:MAX_SENTENCES]), st.session_state.get("target", "").strip(),
                  models, st.session_state.get("pool", "mean"))


def checked_lines() -> list[tuple[str, str | None]]:
    """Each typed line with why it cannot be used (None when it can): a line over the word or
    character cap is left out on its own, so one pasted paragraph does not blank every page."""
    out = []
    for line in sentence_lines():
        try:
            split_words(line)
            out.append((line, None))
        except TextError as err:
            out.append((line, str(err)))
    return out


def sense_labels(sentences: tuple[str, ...]) -> list[str]:
    """One label per sentence, from the '|'-joined labels kept in the session (and URL).

    Labels follow their sentence when lines are edited, added or removed: a new line is
    unlabelled rather than inheriting the label of whatever line used to stand there.
    """
    labels = [l.strip() or UNLABELLED for l in st.session_state.get("labels", "").split("|")]
    made_for = st.session_state.get("_labels_for")
    if made_for is not None:
        by_sentence = dict(zip(made_for, labels))
        return [by_sentence.get(s, UNLABELLED) for s in sentences]
    return [labels[i] if i < len(labels) else UNLABELLED for i in range(len(sentences))]


def set_sense_labels(labels: list[str], sentences: tuple[str, ...]) -> None:
    st.session_state["labels"] = "|".join(str(l).replace("|", "/") for l in labels)
    st.session_state["_labels_for"] = tuple(sentences)


def url_keys() -> dict[str, type]:
    """This session's URL keys (the sidebar's, then each page's as it registers them)."""
    keys = st.session_state.setdefault("_url_keys", {})
    for k, kind in sidebar_keys().items():
        keys.setdefault(k, kind)
    return keys


def current_settings(inputs: Inputs | None = None) -> dict:
    """The session's settings manifest: the sidebar's inputs in the one manifest schema
    (Inputs.settings), the preset, and every page widget in the link under "widgets"."""
    widgets = {k: v for k in url_keys()
               if k not in sidebar_keys() and (v := _value(k)) is not None}
    return (inputs or _session_inputs()).settings(preset=st.session_state.get("preset", CUSTOM),
                                                  widgets=widgets)


def settings_button() -> None:
    """The sidebar's "Settings (JSON)": everything in the link, built after the page ran. Built
    now, not deferred: a deferred callable runs on another thread without the session."""
    slot = st.session_state.pop("_settings_slot", None)
    if slot is not None:
        slot.download_button("Settings (JSON)", manifest_json(current_settings()),
                             file_name="ctxlens-settings.json", mime="application/json",
                             on_click="ignore", help="Everything in this page's link, as JSON")


def _value(key: str):
    """A registered key's value: Streamlit drops a page widget's value when the user leaves its
    page, and the link would lose it (a clusters layer chosen, then another page visited)."""
    return st.session_state.get(key, st.session_state.get(f"_kept_{key}"))


def write_url() -> None:
    """Mirror the registered keys into the address bar (call at the end of a page)."""
    keys = url_keys()
    params = {k: str(v) for k in keys if (v := _value(k)) is not None}
    # a shared link's settings for pages not visited yet stay in the address until those
    # pages register (and restore) them; dropping them would lose every other page's settings
    restored = st.session_state.get("_restored", set())
    pending = {**st.session_state.get("_link", {}), **st.query_params.to_dict()}
    params.update({k: v for k, v in pending.items() if k not in keys and k not in restored})
    for k in keys:
        if k in st.session_state:
            st.session_state[f"_kept_{k}"] = st.session_state[k]
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)
