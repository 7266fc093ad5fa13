"""Plotly figure builders: plain data in, figure out (no Streamlit, no engine calls).

Text arrives plain and each builder makes what it draws safe (app.safe.safe_label), so no typed
label, word or title renders as HTML; only `hover` arrives as markup, built by bold_word.

Colours come from plotly's qualitative palette and the Streamlit theme sets the background, so
figures stay legible in light and dark mode.
"""
from __future__ import annotations

import re
import textwrap
from collections import Counter
from typing import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from app.safe import safe_label

PALETTE = qualitative.Plotly + qualitative.D3
SEQUENTIAL = "Viridis"


def bold_word(text: str, word: str) -> str:
    """Hover text: typed or corpus `text` as safe_label makes it, with its first whole-word
    `word` in bold, the only markup."""
    pattern = re.compile(rf"\b({re.escape(safe_label(word))})\b", re.IGNORECASE)
    return pattern.sub(r"<b>\1</b>", safe_label(text), count=1)


def _colour_map(labels: Sequence[str]) -> dict[str, str]:
    return {lab: PALETTE[i % len(PALETTE)] for i, lab in enumerate(sorted(set(labels)))}


def unique_labels(labels: Sequence[str]) -> list[str]:
    """Plotly merges equal category labels ("the" twice in a sentence would become one row);
    repeated labels get zero-width spaces appended, so they stay distinct but look the same."""
    seen: dict[str, int] = {}
    out = []
    for lab in labels:
        k = seen.get(lab, 0)
        seen[lab] = k + 1
        out.append(lab + "\u200b" * k)
    return out


def _wrap(text: str, width: int = 60) -> str:
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False,
                                     break_on_hyphens=False))


def projection_scatter(panels: Sequence[tuple[str, np.ndarray]], labels: Sequence[str],
                       hover: Sequence[str], title: str = "",
                       overlaps: Sequence[Sequence[Sequence[int]]] = (),
                       numbers: Sequence[int] = ()) -> go.Figure:
    """panels: (subtitle, coords [n, 2]) side by side, sharing the axes; points coloured by label.
    overlaps: per panel, groups of points with the same vector, marked "×k" where they sit (one
    point drawn on another would otherwise hide it), with the senses under the mark when they
    differ ("×7: 3 animal, 4 sport"), so an exported image does not read as one sense.
    numbers: drawn beside the points (the sentence numbers), so a still image says which is
    which."""
    fig = make_subplots(rows=1, cols=len(panels),
                        subplot_titles=[safe_label(t) for t, _ in panels],
                        shared_xaxes=True, shared_yaxes=True, horizontal_spacing=0.04)
    colours = _colour_map(labels)
    labels_arr = np.asarray(labels)
    for col, (_, coords) in enumerate(panels, start=1):
        # a coinciding group's numbers would print on top of each other: its mark says it
        grouped = {i for g in (overlaps[col - 1] if col <= len(overlaps) else ()) for i in g}
        for lab, colour in colours.items():
            idx = np.nonzero(labels_arr == lab)[0]
            fig.add_trace(go.Scatter(
                x=coords[idx, 0], y=coords[idx, 1], mode="markers+text" if numbers else "markers",
                name=safe_label(lab), legendgroup=safe_label(lab), showlegend=col == 1,
                textposition="middle right", textfont=dict(size=10, color="grey"),
                texttemplate=[("" if i in grouped else str(numbers[i])) for i in idx]
                if numbers else None,
                marker=dict(size=12, color=colour, line=dict(width=1, color="white")),
                customdata=idx, text=[_wrap(hover[i]) for i in idx],
                hovertemplate="%{text}<extra>" + safe_label(lab) + "</extra>"), row=1, col=col)
    for col, groups in enumerate(overlaps, start=1):
        if groups:
            coords = panels[col - 1][1]
            fig.add_trace(go.Scatter(
                x=[coords[g[0], 0] for g in groups], y=[coords[g[0], 1] for g in groups],
                mode="text", text=[_overlap_mark(g, labels_arr) for g in groups],
                textposition="top right",
                name="same vector", showlegend=False, hoverinfo="skip"), row=1, col=col)
    fig.update_xaxes(matches="x")    # one scale for every panel: the layouts are comparable
    fig.update_layout(title=safe_label(title), height=430, legend_title_text="sense",
                      margin=dict(l=10, r=10, t=60, b=10))
    return fig


def _overlap_mark(group: Sequence[int], labels: np.ndarray) -> str:
    counts = Counter(labels[list(group)].tolist())
    if len(counts) == 1:
        return f"×{len(group)}"
    return f"×{len(group)}: " + ", ".join(f"{n} {safe_label(lab)}"
                                          for lab, n in counts.most_common())


