"""Generation: a decoder continues a prompt token by token; each step's token, probability,
entropy and alternatives, the token's rank at every layer (logit lens over generated text,
Ecco's rankings), attention between generated and existing tokens (bertviz#131), and why a
chosen generated token came out (its attribution over the text before it)."""
import numpy as np
import pandas as pd
import streamlit as st

from app import engine_access, explain_access, export, state, ui, why
from app import explain_figures as xf
from app.figures import matrix_heatmap, visible_token
from app.safe import safe_md

DEFAULT_PROMPT = "The capital of France is"
PROMPT_CHARS = engine_access.MAX_CHARS       # the engine's cap on any text
MAX_TOKENS = explain_access.MAX_GENERATED_TOKENS


def request(inputs: state.Inputs) -> dict | None:
    """The model and the decoding the user asked for: Engine.generate's arguments."""
    able = engine_access.models_that("generation", current=inputs.model("gpt"))
    if not able:
        st.info("No installed model continues a text left to right (a GPT-family decoder).")
        return None
    key = state.url_key("gen_model", str, default=able[0])
    if st.session_state[key] not in able:
        st.session_state[key] = able[0]
    model_id = st.selectbox("Model", able, key=key)
    prompt = st.text_area("Prompt", key=state.url_key("gen_prompt", str, default=DEFAULT_PROMPT,
                                                      max_chars=PROMPT_CHARS),
                          max_chars=PROMPT_CHARS, height=80)
    st.caption(f"At most {PROMPT_CHARS} characters and {engine_access.MAX_WORDS} words, and "
               f"{MAX_TOKENS} generated tokens; prompt and tokens together within the model's "
               "positions. \"Why this token?\" explains a token while the text before it "
               "(the prompt and the tokens before) keeps within the same caps.")
    c1, c2, c3, c4 = st.columns([2, 1, 1, 1])
    n = c1.slider("Tokens to generate", 1, MAX_TOKENS,
                  key=state.url_key("gen_tokens", default=12, bounds=(1, MAX_TOKENS)))
    sample = c2.toggle("Sample", key=state.url_key("gen_sample", bool, default=False),
                       help="Off: greedy (the likeliest token each step). On: drawn from "
                            "softmax(logits / temperature) with the seed, so a link repeats it.")
    temperature = c3.number_input("Temperature", *explain_access.TEMPERATURES, step=0.1,
                                  disabled=not sample,
                                  key=state.url_key("gen_temperature", float, default=1.0,
                                                    bounds=explain_access.TEMPERATURES))
    seed = c4.number_input("Seed", 0, 2**31 - 1, disabled=not sample,
                           key=state.url_key("gen_seed", default=0, bounds=(0, 2**31 - 1)))
    return dict(model_id=model_id, prompt=prompt, max_tokens=int(n), sample=bool(sample),
                temperature=float(temperature) if sample else 1.0,
                seed=int(seed) if sample else None)


def steps_view(gen, settings: dict) -> None:
    shown = [visible_token(t) for t in gen.tokens]
    fig = xf.generation_steps(gen.tokens, gen.prob, gen.entropy, "Each generated token")
    ui.plotly_chart(fig, key="gen-steps")
    table = pd.DataFrame({
        "step": np.arange(1, len(shown) + 1), "token": shown, "prob": gen.prob,
        "entropy": gen.entropy,
        "top alternatives": [", ".join(f"{visible_token(t)} ({p:.3f})" for t, p in zip(ts, ps))
                             for ts, ps in zip(gen.top_tokens, gen.top_probs)]})
    st.dataframe(table, hide_index=True)
    st.caption(safe_md(explain_access.PROB_CONVENTION) + "; entropy in nats.")
    export.figure_downloads(fig, "generation-steps", table, settings)


def ranks_view(gen, settings: dict) -> None:
    if gen.layer_ranks is None:
        st.info("This model's final norm or output head was not found: no logit lens.")
        return
    fig = xf.layer_ranks(gen.layer_ranks, gen.tokens, gen.layer_names,
                         "Rank of the generated token at every layer")
    ui.plotly_chart(fig, key="gen-ranks")
    st.caption(safe_md(explain_access.RANK_CONVENTION))
    table = pd.DataFrame(gen.layer_ranks, columns=list(gen.layer_names)).assign(
        step=np.arange(1, len(gen.tokens) + 1), token=list(gen.tokens))
    export.figure_downloads(fig, "generation-ranks", table, settings)


