"""Predictions for one blank, each family as it honestly can, asked of the family table: a BERT
fills it with its masked-LM head (or, toggled, the head's likeliest words re-ranked by the whole
sentence each makes); a GPT takes its likeliest words from the left and those a
fill-in-the-blank prompt proposes, and ranks them by the whole sentence (beside its plain
next-word guess, and the logit lens at every layer);
ELMo multiplies its forward LM (from the left) and backward LM (from the right), shown together
and apart. No family is named here: a new family's row says what it can do."""
import zlib

import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, export, figures, knockout, state, ui, why
from app.engine_access import JOINER_RE, MASK, joined_forms, split_words, word_key
from app.safe import safe_md


def choose_blank(inputs: state.Inputs) -> tuple[str, str, str]:
    """-> (text with [MASK], words before the blank, words after it)."""
    c1, c2, c3 = st.columns([3, 1, 1])
    labels = [f"{i + 1}: {s}" for i, s in enumerate(inputs.sentences)]
    key = state.url_key("pred_sentence", default=0)
    if not 0 <= st.session_state[key] < len(labels):
        st.session_state[key] = 0
    pick = c1.selectbox("Sentence", range(len(labels)), format_func=labels.__getitem__, key=key)
    wt = split_words(inputs.sentences[pick])
    lowered = [word_key(w) for w in wt.words]
    t = word_key(inputs.target)
    # the target itself, else a word that holds it joined by an apostrophe or a hyphen
    inside = joined_forms(wt.words, inputs.target)
    default = (lowered.index(t) if t in lowered else
               wt.words.index(inside[0]) if inside else 0)
    # keyed by the sentence's text, not its line number: an edited line starts again from its
    # target word instead of keeping a position that now names another word (or none)
    wkey = f"pred_word_{zlib.crc32(wt.text.encode()):08x}"
    # the link's word (pred_word), for the sentence the link opens with and only once: a
    # copied link reopens on the word the user chose, not on the target word
    linked = st.session_state.get(state.url_key("pred_word", int, default=-1), -1)
    if not st.session_state.get("_pred_word_read"):
        st.session_state["_pred_word_read"] = True
        if wkey not in st.session_state and 0 <= linked < len(wt.words):
            st.session_state[wkey] = linked
    if st.session_state.get(wkey, default) >= len(wt.words):
        st.session_state[wkey] = default
    st.session_state.setdefault(wkey, default)
    w = c2.selectbox("Word to mask", range(len(wt.words)), key=wkey,
                     format_func=lambda i: f"{wt.words[i]} (#{i + 1})")
    st.session_state["pred_word"] = w
    c3.slider("top k", 3, 20, key=state.url_key("top_k", default=8, bounds=(3, 20)),
              help="How many of each model's likeliest words to show")
    start, end = wt.spans[w]
    # "bank's" chosen for the target "bank" (not there whole): only "bank" goes, so the blank
    # keeps the 's the sentence was typed with ("The [MASK]'s door", as a CLI user writes
    # it). Only a part that starts the word: after a hyphen ("river-[MASK]") a GPT's fill
    # would score "river- water"; a word the user picks is masked whole.
    stem = JOINER_RE.split(wt.words[w])[0]
    if w == default and t not in lowered and word_key(stem) == t:
        end = start + len(stem)
    text = wt.text
    return text[:start] + MASK + text[end:], text[:start].strip(), text[end:].strip()


