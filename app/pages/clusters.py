"""Polysemy clusters: the target word's vectors across sentences, per model and layer."""
import numpy as np
import pandas as pd
import streamlit as st

from app import corpus_access, engine_access, export, figures, results, state, ui
from app import selection as sel
from app.safe import safe_md
from app.senses import sense_editor, separation_chart

NEAR_ONE_POINT = 0.9   # mean cosine above which the baseline's points are "nearly one vector"


def overlap_notes(inputs, model_id: str, tv, layer: int, overlaps) -> None:
    """Say why points coincide instead of leaving a lone dot (a context-free layer, or a
    left-to-right model that has read only the shared words before the target)."""
    n = len(tv.rows)
    if overlaps[0] and len(overlaps[0][0]) == n:
        st.caption(f"{tv.layer_names[0]} is context-free: all {n} sentences give "
                   f"'{safe_md(inputs.target)}' the same vector there, so the baseline is one "
                   "point.")
    elif n > 1:
        # BERT's and GPT-2's input layer adds the word's position in the sentence: the points
        # differ a little, and a projection stretched to fill its panel makes that look large
        sims = results.cosine_matrix(model_id, inputs.sentences, inputs.target, inputs.pool, 0)
        cos = float((sims.sum() - n) / (n * (n - 1)))
        if cos >= NEAR_ONE_POINT:
            st.caption(f"{tv.layer_names[0]} holds the word and its position in the sentence, "
                       f"not its context: its {n} points are nearly one vector (mean cosine "
                       f"{cos:.3f}), spread out only because each panel is scaled to fill "
                       "its box.")
    shared = overlaps[1]
    if layer == 0 or not shared:
        return
    left_to_right = engine_access.family_row(engine_access.family_name(model_id)).left_to_right
    sizes = ", ".join(str(len(g)) for g in shared)
    lines = "; ".join(", ".join(str(tv.rows[i] + 1) for i in g) for g in shared)
    why = (f"they share the words before '{safe_md(inputs.target)}', and a left-to-right "
           "model has not read what follows" if left_to_right
           else "the model gives them the same vector")
    st.caption(f"Sentences {lines} coincide at {tv.layer_names[layer]} ({sizes} points, "
               f"marked ×k): {why}.")


def best_view(inputs, models, labels) -> tuple[str, int, float] | None:
    """(model, layer, silhouette) where the user's senses separate best, above the input
    layer: where the page opens (the separation chart below needs every model's vectors
    anyway); None without two labelled senses."""
    if len({lab for lab in labels if lab != state.UNLABELLED}) < 2:
        return None
    best = None
    for _, model_id in models:
        sep, failed = ui.attempt(results.separation, model_id, inputs.sentences, inputs.target,
                                 inputs.pool, tuple(labels))
        if failed:          # its own tab says why it cannot be shown
            continue
        sil = sep.silhouette
        if len(sil) > 1 and np.isfinite(sil[1:]).any():
            layer = int(np.nanargmax(sil[1:])) + 1
            if best is None or sil[layer] > best[2]:
                best = (model_id, layer, float(sil[layer]))
    return best


def opening_view(inputs, models, labels) -> tuple[str, int, float] | None:
    """The tab and layer the page opens on, said in a caption: chosen the first time these
    sentences have two labelled senses and then kept, so that editing a label does not move the
    reader to another tab (Streamlit reopens tabs on their default when it changes)."""
    best = best_view(inputs, models, labels)
    key = (tuple(inputs.sentences), inputs.target, tuple(m for _, m in models))
    kept = st.session_state.get("_opened_on")
    if best is not None and (kept is None or kept[0] != key):
        kept = st.session_state["_opened_on"] = (key, best)
    if kept is None or kept[0] != key:
        return None
    first = kept[1]
    if best is not None and best[:2] != first[:2]:
        st.caption(f"Opened on {safe_md(first[0])}, layer {first[1]}, where your senses "
                   f"separated best at first; with the labels as they are now, "
                   f"{safe_md(best[0])}, layer {best[1]} separates them best (silhouette "
                   f"{best[2]:.2f}, below).")
    elif best is not None:
        st.caption(f"Opened on {safe_md(best[0])}, layer {best[1]}: of the models here, your "
                   f"senses separate best there (silhouette {best[2]:.2f}, below). Every tab "
                   "and layer is one click away.")
    return first


