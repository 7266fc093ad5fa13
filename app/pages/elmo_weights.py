"""ELMo layer weights: the scalar mix gamma * sum_j softmax(s)_j h_j (Peters et al. 2018, eq. 1),
set by hand or learned from the sense labels, with the mixed vectors' clusters updating live."""
import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, export, figures, results, state, ui

S_RANGE = 10.0
GAMMA_RANGE = (0.1, 4.0)


def s_key(j: int) -> str:
    return f"mix_s{j}"


def set_mix(s, gamma: float | None = None) -> None:
    for j, v in enumerate(s):
        st.session_state[s_key(j)] = float(np.clip(round(float(v), 2), -S_RANGE, S_RANGE))
    if gamma is not None:
        st.session_state["mix_gamma"] = float(np.clip(round(gamma, 2), *GAMMA_RANGE))


def learn(inputs: state.Inputs, model_id: str, labels: tuple[str, ...],
          do_layer_norm: bool = False) -> None:
    # a callback runs before the page and its guard: learned_summary says a failure
    mix, failed = ui.attempt(results.learned_mix, model_id, inputs.sentences, inputs.target,
                             inputs.pool, labels, do_layer_norm)
    if failed:
        st.session_state["mix_learned"] = failed
        return
    set_mix(mix.s, mix.gamma)
    st.session_state["mix_learned"] = mix


def controls(inputs: state.Inputs, model_id: str, names, labels: tuple[str, ...],
             ) -> tuple[np.ndarray, float, bool]:
    n_layers = len(names)
    for j in range(n_layers):
        state.url_key(s_key(j), float, default=0.0, bounds=(-S_RANGE, S_RANGE))
    state.url_key("mix_gamma", float, default=1.0, bounds=GAMMA_RANGE)
    layer_norm = st.toggle(
        "Layer-normalise each layer first", key=state.url_key("mix_ln", bool, default=False),
        help="AllenNLP's ScalarMix(do_layer_norm=True): each layer minus its mean, over its "
             "standard deviation (over all the target's occurrences), before it is weighted, so "
             "a layer with larger vectors does not dominate the mix by scale alone.")
    b = st.columns(4)
    b[0].button("Uniform", on_click=set_mix, args=([0.0] * n_layers,))
    b[1].button("Layer 0 only", on_click=set_mix, args=([S_RANGE] + [-S_RANGE] * (n_layers - 1),))
    b[2].button("Top layer only", on_click=set_mix,
                args=([-S_RANGE] * (n_layers - 1) + [S_RANGE],))
    b[3].button("Learn the mix", type="primary", on_click=learn,
                args=(inputs, model_id, labels, layer_norm),
                help="Fit s and γ so the mixed vectors separate your sense labels")
    cols = st.columns(n_layers + 1)
    s = np.array([cols[j].slider(f"s for {names[j]}", -S_RANGE, S_RANGE, step=0.1,
                                 key=s_key(j),
                                 help=f"{names[j]}'s raw weight: the mix gives each layer "
                                      "softmax(s) of the total, so raising one s takes weight "
                                      "from the others") for j in range(n_layers)])
    gamma = cols[-1].slider("γ", *GAMMA_RANGE, step=0.05, key="mix_gamma",
                            help="γ (gamma) scales the whole mixed vector; it changes lengths, "
                                 "not directions")
    return s, float(gamma), bool(layer_norm)


def fmt(value: float, digits: int = 3) -> str:
    return "n/a" if np.isnan(value) else f"{value:.{digits}f}"


