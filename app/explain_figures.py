"""Plotly builders for attributions and generations: plain data in, figure out (no Streamlit,
no engine calls). Words are drawn as plotly text through safe_label, never as HTML."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.figures import SEQUENTIAL, unique_labels, visible_token
from app.safe import safe_label

# red raises f, blue lowers it; the scale is symmetric around 0 so white means "no effect"
DIVERGING = "RdBu_r"


def _limit(scores: np.ndarray) -> float:
    top = float(np.max(np.abs(scores))) if len(scores) else 0.0
    return top if top > 0 else 1.0


def attribution_words(words: Sequence[str], scores: np.ndarray, title: str,
                      signed: bool = True, zlabel: str = "score") -> go.Figure:
    """The sentence as one row of coloured cells, each cell showing its word. `signed`: a
    diverging scale around 0 (an attribution); else a sequential one (rollout's shares)."""
    scores = np.asarray(scores, dtype=float)
    shown = [safe_label(visible_token(w)) for w in words]
    lim = _limit(scores)
    fig = go.Figure(go.Heatmap(
        z=[scores.tolist()], x=list(range(len(words))), y=[""], text=[shown],
        texttemplate="%{text}", colorscale=DIVERGING if signed else SEQUENTIAL,
        zmin=-lim if signed else 0.0, zmax=lim, colorbar=dict(title=safe_label(zlabel)),
        hovertemplate="%{text}<br>" + safe_label(zlabel) + " %{z:.4f}<extra></extra>",
        xgap=2))
    fig.update_layout(title=safe_label(title), height=170, margin=dict(l=10, r=10, t=50, b=10),
                      xaxis=dict(showticklabels=False), yaxis=dict(showticklabels=False))
    return fig


def attribution_bars(words: Sequence[str], scores: np.ndarray, title: str,
                     zlabel: str = "score") -> go.Figure:
    scores = np.asarray(scores, dtype=float)
    fig = go.Figure(go.Bar(
        x=unique_labels([safe_label(visible_token(w)) for w in words]), y=scores.tolist(),
        marker_color=["#d6604d" if s > 0 else "#4393c3" for s in scores],
        hovertemplate="%{x}<br>" + safe_label(zlabel) + " %{y:.4f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=300, yaxis_title=safe_label(zlabel),
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


def generation_steps(tokens: Sequence[str], prob: np.ndarray, entropy: np.ndarray,
                     title: str) -> go.Figure:
    """Each generated token's probability (bars) and the entropy of its step (line, nats)."""
    x = unique_labels([f"{i + 1}: {safe_label(visible_token(t))}" for i, t in enumerate(tokens)])
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=x, y=np.asarray(prob, float).tolist(), name="probability"))
    fig.add_trace(go.Scatter(x=x, y=np.asarray(entropy, float).tolist(), name="entropy (nats)",
                             mode="lines+markers"), secondary_y=True)
    fig.update_layout(title=safe_label(title), height=340, margin=dict(l=10, r=10, t=50, b=10))
    fig.update_yaxes(title_text="probability", range=[0, 1], secondary_y=False)
    fig.update_yaxes(title_text="entropy (nats)", secondary_y=True)
    return fig


def layer_ranks(ranks: np.ndarray, tokens: Sequence[str], layer_names: Sequence[str],
                title: str) -> go.Figure:
    """ranks [tokens, layers]: drawn layers × tokens, coloured by log10 of the rank (1 = the
    layer already puts the token first), each cell showing the rank."""
    r = np.asarray(ranks).T                                         # [layers, tokens]
    x = unique_labels([f"{i + 1}: {safe_label(visible_token(t))}" for i, t in enumerate(tokens)])
    fig = go.Figure(go.Heatmap(
        z=np.log10(r).tolist(), x=x, y=unique_labels([safe_label(n) for n in layer_names]),
        text=[[str(int(v)) for v in row] for row in r], texttemplate="%{text}",
        colorscale=SEQUENTIAL, reversescale=True, zmin=0.0,
        colorbar=dict(title="log10 rank"),
        hovertemplate="%{y} · %{x}<br>rank %{text}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=max(320, 22 * len(layer_names) + 120),
                      yaxis_autorange="reversed", margin=dict(l=10, r=10, t=50, b=10))
    return fig
