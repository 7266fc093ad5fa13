"""Compare layers: Ethayarajh (2019) statistics per layer, layer-by-layer linear CKA within each
model and between two models."""
import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, export, figures, results, state, ui

METRICS = {  # key: (title, y axis, what it says)
    "self_similarity": ("Self-similarity", "cosine",
                        "mean cosine between the same word in different sentences"),
    "intra_sentence": ("Intra-sentence similarity", "cosine",
                       "mean cosine between each word and its sentence's mean vector"),
    "anisotropy": ("Anisotropy baseline", "cosine",
                   "mean cosine between random words in random sentences"),
    "mev": ("Maximum explainable variance", "share",
            "variance of a word's vectors explained by their first principal component"),
}
# why a chart is empty: said under it instead of an empty axis
UNDEFINED = {
    "self_similarity": "Undefined here: no word occurs in two places of your sentences.",
    "mev": "Undefined here: no word occurs in two places of your sentences.",
    "intra_sentence": "Undefined here: it needs a sentence of at least two words (punctuation "
                      "is not counted).",
    "anisotropy": "Undefined here: it pairs words from two different sentences (and not the "
                  "same word twice); add a sentence.",
}


def metric_charts(inputs, geometry, adjusted: bool) -> None:
    cols = st.columns(2)
    for i, (key, (title, axis, meaning)) in enumerate(METRICS.items()):
        series = {}
        for model_id, (metrics, _) in geometry.items():
            source = metrics.adjusted() if adjusted and key != "mev" else metrics
            series[model_id] = getattr(source, key)
        if adjusted and key in ("self_similarity", "intra_sentence"):
            title = f"{title} − baseline"
        fig = figures.per_layer_lines(series, title, axis, relative=True)
        with cols[i % 2]:
            ui.plotly_chart(fig, key=f"metric-{key}")
            st.caption(meaning)
            if all(np.isnan(v).all() for v in series.values()):
                st.caption(why_undefined(key, geometry, adjusted))
            # the CSV alone must say what it holds: with the subtraction on, the same column
            # name would hold values lower by the whole baseline
            column = (f"{key}_minus_baseline" if adjusted and key in ("self_similarity",
                                                                      "intra_sentence") else key)
            table = pd.concat([pd.DataFrame({"model": m, "layer": np.arange(len(v)),
                                             column: v}) for m, v in series.items()])
            export.figure_downloads(fig, f"layers-{key}", table,
                                    inputs.settings(metric=key, adjusted=adjusted))


def why_undefined(key: str, geometry, adjusted: bool) -> str:
    """The reason a chart has no point: its own, or, minus the baseline, the baseline's."""
    own = all(np.isnan(getattr(m, key)).all() for m, _ in geometry.values())
    base = all(np.isnan(m.anisotropy).all() for m, _ in geometry.values())
    if own or key == "mev" or not (adjusted and base):
        return UNDEFINED[key]
    return ("Undefined here: it is this statistic minus the anisotropy baseline, which pairs "
            "words from two different sentences; add a sentence, or turn off the subtraction.")


def cka_heatmaps(inputs, geometry) -> None:
    st.subheader("Layer × layer linear CKA")
    st.caption("Kornblith et al. 2019: 1 = the two layers hold the same geometry (up to "
               "rotation and scale); computed over every word of your sentences.")
    cols = st.columns(figures.heatmaps_per_row([len(cka) for _, cka in geometry.values()]))
    for k, (model_id, (metrics, cka)) in enumerate(geometry.items()):
        col = cols[k % len(cols)]
        names = list(metrics.layer_names)
        fig = figures.matrix_heatmap(cka, names, names, model_id, "CKA", 0.0, 1.0)
        with col:
            ui.plotly_chart(fig, key=f"cka-{model_id}")
            export.figure_downloads(fig, f"cka-{model_id}",
                                    pd.DataFrame(cka, columns=names).assign(layer=names),
                                    inputs.settings(model=model_id))


def pick_model(col, label: str, key: str, ids: list[str], default: str) -> str:
    key = state.url_key(key, str, choices=ids)
    if st.session_state.get(key) not in ids:     # the sidebar changed since it was picked
        st.session_state[key] = default
    return col.selectbox(label, ids, key=key)


def between_models(inputs, models) -> None:
    st.subheader("Between two models")
    ids = [m for _, m in models]
    if len(ids) < 2:
        st.info("Choose models of two families in the sidebar to compare their layers.")
        return
    # first and last of the sidebar's models: with one model a family, the families the
    # furthest apart in the family table
    c1, c2 = st.columns(2)
    model_a = pick_model(c1, "Model A (rows)", "cka_model_a", ids, ids[0])
    model_b = pick_model(c2, "Model B (columns)", "cka_model_b", ids, ids[-1])
    try:
        res = results.between_models(model_a, model_b, inputs.sentences, inputs.pool)
    except engine_access.EngineError as e:
        st.info(ui.one_line(e))
        return
    fig = figures.model_cka_heatmap(res.cka, res.low, res.high, res.layer_names_a,
                                    res.layer_names_b, model_a, model_b)
    ui.plotly_chart(fig, key="cka-between")
    st.caption(f"Linear CKA (Kornblith et al. 2019) between each layer of A and each layer of "
               f"B over the same {res.n_words} words: 1 = the same geometry up to rotation and "
               "scale, 0 = none shared. Debiased (Song et al. 2012's unbiased HSIC), since on "
               "a few dozen words plain CKA is high even between unrelated vectors. In "
               "brackets (in the cells while they are few, and on hover): the 95% interval, a "
               f"percentile bootstrap over the {res.n_sentences} sentences "
               f"({res.n_resamples} resamples).")
    export.figure_downloads(fig, "cka-between-models", pd.DataFrame(res.rows()),
                            inputs.settings(model_a=model_a, model_b=model_b,
                                            estimator="debiased linear CKA",
                                            n_resamples=res.n_resamples))


def render(inputs: state.Inputs) -> None:
    st.title("Compare layers")
    st.caption("How contextual is each layer? Statistics of Ethayarajh (2019) on your "
               "sentences; x is relative depth so models of different depth line up.")
    models = ui.ready_models(inputs)
    if not models:
        return
    adjusted = st.toggle("Subtract the anisotropy baseline", key=state.url_key(
        "adjusted", bool, default=True),
        help="In many layers any two words' vectors already point the same way (anisotropy: "
             "the mean cosine of random word pairs). Subtracting it (Ethayarajh 2019) shows "
             "how much more alike a word's own occurrences are than any two words.")
    geometry = {m: results.layer_geometry(m, inputs.sentences, inputs.pool) for _, m in models}
    repeated = {m: r[0].n_words_repeated for m, r in geometry.items()}
    if not any(repeated.values()):
        st.info("No word occurs twice in your sentences, so self-similarity and MEV are "
                "undefined: repeat a word (a preset does).")
    metric_charts(inputs, geometry, adjusted)
    cka_heatmaps(inputs, geometry)
    between_models(inputs, models)


ui.run_page(render)
