"""What each part does: for one prediction, how much each head matters (knocked out alone, and
Michel et al.'s gradient estimate), which layer and position carry it (activation patching,
Meng et al.'s causal tracing) and each head's and block's direct effect on the logit (direct
logit attribution, pre-norm decoders). Heads are knocked out for every prediction on the
Predictions page (app/knockout.py)."""
import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, explain_access, export, state, ui
from app import component_figures as cf
from app.safe import safe_md

TEXT_CHARS = 300
WORD_CHARS = 50
# an everyday example per kind of prediction, each fixing its own patching pair
EXAMPLES = {
    "masked": dict(text="The capital of France is [MASK].", target="paris",
                   corrupt="The capital of Italy is [MASK].", noise="France"),
    "next": dict(text="The Eiffel Tower is in the city of", target="Paris",
                 corrupt="The Colosseum is in the city of", noise="Eiffel Tower"),
}
CORRUPTIONS = ("another text", "noise on words")


def choose_model(inputs: state.Inputs) -> tuple[str, str] | None:
    """The model to open up, and the kind of prediction it makes ("masked" | "next")."""
    current = inputs.model("gpt") or inputs.model("bert")
    able = engine_access.models_that("ablation", current=current)
    if not able:
        st.info("No installed model can have its parts knocked out (a BERT- or GPT-family "
                "transformer with a prediction head).")
        return None
    key = state.url_key("parts_model", str, default=able[0])
    if st.session_state[key] not in able:
        st.session_state[key] = able[0]
    model_id = st.selectbox("Model", able, key=key)
    kind = "masked" if "masked_lm" in engine_access.capabilities(model_id) else "next"
    return model_id, kind


def question(kind: str, prefix: str) -> tuple[str, str, str | None]:
    """The text, the target and the contrast, in the link under `prefix` and this kind."""
    ex = EXAMPLES[kind]
    c1, c2, c3 = st.columns([4, 1.3, 1.3])
    text = state.url_text_input(
        c1, "Text" + (" (one [MASK])" if kind == "masked" else " (the word comes next)"),
        f"{prefix}_text_{kind}", TEXT_CHARS, default=ex["text"])
    target = state.url_text_input(c2, "Target word", f"{prefix}_target_{kind}", WORD_CHARS,
                                  default=ex["target"])
    contrast = state.url_text_input(
        c3, "Rather than (optional)", f"{prefix}_contrast_{kind}", WORD_CHARS,
        help="f = log p(target) − log p(contrast) when given, else log p(target).")
    return text.strip(), target.strip(), contrast.strip() or None


def _refused(exc: Exception) -> None:
    st.warning(ui.one_line(exc))


def importance_view(inputs, model_id: str, kind: str) -> None:
    st.caption("For one prediction, each head knocked out alone (its output zeroed where it "
               "enters the attention output projection): how much f drops. Beside it, Michel "
               "et al. (2019)'s estimate of the same from one backward pass, |∂f/∂ξ| for a "
               "gate ξ = 1 on each head.")
    text, target, contrast = question(kind, "imp")
    if not (text and target):
        st.info("Type a text and a target word.")
        return
    try:
        imp = explain_access.head_importance(model_id, text, target, contrast, kind)
    except (engine_access.EngineError, engine_access.TextError) as exc:
        _refused(exc)
        return
    settings = inputs.settings(model=model_id, kind=kind, context=text, target=target,
                               contrast=contrast)
    c1, c2 = st.columns(2)
    for col, values, title, label, signed, name in (
            (c1, imp.knocked, "Drop in f with the head knocked out", "drop in f", True,
             "head-knockout"),
            (c2, imp.gradient, "Gradient estimate |∂f/∂ξ|", "|∂f/∂ξ|", False,
             "head-gradient")):
        with col:
            fig = cf.head_map(values, title, label, signed=signed)
            ui.plotly_chart(fig, key=name)
            export.figure_downloads(fig, name, _head_table(values, label), settings,
                                    arrays={"knocked": imp.knocked, "gradient": imp.gradient})
    st.caption(safe_md(f"f = {imp.f_means}: {imp.f:.3f} with every head on. Spearman's rank "
                       f"correlation of the two maps over all heads: {imp.spearman:.2f}."))


def _head_table(values: np.ndarray, label: str) -> pd.DataFrame:
    n_layers, n_heads = values.shape
    return pd.DataFrame({"layer": np.repeat(np.arange(1, n_layers + 1), n_heads),
                         "head": np.tile(np.arange(1, n_heads + 1), n_layers),
                         label: np.asarray(values).ravel()})