def learned_summary(sep_now, sep_top, same_point: bool = False) -> None:
    """The learned mix against the uniform mix and against the top layer alone (Peters et al.
    2018 found the top layer best for word sense; a learned mix can lose to it)."""
    learned = st.session_state.get("mix_learned")
    if isinstance(learned, str):
        st.warning(learned)
    elif learned is not None:
        note = ""
        if not GAMMA_RANGE[0] <= round(learned.gamma, 2) <= GAMMA_RANGE[1]:
            # the slider holds the nearest end; γ scales every vector alike, so no score moves
            shown = float(np.clip(learned.gamma, *GAMMA_RANGE))
            note = (f"; the γ slider stops at {shown:.2f}, and as γ scales every vector alike "
                    "the scores and the clusters' shapes are the same")
        st.success("Learned weights: " + ", ".join(f"{w:.2f}" for w in learned.weights)
                   + f"; γ = {learned.gamma:.2f} (in units of the layers' mean RMS norm{note}).")
        c = st.columns(4)
        gain = learned.after.silhouette[0] - learned.before.silhouette[0]
        c[0].metric("silhouette, uniform mix", fmt(learned.before.silhouette[0]))
        c[1].metric("silhouette, learned mix", fmt(learned.after.silhouette[0]),
                    None if np.isnan(gain) else f"{gain:+.3f}")
        c[2].metric("nearest centroid, uniform", fmt(learned.before.nearest_centroid[0], 2))
        c[3].metric("nearest centroid, learned", fmt(learned.after.nearest_centroid[0], 2))
        top, mine = sep_top.silhouette[0], learned.after.silhouette[0]
        if not (np.isnan(top) or np.isnan(mine)):
            verdict = ("beats" if mine > top + 1e-9 else "does not beat")
            st.caption(f"Top layer only: silhouette {fmt(top)}. The learned mix {verdict} it "
                       f"({mine - top:+.3f}) on these same sentences (an in-sample fit: a "
                       "softmax over layers with a small penalty, which cannot sit exactly on "
                       "one layer).")
    now = (f"Current mix: silhouette {fmt(sep_now.silhouette[0])}, leave-one-out "
           f"nearest-centroid accuracy {fmt(sep_now.nearest_centroid[0], 2)}")
    if np.isnan(sep_now.silhouette[0]) or np.isnan(sep_now.nearest_centroid[0]):
        now += " (n/a: it needs two senses, each labelled in at least two sentences)"
    if same_point:
        # "Layer 0 only" leaves ~1e-9 of the other layers: the scores would read rounding noise
        now += (". Every occurrence has the same vector in this mix (the char CNN sees the "
                "word alone), so nothing separates the senses: silhouette 0, and nearest "
                "centroid scores what a guess between tied centroids would")
    st.caption(now + ".")


def render(inputs: state.Inputs) -> None:
    st.title("ELMo layer weights")
    st.caption("ELMo's representation is a learned mix of its layers: γ · Σⱼ softmax(s)ⱼ hⱼ. "
               "Without a task the mix is uniform; here you set it, or learn it from your senses.")
    mixing = tuple(name for name, f in engine_access.family_rows().items()
                   if "scalar_mix" in f.capabilities)     # every model of such a family mixes
    models = ui.ready_models(inputs, families=mixing)
    if not models or not inputs.target:
        if models:
            st.info("Type a target word in the sidebar.")
        return
    model_id = models[0][1]
    tv = results.target_vectors(model_id, inputs.sentences, inputs.target, inputs.pool)
    if not ui.missing_target_note(inputs.target, tv.missing, inputs.sentences):
        return
    ui.repeated_target_note(inputs.target, tv.repeated)
    labels = tuple(state.sense_labels(inputs.sentences)[r] for r in tv.rows)
    s, gamma, layer_norm = controls(inputs, model_id, tv.layer_names, labels)
    weights = results.softmax(s)
    bars = figures.mix_weights(weights, gamma, tv.layer_names)
    ui.plotly_chart(bars, key="mix-bars")
    export.figure_downloads(bars, "elmo-mix-weights", export.layer_table(
        {"s": s, "softmax_s": weights}, tv.layer_names).assign(gamma=gamma),
        inputs.settings(model=model_id, s=s.tolist(), gamma=gamma,
                        do_layer_norm=layer_norm))
    mix = results.scalar_mix(model_id, inputs.sentences, inputs.target, inputs.pool,
                             tuple(float(v) for v in s), gamma, layer_norm, labels)
    mixed = mix.vectors
    learned_summary(mix.separation, mix.top_separation, same_point=mix.one_point)
    hover = [inputs.sentences[r] for r in tv.rows]
    fig = figures.projection_scatter([("mixed vectors (PCA)", mix.coords)], list(labels),
                                     [figures.bold_word(h, inputs.target) for h in hover],
                                     title=f"{model_id}: '{inputs.target}', mixed",
                                     numbers=[r + 1 for r in tv.rows])
    ui.plotly_chart(fig, key="mix-scatter")
    export.figure_downloads(fig, "elmo-mix-clusters", pd.DataFrame(
        {**tv.occurrence_columns(inputs.pool, "scalar mix"), "sentence": hover,
         "sense": list(labels), "x": mix.coords[:, 0], "y": mix.coords[:, 1]}),
        inputs.settings(model=model_id, s=s.tolist(), gamma=gamma, do_layer_norm=layer_norm))
    export.embedding_downloads({"mixed": mixed, "vectors": tv.vectors}, mixed,
                               pd.DataFrame({**tv.index_columns(), "sentence": hover,
                                             "sense": list(labels)}),
                               f"{inputs.target}-{model_id}-mix",
                               info={"model": model_id, "target": inputs.target,
                                     "pooling": inputs.pool, "layers": list(tv.layer_names),
                                     "s": [f"{v:g}" for v in s], "gamma": f"{gamma:g}",
                                     "axes": "mixed: sentence, dim; vectors: layer, sentence, dim"})


ui.run_page(render)
