"""The linked selection of Layers side by side: one selection of occurrences (sentence, word
position), the same ids in every model's grid, kept in the URL; a click or lasso on any grid
sets it, and the side panel reads it in the model and layer where it was made (its sentence,
nearest neighbours, what the model predicts there and where it attends)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app import attention_figures, corpus_access, engine_access, results, ui
from app import selection as sel
from app.engine_access import left_of_word, mask_word
from app.safe import safe_md

# the URL keys of the selection, the layer it was made at and its model
SEL, SEL_LAYER, SEL_MODEL = "grid_sel", "grid_sel_layer", "grid_sel_model"


def selection() -> list[tuple[int, int]]:
    """The selected occurrences, from the URL-backed "s:w,s:w" string."""
    return sel.parse_occurrences(st.session_state.get(SEL, ""))


def set_selection(ids: list[tuple[int, int]], layer: int, model_id: str) -> None:
    st.session_state[SEL] = sel.format_occurrences(ids)
    st.session_state[SEL_LAYER] = layer
    st.session_state[SEL_MODEL] = model_id


def take_event(chart_key: str, occ, keep: list[int], layers: list[int], model_id: str,
               add: bool = False) -> bool:
    """A click or lasso on a grid arrives as that chart's widget state at the start of the next
    run: turn it into the selection before the grids are drawn, so every grid shows it now.
    (The chart is a new element once its highlights change, so its own state starts empty:
    an empty event means "nothing new", and the Clear button clears. That is also why
    plotly's shift-click cannot add: the chart it would add to is gone; `add` does it here.)
    True if it changed."""
    picked, panel = sel.clicked_occurrences(st.session_state.get(chart_key), len(keep),
                                            len(layers))
    if not picked:
        return False
    before = (selection(), st.session_state.get(SEL_LAYER), st.session_state.get(SEL_MODEL))
    ids = [occ.ids[keep[i]] for i in picked]
    if add:
        ids = sel.add_to_selection(selection(), ids)
    set_selection(ids, layers[panel], model_id)
    return before != (selection(), st.session_state.get(SEL_LAYER),
                      st.session_state.get(SEL_MODEL))


def side_panel(inputs, opts: dict, labels: list[str]) -> None:
    st.subheader("Selection")
    ids = selection()
    model_id = st.session_state.get(SEL_MODEL)
    if not ids or model_id not in dict((m, f) for f, m in inputs.models):
        st.caption("Click a point in any panel (or lasso several) to see its "
                   "sentence, its nearest neighbours, what the model predicts there and where "
                   "it attends.")
        return
    occ = results.occurrences(model_id, inputs.sentences, inputs.target, inputs.pool,
                              opts["scope"])
    index = [occ.index(o) for o in ids]
    index = [i for i in index if i is not None]
    if not index:
        st.caption("The selected words are not among the points any more.")
        return
    n_layers = len(occ.layer_names)
    layer = min(max(int(st.session_state.get(SEL_LAYER, n_layers - 1)), 0), n_layers - 1)
    st.caption(f"{len(index)} selected in {safe_md(model_id)}, read at {occ.layer_names[layer]}.")
    if st.button("Clear selection", key="grid_clear"):
        set_selection([], layer, model_id)
        st.rerun()
    st.dataframe(pd.DataFrame({"sentence": [occ.sentence[i] + 1 for i in index],
                               "word": [occ.word[i] for i in index],
                               "sense": [labels[occ.sentence[i]] for i in index],
                               "text": [inputs.sentences[occ.sentence[i]] for i in index]}),
                 hide_index=True, width="stretch")
    focus = index[0]
    s, w = occ.sentence[focus], occ.position[focus]
    word = occ.word[focus]
    st.text(f"{s + 1}: {inputs.sentences[s]}")        # st.text: typed text stays text
    st.markdown(f"**Nearest to '{safe_md(word)}' (sentence {s + 1}) at "
                f"{occ.layer_names[layer]}**")
    near = results.neighbours(model_id, inputs.sentences, inputs.target, inputs.pool,
                              opts["scope"], focus, layer, 5)
    st.dataframe(pd.DataFrame({"word": [occ.word[n.index] for n in near],
                               "sentence": [occ.sentence[n.index] + 1 for n in near],
                               "cosine": [round(n.cosine, 4) for n in near],
                               "text": [inputs.sentences[occ.sentence[n.index]] for n in near]}),
                 hide_index=True, width="stretch")
    st.caption("Cosine in the model's own space at that layer, among all points shown.")
    predictions(model_id, inputs.sentences[s], w, word)
    attention(model_id, inputs.sentences[s], w, layer, word)
    if corpus_access.corpus_indexes() and st.button("Search the corpus for contexts like this",
                                                    key="grid_to_corpus"):
        st.session_state["corpus_query_text"] = inputs.sentences[s]
        st.session_state["corpus_query_word"] = word
        st.switch_page("app/pages/corpus.py")


def predictions(model_id: str, sentence: str, position: int, word: str) -> None:
    """What the model predicts at this position, as it honestly can: a masked LM fills the
    word's place from both sides, a left-to-right model says what it expected next."""
    can = engine_access.capabilities(model_id)
    with ui.guarded(note="No predictions"):     # the panel's other parts still show
        if "masked_lm" in can:
            pred = engine_access.predict("masked", model_id, mask_word(sentence, position), top_k=5)
            what = f"masked-word guesses for '{safe_md(word)}'"
        elif "next_word" in can and position > 0:
            pred = engine_access.predict("next", model_id, left_of_word(sentence, position),
                                         top_k=5)
            what = f"next-word guesses before '{safe_md(word)}' (left context only)"
        else:
            return
        st.markdown(f"**{what}**")
        st.dataframe(pd.DataFrame({"guess": [c.token for c in pred.candidates],
                                   "probability": [round(c.prob, 4) for c in pred.candidates]}),
                     hide_index=True, width="stretch")


def attention(model_id: str, sentence: str, position: int, layer: int, word: str) -> None:
    if "attention" not in engine_access.capabilities(model_id) or layer == 0:
        return
    got = results.attention_row(model_id, sentence, position, layer)
    if got is None:
        return
    rows, special, words = got
    fig = attention_figures.attention_row(
        words, rows.mean(axis=0), float(special.mean()), position,
        f"Where '{word}' attends, layer {layer} (mean of heads)")
    ui.plotly_chart(fig, key="grid-attention")