def patching_view(inputs, model_id: str, kind: str) -> None:
    st.caption("Activation patching: the corrupted run, with one layer × position of the "
               "clean run put back. Each cell: the share of the clean f it restores "
               "((patched − corrupted) / (clean − corrupted)). Causal tracing (Meng et al. "
               "2022) noises the subject's words instead of changing them.")
    ex = EXAMPLES[kind]
    text, target, contrast = question(kind, "patch")
    c1, c2, c3 = st.columns([1.3, 3, 1.5])
    how = c1.radio("Corrupt by", CORRUPTIONS, key=state.url_key(
        "patch_how", str, default=CORRUPTIONS[0], choices=CORRUPTIONS))
    noise = corrupt = None
    if how == CORRUPTIONS[0]:
        corrupt = state.url_text_input(
            c2, "Corrupted text (tokenised to the same length)", f"patch_corrupt_{kind}",
            TEXT_CHARS, default=ex["corrupt"]).strip()
    else:
        noise = state.url_text_input(
            c2, "Words to noise (3× the embeddings' std, 5 seeds)", f"patch_noise_{kind}",
            TEXT_CHARS, default=ex["noise"]).strip()
    site = c3.radio("Site", list(explain_access.SITES), key=state.url_key(
        "patch_site", str, default="residual", choices=tuple(explain_access.SITES)))
    if not (text and target and (corrupt or noise)):
        st.info("Type a clean text, a target, and a corrupted text or the words to noise.")
        return
    try:
        p = explain_access.patch(model_id, text, corrupt, target, contrast, site=site,
                                 kind=kind, noise_words=noise)
    except (engine_access.EngineError, engine_access.TextError) as exc:
        _refused(exc)
        return
    said = safe_md(f"f = {p.f_means}: clean {p.clean:.3f}, corrupted {p.corrupt:.3f}. "
                   f"Corrupted by {p.corruption}.")
    if p.restore_note:       # every share would be 0/0: no grid of NaN, no CSV of NaN
        st.info(p.restore_note[0].upper() + p.restore_note[1:] + ". Change the corrupted "
                "text, or noise some words instead.")
        st.caption(said)
        return
    rows = list(p.row_labels)
    fig = cf.patching_grid(p.restored, p.tokens, rows, f"{site}: share of f restored")
    ui.plotly_chart(fig, key="patching-grid")
    st.caption(said)
    n_rows, n_tok = p.patched.shape
    table = pd.DataFrame({"row": np.repeat(rows, n_tok),
                          "position": np.tile(np.arange(n_tok), n_rows),
                          "token": list(p.tokens) * n_rows, "patched_f": p.patched.ravel(),
                          "restored": p.restored.ravel()})
    export.figure_downloads(fig, "patching-grid", table,
                            inputs.settings(model=model_id, kind=kind, clean=text,
                                            corrupt=corrupt, noise=noise, site=site,
                                            target=target, contrast=contrast),
                            arrays=p.arrays())


def logit_view(inputs, model_id: str, kind: str) -> None:
    st.caption("Direct logit attribution: each head's and feed-forward block's output, read "
               "straight through the final norm (its scale frozen at this input) and the "
               "unembedding into the target's logit. The parts add up to the logit.")
    if "direct_logit" not in engine_access.capabilities(model_id):
        why = engine_access.cannot(model_id).get("direct_logit") or "it is no pre-norm decoder"
        st.info(safe_md(f"{model_id} has no direct logit attribution: {why}. Models that can: "
                        + ", ".join(engine_access.models_that("direct_logit"))))
        return
    text, target, contrast = question(kind, "dla")
    if not (text and target):
        st.info("Type a text and a target word.")
        return
    try:
        c = explain_access.components(model_id, text, target, contrast)
    except (engine_access.EngineError, engine_access.TextError) as exc:
        _refused(exc)
        return
    settings = inputs.settings(model=model_id, text=text, target=target, contrast=contrast)
    arrays = {"heads": c.heads, "mlp": c.mlp, "embed": np.float64(c.embed),
              "rest": np.float64(c.rest), "logit": np.float64(c.logit)}
    fig = cf.head_map(c.heads, "Each head's direct effect", "logit")
    ui.plotly_chart(fig, key="dla-heads")
    export.figure_downloads(fig, "dla-heads", _head_table(c.heads, "direct effect"), settings,
                            arrays=arrays)
    bars = cf.block_bars(c.embed, c.mlp, c.heads, c.rest, "Each block's direct effect")
    ui.plotly_chart(bars, key="dla-blocks")
    export.figure_downloads(bars, "dla-blocks", pd.DataFrame(
        {"part": ["embeddings"] + [f"layer {l + 1} mlp" for l in range(len(c.mlp))] + ["rest"],
         "direct effect": [c.embed, *c.mlp, c.rest]}), settings, arrays=arrays)
    st.caption(safe_md(f"The parts add up: embeddings {c.embed:.3f} + heads "
                       f"{c.heads.sum():.3f} + feed-forward blocks {c.mlp.sum():.3f} + rest "
                       f"{c.rest:.3f} = {c.total:.3f}; {c.logit_means}: {c.logit:.3f} "
                       f"(difference {abs(c.total - c.logit):.1e})."))


def render(inputs: state.Inputs) -> None:
    st.title("What each part does")
    chosen = choose_model(inputs)
    if chosen is None:
        return
    model_id, kind = chosen
    # one view at a time: each runs the model many times (tabs would run all three)
    # the direct effects first: one forward pass, where the others run the model hundreds of
    # times (a page opened by mistake stays quick)
    view = st.radio("View", list(VIEWS), horizontal=True, key=state.url_key(
        "parts_view", str, default="Direct logit attribution", choices=tuple(VIEWS)))
    if view != "Direct logit attribution":
        st.caption(engine_access.work_cap())
    with ui.guarded():
        VIEWS[view](inputs, model_id, kind)


VIEWS = {"Head importance": importance_view, "Activation patching": patching_view,
         "Direct logit attribution": logit_view}


ui.run_page(render)
