"""Matplotlib PNGs of the per-layer results, measured next to published values."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.published import ETHAYARAJH_2019, PUBLISHED_LAYERS  # noqa: E402

GEOMETRY_PANELS = (("anisotropy", "anisotropy baseline"),
                   ("self_similarity_adjusted", "self-similarity − baseline"),
                   ("intra_sentence_adjusted", "intra-sentence similarity − baseline"),
                   ("mev_adjusted", "maximum explainable variance − baseline"))
PUBLISHED_STYLE = {"ELMo": "tab:green", "BERT-base": "tab:blue", "GPT-2": "tab:red"}
# measured lines avoid the published colours; one marker per family
MODEL_COLOURS = ("tab:purple", "tab:orange", "black", "tab:brown", "tab:olive", "tab:cyan",
                 "tab:pink", "tab:gray")
FAMILY_MARKER = {"elmo": "s", "bert": "o", "gpt": "^"}


def model_style(i: int, family: str) -> dict:
    return {"color": MODEL_COLOURS[i % len(MODEL_COLOURS)],
            "marker": FAMILY_MARKER.get(family, "o"), "ms": 4}


def depth(n_layers: int) -> np.ndarray:
    """Layer index / top layer: models of different depth share one x-axis (0 = embeddings)."""
    return np.arange(n_layers) / max(1, n_layers - 1)


def _published(ax, quantity: str) -> None:
    for name, rows in ETHAYARAJH_2019.get(quantity, {}).items():
        top, colour = PUBLISHED_LAYERS[name], PUBLISHED_STYLE[name]
        for i, (a, b, lo, hi) in enumerate(rows):
            label = f"{name} (Ethayarajh 2019)" if i == 0 else None
            if a == b and lo == hi:
                ax.plot([a / top], [lo], marker="*", ms=11, ls="", color=colour, alpha=0.6,
                        label=label)
            else:
                ax.fill_between([a / top, b / top], [lo, lo], [hi, hi], color=colour, alpha=0.15,
                                label=label)


def _band(ax, ys: np.ndarray, ci: list | None, colour: str) -> None:
    """The 95% bootstrap interval per layer as a shaded band (nothing for results without)."""
    if ci:
        lo, hi = np.array(ci, dtype=float).T
        ax.fill_between(depth(len(ys)), lo, hi, color=colour, alpha=0.15, lw=0)


def geometry_plot(results: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (key, title) in zip(axes.flat, GEOMETRY_PANELS):
        _published(ax, key)
        for i, r in enumerate(results):
            ys = np.array(r["geometry"][key], dtype=float)
            style = model_style(i, r["family"])
            ax.plot(depth(len(ys)), ys, label=r["model"], **style)
            _band(ax, ys, r["geometry"].get("ci", {}).get(key), style["color"])
        ax.set_title(title)
        ax.set_xlabel("relative depth (0 = embedding layer, 1 = top layer)")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.suptitle("Ethayarajh (2019) statistics per layer: measured (lines) vs published "
                 "(stars, bands)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_layer_plot(results: list[dict], series, title: str, ylabel: str, path: Path,
                   baselines: dict[str, float] | None = None) -> None:
    """series(result) -> (label, values per layer, 95% interval per layer or None) triples;
    one line (and band) per model and series."""
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for i, r in enumerate(results):
        for j, (label, ys, ci) in enumerate(series(r)):
            ys = np.array(ys, dtype=float)
            style = model_style(i, r["family"])
            ax.plot(depth(len(ys)), ys, label=f"{r['model']}{label}",
                    ls=("-", "--", ":")[j % 3], **style)
            _band(ax, ys, ci, style["color"])
    for name, value in (baselines or {}).items():
        ax.axhline(value, ls="--", lw=1, color="grey")
        ax.text(0.01, value, name, fontsize=8, va="bottom", color="grey")
    ax.set_xlabel("relative depth (0 = embedding layer, 1 = top layer)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