def prediction(kind: str, model_id: str, text: str, title: str, inputs, name: str,
               off: tuple[str, str] | None, sides: str = "both",
               rescore: bool = False) -> why.Shown | None:
    """Show one prediction as a bar chart, and beside it the same with the parts `off`
    (knocked out, their mode) off; the prediction shown, for the why-view, or None (with a
    note) when there is none."""
    if not text:
        st.info(f"{title}: there are no words on that side of the blank.")
        return None
    try:
        pred = engine_access.predict(kind, model_id, text, top_k=st.session_state["top_k"],
                                     sides=sides, rescore=rescore)
    except engine_access.UnsupportedPrediction as exc:
        st.info(ui.one_line(exc))
        return None
    except engine_access.EngineError as exc:   # e.g. a blank this model cannot start a text with
        st.warning(f"{title}: {ui.one_line(exc)}")
        return None
    settings = inputs.settings(model=model_id, kind=kind, context=text, sides=sides,
                               method=pred.method, **({"rescore": True} if rescore else {}))
    shown = why.Shown(model_id, kind, text, title, name,
                      tuple(w for c in pred.candidates if (w := c.token.strip())))
    if off is None or "ablation" not in engine_access.capabilities(model_id):
        bars(pred, title, name, settings)
        if off is not None:
            st.caption(f"{safe_md(model_id)} has no attention heads or feed-forward blocks to "
                       "knock out: shown as it is.")
        return shown
    spec, mode = off
    on_col, off_col = st.columns(2)
    with on_col:
        bars(pred, f"{title} · every part on", name, settings)
    with off_col:
        try:
            gone = engine_access.predict(kind, model_id, text, top_k=st.session_state["top_k"],
                                         sides=sides, rescore=rescore, ablate=spec,
                                         ablate_mode=mode)
        except (engine_access.UnsupportedPrediction, engine_access.EngineError) as exc:
            # e.g. a layer it lacks; the parts are typed text, never read as markdown
            st.warning(f"With {safe_md(spec)} off: {ui.one_line(exc)}")
            return shown
        bars(gone, f"{title} · {spec} off ({mode})", f"{name}-off",
             {**settings, "ablate": spec, "ablate_mode": mode})
    return shown


def bars(pred, title: str, name: str, settings: dict) -> None:
    table = pd.DataFrame(pred.as_json())
    fig = figures.prediction_bars(table["token"].tolist(), table["prob"].tolist(), title)
    ui.plotly_chart(fig, key=f"pred-{name}")
    if pred.method:
        st.caption(pred.method)
    export.figure_downloads(fig, f"pred-{name}", table, settings)


def masked_lm(sidebar_bert: str | None, label: str) -> str | None:
    """The masked LM for the masked-LM column: the sidebar's model when it has a head, else a
    bundled one, said in one line (the sidebar choice stays as it is for the other pages)."""
    fillers = engine_access.models_that("masked_lm", current=sidebar_bert)
    if not fillers:
        st.info("No installed model has a masked-LM head.")
        return None
    key = state.url_key("pred_bert", kind=str, default=fillers[0])
    if st.session_state[key] not in fillers:
        st.session_state[key] = fillers[0]
    if sidebar_bert and "masked_lm" not in engine_access.capabilities(sidebar_bert):
        st.caption(f"{safe_md(sidebar_bert)} (the sidebar's {label}) has no masked-LM head, so a model "
                   "with one fills the blank here.")
    return st.selectbox("Masked LM", fillers, key=key)


def model_column(inputs, family_name: str, model_id: str | None, masked: str, prefix: str,
                 suffix: str, off: tuple[str, str] | None) -> list[why.Shown]:
    """Every prediction the model can make (with the parts `off` knocked out, beside): a
    family of masked LMs fills the blank with the masked LM chosen here; any other model is
    asked what its own checkpoint can do (an ELMo file may ship no LM softmax): a
    left-to-right LM fills the blank by re-ranking and guesses the next word; with a
    right-to-left LM as well (ELMo) both LMs are shown together and apart. Returns the
    predictions shown."""
    fam = engine_access.family_row(family_name)
    if "masked_lm" in fam.capabilities:     # a column of masked LMs: one with a head is picked
        model_id = masked_lm(model_id, fam.label)
        if model_id is not None:
            st.markdown(f"**{fam.label} · {safe_md(model_id)}** — fills the blank")
            rescore = st.toggle(
                "Re-rank by sentence", key=state.url_key("pred_rescore", kind=bool,
                                                         default=False),
                help="The head's 30 likeliest words, each put in the blank and ranked by how "
                     "likely the model finds the whole sentence then (pseudo-log-likelihood, "
                     "Salazar et al. 2020). Slower: one pass of the model per candidate and word, "
                     "a few seconds for a short sentence on a laptop CPU.")
            return _drawn(prediction(
                "masked", model_id, masked, "Masked LM, re-ranked" if rescore else "Masked LM",
                inputs, fam.name, off, rescore=rescore))
        return []
    if model_id is None:
        st.info(f"Choose {fam.a_label} model in the sidebar.")
        return []
    can = engine_access.capabilities(model_id) & set(PREDICTS)   # this checkpoint, not its family
    if not can:
        st.info(f"{safe_md(model_id)} ships no LM softmax or head to predict words with; its layers are "
                "on the other pages.")
        return []
    two_lms = {"next_word", "previous_word"} <= can
    st.markdown(f"**{fam.label} · {safe_md(model_id)}** — "
                + ("forward and backward LMs" if two_lms else "reads left to right"))
    shown = []
    if "fill_blank" in can:
        shown += _drawn(prediction("masked", model_id, masked,
                                   "Both LMs together" if two_lms else "Fill from both sides",
                                   inputs, f"{fam.name}-fill", off))
    if "next_word" in can:
        shown += _drawn(prediction(
            "next", model_id, prefix,
            "Forward LM (from the left)" if two_lms else "Next word (left side only)", inputs,
            f"{fam.name}-fwd" if two_lms else fam.name, off))
    if "previous_word" in can:
        shown += _drawn(prediction("previous", model_id, suffix, "Backward LM (from the right)",
                                   inputs, f"{fam.name}-bwd", off))
    return shown


