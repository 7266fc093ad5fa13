"""The user's sense labels, one per sentence: edited in a table, or suggested by clustering a
model's top layer (saying when the split is weak); and how well each layer of each model keeps
the labelled senses apart."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import streamlit as st

from app import export, figures, results, state, ui
from app.safe import safe_md


def sense_editor(inputs: state.Inputs, suggest_from: tuple[str, str] | None) -> list[str]:
    """Editable sense label per sentence, with a clustering suggestion."""
    labels = state.sense_labels(inputs.sentences)
    with st.expander("Sense labels (edit, or let clustering suggest them)", expanded=False):
        c1, c2, c3 = st.columns([1, 1, 2])
        k = c1.number_input("senses", 2, 6, 2, key="suggest_k")
        how = c2.selectbox("clustering", ["kmeans", "agglomerative"], key="suggest_how")
        if c3.button("Suggest senses", disabled=suggest_from is None,
                     help=f"Cluster {suggest_from[1] if suggest_from else ''}'s top layer"
                     ) and suggest_from:
            with ui.guarded():  # the model may fail to load: say so here and keep the page
                found = results.suggested_senses(suggest_from[1], inputs.sentences,
                                                 inputs.target, inputs.pool, int(k), how)
                for row, lab in zip(found.rows, found.clusters):
                    labels[row] = f"sense {lab + 1}"
                state.set_sense_labels(labels, inputs.sentences)
                st.session_state["_suggested"] = suggestion_note(found.quality, suggest_from[1])
        if st.session_state.get("_suggested"):
            kind, text = st.session_state["_suggested"]
            (st.warning if kind == "weak" else st.caption)(text)
        # the column to edit first: on a phone long sentences push it off the right edge
        table = pd.DataFrame({"sense": labels, "sentence": inputs.sentences})
        # A keyed table keeps its edits while its values change, so its key changes only when
        # the labels change from outside it (a suggestion, a preset, edited sentences). Keyed
        # by the labels themselves, each edit would make a new table and the next edit, sent to
        # the old one, would be lost: every second label typed.
        if st.session_state.get("_senses_out") != (inputs.sentences, labels):
            st.session_state["_senses_version"] = st.session_state.get("_senses_version", 0) + 1
        edited = st.data_editor(table, disabled=["sentence"], hide_index=True,
                                width="stretch",
                                key=f"senses-{st.session_state['_senses_version']}")
        # "bird " and "bird" are one sense (phone keyboards add the space)
        labels = [str(s).strip() if s and str(s).strip() else state.UNLABELLED
                  for s in edited["sense"]]
        state.set_sense_labels(labels, inputs.sentences)
        # as the next run reads them back (stripped, "|" as "/"), or a label typed with a
        # trailing space would read as changed from outside and drop the next edit
        st.session_state["_senses_out"] = (inputs.sentences,
                                           state.sense_labels(inputs.sentences))
    return labels


def suggestion_note(q: results.SplitQuality, model_id: str) -> tuple[str, str]:
    """Say how the suggested split came out, and when it is weak: it is the model's grouping,
    not the senses (minilm-l6 splits the mouse preset 5 : 3)."""
    text = (f"{model_id}'s top layer splits the sentences {' : '.join(map(str, q.sizes))} "
            f"(silhouette {q.silhouette:.2f})")
    if q.weak:
        return "weak", (text + ": a weak split (silhouette under 0.1, or a sense of one "
                        "sentence), so read it as this layer's grouping rather than the "
                        "senses; edit the labels where you know better.")
    return "ok", text + "."


def separation_chart(inputs, models, labels) -> None:
    st.subheader("Sense separation per layer")
    st.caption("How well each layer keeps your senses apart. Silhouette: for each sentence, "
               "how much closer it is to its own sense than to the nearest other one, from "
               "−1 (mixed up) to 1 (cleanly apart). Nearest-centroid: the share of sentences "
               "whose vector lies nearest the average of its own sense, each left out of "
               "that average (leave-one-out).")
    if len({l for l in labels if l != state.UNLABELLED}) < 2:
        st.info("Label at least two senses (or press Suggest senses) to see separation.")
        return
    sil, acc = {}, {}
    for _, model_id in models:
        sep = results.separation(model_id, inputs.sentences, inputs.target, inputs.pool,
                                 tuple(labels), state.UNLABELLED)
        sil[model_id], acc[model_id] = sep.silhouette, sep.nearest_centroid
    n_unlabelled = sum(l == state.UNLABELLED for l in labels)
    if n_unlabelled:
        st.caption(f"{n_unlabelled} unlabelled sentence{'s' if n_unlabelled > 1 else ''} "
                   f"('{state.UNLABELLED}') left out of both measures.")
    counts = Counter(l for l in labels if l != state.UNLABELLED)
    single = sorted(s for s, n in counts.items() if n == 1)
    charts = [("silhouette", sil, "silhouette (cosine)")]
    if single:
        named = ", ".join(f"'{safe_md(s)}'" for s in single)
        st.info(f"Nearest-centroid accuracy is left out: it holds each sentence out in turn, so "
                f"every sense needs at least two sentences ({named} "
                "has one).")
    else:
        charts.append(("nearest-centroid", acc, "leave-one-out accuracy"))
    for col, (name, series, axis) in zip(st.columns(2), charts):
        fig = figures.per_layer_lines(series, name.capitalize(), axis, relative=True)
        with col:
            ui.plotly_chart(fig, key=f"sep-{name}")
            table = pd.concat([pd.DataFrame({"model": m, "layer": np.arange(len(v)), name: v})
                               for m, v in series.items()])
            export.figure_downloads(fig, f"separation-{name}", table, inputs.settings())
