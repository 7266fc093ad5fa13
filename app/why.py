"""The "Why this word?" view: one prediction's attribution over its text, as coloured words and
as bars, with the pieces, the map's faithfulness and attention rollout beside it. Shared by the
Predictions page (every family's blank side by side) and the Generation page (a generated
token over the text before it). Conventions: docs/attribution.md."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, explain_access, export, state, ui
from app import explain_figures as xf
from app.safe import safe_md

METHODS = explain_access.METHODS
METHOD_LABELS = {**{m: v["label"] for m, v in METHODS.items()},
                 "all": f"all {len(METHODS)} side by side"}
KIND_LABELS = {"masked": "the blank", "next": "the next word", "previous": "the previous word"}


@dataclass(frozen=True)
class Shown:
    """A prediction a page shows and can explain: who made it, of what, and its words."""

    model_id: str
    kind: str                     # masked | next | previous
    text: str                     # what Engine.attribute reads
    title: str
    name: str                     # unique in the page: keys and file names
    candidates: tuple[str, ...]   # its predicted words, best first


def question(prefix: str, predicted: tuple[str, ...] = (), ask_target: bool = True,
             ) -> tuple[str, str | None, list[str]]:
    """The target (typed, or picked among `predicted`; "" when not `ask_target`), the contrast
    (None when empty) and the methods, each in the link under `prefix`."""
    target_key = f"{prefix}_target"
    if predicted:
        pick_key = f"{prefix}_pick"

        def copy_pick() -> None:      # a click on a predicted word types it in the target box
            if st.session_state.get(pick_key):
                st.session_state[target_key] = st.session_state[pick_key]
        st.selectbox("Pick a predicted word", [""] + list(predicted), key=pick_key,
                     on_change=copy_pick, format_func=lambda w: w or "(choose one)")
    c1, c2, c3 = st.columns([2, 2, 3])
    target = state.url_text_input(
        c1, "Word to explain", target_key, 50,
        placeholder="each model's top word" if predicted else "",
        help="The word whose prediction is explained: any word the model's vocabulary "
             "spells.") if ask_target else ""
    contrast = state.url_text_input(
        c2, "Rather than (optional)", f"{prefix}_contrast", 50,
        help="A contrast word makes f = log p(target) − log p(contrast): why this word rather "
             "than that one (Yin & Neubig 2022).")
    method = c3.radio("Method", list(METHOD_LABELS), format_func=METHOD_LABELS.__getitem__,
                      horizontal=True,
                      key=state.url_key(f"{prefix}_method", str, default="gradxinput",
                                        choices=tuple(METHOD_LABELS)))
    methods = list(METHODS) if method == "all" else [method]
    if any(METHODS[m]["many_passes"] for m in methods):
        st.caption(engine_access.work_cap())
    return target.strip(), contrast.strip() or None, methods


def explain(model_id: str, text: str, kind: str, target: str, contrast: str | None,
            methods: list[str], name: str, settings: dict,
            off: tuple[str, str] | None = None) -> None:
    """Every chosen method's map of one prediction, then rollout beside them; a question the
    model cannot answer is one line. `off` (parts knocked out, their mode): each map beside
    the same with those parts off."""
    for method in methods:
        try:
            att = explain_access.attribute(model_id, text, target, contrast, method, kind)
        except engine_access.UnsupportedPrediction as exc:
            st.info(ui.one_line(exc))
            return
        except (engine_access.EngineError, engine_access.TextError) as exc:
            # a target it cannot spell, contrast = target, a text past the caps
            st.warning(ui.one_line(exc))
            return
        if off is None:
            attribution_map(att, f"{name}-{method}", {**settings, "method": method})
            continue
        on_col, off_col = st.columns(2)
        with on_col:
            st.caption("Every part on")
            attribution_map(att, f"{name}-{method}", {**settings, "method": method})
        with off_col:
            st.caption(f"With {safe_md(off[0])} off ({off[1]})")   # typed: no markdown
            try:
                gone = explain_access.attribute(model_id, text, target, contrast, method, kind,
                                                ablate=off[0], ablate_mode=off[1])
            except (engine_access.UnsupportedPrediction, engine_access.EngineError) as exc:
                st.warning(ui.one_line(exc))
                continue
            attribution_map(gone, f"{name}-{method}-off", {**settings, "method": method,
                                                           "ablate": off[0],
                                                           "ablate_mode": off[1]})
    with ui.guarded("Attention rollout"):
        rollout_map(model_id, text, kind, name, settings)


def attribution_map(att, name: str, settings: dict) -> None:
    label = METHOD_LABELS[att.method]
    vs = f" rather than {att.contrast!r}" if att.contrast else ""
    title = f"{label}: why {att.target!r}{vs}"
    words = xf.attribution_words(att.words, att.scores, title,
                                 signed=METHODS[att.method]["signed"])
    ui.plotly_chart(words, key=f"why-words-{name}")
    bars = xf.attribution_bars(att.words, att.scores, f"{label}, per word")
    ui.plotly_chart(bars, key=f"why-bars-{name}")
    st.caption(safe_md(f"f = {att.f_means}: {att.f:.3f} (natural log). ")
               + safe_md(METHODS[att.method]["note"]) + " " + safe_md(conventions(att)))
    st.caption(safe_md(faithfulness(att)))
    if st.toggle("Show the pieces", key=f"why-pieces-{name}"):
        st.dataframe(pieces_table(att), hide_index=True)
    table = pd.DataFrame({"word": att.words, "score": att.scores})
    export.figure_downloads(words, f"why-{name}", table, settings)


def conventions(att) -> str:
    if att.completeness_gap is not None:         # integrated gradients
        rel = att.completeness_gap / max(abs(att.f - att.f_baseline), 1e-12)
        return (f"Baseline: {att.baseline}; f(baseline) = {att.f_baseline:.3f}. {att.steps} "
                f"steps; completeness gap |Σ scores − (f − f(baseline))| = "
                f"{att.completeness_gap:.2g} ({rel:.1%} of f − f(baseline)), "
                + ("within 1%." if att.converged else
                   "NOT within 1% even at the most steps: read the map with care."))
    if not METHODS[att.method]["additive"]:
        return (f"A removed word's pieces are replaced by {att.absent}. A word is removed "
                "whole, so its score is not the sum of its pieces'.")
    if not METHODS[att.method]["signed"]:
        return ("Scores of a word are the sums over its pieces; a score says how much, not "
                "which way.")
    return "Scores of a word are the sums over its pieces; positive raises f."


def faithfulness(att) -> str:
    """ERASER's two measures (DeYoung et al. 2020) in words, against a random order."""
    comp, rcomp = att.comprehensiveness, att.random_comprehensiveness
    suff, rsuff = att.sufficiency, att.random_sufficiency
    verdict = ("beats a random order on both" if comp > rcomp and suff < rsuff else
               "beats a random order on one of the two" if comp > rcomp or suff < rsuff else
               "does no better than a random order: do not trust it here")
    return (f"How far to trust this map: removing its top 10/20/50% of words lowers f by "
            f"{comp:.2f} on average (random words: {rcomp:.2f}; higher is better); keeping "
            f"only those words lowers f by {suff:.2f} (random words: {rsuff:.2f}; lower is "
            f"better). This map {verdict}.")


