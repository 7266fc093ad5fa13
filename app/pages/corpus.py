"""Corpus: thousands of occurrences of a word from an indexed corpus (Context Atlas, Coenen et
al. 2019), clustered; click one for its sentence and its nearest contexts anywhere in the
corpus (exBERT's search); or search the corpus for contexts like a sentence of your own."""
import pandas as pd
import streamlit as st

from app import corpus_access, state, ui
from app import selection as sel
from app.corpus_builds import JUST_BUILT, build_offer, delete_offer
from app.corpus_maps import GRID_POINTS, MAX_POINTS, grid_map, word_map
from app.engine_access import MAX_CHARS
from app.results import PROJECTIONS
from app.safe import safe_md

# no t-SNE: its cost grows fastest with the thousands of points a corpus map holds
METHODS = {label: method for label, method in PROJECTIONS.items() if method != "tsne"}
QUERY_TEXT, QUERY_WORD = "corpus_query_text", "corpus_query_word"
WORD_CHARS = 40         # the word boxes' cap; a sentence's is the engine's (MAX_CHARS)


def choose_index():
    found = corpus_access.corpus_indexes()
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
    smollm2-135m's 31 layers names those seven, not "layers 0–30")."""
    layers = list(layers)
    if len(layers) == 1:
        return f"layer {layers[0]}"
    if layers == list(range(layers[0], layers[-1] + 1)):
        return f"layers {layers[0]}–{layers[-1]}"
    return "layers " + ", ".join(map(str, layers))


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
               f"compared with every occurrence in the index ({safe_md(manifest.model)}, cosine).")
    c1, c2 = st.columns([4, 1])
    text = state.url_text_input(c1, "Sentence", QUERY_TEXT, MAX_CHARS)
    word = state.url_text_input(c2, "Word", QUERY_WORD, WORD_CHARS)
    if text.strip() and word.strip():
        with ui.guarded():
            neighbour_table(corpus_access.corpus_search(folder, text, word.strip(), layer, 10))


def render(inputs: state.Inputs) -> None:
    st.title("Corpus")
    st.caption("One word across a whole corpus: every occurrence embedded once into an index "
               "(`ctxlens index`), mapped and clustered here.")
    folder = choose_index()
    if folder is None:
        build_offer(have_indexes=False)
        return
    build_offer(have_indexes=True)
    manifest = corpus_access.corpus_manifest(folder)
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
                    lambda i, k: corpus_access.corpus_grid_neighbours_of(folder, word, GRID_POINTS,
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
                        lambda i, _: corpus_access.corpus_neighbours_of(folder, word, layer,
                                                                        MAX_POINTS, i, 10),
                        lambda _: manifest.layer_names[manifest.layers.index(layer)])
    search_box(folder, manifest, layer)


ui.run_page(render)
