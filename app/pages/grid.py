"""Layers side by side: every layer's projection at once, linked selection, search, isolate.

Small multiples after Tufte; the linked selection and neighbour panel after LIT and TF Projector.
A point is an occurrence (sentence, word position): the same id in every model, so a selection
made in one model's grid is ringed in every grid, and the side panel reads it in the model and
layer where it was made.
"""

import pandas as pd
import streamlit as st

from app import export, figures, results, state, ui
from app import selection as sel
from app.engine_access import word_key
from app.grid_selection import SEL, SEL_LAYER, SEL_MODEL, selection, side_panel, take_event
from app.results import MIN_POINTS, PROJECTIONS
from app.safe import safe_md

SCOPES = {"the target word": "target", "every word": "all"}
MAX_PANELS = 12          # auto: every k-th layer so that a grid holds at most this many panels
MAX_PANELS_3D = 8        # each 3-D panel is a WebGL context; browsers allow ~16 per page
WEBGL_PANELS = 15        # ... so stacked models share 15 (a 16th breaks the first panel)
OTHER = "other words"


def point_labels(occ, labels: list[str], target: str, scope: str) -> list[str]:
    """Target occurrences take their sentence's sense label; other words share one grey-ish
    label so the senses stay the colours that matter."""
    t = word_key(target)
    return [labels[s] if (scope == "target" or word_key(w) == t) else OTHER
            for s, w in zip(occ.sentence, occ.word)]


def hover_texts(occ, sentences) -> list[str]:
    """The sentence with the occurrence's word in bold; typed text is escaped first (plotly
    reads a small HTML subset), so only our bold is markup."""
    return [f"{s + 1}: " + figures.bold_word(sentences[s], w)
            for s, w in zip(occ.sentence, occ.word)]