def pieces_table(att) -> pd.DataFrame:
    p2w = np.asarray(att.piece_to_word)
    return pd.DataFrame({"piece": list(att.pieces),
                         "word": [att.words[w] if w >= 0 else "(special)" for w in p2w],
                         "score": att.piece_scores})


def rollout_map(model_id: str, text: str, kind: str, name: str, settings: dict) -> None:
    try:
        roll = explain_access.rollout_words(model_id, text, kind)
    except engine_access.UnsupportedPrediction as exc:
        st.caption(f"Attention rollout: {ui.one_line(exc)}")
        return
    fig = xf.attribution_words(roll.words, roll.scores, "Attention rollout (for comparison)",
                               signed=False, zlabel="share")
    ui.plotly_chart(fig, key=f"why-rollout-{name}")
    st.caption("Abnar & Zuidema 2020: how much of the explained position's top-layer state "
               "flows from each word. It does not know the target, so it is not an "
               "attribution of f; the rest of the share goes to special tokens.")
    export.figure_downloads(fig, f"rollout-{name}",
                            pd.DataFrame({"word": roll.words, "share": roll.scores}),
                            {**settings, "method": "rollout"})


def predictions_view(inputs: state.Inputs, shown: list[Shown],
                     off: tuple[str, str] | None = None) -> None:
    """The Predictions page's section: the predictions of one kind, every model side by side,
    each explained for the same question (and with the parts `off` knocked out, beside)."""
    st.subheader("Why this word?")
    able = [s for s in shown if "attribution" in engine_access.capabilities(s.model_id)]
    if not st.toggle("Explain these predictions", key=state.url_key("why", bool, default=False),
                     help="Which words of the sentence raise or lower the prediction of a word: "
                          + ", ".join(v["label"] for v in METHODS.values()) + "."):
        return
    if not able:
        st.info("None of the models shown here can explain its predictions.")
        return
    kinds = list(dict.fromkeys(s.kind for s in able))
    key = state.url_key("why_kind", str, default=kinds[0])
    if st.session_state[key] not in kinds:
        st.session_state[key] = kinds[0]
    kind = st.radio("Explain", kinds, format_func=KIND_LABELS.__getitem__, horizontal=True,
                    key=key)
    row = [s for s in able if s.kind == kind]
    predicted = tuple(dict.fromkeys(w for s in row for w in s.candidates))
    target, contrast, methods = question("why", predicted)
    for col, s in zip(st.columns(len(row)), row):
        with col:
            word = target or (s.candidates[0] if s.candidates else "")
            st.markdown(f"**{safe_md(s.title)} · {safe_md(s.model_id)}**")
            if not word:
                st.info("Type a target word.")
                continue
            explain(s.model_id, s.text, kind, word, contrast, methods, s.name,
                    inputs.settings(model=s.model_id, kind=kind, context=s.text, target=word,
                                    contrast=contrast), off)
