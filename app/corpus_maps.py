"""The Corpus page's maps of one word's occurrences in an index: at one layer, or at every
layer side by side (aligned as on Layers side by side), coloured by k-means clusters or by the
user's keyword labels, each with its CSV."""
from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from app import corpus_access, export, figures, state, ui
from app.safe import safe_md

MAX_POINTS = 3000
# in every layer's panel at once: 7 panels of 1,000 points stay quick
GRID_POINTS = 1000


def _too_few(word: str, n: int) -> bool:
    if n == 0:
        st.warning(f"'{safe_md(word)}' does not occur in this index (words are matched whole, "
                   "ignoring case).")
    elif n < 3:
        st.warning(f"'{safe_md(word)}' occurs {n} times: too few to map.")
    return n < 3


def _points(folder: str, word: str, sids, labels_spec: str, clusters):
    """(sentences, colour labels, how they were coloured, hover texts) of a map's points;
    clusters() is called only without keyword labels."""
    texts = corpus_access.corpus_texts(folder, tuple(int(s) for s in sids))
    sentences = [texts.get(int(s), "") for s in sids]
    rules = parse_rules(labels_spec)
    if rules:
        colour, how = [label_by_rules(s, rules) for s in sentences], "your keyword labels"
    else:
        colour = [f"cluster {c + 1}" for c in clusters()]
        how = f"{len(set(colour))} clusters (k-means, k chosen by silhouette)"
    hover = [f"{int(s)}: " + figures.bold_word(t, word) for s, t in zip(sids, sentences)]
    return sentences, colour, how, hover


def word_map(inputs: state.Inputs, folder: str, manifest, word: str, layer: int, method: str,
             labels_spec: str):
    vec, sids, pos = corpus_access.corpus_occurrences(folder, word, layer, MAX_POINTS)
    if _too_few(word, len(vec)):
        return None
    total = corpus_access.corpus_count(folder, word, layer)
    sentences, colour, how, hover = _points(
        folder, word, sids, labels_spec,
        lambda: corpus_access.corpus_clusters(folder, word, layer, MAX_POINTS))
    coords = corpus_access.corpus_projection(folder, word, layer, MAX_POINTS, method)
    fig = figures.layer_grid([(manifest.layer_names[manifest.layers.index(layer)], coords)],
                             colour, hover,
                             title=f"'{word}' in {manifest.corpus}: {len(vec):,} of {total:,} "
                                   f"occurrences, {manifest.model}", cols=1)
    fig.update_layout(height=620, legend_title_text="colour")
    ui.plotly_chart(fig, key="corpus-map", on_select="rerun",
                    selection_mode=("points", "box", "lasso"))
    st.caption(f"Coloured by {how}. Click a point for its sentence and its nearest contexts "
               "in the whole corpus.")
    # positions as the index and `ctxlens neighbours --json` give them (from 0), like the ids
    table = pd.DataFrame({"sentence_id": sids, "position": pos, "label": colour,
                          "x": coords[:, 0], "y": coords[:, 1], "sentence": sentences})
    export.figure_downloads(fig, f"corpus-{word}-L{layer}", table,
                            inputs.settings(index=folder, model=manifest.model,
                                            corpus=manifest.corpus, word=word, layer=layer,
                                            projection=method, colour=how,
                                            points=int(len(vec))))
    return sids, pos, sentences


def grid_map(inputs: state.Inputs, folder: str, manifest, word: str, layer: int, method: str,
             labels_spec: str):
    """The same occurrences at every layer of the index, one aligned panel a layer (as on
    Layers side by side), coloured by the clusters at the chosen layer or by keyword labels."""
    vec, sids, pos = corpus_access.corpus_layer_occurrences(folder, word, GRID_POINTS)
    if _too_few(word, len(sids)):
        return None
    total = corpus_access.corpus_count(folder, word, manifest.layers[0])
    name = manifest.layer_names[manifest.layers.index(layer)]
    sentences, colour, how, hover = _points(
        folder, word, sids, labels_spec,
        lambda: corpus_access.corpus_grid_clusters(folder, word, GRID_POINTS, layer))
    if not parse_rules(labels_spec):
        how += f" at {name}"
    coords = corpus_access.corpus_grid_projection(folder, word, GRID_POINTS, method)
    fig = figures.layer_grid(list(zip(manifest.layer_names, coords)), colour, hover,
                             title=f"'{word}' in {manifest.corpus}: {len(sids):,} of {total:,} "
                                   f"occurrences at every layer, {manifest.model}")
    rows = -(-len(manifest.layers) // figures.GRID_COLS)
    fig.update_layout(height=120 + 300 * rows, legend_title_text="colour")
    ui.plotly_chart(fig, key="corpus-grid", on_select="rerun",
                    selection_mode=("points", "box", "lasso"))
    st.caption(f"Coloured by {how}; the same {len(sids):,} occurrences in every panel "
               f"(at most {GRID_POINTS:,} here). Click a point for its sentence and its nearest "
               "contexts in the whole corpus at that panel's layer.")
    # positions as the index and `ctxlens neighbours --json` give them (from 0), like the ids
    table = pd.DataFrame({"sentence_id": sids, "position": pos, "label": colour,
                          "sentence": sentences})
    for k, lay in enumerate(manifest.layers):
        table[f"x_L{lay}"], table[f"y_L{lay}"] = coords[k, :, 0], coords[k, :, 1]
    export.figure_downloads(fig, f"corpus-{word}-layers", table,
                            inputs.settings(index=folder, model=manifest.model,
                                            corpus=manifest.corpus, word=word, layer=layer,
                                            layers=list(manifest.layers), projection=method,
                                            colour=how, points=int(len(sids))))
    return sids, pos, sentences


def parse_rules(spec: str) -> list[tuple[str, set[str]]]:
    """"river: water, shore" lines -> [(label, {keywords})]; malformed lines are skipped."""
    rules = []
    for line in spec.splitlines():
        label, _, words = line.partition(":")
        keys = {w.strip().lower() for w in words.split(",") if w.strip()}
        if label.strip() and keys:
            rules.append((label.strip(), keys))
    return rules


def label_by_rules(sentence: str, rules) -> str:
    words = {w.lower() for w in re.findall(r"\w+", sentence)}
    for label, keys in rules:
        if words & keys:
            return label
    return "?"
