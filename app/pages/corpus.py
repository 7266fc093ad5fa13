"""Corpus: thousands of occurrences of a word from an indexed corpus (Context Atlas, Coenen et
al. 2019), clustered; click one for its sentence and its nearest contexts anywhere in the
corpus (exBERT's search); or search the corpus for contexts like a sentence of your own."""
import re
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from app import compute, export, figures, state, ui
from app import selection as sel
from app.safe import safe_md
from app.text import MAX_CHARS

METHODS = {"PCA": "pca", "UMAP": "umap"}
MAX_POINTS = 3000
GRID_POINTS = 1000     # in every layer's panel at once: 7 panels of 1,000 points stay quick
QUERY_TEXT, QUERY_WORD = "corpus_query_text", "corpus_query_word"
WORD_CHARS = 40         # the word boxes' cap; a sentence's is the engine's (MAX_CHARS)
JUST_BUILT = "_corpus_just_built"


def choose_index():
    found = compute.corpus_indexes()
    if not found:
        return None
    labels = {str(p): f"{p.name}: {m.model}, {m.corpus}, {m.n_sentences:,} sentences, "
                      f"{layers_label(m.layers)}" for p, m in found}
    key = state.url_key("corpus_index", str, default=str(found[0][0]), choices=labels)
    built = st.session_state.pop(JUST_BUILT, None)     # set before the widget exists, as asked
    if built in labels:
        st.session_state[key] = built
    elif st.session_state.get(key) not in labels:      # an index deleted since
        st.session_state[key] = str(found[0][0])
    return st.selectbox("Index", list(labels), format_func=labels.__getitem__, key=key)


def layers_label(layers) -> str:
    """"layers 0–6" for a run of layers, "layers 0, 5, 10" for some (an index of seven of
    smollm2-135m's 31 read "layers 0–30")."""
    layers = list(layers)
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}–{layers[-1]}"
    return "layers " + ", ".join(map(str, layers))


def build_offer(have_indexes: bool) -> None:
    """Build Brown for any installed model at the layers chosen: the page's main content with
    no index yet, behind a toggle under the index choice otherwise."""
    if not compute.index_changes_allowed():
        if have_indexes:
            st.caption(compute.READ_ONLY_NOTE)
        else:
            st.info(f"No corpus index yet. {compute.READ_ONLY_NOTE}")
        return
    models = compute.brown_index_models()
    if not models:
        if not have_indexes:
            st.info("No index yet, and no installed model to build one with (`ctxlens models`).")
        return
    if not have_indexes:
        st.info("No corpus index yet. Build one of the Brown corpus (57k sentences, 1.16M "
                "words) here, or with `make index` from a terminal; an interrupted build "
                "continues where it stopped.")
    # a toggle, not an expander: an expander's content runs (and would load a model) closed
    elif not st.toggle("Build a Brown index for another model or other layers",
                       key="corpus_build_more"):
        return
    with st.container(border=have_indexes):
        model = st.selectbox("Model", models, key="corpus_build_model")
        try:
            shape = compute.layer_shape(model)
        except Exception as exc:  # noqa: BLE001 - one line, the page stays
            ui.show_error(exc)
            return
        n = len(shape.names)
        default, most = compute.brown_default_layers(n)
        layers = st.multiselect(
            "Layers", list(range(n)), default=default,
            format_func=lambda i: f"{i}: {shape.names[i]}", key=f"corpus_build_layers-{model}",
            help=f"Every layer for a model of up to {most}; a deeper one gets "
                 f"{most} evenly spaced unless you choose others.")
        if not layers:
            st.warning("Choose at least one layer to index.")
            return
        folder = compute.brown_index_path(model, layers, n)
        state = compute.brown_index_state(folder)
        if state == "complete":
            st.caption(f"Already built: {folder.name}, in the Index list above.")
            return
        size = compute.brown_index_bytes(len(layers), shape.dim)
        st.caption(f"{len(layers)} of {n} layers ({shape.dim} dimensions each) into {folder}: "
                   f"about {size / 2**30:.1f} GiB on disk. The time depends on the model; the "
                   "bar shows the time left once the first sentences are in. Leaving the page "
                   "or changing a setting stops the build; building again continues it."
                   + (" A build of these layers stopped before the end: this continues it."
                      if state == "partial" else ""))
        free = compute.free_bytes(folder)
        if size > free:
            st.warning(f"That disk has {free / 2**30:.1f} GiB free, less than the index needs: "
                       "choose fewer layers, or free some space first (a build that fills the "
                       "disk stops and keeps what it wrote).")
        verb = "Continue" if state == "partial" else "Build"
        if state == "partial" and st.button("Delete what the stopped build wrote",
                                            key="corpus_delete_partial"):
            delete_index(str(folder))
        if st.button(f"{verb} the Brown index for {model}", key="corpus_build"):
            bar = st.progress(0.0, text=f"Embedding Brown with {model} …")
            try:
                compute.build_brown_index(model, layers, folder, ui.build_progress(
                    bar, f"Embedding Brown with {model}"))
            except Exception as exc:  # noqa: BLE001 - one line, the page stays
                ui.show_error(exc)
                return
            bar.progress(1.0, text="Done")
            st.session_state[JUST_BUILT] = str(folder)     # the page opens the new index
            st.rerun()


def delete_offer(folder: str, manifest) -> None:
    """The app's own indexes (those built here) can go again: Brown at seven layers of a 135M
    model takes 9.5 GiB."""
    if not compute.app_owned(folder) or not compute.index_changes_allowed():
        return
    name = Path(folder).name
    with st.popover(f"Delete {name}"):
        st.caption(f"{manifest.bytes_on_disk / 2**30:.1f} GiB on disk; building it again takes "
                   "as long as the first time.")
        if st.button(f"Delete {name} now", key="corpus_delete", type="primary"):
            delete_index(folder)


