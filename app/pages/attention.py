"""Attention (BERT and GPT): head view, one head as a heatmap, model view, head statistics,
rollout and the neuron view (app/neuron_view.py). ELMo has no attention: its layer
contributions are shown instead."""
import pandas as pd
import streamlit as st

from app import (attention_figures, component_figures, engine_access, export, figures,
                 knockout, neuron_view, results, state, ui)
from app import selection as sel
from app.safe import safe_md


def view_options(enc) -> tuple[int, int | None, bool]:
    c1, c2, c3, c4 = st.columns([1, 0.8, 1.1, 1.1])   # the toggles' labels whole at 768 px
    n_layers, n_heads = enc.attentions.shape[:2]
    for key, top, low in (("att_layer", n_layers, 1), ("att_head", n_heads - 1, 0)):
        state.url_key(key, default=low)
        st.session_state[key] = min(max(st.session_state[key], low), top)
    layer = c1.slider("Layer", 1, n_layers, key="att_layer")
    average = c3.toggle("Average over heads", key=state.url_key("att_average", bool,
                                                                 default=False))
    # counted from 1 on screen, as the layers are (the link keeps the 0-based index)
    head = None if average else c2.selectbox("Head", list(range(n_heads)), key="att_head",
                                             format_func=lambda h: str(h + 1))
    hide = c4.toggle("Hide special tokens", key=state.url_key("att_hide", bool, default=False),
                     help="[CLS]/[SEP]/BOS: rows are renormalised over the remaining tokens")
    return layer, head, hide


UNITS = ("Tokens", "Words")
WORDS_HELP = ("Words: the words the rest of the app uses. Attention to a word is the sum over "
              "its pieces, from a word the mean over its pieces (Clark et al. 2019, \"What does "
              "BERT look at?\"); a lone space piece counts with the word after it; [CLS], [SEP] "
              "and BOS stay entries of their own, so every row still sums to 1.")


def by_words() -> bool:
    """The "Tokens / Words" choice: whether the head view, heatmap and model view merge each
    word's pieces (WordPiece ##, BPE Ġ, SentencePiece ▁ all split words their own way)."""
    c1, c2 = st.columns([1, 2.2])
    units = c1.radio("Show", UNITS, horizontal=True, key=state.url_key(
        "att_units", str, default=UNITS[0], choices=UNITS), help=WORDS_HELP)
    if units == "Words":
        c2.caption("Head view, heatmap and model view per word; head statistics, rollout and "
                   "the neuron view stay per token.")
    return units == "Words"