def plan(inputs, model_id: str, opts: dict) -> dict | None:
    """What a model's grid will show (points kept, layers), from the selection as it stands:
    the same plan that drew last run's grid, so a click on it maps back to occurrences."""
    occ_all = results.occurrences(model_id, inputs.sentences, inputs.target, inputs.pool,
                                  opts["scope"])
    if len(occ_all) == 0:
        st.error(f"'{safe_md(inputs.target)}' is in none of the sentences (words are matched "
                 "whole, ignoring case).")
        return None
    keep = list(range(len(occ_all)))
    chosen = [i for i in (occ_all.index(o) for o in selection()) if i is not None]
    isolated = opts["isolate"] and len(chosen) >= MIN_POINTS
    if opts["isolate"] and not isolated:
        st.info(f"Isolate needs at least {MIN_POINTS} selected points (lasso them, or turn "
                f"on \"Clicks add\"); {len(chosen)} selected, so every point is shown.")
    if isolated:
        keep = sorted(chosen)
    n_layers = len(occ_all.layer_names)
    stacked = opts.get("n_models", 1)
    cap = (min(MAX_PANELS_3D, WEBGL_PANELS // stacked) if opts["dims"] == 3 else MAX_PANELS)
    layers = sel.shown_layers(n_layers, opts["every"], cap)
    if len(layers) > cap:
        if opts["dims"] == 3:
            shared = f", {stacked} models sharing what a browser can draw" if stacked > 1 else ""
            st.info(f"{len(layers)} panels asked for; 3D shows {cap} (the first {cap - 1} and "
                    f"the top layer{shared}): raise 'every k-th layer' to see the others.")
            layers = layers[:cap - 1] + [layers[-1]]
        else:
            st.caption(f"{len(layers)} panels: scroll to see them all.")
    return dict(model_id=model_id, occ_all=occ_all, keep=keep, isolated=isolated,
                layers=layers, chart_key=f"grid-{model_id}")


def model_grid(inputs, p: dict, opts: dict, labels: list[str]) -> None:
    model_id, occ_all, keep, layers = p["model_id"], p["occ_all"], p["keep"], p["layers"]
    occ = occ_all.subset(keep)
    n_layers = len(occ.layer_names)
    chart_key = p["chart_key"]
    chosen = [occ.index(o) for o in selection()]
    chosen = [i for i in chosen if i is not None]
    proj = results.grid_projection(model_id, inputs.sentences, inputs.target, inputs.pool,
                                   opts["scope"], opts["method"], opts["dims"],
                                   tuple(keep) if p["isolated"] else None)
    find = word_key(opts["find"].strip())
    found = [i for i, w in enumerate(occ.word) if find and word_key(w) == find]
    if find and not found:
        st.caption(f"'{safe_md(opts['find'])}' is not among the points shown.")
    plabels = point_labels(occ, labels, inputs.target, opts["scope"])
    hover = hover_texts(occ, inputs.sentences)
    panels = [(occ.layer_names[l] + (" (baseline)" if l == 0 else ""), proj.coords[l])
              for l in layers]
    what = f"'{inputs.target}'" if opts["scope"] == "target" else "every word"
    fig = figures.layer_grid(panels, plabels, hover, list(occ.word) if opts["labels"] else None,
                             selected=chosen, found=found,
                             title=f"{model_id}: {what}, {len(occ)} points, "
                                   f"{len(layers)} of {n_layers} layers")
    ui.plotly_chart(fig, key=chart_key, on_select="rerun",
                    selection_mode=("points", "box", "lasso"))
    st.caption(proj.note + (f"; axes explain {sum(proj.explained):.0%} of the variance"
                            if proj.explained else "") +
               ". Click a point or lasso several (with \"Clicks add\" on, each click adds a "
               "point or takes it out): every panel and model rings them and the Selection "
               "panel reads them.")
    rows = []
    for panel, l in enumerate(layers):
        for i in range(len(occ)):
            rows.append({"layer": occ.layer_names[l], "layer_index": l,
                         # counted from 0, as `ctxlens embed` and `neighbours` count them
                         "sentence_index": occ.sentence[i], "position": occ.position[i],
                         "word": occ.word[i], "label": plabels[i],
                         **{ax: float(proj.coords[l, i, k])
                            for k, ax in enumerate("xyz"[:opts["dims"]])}})
    settings = inputs.settings(model=model_id, projection=opts["method"], scope=opts["scope"],
                               layers=layers, dims=opts["dims"], isolate=opts["isolate"],
                               selection=[list(o) for o in selection()], seed=0)
    export.figure_downloads(fig, f"grid-{model_id}", pd.DataFrame(rows), settings)
    with st.expander(f"Play through {safe_md(model_id)}'s layers"):
        if opts["dims"] == 3:
            st.caption("The animation is 2-D: switch 3D off to play it.")
        else:
            anim = figures.layer_animation(panels, plabels, hover,
                                           title=f"{model_id}: {what}, layer by layer")
            ui.plotly_chart(anim, key=f"anim-{model_id}")
            export.figure_downloads(anim, f"grid-animation-{model_id}", pd.DataFrame(rows),
                                    settings)


def controls() -> dict:
    # widths that keep every label whole down to a tablet's 768 px
    c = st.columns([2, 2, 0.8, 1, 1.6])
    method = PROJECTIONS[c[0].radio("Projection", list(PROJECTIONS), horizontal=True,
                                     help=ui.PROJECTION_HELP, key=state.url_key(
        "grid_projection", str, default="PCA", choices=PROJECTIONS))]
    scope = SCOPES[c[1].radio("Points", list(SCOPES), horizontal=True, key=state.url_key(
        "grid_points", str, default="the target word", choices=SCOPES))]
    dims = 3 if c[2].toggle("3D", key=state.url_key("grid_3d", bool, default=False)) else 2
    show_labels = c[3].toggle("Labels", key=state.url_key("grid_labels", bool, default=False))
    stack = c[4].toggle("All models", key=state.url_key("grid_all", bool, default=False),
                        help="One grid per chosen model, one under another")
    d = st.columns([1, 1.5, 1.6, 1.2])
    every = d[0].number_input("Every k-th layer (0: auto)", 0, 32, key=state.url_key(
        "grid_every", int, default=0, bounds=(0, 32)), help=f"auto keeps a grid to {MAX_PANELS} panels")
    find = state.url_text_input(d[1], "Find a word", "grid_find", 60,
                                placeholder="rings its occurrences in every panel")
    isolate = d[2].toggle("Isolate selection", key=state.url_key("grid_isolate", bool,
                                                                   default=False),
                          help="Re-project only the selected points")
    add = d[3].toggle("Clicks add", key=state.url_key("grid_add", bool, default=False),
                      help="A click adds its point to the selection (a selected point: takes "
                           "it out) instead of replacing it")
    return dict(method=method, scope=scope, dims=dims, labels=show_labels, stack=stack,
                every=int(every), find=find, isolate=isolate, add=add)


def render(inputs: state.Inputs) -> None:
    st.title("Layers side by side")
    st.caption("Every layer at once, aligned so that a point moves rather than the axes: "
               "the input embedding first (the word, and in BERT and GPT-2 its position, before any "
               "context), then up the stack.")
    models = ui.target_models(inputs)
    if not models:
        return
    state.url_key(SEL, str, default="")
    state.url_key(SEL_LAYER, int)
    state.url_key(SEL_MODEL, str)
    opts = controls()
    labels = state.sense_labels(inputs.sentences)
    if not opts["stack"]:
        ids = [m for _, m in models]
        pick = st.selectbox("Model", ids, key=state.url_key("grid_model", str, default=ids[0],
                                                            choices=ids))
        models = [(f, m) for f, m in models if m == pick]
    opts["n_models"] = len(models)
    main, side = st.columns([3, 1])
    with main:
        plans = []
        for _, model_id in models:
            with ui.guarded():          # a failing model keeps the other models' grids
                if ui.prepared(model_id, inputs) and (p := plan(inputs, model_id, opts)):
                    plans.append(p)
        # every click first, then every grid: a selection made in the second grid rings its
        # points in the first one in the same run
        changed = [take_event(p["chart_key"], p["occ_all"], p["keep"], p["layers"],
                              p["model_id"], opts["add"]) for p in plans]
        if any(changed) and opts["isolate"]:    # the points kept follow the new selection
            plans = [plan(inputs, p["model_id"], opts) for p in plans]
        for p in plans:
            with ui.guarded():
                model_grid(inputs, p, opts, labels)
    with side:
        side_panel(inputs, opts, labels)


ui.run_page(render)