def delete_index(folder: str) -> None:
    """Delete one of the app's indexes and draw the page again; a refusal is one line."""
    try:
        compute.remove_index(folder)
    except Exception as exc:  # noqa: BLE001 - one line, the page stays
        ui.show_error(exc)
        return
    st.rerun()


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
    texts = compute.corpus_texts(folder, tuple(int(s) for s in sids))
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
    vec, sids, pos = compute.corpus_occurrences(folder, word, layer, MAX_POINTS)
    if _too_few(word, len(vec)):
        return None
    total = compute.corpus_count(folder, word, layer)
    sentences, colour, how, hover = _points(
        folder, word, sids, labels_spec,
        lambda: compute.corpus_clusters(folder, word, layer, MAX_POINTS))
    coords = compute.corpus_projection(folder, word, layer, MAX_POINTS, method)
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
    vec, sids, pos = compute.corpus_layer_occurrences(folder, word, GRID_POINTS)
    if _too_few(word, len(sids)):
        return None
    total = compute.corpus_count(folder, word, manifest.layers[0])
    name = manifest.layer_names[manifest.layers.index(layer)]
    sentences, colour, how, hover = _points(
        folder, word, sids, labels_spec,
        lambda: compute.corpus_grid_clusters(folder, word, GRID_POINTS, layer))
    if not parse_rules(labels_spec):
        how += f" at {name}"
    coords = compute.corpus_grid_projection(folder, word, GRID_POINTS, method)
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


def neighbour_table(hits) -> None:
    st.dataframe(pd.DataFrame({"cosine": [round(h.cosine, 4) for h in hits],
                               "word": [h.word for h in hits],
                               "sentence_id": [h.sentence_id for h in hits],
                               "sentence": [h.sentence for h in hits]}),
                 hide_index=True, width="stretch")


def clicked(found, chart: str, n_panels: int, hint: str, nearest, layer_name) -> None:
    """The clicked point's sentence and its nearest contexts in the corpus: nearest(point,
    panel) finds them, layer_name(panel) names the layer they were read at."""
    sids, _, sentences = found
    picked, panel = sel.clicked_occurrences(st.session_state.get(chart), len(sids), n_panels)
    if not picked:
        st.caption(hint)
        return
    i = picked[0]
    st.text(f"{int(sids[i])}: {sentences[i]}")
    hits = nearest(i, panel)
    st.markdown(f"**Nearest contexts at {layer_name(panel)}**")
    neighbour_table(hits)


def search_box(folder, manifest, layer) -> None:
    st.subheader("Search the corpus for contexts like this one")
    st.caption("A sentence of your own (or the point clicked on Polysemy clusters or selected on "
               "Layers side by side) and the word to look up; its vector at this layer is "
               f"compared with every occurrence in the index ({manifest.model}, cosine).")
    c1, c2 = st.columns([4, 1])
    text = state.url_text_input(c1, "Sentence", QUERY_TEXT, MAX_CHARS)
    word = state.url_text_input(c2, "Word", QUERY_WORD, WORD_CHARS)
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
        build_offer(have_indexes=False)
        return
    build_offer(have_indexes=True)
    manifest = compute.corpus_manifest(folder)
    delete_offer(folder, manifest)
    c1, c2, c3 = st.columns([2, 3, 2])
    word = state.url_text_input(c1, "Word", "corpus_word", WORD_CHARS,
                                default=inputs.target or "bank").strip()
    key = state.url_key("corpus_layer", int, default=manifest.layers[-1],
                        choices=manifest.layers)
    if st.session_state.get(key) not in manifest.layers:   # another index opened: its top
        st.session_state[key] = manifest.layers[-1]        # layer, not its first (char CNN)
    layer = c2.select_slider("Layer", manifest.layers, key=key)
    method = METHODS[c3.radio("Projection", list(METHODS), horizontal=True,
                                 help=ui.PROJECTION_HELP, key=state.url_key(
        "corpus_projection", str, default="PCA", choices=METHODS))]
    with st.expander("Colour by your own sense labels (keywords in the sentence)"):
        spec = st.text_area("One label a line: label: keyword, keyword", key=state.url_key(
            "corpus_labels", str, default=""), placeholder="river: river, water, shore\n"
                                                           "money: money, loan, account")
    every_layer = st.toggle(
        "Every layer side by side", key=state.url_key("corpus_grid", bool, default=False),
        help="The same occurrences at every layer of the index, one aligned panel a layer; the "
             "Layer slider then picks the layer whose clusters colour them.")
    if word and every_layer:
        found = grid_map(inputs, folder, manifest, word, layer, method, spec)
        if found is not None:
            clicked(found, "corpus-grid", len(manifest.layers),
                    "Click a point in any panel to see its nearest contexts in the corpus at "
                    "that layer.",
                    lambda i, k: compute.corpus_grid_neighbours_of(folder, word, GRID_POINTS,
                                                                   i, k, 10),
                    lambda k: manifest.layer_names[k])
    elif word:
        main, side = st.columns([3, 2])
        with main:
            found = word_map(inputs, folder, manifest, word, layer, method, spec)
        with side:
            if found is not None:
                clicked(found, "corpus-map", 1,
                        "Click a point to see its nearest contexts in the corpus.",
                        lambda i, _: compute.corpus_neighbours_of(folder, word, layer,
                                                                  MAX_POINTS, i, 10),
                        lambda _: manifest.layer_names[manifest.layers.index(layer)])
    search_box(folder, manifest, layer)


ui.run_page(render)
