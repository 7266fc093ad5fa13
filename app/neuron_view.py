"""BertViz's neuron view on the Attention page: for one head and one query token, how each key's
score is made from the query and key vectors, and the softmax of those scores that is the
head's attention row."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app import attention_figures, engine_access, export, ui
from app.engine_access import Encoding


def show(enc: Encoding, layer: int, head: int | None, settings: dict) -> None:
    """BertViz's neuron view: how one head's score for each key is made from the query and key
    vectors (all tokens, special ones included: they take part in the softmax)."""
    st.caption("A score is the dot product of the query token's vector with each key vector, "
               "times 1/√d; its softmax over the keys is the attention row. Red and blue: "
               "positive and negative components.")
    ruled_out = engine_access.cannot(enc.model_id).get("query_key")
    if ruled_out:            # known from the architecture, before any model runs
        st.info(f"No neuron view for this model: {ruled_out}")
        return
    if head is None:
        st.info("Pick one head (switch off 'Average over heads'): each head has its own "
                "queries and keys.")
        return
    options = [f"{i}: {t}" for i, t in enumerate(enc.tokens)]
    key = "att_query"
    if st.session_state.get(key) not in options:
        st.session_state[key] = options[min(len(options) - 1, 1)]
    pick = st.selectbox("Query token", options, key=key)
    token = options.index(pick)
    try:
        qk = engine_access.query_key(enc.model_id, enc.text, layer)
    except engine_access.UnsupportedPrediction as err:   # seen only when run (attention sinks, ...)
        st.info(f"No neuron view for this model: {ui.one_line(err)}")
        return
    if qk.softcap:
        st.caption(f"This model soft-caps its scores before the softmax: "
                   f"{qk.softcap:g}·tanh(score / {qk.softcap:g}); the scores shown are capped.")
    scores, attn = qk.scores(head, token), qk.attention(head, token)
    fig = attention_figures.neuron_view(qk.tokens, qk.queries[head, token], qk.keys[head],
                                        qk.products(head, token), scores, attn, token,
                                        f"{enc.model_id}, layer {layer}, head {head + 1}: "
                                        "neuron view")
    table = pd.DataFrame({"key_token": list(qk.tokens), "score": scores, "attention": attn})
    ui.plotly_chart(fig, key="neuron-view")
    export.figure_downloads(fig, "neuron-view", table, {**settings, "query_token": token})
