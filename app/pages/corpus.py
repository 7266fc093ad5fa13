"""Corpus: thousands of occurrences of a word from an indexed corpus (Context Atlas, Coenen et
al. 2019), clustered; click one for its sentence and its nearest contexts anywhere in the
corpus (exBERT's search); or search the corpus for contexts like a sentence of your own."""
import html
import re

import numpy as np
import pandas as pd
import streamlit as st

from app import compute, export, figures, state, ui
from app import selection as sel

METHODS = {"PCA": "pca", "UMAP": "umap"}
MAX_POINTS = 3000
QUERY_TEXT, QUERY_WORD = "corpus_query_text", "corpus_query_word"


def choose_index():
    found = compute.corpus_indexes()
    if not found:
        return None
    labels = {str(p): f"{p.name}: {m.model}, {m.corpus}, {m.n_sentences:,} sentences, "
                      f"layers {m.layers[0]}–{m.layers[-1]}" for p, m in found}
    key = state.url_key("corpus_index", str, default=str(found[0][0]), choices=labels)
    return st.selectbox("Index", list(labels), format_func=labels.__getitem__, key=key)


def build_offer() -> None:
    model = compute.brown_index_model()
    if model is None:
        st.info("No index yet, and no installed model to build one with (`ctxlens models`).")
        return
    target = compute.brown_index_path(model)
    st.info(f"No corpus index yet. Build one of the Brown corpus (57k sentences, 1.16M words) "
            f"for {model}, every layer, into {target} (about 11 minutes on 2 cores; `make "
            "index` does the same from a terminal; an interrupted build continues where it "
            "stopped).")
    if st.button(f"Build the Brown index for {model}", key="corpus_build"):
        bar = st.progress(0.0, text="Loading the corpus and the model …")
        try:
            compute.build_brown_index(model, lambda done, total: bar.progress(
                done / total, text=f"Indexed {done:,} of {total:,} sentences"))
        except Exception as exc:  # noqa: BLE001 - one line, the page stays
            ui.show_error(exc)
            return
        bar.progress(1.0, text="Done")
        st.rerun()


def word_map(inputs: state.Inputs, folder: str, manifest, word: str, layer: int, method: str,
             labels_spec: str):
    vec, sids, pos = compute.corpus_occurrences(folder, word, layer, MAX_POINTS)
    total = compute.corpus_count(folder, word, layer)
    if len(vec) == 0:
        st.warning(f"'{word}' does not occur in this index (words are matched whole, "
                   "ignoring case).")
        return None
    if len(vec) < 3:
        st.warning(f"'{word}' occurs {len(vec)} times: too few to map.")
        return None
    texts = compute.corpus_texts(folder, tuple(int(s) for s in sids))
    sentences = [texts.get(int(s), "") for s in sids]
    rules = parse_rules(labels_spec)
    if rules:
        colour = [label_by_rules(s, rules) for s in sentences]
        how = "your keyword labels"
    else:
        colour = [f"cluster {c + 1}" for c in compute.corpus_clusters(folder, word, layer,
                                                                        MAX_POINTS)]
        how = f"{len(set(colour))} clusters (k-means, k chosen by silhouette)"
    coords = compute.corpus_projection(folder, word, layer, MAX_POINTS, method)
    hover = [f"{int(s)}: " + re.sub(rf"\b({re.escape(html.escape(word))})\b", r"<b>\1</b>",
                                    html.escape(t), count=1, flags=re.IGNORECASE)
             for s, t in zip(sids, sentences)]
    fig = figures.layer_grid([(manifest.layer_names[manifest.layers.index(layer)], coords)],
                             colour, hover,
                             title=f"'{word}' in {manifest.corpus}: {len(vec):,} of {total:,} "
                                   f"occurrences, {manifest.model}", cols=1)
    fig.update_layout(height=620, legend_title_text="colour")
    st.plotly_chart(fig, key="corpus-map", on_select="rerun",
                    selection_mode=("points", "box", "lasso"))
    st.caption(f"Coloured by {how}. Click a point for its sentence and its nearest contexts "
               "in the whole corpus.")
    table = pd.DataFrame({"sentence_id": sids, "position": pos + 1, "label": colour,
                          "x": coords[:, 0], "y": coords[:, 1], "sentence": sentences})
    export.figure_downloads(fig, f"corpus-{word}-L{layer}", table,
                            inputs.settings(index=folder, model=manifest.model,
                                            corpus=manifest.corpus, word=word, layer=layer,
                                            projection=method, colour=how,
                                            points=int(len(vec))))
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


