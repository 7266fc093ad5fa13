"""Plotly builders for what each part of a model does (engine/components/): head maps, a
patching grid and each block's direct effect. Plain data in, figure out (no Streamlit, no
engine calls); labels go through safe_label, never HTML."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from app.explain_figures import DIVERGING
from app.figures import SEQUENTIAL, unique_labels, visible_token
from app.safe import safe_label


def _limit(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)]) if np.size(values) else np.zeros(0)
    top = float(finite.max()) if finite.size else 0.0
    return top if top > 0 else 1.0


def head_map(values: np.ndarray, title: str, zlabel: str, signed: bool = True) -> go.Figure:
    """A layers × heads map, layer 1 on top; `signed`: a diverging scale around 0."""
    values = np.asarray(values, dtype=float)
    n_layers, n_heads = values.shape
    lim = _limit(values)
    fig = go.Figure(go.Heatmap(
        z=values, x=[f"head {h + 1}" for h in range(n_heads)],
        y=[f"layer {l + 1}" for l in range(n_layers)],
        colorscale=DIVERGING if signed else SEQUENTIAL, zmin=-lim if signed else 0.0, zmax=lim,
        colorbar=dict(title=safe_label(zlabel)), xgap=1, ygap=1,
        hovertemplate="%{y} · %{x}<br>" + safe_label(zlabel) + " %{z:.4f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=max(300, 18 * n_layers + 120),
                      yaxis_autorange="reversed", margin=dict(l=10, r=10, t=50, b=10))
    return fig


def patching_grid(restored: np.ndarray, tokens: Sequence[str], rows: Sequence[str],
                  title: str) -> go.Figure:
    """The share of f each patched cell restores: rows are layers, columns the pieces read."""
    restored = np.asarray(restored, dtype=float)
    x = unique_labels([safe_label(visible_token(t)) for t in tokens])
    lim = _limit(restored)
    fig = go.Figure(go.Heatmap(
        z=restored, x=x, y=[safe_label(r) for r in rows], colorscale=DIVERGING,
        zmin=-lim, zmax=lim, colorbar=dict(title="restored"),
        hovertemplate="%{y} · %{x}<br>restored %{z:.3f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=max(320, 16 * len(rows) + 140),
                      yaxis_autorange="reversed", margin=dict(l=10, r=10, t=50, b=10))
    return fig


def block_bars(embed: float, mlp: np.ndarray, heads: np.ndarray, rest: float,
               title: str) -> go.Figure:
    """Each block's direct effect: the embeddings, then per layer its attention (the sum of
    its heads) and its feed-forward block, then what no component owns."""
    n = len(mlp)
    names = ["embeddings"] + [f"{l + 1} {part}" for l in range(n) for part in ("attn", "mlp")] \
        + ["rest"]
    values = [embed] + [float(v) for l in range(n)
                        for v in (heads[l].sum(), mlp[l])] + [rest]
    colours = ["#888"] + ["#1f77b4", "#ff7f0e"] * n + ["#bbb"]
    fig = go.Figure(go.Bar(x=names, y=values, marker_color=colours,
                           hovertemplate="%{x}: %{y:.4f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=340, margin=dict(l=10, r=10, t=50, b=10),
                      yaxis_title="direct effect on the logit")
    return fig


def mark_heads(fig: go.Figure, heads: set[tuple[int, int]], n_layers: int, n_heads: int,
               n: int) -> go.Figure:
    """Cross out the thumbnails of the heads switched off ((layer, head), from 1) on a model
    view (attention_figures.attention_grid: n × n maps a gap apart), as a trace after its
    clickable markers, so a click still reads those."""
    shown = sorted((l, h) for l, h in heads if 1 <= l <= n_layers and 1 <= h <= n_heads)
    if not shown:
        return fig
    cell = n + 1
    fig.add_trace(go.Scatter(
        x=[(h - 1) * cell + (n - 1) / 2 for _, h in shown],
        y=[(l - 1) * cell + (n - 1) / 2 for l, _ in shown], mode="markers",
        marker=dict(symbol="x-thin", size=max(10, 3 * n), line=dict(width=3, color="#d62728")),
        text=[f"layer {l}, head {h}: switched off" for l, h in shown], hoverinfo="text",
        showlegend=False))
    return fig