def attention_views(inputs, enc) -> None:
    layer, head, hide = view_options(enc)
    words = by_words()
    maps, labels = results.viewed_maps(enc, words, hide, slice(layer - 1, layer))   # [1, H, n, n]
    one = maps[0].mean(axis=0) if head is None else maps[0, head]
    unit = ", words" if words else ""        # in the titles of the maps that follow the choice
    what = f"layer {layer}, " + ("mean of heads" if head is None else f"head {head + 1}") + unit
    # layer and head as the page numbers them, from 1 (None: the mean of the heads)
    settings = inputs.settings(model=enc.model_id, sentence=enc.text, layer=layer,
                               head=None if head is None else head + 1, hide_special=hide,
                               units=UNITS[words].lower())
    per_token = {**settings, "units": "tokens"}     # the tabs that do not follow the choice
    names = ["Head view", "Heatmap", "Model view", "Head statistics", "Rollout"]
    # the tab also where the architecture rules the view out: it says why there
    neurons = "query_key" in (engine_access.capabilities(enc.model_id)
                              | set(engine_access.cannot(enc.model_id)))
    # keyed, and at the same place on every run (engine_access keeps the loading box's place):
    # the tab the user chose stays in front through the reruns a click on a view starts
    tabs = st.tabs(names + (["Neuron view"] if neurons else []), key="att_views")
    with tabs[0], ui.guarded():
        options = ["(all)"] + [f"{i}: {t}" for i, t in enumerate(labels)]
        if st.session_state.get("att_focus") not in options:   # another sentence or model
            st.session_state["att_focus"] = "(all)"
        c1, c2 = st.columns([2, 1])
        focus = c1.selectbox("Focus on token", options, key="att_focus",
                             help="or click a token in the view; click it again for all")
        every = c2.toggle("Every head, one colour each", key=state.url_key(
            "att_every_head", bool, default=False))
        idx = None if focus == "(all)" else int(focus.split(":")[0])
        if every:
            fig = attention_figures.head_view_heads(
                labels, maps[0], idx, f"{enc.model_id}, layer {layer}, every head{unit}")
        else:
            fig = attention_figures.head_view(labels, one, idx, f"{enc.model_id}, {what}")
        ui.plotly_chart(fig, key="head-view", selection_mode="points",
                        on_select=lambda: focus_token(options))
        export.figure_downloads(fig, "head-view", export.matrix_table(one, labels), settings)
    with tabs[1], ui.guarded():
        show(figures.matrix_heatmap(one, labels, labels, f"{enc.model_id}, {what}",
                                    "attention", 0.0, 1.0), "head-heatmap",
             export.matrix_table(one, labels), settings)
    with tabs[2], ui.guarded():
        model_view(enc, words, hide, len(labels), settings)
    with tabs[3], ui.guarded():
        head_statistics(inputs, enc, per_token)
    with tabs[4], ui.guarded():
        st.caption("Attention rollout (Abnar & Zuidema 2020): heads averaged, the residual "
                   "added as 0.5·A + 0.5·I, multiplied from the input up to this layer.")
        rolled, tokens = results.viewed_rollout(enc, hide)                 # [L, n, n]
        show(figures.matrix_heatmap(rolled[layer - 1], tokens, tokens,
                                    f"Rollout to layer {layer}", "share", 0.0, None),
             "rollout", export.matrix_table(rolled[layer - 1], tokens), per_token)
    if neurons:
        with tabs[5], ui.guarded():
            neuron_view.show(enc, layer, head, per_token)


def model_view(enc, words: bool, hide: bool, n: int, settings: dict) -> None:
    """Every layer (rows) and head (columns) as thumbnails, when the sentence is short enough
    to send them all; else one line saying so (the head view and heatmap show any one map)."""
    n_layers, n_heads = enc.attentions.shape[:2]
    cells = attention_figures.attention_grid_cells(n_layers, n_heads, n)
    if cells > attention_figures.MODEL_VIEW_MAX_CELLS:
        st.info(f"This sentence is too long for the model view: {n_layers} layers × {n_heads} "
                f"heads × {n}² {'words' if words else 'tokens'} make {cells:,} cells, and it "
                f"draws at most {attention_figures.MODEL_VIEW_MAX_CELLS:,}. Pick a layer and head "
                "above to see them in the Head view and Heatmap tabs.")
        return
    clicks = st.radio("A click on a thumbnail", CLICKS, horizontal=True,
                      key=state.url_key("att_click", str, default=CLICKS[0], choices=CLICKS),
                      help="Switch a head off to see, on the Predictions page, every "
                           "prediction with it knocked out beside the original.")
    st.caption("Every layer (rows) and head (columns): click a thumbnail (or pick a layer "
               "and head above) to " + ("open it in the head view and heatmap."
                                        if clicks == CLICKS[0] else "switch that head off, "
                                        "or on again."))
    off = knockout.heads_of(knockout.current())
    if off:
        st.caption("Switched off: " + ", ".join(f"{l}.{h}" for l, h in sorted(off))
                   + " (layer.head, from 1).")
        if st.session_state.get("_via_navigation"):     # a link needs the app's page list
            st.page_link("app/pages/predictions.py", label="See the predictions with them off",
                         icon="🔌")
    maps, labels = results.viewed_maps(enc, words, hide)              # [L, H, n, n]
    grid = attention_figures.attention_grid(maps, [f"layer {l + 1}" for l in range(len(maps))])
    component_figures.mark_heads(grid, off, n_layers, n_heads, len(labels))
    ui.plotly_chart(grid, key="model-view", selection_mode="points",
                    on_select=lambda: clicked_head(n_heads, clicks == CLICKS[1]))
    export.figure_downloads(grid, "model-view", None, settings,
                            arrays=export.attention_arrays(enc.model_id, maps, labels, words))


