"""Plotly figures of attention: a head's lines between tokens (bertviz-style head view, one
head or every head), the model view's grid of every layer and head, one attention row over
words, and the neuron view of a query against every key. Plain data in, figure out, as in
app/figures.py, whose colours and safe labels they share."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures import PALETTE, SEQUENTIAL, unique_labels
from app.safe import safe_label


# Lines stop just short of the token markers: a line's end point on top of a marker wins the
# click (hover mode "closest" ties), and a click on the token would then never focus it.
LINE_GAP = 0.04


def head_view(tokens: Sequence[str], att: np.ndarray, focus: int | None = None,
              title: str = "") -> go.Figure:
    """BertViz-style: tokens in two columns, a line per (row -> column) pair, weight as opacity.
    focus: show only the lines from this token (and, fainter, to it).

    Lines are grouped into a few opacity bins, one trace each, so a 100-token sentence draws
    ten traces rather than ten thousand."""
    tokens = [safe_label(tok) for tok in tokens]
    t = len(tokens)
    y = -np.arange(t, dtype=float)
    edges = np.array([0.01, 0.05, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.01])
    fig = go.Figure()
    for outgoing in (True, False):
        for lo, hi in zip(edges[:-1], edges[1:]):
            xs, ys, text = [], [], []
            for i, j in zip(*np.nonzero((att >= lo) & (att < hi))):
                if focus is not None and (i != focus if outgoing else j != focus or i == focus):
                    continue
                if focus is None and not outgoing:
                    continue
                label = f"{tokens[i]} → {tokens[j]}: {att[i, j]:.3f}"
                xs += [LINE_GAP, 1 - LINE_GAP, None]
                ys += [y[i], y[j], None]
                text += [label, label, None]
            if not xs:
                continue
            rgb = "31,119,180" if outgoing else "214,39,40"
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", showlegend=False, text=text, hoverinfo="text",
                line=dict(width=1 + 5 * lo, color=f"rgba({rgb},{min(1.0, 0.15 + hi):.2f})")))
    _token_columns(fig, tokens, y)
    fig.update_layout(title=safe_label(title), height=max(300, 26 * t + 80),
                      xaxis=dict(visible=False, range=[-0.6, 1.6]),
                      yaxis=dict(visible=False), margin=dict(l=10, r=10, t=50, b=10))
    return fig


def _token_columns(fig: go.Figure, tokens: Sequence[str], y: np.ndarray) -> None:
    """The two token columns of a head view, labels outside the lines; customdata is the token
    index, so a click on a token can focus it."""
    for x, side in ((0, "left"), (1, "right")):
        fig.add_trace(go.Scatter(x=[x] * len(tokens), y=y, mode="markers+text",
                                 text=list(tokens), textposition=f"middle {side}",
                                 showlegend=False, customdata=np.arange(len(tokens)),
                                 marker=dict(size=9, color="grey"),
                                 hovertemplate="%{text}: click to focus<extra></extra>"))


def head_view_heads(tokens: Sequence[str], att: np.ndarray, focus: int | None = None,
                    title: str = "", min_weight: float = 0.05) -> go.Figure:
    """BertViz's head view with every head at once: att [heads, T, T], one colour per head (a
    legend entry each: click it to hide the head), weight as opacity; lines under min_weight
    are left out. focus: only the lines from that token."""
    tokens = [safe_label(tok) for tok in tokens]
    heads, t = att.shape[0], att.shape[1]
    y = -np.arange(t, dtype=float)
    edges = np.array([min_weight, 0.2, 0.4, 0.7, 1.01])
    fig = go.Figure()
    for h in range(heads):
        colour = PALETTE[h % len(PALETTE)]
        first = True
        for lo, hi in zip(edges[:-1], edges[1:]):
            xs, ys, text = [], [], []
            for i, j in zip(*np.nonzero((att[h] >= lo) & (att[h] < hi))):
                if focus is not None and i != focus:
                    continue
                label = f"head {h + 1}: {tokens[i]} → {tokens[j]}: {att[h, i, j]:.3f}"
                xs += [LINE_GAP, 1 - LINE_GAP, None]
                ys += [y[i], y[j], None]
                text += [label, label, None]
            if not xs:
                continue
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines", name=f"head {h + 1}", legendgroup=f"head {h + 1}",
                showlegend=first, text=text, hoverinfo="text", opacity=min(1.0, 0.2 + hi * 0.8),
                line=dict(width=1 + 4 * lo, color=colour)))
            first = False
    _token_columns(fig, tokens, y)
    fig.update_layout(title=safe_label(title), height=max(300, 26 * t + 80),
                      legend_title_text="head",
                      xaxis=dict(visible=False, range=[-0.6, 1.6]),
                      yaxis=dict(visible=False), margin=dict(l=10, r=10, t=50, b=10))
    return fig


# The model view sends every layer's and head's map in one heatmap: past this many cells (a
# 270-map SmolLM2-135M at 85 tokens) it is ~10 MB a browser draws slowly, and a 600-token
# sentence makes it hundreds of MB.
MODEL_VIEW_MAX_CELLS = 2_000_000


def attention_grid_cells(layers: int, heads: int, tokens: int) -> int:
    """The attention weights attention_grid draws (the gaps between its maps aside)."""
    return layers * heads * tokens ** 2


def attention_grid(att: np.ndarray, layer_names: Sequence[str] | None = None) -> go.Figure:
    """Model view: every (layer, head) map as a thumbnail in one heatmap, separated by gaps."""
    layers, heads, t, _ = att.shape
    cell = t + 1
    # float32: half the bytes of plotly's default float64 on the wire, and plenty for a colour
    grid = np.full((layers * cell, heads * cell), np.nan, np.float32)
    for l in range(layers):
        for h in range(heads):
            grid[l * cell:l * cell + t, h * cell:h * cell + t] = att[l, h]
    fig = go.Figure(go.Heatmap(z=grid, colorscale=SEQUENTIAL, zmin=0, zmax=1, hoverongaps=False,
                               showscale=False, hoverinfo="skip"))
    # one clickable marker per thumbnail (point index = layer * heads + head) to open it
    ly, hd = np.divmod(np.arange(layers * heads), heads)
    fig.add_trace(go.Scatter(x=hd * cell + (t - 1) / 2, y=ly * cell + (t - 1) / 2, mode="markers",
                             marker=dict(size=max(8, 3 * t), opacity=0.01, color="white"),
                             text=[f"layer {l + 1}, head {h + 1}: click to open" for l, h in
                                   zip(ly, hd)], hoverinfo="text", showlegend=False))
    fig.update_layout(
        height=max(300, 40 * layers + 80), yaxis_autorange="reversed",
        xaxis=dict(tickvals=[h * cell + t / 2 for h in range(heads)],
                   ticktext=[f"head {h + 1}" for h in range(heads)]),
        yaxis=dict(tickvals=[l * cell + t / 2 for l in range(layers)],
                   ticktext=[safe_label(n) for n in
                             layer_names or [f"layer {l + 1}" for l in range(layers)]]),
        margin=dict(l=10, r=10, t=30, b=10))
    return fig


def attention_row(words: Sequence[str], weights: np.ndarray, special: float,
                  focus: int, title: str) -> go.Figure:
    """Where one word looks: attention (mean over heads) to each word, the word itself marked,
    the share that goes to special tokens as a last bar."""
    names = unique_labels([safe_label(w) for w in words]) + (["[special]"] if special > 0
                                                              else [])
    values = list(weights) + ([special] if special > 0 else [])
    colours = [PALETTE[1] if i == focus else PALETTE[0] for i in range(len(words))] + \
        (["grey"] if special > 0 else [])
    fig = go.Figure(go.Bar(x=names, y=values, marker_color=colours,
                           hovertemplate="%{x}: %{y:.3f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=260, yaxis_title="attention",
                      yaxis_range=[0, max(values + [0.05]) * 1.15],
                      margin=dict(l=10, r=10, t=40, b=10))
    return fig


def neuron_view(tokens: Sequence[str], query: np.ndarray, keys: np.ndarray,
                products: np.ndarray, scores: np.ndarray, attention: np.ndarray,
                query_token: int, title: str) -> go.Figure:
    """BertViz's neuron view for one head and one query token: the query vector, every key
    vector, their elementwise products (a row sums to the raw score), the scaled scores and
    their softmax, which is the attention row. A causal model's future tokens score -inf."""
    names = unique_labels([safe_label(f"{i}: {t}") for i, t in enumerate(tokens)])
    fig = make_subplots(rows=2, cols=4, row_heights=[0.12, 0.88], column_widths=[0.34, 0.34,
                        0.16, 0.16], horizontal_spacing=0.04, vertical_spacing=0.06,
                        specs=[[{"colspan": 2}, None, None, None], [{}, {}, {}, {}]],
                        subplot_titles=[f"query q ({names[query_token]})", "keys k",
                                        "q ⊙ k", "q·k × scale", "softmax = attention"])
    lim = float(max(np.abs(keys).max(), np.abs(query).max(), 1e-9))
    plim = float(max(np.abs(products).max(), 1e-9))
    fig.add_trace(go.Heatmap(z=query[None, :], y=["q"], colorscale="RdBu", zmid=0, zmin=-lim,
                             zmax=lim, showscale=False,
                             hovertemplate="dim %{x}: %{z:.3f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Heatmap(z=keys, y=names, colorscale="RdBu", zmid=0, zmin=-lim, zmax=lim,
                             showscale=False,
                             hovertemplate="%{y} dim %{x}: %{z:.3f}<extra>k</extra>"), 2, 1)
    fig.add_trace(go.Heatmap(z=products, y=names, colorscale="RdBu", zmid=0, zmin=-plim,
                             zmax=plim, showscale=False,
                             hovertemplate="%{y} dim %{x}: %{z:.3f}<extra>q⊙k</extra>"), 2, 2)
    shown = np.where(np.isfinite(scores), scores, np.nan)
    fig.add_trace(go.Bar(x=shown, y=names, orientation="h", marker_color=PALETTE[0],
                         text=["−∞" if not np.isfinite(s) else f"{s:.2f}" for s in scores],
                         textposition="auto", hovertemplate="%{y}: %{x:.3f}<extra></extra>"),
                  2, 3)
    fig.add_trace(go.Bar(x=attention, y=names, orientation="h", marker_color=PALETTE[1],
                         text=[f"{a:.2f}" for a in attention], textposition="auto",
                         hovertemplate="%{y}: %{x:.3f}<extra></extra>"), 2, 4)
    for col in (1, 2, 3, 4):
        fig.update_yaxes(autorange="reversed", row=2, col=col, showticklabels=col == 1)
    fig.update_yaxes(showticklabels=False, row=1, col=1)
    # the query's dimension numbers would sit under its strip, where the titles of the keys and
    # their products stand: the query reads on hover, and the rows below number the same dims
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    fig.update_layout(title=safe_label(title), height=max(320, 24 * len(tokens) + 160),
                      showlegend=False,
                      margin=dict(l=10, r=10, t=70, b=10))
    return fig