def neighbour_table(hits) -> None:
    st.dataframe(pd.DataFrame({"cosine": [round(h.cosine, 4) for h in hits],
                               "word": [h.word for h in hits],
                               "sentence_id": [h.sentence_id for h in hits],
                               "sentence": [h.sentence for h in hits]}),
                 hide_index=True, width="stretch")


def clicked(folder, manifest, word, layer, found) -> None:
    sids, _, sentences = found
    picked, _ = sel.clicked_occurrences(st.session_state.get("corpus-map"), len(sids), 1)
    if not picked:
        st.caption("Click a point to see its nearest contexts in the corpus.")
        return
    i = picked[0]
    st.text(f"{int(sids[i])}: {sentences[i]}")
    hits = compute.corpus_neighbours_of(folder, word, layer, MAX_POINTS, i, 10)
    st.markdown(f"**Nearest contexts at {manifest.layer_names[manifest.layers.index(layer)]}**")
    neighbour_table(hits)


def search_box(folder, manifest, layer) -> None:
    st.subheader("Search the corpus for contexts like this one")
    st.caption("A sentence of your own (or the point selected on Layers side by side) and the "
               "word to look up; its vector at this layer is compared with every occurrence "
               f"in the index ({manifest.model}, cosine).")
    c1, c2 = st.columns([4, 1])
    text = c1.text_input("Sentence", key=state.url_key(QUERY_TEXT, str, default=""),
                         max_chars=1000)
    word = c2.text_input("Word", key=state.url_key(QUERY_WORD, str, default=""), max_chars=40)
    if text.strip() and word.strip():
        try:
            hits = compute.corpus_search(folder, text, word.strip(), layer, 10)
        except Exception as exc:  # noqa: BLE001 - one line
            ui.show_error(exc)
            return
        neighbour_table(hits)


def render(inputs: state.Inputs) -> None:
    st.title("Corpus")
    st.caption("One word across a whole corpus: every occurrence embedded once into an index "
               "(`ctxlens index`), mapped and clustered here.")
    folder = choose_index()
    if folder is None:
        build_offer()
        return
    manifest = compute.corpus_manifest(folder)
    c1, c2, c3 = st.columns([2, 3, 2])
    word = c1.text_input("Word", key=state.url_key("corpus_word", str,
                                                     default=inputs.target or "bank"),
                         max_chars=40).strip()
    layer = c2.select_slider("Layer", manifest.layers, key=state.url_key(
        "corpus_layer", int, default=manifest.layers[-1], choices=manifest.layers))
    method = METHODS[c3.radio("Projection", list(METHODS), horizontal=True, key=state.url_key(
        "corpus_projection", str, default="PCA", choices=METHODS))]
    with st.expander("Colour by your own sense labels (keywords in the sentence)"):
        spec = st.text_area("One label a line: label: keyword, keyword", key=state.url_key(
            "corpus_labels", str, default=""), placeholder="river: river, water, shore\n"
                                                           "money: money, loan, account")
    if word:
        main, side = st.columns([3, 2])
        with main:
            found = word_map(inputs, folder, manifest, word, layer, method, spec)
        with side:
            if found is not None:
                clicked(folder, manifest, word, layer, found)
    search_box(folder, manifest, layer)


ui.run_page(render)