def focus_token(options: list[str]) -> None:
    """Head-view click on a token: focus it, or show every token again."""
    clicked = sel.clicked_tokens(st.session_state.get("head-view"))
    if clicked:
        st.session_state["att_focus"] = sel.toggle_focus(
            st.session_state.get("att_focus", options[0]), options, clicked[0])


CLICKS = ("opens it", "switches the head off")


def clicked_head(n_heads: int, switch: bool) -> None:
    """Model-view click: its thumbnails are a layer a row, a head a column. It opens that head,
    or switches it off (on again when it was off) for every prediction (app/knockout.py)."""
    cell = sel.clicked_cell(st.session_state.get("model-view"), n_heads)
    if not cell:
        return
    if switch:
        knockout.set_spec(knockout.toggled(knockout.current(), cell[0] + 1,
                                           cell[1] + 1))
    else:
        st.session_state.update(att_layer=cell[0] + 1, att_head=cell[1], att_average=False)


def head_statistics(inputs, enc, settings) -> None:
    stats = results.head_stats(enc.model_id, enc.text)
    rows = [f"layer {l + 1}" for l in range(stats.entropy.shape[0])]
    heads = [f"head {h + 1}" for h in range(stats.entropy.shape[1])]
    for name, values, zmax, meaning in (
            ("entropy", stats.entropy, None, "bits; low = focused on few tokens"),
            ("sink share", stats.sink_share, 1.0, "attention on special tokens / the first token"),
            ("previous-token score", stats.previous_token, 1.0, "attention from i to i−1")):
        st.caption(f"{name}: {meaning}")
        show(figures.matrix_heatmap(values, heads, rows, name.capitalize(), name, 0.0, zmax),
             f"heads-{name.replace(' ', '-')}",
             pd.DataFrame(values, columns=heads).assign(layer=rows), settings)


def show(fig, name, table, settings) -> None:
    ui.plotly_chart(fig, key=name)
    export.figure_downloads(fig, name, table, settings)


def layer_contributions(inputs, family_name: str, model_id: str, sentence: str) -> None:
    """For a model without attention maps (ELMo's biLSTM has none): each layer's share of each
    word's vector norm, i.e. of its uniform mix."""
    st.info(f"{safe_md(model_id)} ({state.family_name(family_name)}) has no attention maps. Shown "
            "instead: how much each layer contributes to each word's uniform mix (share of the "
            "vector norms).")
    enc = engine_access.encodings(model_id, (sentence,))[0]
    shares, names = results.layer_shares(enc, inputs.pool)                  # [layers, words]
    show(figures.stacked_shares(enc.words, shares, names, f"{model_id}: layer contributions"),
         f"{family_name}-contributions", pd.DataFrame(shares.T, columns=list(names)).assign(
             word=list(enc.words)), inputs.settings(model=model_id, sentence=sentence))


def render(inputs: state.Inputs) -> None:
    st.title("Attention")
    models = ui.ready_models(inputs)
    if not models:
        return
    labels = [f"{i + 1}: {s}" for i, s in enumerate(inputs.sentences)]
    key = state.url_key("att_sentence", default=0)
    if not 0 <= st.session_state[key] < len(labels):
        st.session_state[key] = 0
    pick = st.selectbox("Sentence", range(len(labels)), format_func=labels.__getitem__, key=key)
    sentence = inputs.sentences[pick]
    with_att = [m for _, m in models if "attention" in engine_access.capabilities(m)]
    if with_att:
        key = state.url_key("att_model", str, choices=with_att)
        if st.session_state.get(key) not in with_att:
            st.session_state[key] = with_att[0]
        model_id = st.radio("Model", with_att, horizontal=True, key=key, format_func=safe_md)
        enc = engine_access.encodings(model_id, (sentence,), attentions=True)[0]
        if enc.attentions is None:
            st.warning(f"{safe_md(model_id)} returned no attention maps for this sentence.")
        else:
            attention_views(inputs, enc)
    for f, m in models:
        if "attention" not in engine_access.capabilities(m):
            st.subheader(state.family_name(f))
            layer_contributions(inputs, f, m, sentence)


ui.run_page(render)