def _drawn(shown: why.Shown | None) -> list[why.Shown]:
    return [] if shown is None else [shown]


def logit_lens(inputs, model_id: str, prefix: str) -> None:
    st.subheader(f"Logit lens · {safe_md(model_id)}")
    st.caption("nostalgebraist 2020: the final norm and output head applied to every layer; "
               "each cell is that layer's best next token after the word in the column.")
    if not prefix:
        st.info("The blank is the first word: there is no prefix to read.")
        return
    try:
        lens = engine_access.logit_lens(model_id, prefix)
    except engine_access.UnsupportedPrediction as exc:
        st.info(ui.one_line(exc))
        return
    rows = list(lens.layer_names)
    shown = [[figures.visible_token(t) for t in row] for row in lens.top_tokens]
    fig = figures.matrix_heatmap(lens.top_probs, list(lens.tokens), rows, "Top next token per "
                                 "layer", "probability", 0.0, 1.0, text=shown)
    ui.plotly_chart(fig, key="logit-lens")
    # one row per (layer, position): the figure's text (the top tokens) with its colour, and
    # no column named by a token (" the" twice would make two columns of one name)
    n_layers, n_tokens = np.shape(lens.top_probs)
    export.figure_downloads(fig, "logit-lens", pd.DataFrame({
        "layer": np.repeat(rows, n_tokens), "position": np.tile(np.arange(n_tokens), n_layers),
        "input_token": list(lens.tokens) * n_layers,
        "top_next_token": [t for row in lens.top_tokens for t in row],
        "probability": np.asarray(lens.top_probs).ravel()}),
        inputs.settings(model=model_id, prefix=prefix))


PREDICTS = ("masked_lm", "fill_blank", "next_word", "previous_word")


def render(inputs: state.Inputs) -> None:
    st.title("Predictions")
    # loaded with progress, not encoded: this page reads predictions, no encoding
    models = ui.ready_models(inputs, encode=False)
    if not models:
        return
    masked, prefix, suffix = choose_blank(inputs)
    st.text(f"The blank: {masked}")     # typed text: never read as markdown ("bank(s)", *x*)
    with st.expander("Knock out heads or blocks", expanded=bool(knockout.current())):
        spec, mode = knockout.controls()
        st.caption(knockout.SYNTAX + " Each prediction and its \"why\" are shown with every "
                   "part on and with these off, side by side; a head can also be clicked off "
                   "in the Attention page's model view.")
    # the parts knocked out in this run (app/knockout.py), or None
    off = (spec, mode) if spec else None
    chosen = dict(models)
    # one column per family that can predict, masked LMs first (they read both sides at once)
    families = engine_access.family_rows()
    shown = sorted((name for name, f in families.items() if f.capabilities & set(PREDICTS)),
                   key=lambda name: "masked_lm" not in families[name].capabilities)
    # the predictions drawn in this run, for the why-view under them
    drawn: list[why.Shown] = []
    for col, name in zip(st.columns(len(shown)), shown):
        with col:
            drawn += model_column(inputs, name, chosen.get(name), masked, prefix, suffix, off)
    why.predictions_view(inputs, drawn, off)
    for name, model_id in models:
        if "logit_lens" in engine_access.capabilities(model_id):
            logit_lens(inputs, model_id, prefix)


ui.run_page(render)