def attention_view(args: dict, settings: dict) -> None:
    att = explain_access.generation_attention(**args)
    layers, heads = att.attentions.shape[:2]
    c1, c2 = st.columns(2)
    layer = c1.selectbox("Layer", _choices("gen_layer", layers), key="gen_layer")
    head = c2.selectbox("Head", _choices("gen_head", heads), key="gen_head")
    maps = att.attentions if layer == "average" else att.attentions[int(layer) - 1:int(layer)]
    maps = maps if head == "average" else maps[:, int(head) - 1:int(head)]
    rows = maps.mean(axis=(0, 1))[att.n_prompt:]                     # [generated, all tokens]
    labels = [visible_token(t) for t in att.tokens]
    fig = matrix_heatmap(rows, labels, labels[att.n_prompt:],
                         f"Attention of generated tokens (layer {layer}, head {head})",
                         "attention", 0.0, None)
    ui.plotly_chart(fig, key="gen-attention")
    st.caption("Rows: the generated tokens; columns: the prompt's tokens, then the generated "
               "ones (each row attends only to its left). From one forward of the whole text.")
    export.figure_downloads(fig, "generation-attention",
                            pd.DataFrame(rows, columns=labels).assign(row_token=labels[
                                att.n_prompt:]), {**settings, "layer": layer, "head": head})


def _choices(key: str, n: int) -> list[str]:
    """"average" or one of n, in the link; a linked number past this model's n is dropped."""
    options = ["average"] + [str(j) for j in range(1, n + 1)]
    state.url_key(key, str, default="average")
    if st.session_state[key] not in options:
        st.session_state[key] = "average"
    return options


def explainable(gen) -> tuple[list[int], tuple[int, str] | None]:
    """The generated tokens (from 0) whose text before them the engine reads within its caps
    (engine.text: characters and words, as Engine.attribute splits it), and the first one
    left out with why (None when none is)."""
    able, refused = [], None
    for i, context in enumerate(gen.contexts):
        try:
            engine_access.split_words(engine_access.drop_invisible(context))
        except engine_access.TextError as exc:
            refused = refused or (i, ui.one_line(exc))
        else:
            able.append(i)
    return able, refused


def _numbers(steps: list[int]) -> str:
    """Steps from 0 as the token numbers shown (from 1), runs written "1–3": "1–3, 5"."""
    runs: list[list[int]] = []
    for j in steps:
        if runs and j == runs[-1][-1] + 1:
            runs[-1].append(j)
        else:
            runs.append([j])
    return ", ".join(f"{r[0] + 1}" if len(r) == 1 else f"{r[0] + 1}–{r[-1] + 1}" for r in runs)


def why_view(gen, settings: dict) -> None:
    able, refused = explainable(gen)
    if refused:
        i, why_not = refused
        where = (f"before token {i + 1}, {why_not} (a token is explained over the prompt and "
                 "the tokens before it)")
        if not able:
            st.info(safe_md(f"No generated token can be explained: {where}."))
            return
        n = len(gen.tokens)
        st.caption(safe_md(f"Token{'s' if len(able) > 1 else ''} {_numbers(able)} of {n} can "
                           f"be explained; {where}."))
    key = state.url_key("gen_explain", default=0, bounds=(0, 10**4))
    if st.session_state[key] not in able:
        st.session_state[key] = able[0]
    i = st.selectbox("Generated token", able, key=key,
                     format_func=lambda j: f"{j + 1}: {visible_token(gen.tokens[j])}")
    word, exact = explain_access.explained_target(gen.tokens[i])
    if not word:
        st.info("This token is whitespace alone: there is no word to explain.")
        return
    if not (exact and gen.context_round_trips[i]):
        st.caption(safe_md(f"Explained as the word {word!r} after a space following the text "
                           "before it; the model generated the piece "
                           f"{visible_token(gen.tokens[i])!r}"
                           + ("" if gen.context_round_trips[i] else
                              ", and that text does not tokenise back to exactly the pieces "
                              "it read") + ", so the explained input differs slightly."))
    _, contrast, methods = why.question("gen", ask_target=False)
    why.explain(gen.model_id, gen.contexts[i], "next", word, contrast, methods, f"gen-{i}",
                {**settings, "token": i, "target": word, "context": gen.contexts[i]})


def render(inputs: state.Inputs) -> None:
    st.title("Generation")
    args = request(inputs)
    if args is None:
        return
    try:
        gen = explain_access.generate(**args)
    except (engine_access.EngineError, engine_access.TextError) as exc:
        st.warning(ui.one_line(exc))     # too many tokens for the model, an empty prompt ...
        return
    st.text(gen.prompt + gen.text)      # typed and generated text: never read as markdown
    st.caption(f"{len(gen.tokens)} tokens, "
               + ("stopped at the end-of-text token" if gen.stopped == "eos"
                  else "as many as asked for")
               + (f"; sampled at temperature {gen.temperature:g}, seed {gen.seed}"
                  if gen.sample else "; greedy"))
    settings = inputs.settings(model=args["model_id"], prompt=args["prompt"],
                               decoding=gen.to_json()["decoding"], max_tokens=args["max_tokens"])
    steps, ranks, attention, explain = st.tabs(      # keyed: as the Attention page's views
        ["Steps", "Rank at every layer", "Attention", "Why this token?"], key="gen_views")
    with steps, ui.guarded():
        steps_view(gen, settings)
    with ranks, ui.guarded():
        ranks_view(gen, settings)
    with attention, ui.guarded():
        attention_view(args, settings)
    with explain, ui.guarded():
        why_view(gen, settings)


ui.run_page(render)
