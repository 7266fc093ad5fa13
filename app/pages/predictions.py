"""Predictions for one blank: BERT fills it (masked LM), GPT continues the words before it (and
the logit lens shows the guess at every layer), ELMo's forward and backward LMs guess it from
the left and from the right."""
import pandas as pd
import streamlit as st

from app import compute, export, figures, state, ui
from engine.families.base import UnsupportedPrediction
from engine.text import MASK, split_words


def choose_blank(inputs: state.Inputs) -> tuple[str, str, str]:
    """-> (text with [MASK], words before the blank, words after it)."""
    c1, c2, c3 = st.columns([3, 1, 1])
    labels = [f"{i + 1}: {s}" for i, s in enumerate(inputs.sentences)]
    key = state.url_key("pred_sentence", default=0)
    if st.session_state[key] >= len(labels):
        st.session_state[key] = 0
    pick = c1.selectbox("Sentence", range(len(labels)), format_func=labels.__getitem__, key=key)
    wt = split_words(inputs.sentences[pick])
    lowered = [w.lower() for w in wt.words]
    default = lowered.index(inputs.target.lower()) if inputs.target.lower() in lowered else 0
    wkey = f"pred_word_{pick}"
    st.session_state.setdefault(wkey, default)
    w = c2.selectbox("Word to mask", range(len(wt.words)), key=wkey,
                     format_func=lambda i: f"{wt.words[i]} (#{i + 1})")
    c3.slider("top k", 3, 20, key=state.url_key("top_k", default=8))
    start, end = wt.spans[w]
    text = wt.text
    return text[:start] + MASK + text[end:], text[:start].strip(), text[end:].strip()


def prediction(kind: str, model_id: str, text: str, title: str, inputs, name: str) -> bool:
    """Show one prediction as a bar chart; False (with a note) when the model cannot do it."""
    if not text:
        st.info(f"{title}: there are no words on that side of the blank.")
        return True
    try:
        pred = compute.predict(kind, model_id, text, top_k=st.session_state["top_k"])
    except UnsupportedPrediction as exc:
        st.info(ui.one_line(exc))
        return False
    table = pd.DataFrame(pred.as_json())
    fig = figures.prediction_bars(table["token"].tolist(), table["prob"].tolist(), title)
    st.plotly_chart(fig, key=f"pred-{name}")
    export.figure_downloads(fig, f"pred-{name}", table,
                            inputs.settings(model=model_id, kind=kind, context=text))
    return True


def switch_bert(model_id: str) -> None:
    st.session_state["model_bert"] = model_id


def bert_column(inputs, model_id, masked) -> None:
    st.markdown(f"**BERT · {model_id}** — fills the blank")
    if not prediction("masked", model_id, masked, "Masked LM", inputs, "bert"):
        for alt in compute.masked_lm_alternatives(model_id):
            st.button(f"Switch to {alt}", on_click=switch_bert, args=(alt,), key=f"to-{alt}")


def logit_lens(inputs, model_id: str, prefix: str) -> None:
    st.subheader(f"Logit lens · {model_id}")
    st.caption("nostalgebraist 2020: the final norm and output head applied to every layer; "
               "each cell is that layer's best next token after the word in the column.")
    if not prefix:
        st.info("The blank is the first word: there is no prefix to read.")
        return
    try:
        lens = compute.logit_lens(model_id, prefix)
    except UnsupportedPrediction as exc:
        st.info(ui.one_line(exc))
        return
    rows = list(lens.layer_names or [f"layer {i}" for i in range(len(lens.top_tokens))])
    fig = figures.matrix_heatmap(lens.top_probs, list(lens.tokens), rows, "Top next token per "
                                 "layer", "probability", 0.0, 1.0, text=lens.top_tokens)
    st.plotly_chart(fig, key="logit-lens")
    export.figure_downloads(fig, "logit-lens", pd.DataFrame(
        lens.top_probs, columns=list(lens.tokens)).assign(layer=rows),
        inputs.settings(model=model_id, prefix=prefix))


def render(inputs: state.Inputs) -> None:
    st.title("Predictions")
    models = ui.ready_models(inputs)
    if not models:
        return
    masked, prefix, suffix = choose_blank(inputs)
    st.markdown(f"**The blank:** {masked}")
    chosen = dict(models)
    cols = st.columns(3)
    with cols[0]:
        if "bert" in chosen:
            bert_column(inputs, chosen["bert"], masked)
        else:
            st.info("Choose a BERT model in the sidebar.")
    with cols[1]:
        if "gpt" in chosen:
            st.markdown(f"**GPT · {chosen['gpt']}** — continues the words before it")
            prediction("next", chosen["gpt"], prefix, "Next word", inputs, "gpt")
    with cols[2]:
        if "elmo" in chosen:
            st.markdown(f"**ELMo · {chosen['elmo']}** — forward and backward LMs")
            if prediction("next", chosen["elmo"], prefix, "Forward LM (from the left)",
                          inputs, "elmo-fwd"):
                prediction("previous", chosen["elmo"], suffix, "Backward LM (from the right)",
                           inputs, "elmo-bwd")
    if "gpt" in chosen:
        logit_lens(inputs, chosen["gpt"], prefix)


ui.run_page(render)