def model_tab(inputs, model_id, method, labels,
               best_layer: int | None = None) -> results.TargetVectors | None:
    tv = results.target_vectors(model_id, inputs.sentences, inputs.target, inputs.pool)
    if not tv.rows:     # render said which sentences lack the target, once for every tab
        return None
    ui.repeated_target_note(inputs.target, tv.repeated)
    proj = results.project(model_id, inputs.sentences, inputs.target, inputs.pool, method)
    n_layers = len(tv.layer_names)
    key = state.url_key(f"layer_{model_id}")
    if not 0 <= st.session_state.get(key, n_layers - 1) < n_layers:
        st.session_state[key] = n_layers - 1
    st.session_state.setdefault(key, n_layers - 1 if best_layer is None else best_layer)
    if engine_access.model_note(model_id):   # what it is: a bundled one says how little it read
        st.caption(engine_access.model_note(model_id))
    layer = st.slider("Layer", 0, n_layers - 1, key=key,
                      help="0 is the input embedding layer: the word (and, in BERT and "
                           "GPT-2, its position), before any context")
    hover = [inputs.sentences[r] for r in tv.rows]
    hover_bold = [figures.bold_word(h, inputs.target) for h in hover]
    point_labels = [labels[r] for r in tv.rows]
    overlaps = [results.identical_groups(tv.vectors[0]),
                results.identical_groups(tv.vectors[layer])]
    fig = figures.projection_scatter(
        [(f"{tv.layer_names[0]} (baseline)", proj.coords[0]),
         (tv.layer_names[layer], proj.coords[layer])], point_labels, hover_bold,
        title=f"{model_id}: '{inputs.target}' in {len(tv.rows)} sentences", overlaps=overlaps,
        numbers=[r + 1 for r in tv.rows])
    ui.plotly_chart(fig, key=f"scatter-{model_id}", on_select="rerun",
                    selection_mode=("points", "box", "lasso"))
    to_corpus(inputs, model_id, tv)
    overlap_notes(inputs, model_id, tv, layer, overlaps)
    st.caption(proj.note + (f"; axes explain {sum(proj.explained):.0%} of the variance"
                            if proj.explained else ""))
    table = pd.DataFrame({**tv.occurrence_columns(inputs.pool, tv.layer_names[layer]),
                          "sentence": hover, "sense": point_labels,
                          "x": proj.coords[layer, :, 0], "y": proj.coords[layer, :, 1]})
    settings = inputs.settings(model=model_id, layer=layer, projection=method, seed=0)
    export.figure_downloads(fig, f"clusters-{model_id}-L{layer}", table, settings)
    sims = results.cosine_matrix(model_id, inputs.sentences, inputs.target, inputs.pool, layer)
    names = [f"{r + 1}: {labels[r]}" for r in tv.rows]
    heat = figures.similarity_heatmap(sims, names, f"Cosine similarity, {tv.layer_names[layer]}")
    ui.plotly_chart(heat, key=f"cos-{model_id}")
    export.figure_downloads(heat, f"cosine-{model_id}-L{layer}",
                            pd.DataFrame(sims, columns=names).assign(label=names), settings)
    meta = pd.DataFrame({**tv.index_columns(), "sentence": hover, "sense": point_labels})
    # the NPZ holds every layer ([layers, sentences, dim]), the projector file the one shown
    export.embedding_downloads({"vectors": tv.vectors}, tv.vectors[layer], meta,
                               f"{inputs.target}-{model_id}-L{layer}",
                               info={"model": model_id, "target": inputs.target,
                                     "pooling": inputs.pool, "layers": list(tv.layer_names),
                                     "axes": "layer, sentence, dim"},
                               npz_name=f"{inputs.target}-{model_id}-all-layers")
    return tv


def to_corpus(inputs, model_id: str, tv) -> None:
    """A clicked point: its sentence, and (where a corpus index exists) a button that searches
    the corpus for contexts like it on the Corpus page."""
    picked = [i for i in sel.clicked_points(st.session_state.get(f"scatter-{model_id}"))
              if 0 <= i < len(tv.rows)]
    if not picked or not corpus_access.corpus_indexes():
        return
    sentence = inputs.sentences[tv.rows[picked[0]]]
    with st.container(key=f"corpus_from_{model_id}"):
        st.text(f"{tv.rows[picked[0]] + 1}: {sentence}")     # st.text: typed text stays text
    if st.button("Search the corpus for contexts like this", key=f"to_corpus_{model_id}"):
        st.session_state["corpus_query_text"] = sentence
        st.session_state["corpus_query_word"] = inputs.target
        st.switch_page("app/pages/corpus.py")


def render(inputs: state.Inputs) -> None:
    st.title("Polysemy clusters")
    st.caption("Where does one word's meaning split by context? Each point is the target word "
               "in one sentence; layer 0 (left) is the baseline: the input embedding, before any "
               "context is read.")
    # Each tab loads its own model, so the first chart shows while the next models load.
    models = ui.target_models(inputs)
    if not models:
        return
    methods = results.PROJECTIONS
    method = methods[st.radio("Projection", list(methods), horizontal=True,
                              help=ui.PROJECTION_HELP, key=state.url_key(
        "projection", str, default="PCA", choices=methods))]
    labels = sense_editor(inputs, models[-1])
    # once above the tabs, not once in each (the words are split alike for every model)
    missing = results.target_missing(inputs.sentences, inputs.target)
    if not ui.missing_target_note(inputs.target, missing, inputs.sentences):
        return
    names = [f"{state.family_name(f)}: {safe_md(m)}" for f, m in models]
    best = opening_view(inputs, models, labels)
    tabs = st.tabs(names, default=names[[m for _, m in models].index(best[0])] if best else None)
    shown = []
    for tab, (family, model_id) in zip(tabs, models):
        with tab, ui.guarded():          # a failing model keeps the other models' tabs
            layer = best[1] if best and best[0] == model_id else None
            if ui.prepared(model_id, inputs) and model_tab(inputs, model_id, method,
                                                            labels, layer) is not None:
                shown.append((family, model_id))
    if shown:
        separation_chart(inputs, shown, labels)


ui.run_page(render)