def similarity_heatmap(matrix: np.ndarray, labels: Sequence[str], title: str = "") -> go.Figure:
    labels = unique_labels([safe_label(l) for l in labels])
    fig = go.Figure(go.Heatmap(z=matrix, x=labels, y=labels,
                               colorscale=SEQUENTIAL,
                               zmin=float(min(0.0, np.nanmin(matrix))), zmax=1.0,
                               colorbar=dict(title="cosine"),
                               hovertemplate="%{y}<br>%{x}<br>cosine %{z:.3f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=420, yaxis_autorange="reversed",
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


def per_layer_lines(series: Mapping[str, np.ndarray], title: str, yaxis: str,
                    relative: bool = False) -> go.Figure:
    """One line per model over layers (x = layer, or relative depth 0..1 when depths differ)."""
    fig = go.Figure()
    for k, (name, values) in enumerate(series.items()):
        n = len(values)
        x = np.linspace(0, 1, n) if relative and n > 1 else np.arange(n)
        # explicit hues: the Streamlit theme's default sequence starts with two blues
        name = safe_label(name)
        fig.add_trace(go.Scatter(x=x, y=values, mode="lines+markers", name=name,
                                 line=dict(color=PALETTE[k % len(PALETTE)]),
                                 hovertemplate=f"{name}<br>layer %{{customdata}}<br>"
                                               f"{yaxis} %{{y:.3f}}<extra></extra>",
                                 customdata=np.arange(n)))
    fig.update_layout(title=safe_label(title), height=360, yaxis_title=yaxis,
                      xaxis_title="relative depth (0 = embeddings, 1 = top)" if relative
                      else "layer", margin=dict(l=10, r=10, t=50, b=10))
    return fig


def matrix_heatmap(matrix: np.ndarray, x: Sequence[str], y: Sequence[str], title: str,
                   zlabel: str, zmin: float | None = None, zmax: float | None = None,
                   text: Sequence[Sequence[str]] | None = None) -> go.Figure:
    if text is not None:
        text = [[safe_label(cell) for cell in row] for row in text]
    fig = go.Figure(go.Heatmap(
        z=matrix, x=unique_labels([safe_label(v) for v in x]),
        y=unique_labels([safe_label(v) for v in y]), colorscale=SEQUENTIAL, zmin=zmin,
        zmax=zmax,
        colorbar=dict(title=zlabel), text=text, texttemplate="%{text}" if text is not None
        else None, hovertemplate="%{y} · %{x}<br>" + zlabel + " %{z:.3f}<extra></extra>"))
    fig.update_layout(title=safe_label(title), height=max(320, 22 * len(y) + 120),
                      yaxis_autorange="reversed", margin=dict(l=10, r=10, t=50, b=10))
    return fig


def mix_weights(weights: np.ndarray, gamma: float, layer_names: Sequence[str]) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, column_widths=[0.8, 0.2],
                        subplot_titles=["softmax(s): weight per layer", "γ (scale)"])
    fig.add_trace(go.Bar(x=[safe_label(n) for n in layer_names], y=weights, name="softmax(s)",
                         text=[f"{w:.2f}" for w in weights], textposition="outside"), 1, 1)
    fig.add_trace(go.Bar(x=["γ"], y=[gamma], name="γ", text=[f"{gamma:.2f}"],
                         textposition="outside"), 1, 2)
    fig.update_yaxes(range=[0, 1.15], row=1, col=1)
    fig.update_yaxes(range=[0, max(1.2, gamma * 1.2)], row=1, col=2)
    fig.update_layout(height=320, showlegend=False, margin=dict(l=10, r=10, t=50, b=10))
    return fig


def stacked_shares(words: Sequence[str], shares: np.ndarray, layer_names: Sequence[str],
                   title: str) -> go.Figure:
    """shares: [layers, words], columns summing to 1."""
    words = unique_labels([safe_label(w) for w in words])
    fig = go.Figure([go.Bar(x=words, y=shares[l], name=safe_label(layer_names[l]),
                            marker_color=PALETTE[l % len(PALETTE)]) for l in range(len(shares))])
    fig.update_layout(barmode="stack", title=safe_label(title), height=360, yaxis_title="share",
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


def visible_token(token: str) -> str:
    """A token as a label one can see: newlines and tabs escaped ("\\n"), and a token of spaces
    alone shown as "␣" (a blank cell read as "no prediction")."""
    shown = repr(token)[1:-1] if token else "∅"
    return shown.replace(" ", "␣") if not token.strip() else shown


def prediction_bars(tokens: Sequence[str], probs: Sequence[float], title: str) -> go.Figure:
    fig = go.Figure(go.Bar(x=list(probs)[::-1],
                           y=[safe_label(visible_token(t)) for t in tokens][::-1],
                           orientation="h", text=[f"{p:.3f}" for p in probs][::-1],
                           textposition="outside"))
    fig.update_layout(title=safe_label(title), height=60 + 28 * len(tokens),
                      xaxis_title="probability",
                      xaxis_range=[0, min(1.0, max(probs or [0.1]) * 1.3 + 0.05)],
                      margin=dict(l=10, r=10, t=50, b=10))
    return fig


GRID_COLS = 4
GRID_PANEL_PX = 250


def _emphasis(n: int, selected: Sequence[int], found: Sequence[int]):
    """Per point: (size, opacity, outline colour, outline width). Selected points are ringed in
    black, found ones in orange; with either present, the rest fade so the eye finds them."""
    sel, hit = set(selected), set(found)
    focus = sel | hit
    size = [14 if i in focus else 9 for i in range(n)]
    opacity = [1.0 if (not focus or i in focus) else 0.25 for i in range(n)]
    colour = ["black" if i in sel else "darkorange" if i in hit else "white" for i in range(n)]
    width = [2.5 if i in focus else 0.5 for i in range(n)]
    return np.array(size), np.array(opacity), np.array(colour), np.array(width)


def layer_grid(panels: Sequence[tuple[str, np.ndarray]], labels: Sequence[str],
               hover: Sequence[str], words: Sequence[str] | None = None,
               selected: Sequence[int] = (), found: Sequence[int] = (),
               title: str = "", cols: int = GRID_COLS) -> go.Figure:
    """Small multiples: one aligned projection per layer (panels: (title, coords [n, 2|3])),
    the same points in every panel, coloured by label. Each point's customdata is
    [point index, panel index], which is what a click or lasso selection reports.
    words: drawn beside the points when given (the label toggle)."""
    n_panels = len(panels)
    three_d = n_panels and panels[0][1].shape[1] == 3
    cols = max(1, min(cols, n_panels))
    rows = -(-n_panels // cols)
    specs = [[{"type": "scene" if three_d else "xy"}] * cols for _ in range(rows)]
    titles = [_wrap(safe_label(t), 12) for t, _ in panels]
    two_lines = any("<br>" in t for t in titles)
    fig = make_subplots(rows=rows, cols=cols, specs=specs,
                        # two short lines, not one long one: on a phone a row of four panels
                        # is ~350 px wide
                        subplot_titles=titles,
                        horizontal_spacing=0.02, vertical_spacing=min(0.12, 0.3 / rows))
    colours = _colour_map(labels)
    labels_arr = np.asarray(labels)
    size, opacity, outline, width = _emphasis(len(labels), selected, found)
    for p, (name, coords) in enumerate(panels):
        r, c = divmod(p, cols)
        for lab, colour in colours.items():
            idx = np.nonzero(labels_arr == lab)[0]
            if three_d:   # scatter3d takes one opacity and one outline width per trace
                marker = dict(size=size[idx] * 0.6, color=colour,
                              line=dict(width=1, color=outline[idx]))
            else:
                marker = dict(size=size[idx], color=colour, opacity=opacity[idx],
                              line=dict(width=width[idx], color=outline[idx]))
            common = dict(name=safe_label(lab), legendgroup=safe_label(lab), showlegend=p == 0,
                          mode="markers+text" if words is not None else "markers",
                          text=[safe_label(words[i]) for i in idx] if words is not None
                          else None,
                          textposition="top center", textfont=dict(size=10),
                          customdata=np.stack([idx, np.full(len(idx), p)], axis=1),
                          hovertext=[_wrap(hover[i]) for i in idx],
                          hovertemplate="%{hovertext}<extra>"
                                        + f"{safe_label(lab)} · {safe_label(name)}</extra>")
            if three_d:
                fig.add_trace(go.Scatter3d(x=coords[idx, 0], y=coords[idx, 1], z=coords[idx, 2],
                                           marker=marker, **common), row=r + 1, col=c + 1)
            else:
                fig.add_trace(go.Scatter(x=coords[idx, 0], y=coords[idx, 1], marker=marker,
                                         **common), row=r + 1, col=c + 1)
    if not three_d:
        # one scale for every panel (the projections are aligned), no tick labels: the axes
        # of a projection have no units
        fig.update_xaxes(matches="x", showticklabels=False)
        fig.update_yaxes(matches="y", showticklabels=False)
    # plotly's default drag (zoom) keeps a plain click a selection; lasso and box select are
    # in the mode bar
    fig.update_layout(title=dict(text=safe_label(title), y=1, yref="container", yanchor="top",
                                 pad=dict(t=12)),
                      height=rows * GRID_PANEL_PX + 90, legend_title_text="sense",
                      margin=dict(l=10, r=10, t=90 if two_lines else 70, b=10))
    return fig


def layer_animation(panels: Sequence[tuple[str, np.ndarray]], labels: Sequence[str],
                    hover: Sequence[str], title: str = "") -> go.Figure:
    """One 2-D panel that morphs from layer to layer: a frame per panel, a play button and a
    slider (the axes stay fixed, so movement is the points', not the scale's)."""
    colours = _colour_map(labels)
    labels_arr = np.asarray(labels)
    groups = {lab: np.nonzero(labels_arr == lab)[0] for lab in colours}

    def traces(coords):
        return [go.Scatter(x=coords[idx, 0], y=coords[idx, 1], mode="markers",
                           name=safe_label(lab),
                           marker=dict(size=12, color=colours[lab],
                                       line=dict(width=1, color="white")),
                           text=[_wrap(hover[i]) for i in idx],
                           hovertemplate="%{text}<extra>" + safe_label(lab) + "</extra>")
                for lab, idx in groups.items()]

    allc = np.concatenate([c for _, c in panels]) if panels else np.zeros((1, 2))
    pad = 0.08 * (allc.max(axis=0) - allc.min(axis=0) + 1e-9)
    lo, hi = allc.min(axis=0) - pad, allc.max(axis=0) + pad
    names = [safe_label(n) for n, _ in panels]
    fig = go.Figure(data=traces(panels[0][1]),
                    frames=[go.Frame(data=traces(c), name=n)
                            for n, (_, c) in zip(names, panels)])
    step = dict(frame=dict(duration=700, redraw=False), transition=dict(duration=500),
                mode="immediate")
    fig.update_layout(
        title=safe_label(title), height=520, legend_title_text="sense",
        xaxis=dict(range=[lo[0], hi[0]], showticklabels=False),
        yaxis=dict(range=[lo[1], hi[1]], showticklabels=False),
        updatemenus=[dict(type="buttons", showactive=False, x=0, y=-0.08, xanchor="left",
                          buttons=[dict(label="▶ play", method="animate",
                                        args=[None, dict(step, fromcurrent=True)]),
                                   dict(label="❚❚ pause", method="animate",
                                        args=[[None], dict(step, frame=dict(duration=0))])])],
        sliders=[dict(active=0, x=0.15, len=0.85, y=-0.02, currentvalue=dict(prefix=""),
                      steps=[dict(label=n, method="animate",
                                  args=[[n], dict(step, frame=dict(duration=0))])
                             for n in names])],
        margin=dict(l=10, r=10, t=60, b=60))
    return fig


def heatmaps_per_row(n_layers: list[int], width_px: int = 1200, min_cell_px: int = 18) -> int:
    """How many square heatmaps (layer x layer CKA) fit side by side with every cell at least
    min_cell_px wide: three 7-layer maps share a row, SmolLM2's 31 layers take the full width
    (squeezed into a third, its cells would be 9 px and its labels would overlap)."""
    biggest = max(n_layers, default=1)
    for cols in (3, 2, 1):
        if cols <= len(n_layers) and width_px / cols - 120 >= biggest * min_cell_px:
            return cols
    return 1


# layers a side up to which every cell of a model x model heatmap is labelled
MAX_CELL_TEXT = 8


def model_cka_heatmap(cka: np.ndarray, low: np.ndarray, high: np.ndarray,
                      layers_a: Sequence[str], layers_b: Sequence[str], model_a: str,
                      model_b: str) -> go.Figure:
    """Layers of model A (rows) x layers of model B (columns): CKA, and on hover its 95%
    interval (low and high as the heatmap's customdata); written in the cells too while they
    are few enough to hold it, so an exported image carries the intervals."""
    fig = matrix_heatmap(cka, layers_b, layers_a,
                         f"CKA between models: {model_a} (rows) × {model_b} (columns)", "CKA",
                         0.0, 1.0)
    if len(layers_a) <= MAX_CELL_TEXT and len(layers_b) <= MAX_CELL_TEXT:
        # numbers only, so the line break may stay markup
        fig.update_traces(texttemplate="%{text}", text=[
            [f"{v:.2f}<br>[{lo:.2f}, {hi:.2f}]" for v, lo, hi in zip(*rows)]
            for rows in zip(cka, low, high)])
        fig.update_layout(height=max(320, 46 * len(layers_a) + 120))
    fig.update_traces(customdata=np.stack([low, high], axis=-1),
                      hovertemplate="A %{y} · B %{x}<br>CKA %{z:.3f} [%{customdata[0]:.3f}, "
                                    "%{customdata[1]:.3f}] (95% CI)<extra></extra>")
    fig.update_layout(xaxis_title="model B", yaxis_title="model A")
    return fig
