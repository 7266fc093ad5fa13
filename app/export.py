"""Exports: static images (PNG/SVG/PDF via kaleido), standalone HTML, CSV, NPZ, Embedding
Projector TSV and a JSON manifest of the settings. Pure functions returning bytes, plus one
Streamlit helper (`figure_downloads`) that offers them under a figure.

Static images are rendered lazily: the download buttons get a callable that Streamlit runs only
when the user clicks, because kaleido drives a headless Chromium and costs ~0.3-5 s per image.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import threading
import warnings
import zipfile
from typing import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

IMAGE_FORMATS = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
_KALEIDO_LOCK = threading.Lock()
_server_started = False


def _browser_path() -> None:
    # kaleido 1.x drives a system Chrome/Chromium through choreographer, which honours
    # BROWSER_PATH; Debian's package installs /usr/bin/chromium.
    if "BROWSER_PATH" not in os.environ:
        found = shutil.which("chromium") or shutil.which("chromium-browser")
        if found:
            os.environ["BROWSER_PATH"] = found


def _start_server() -> None:
    """One persistent headless browser: the first image takes seconds, later ones ~0.3 s."""
    global _server_started
    if not _server_started:
        import kaleido

        _browser_path()
        kaleido.start_sync_server(silence_warnings=True)
        _server_started = True


def figure_image(fig: go.Figure, fmt: str, width: int = 1000, height: int | None = None,
                 scale: float = 2.0) -> bytes:
    """The figure as an image; height: the figure's own (a grid of many panels is tall), else
    700 px."""
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"fmt: use one of {', '.join(IMAGE_FORMATS)}")
    with _KALEIDO_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _start_server()
        # a light template so exported figures read well on paper whatever the app theme
        out = go.Figure(fig).update_layout(template="plotly_white")
        height = height or out.layout.height or 700
        return out.to_image(format=fmt, width=width, height=height,
                            scale=scale if fmt == "png" else 1)


def figure_html(fig: go.Figure) -> bytes:
    """Standalone HTML: plotly.js is embedded, so the file opens offline."""
    return fig.to_html(include_plotlyjs=True, full_html=True).encode()


def table_csv(table: pd.DataFrame) -> bytes:
    return table.to_csv(index=False).encode()


def embeddings_npz(vectors: dict[str, np.ndarray], metadata: pd.DataFrame,
                   info: dict | None = None) -> bytes:
    """vectors: name -> [layers, n, dim] (or [n, dim]); metadata columns saved as string arrays;
    `info` (model, target, pooling, the layers' names...) as arrays of its own, so the file says
    what its axes are without the settings file beside it."""
    clash = sorted(set(vectors) & set(info or {}))
    if clash:   # one would overwrite the other in the file
        raise ValueError(f"the NPZ's info names its vector arrays: {clash}")
    buf = io.BytesIO()
    arrays = {k: np.asarray(v, np.float32) for k, v in vectors.items()}
    arrays.update({k: np.array(v if isinstance(v, (list, tuple)) else [v], dtype=str)
                   for k, v in (info or {}).items()})
    # unicode (not object) arrays, so np.load works without allow_pickle
    arrays.update({f"meta_{c}": np.array(metadata[c].astype(str).tolist(), dtype=str)
                   for c in metadata.columns})
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def projector_zip(vectors: np.ndarray, metadata: pd.DataFrame) -> bytes:
    """TensorFlow Embedding Projector files: vectors.tsv (no header) and metadata.tsv (header
    row, required by the projector when there is more than one column)."""
    if vectors.ndim != 2 or len(vectors) != len(metadata):
        raise ValueError("vectors: must be [n, dim] with one metadata row per vector")
    vec = "\n".join("\t".join(f"{x:.6g}" for x in row) for row in vectors) + "\n"
    meta = metadata.astype(str).apply(lambda col: col.str.replace(r"[\t\n]", " ", regex=True))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("vectors.tsv", vec)
        # plain TSV, as the projector reads it: csv quoting would show '"No loans."' doubled
        z.writestr("metadata.tsv", meta.to_csv(sep="\t", index=False, quoting=csv.QUOTE_NONE,
                                               escapechar=None))
    return buf.getvalue()


def manifest_json(settings: dict) -> bytes:
    return json.dumps(settings, indent=2, sort_keys=True, default=str).encode()


def arrays_npz(arrays: dict[str, np.ndarray]) -> bytes:
    """Named arrays as one compressed NPZ; labels as unicode (not object) arrays, so np.load
    works without allow_pickle."""
    buf = io.BytesIO()
    np.savez_compressed(buf, **{k: np.asarray(v) for k, v in arrays.items()})
    return buf.getvalue()


def file_stem(name: str) -> str:
    """A download's file name from a figure's name: a model folder's path or a typed word keeps
    its letters (of any script) and digits; every other run of characters is one '-'."""
    return re.sub(r"[^\w.]+", "-", name, flags=re.UNICODE).strip("-.")[:120] or "figure"


def figure_downloads(fig: go.Figure, name: str, table: pd.DataFrame | None = None,
                     settings: dict | None = None,
                     arrays: dict[str, np.ndarray] | None = None) -> None:
    """Download buttons under a figure: PNG, SVG, PDF (rendered on click), HTML, CSV, JSON, and
    NPZ of `arrays` (the figure's numbers, for a figure no table holds)."""
    import streamlit as st

    from app.safe import safe_md

    # a name may hold a model's path or a typed word: the label shows it as text, the files
    # are named without its slashes
    stem = file_stem(name)
    with st.expander(f"Export {safe_md(name)}"):
        cols = st.columns(6 if arrays is None else 7)
        for col, fmt in zip(cols, IMAGE_FORMATS):
            col.download_button(fmt.upper(), lambda f=fmt: figure_image(fig, f),
                                file_name=f"{stem}.{fmt}", mime=IMAGE_FORMATS[fmt],
                                key=f"dl-{name}-{fmt}", on_click="ignore")
        cols[3].download_button("HTML", lambda: figure_html(fig), file_name=f"{stem}.html",
                                mime="text/html", key=f"dl-{name}-html", on_click="ignore")
        if table is not None:
            cols[4].download_button("CSV", table_csv(table), file_name=f"{stem}.csv",
                                    mime="text/csv", key=f"dl-{name}-csv", on_click="ignore")
        if settings is not None:
            cols[5].download_button("JSON", manifest_json(settings), file_name=f"{stem}.json",
                                    mime="application/json", key=f"dl-{name}-json",
                                    on_click="ignore")
        if arrays is not None:
            cols[6].download_button("NPZ", lambda: arrays_npz(arrays), file_name=f"{stem}.npz",
                                    mime="application/octet-stream", key=f"dl-{name}-arrays",
                                    on_click="ignore")


def embedding_downloads(vectors: dict[str, np.ndarray], projector: np.ndarray,
                        metadata: pd.DataFrame, name: str, info: dict | None = None,
                        npz_name: str | None = None) -> None:
    import streamlit as st

    c1, c2 = st.columns(2)
    c1.download_button("Embeddings (NPZ)", lambda: embeddings_npz(vectors, metadata, info),
                       file_name=f"{npz_name or name}.npz", mime="application/octet-stream",
                       key=f"dl-{name}-npz", on_click="ignore")
    c2.download_button("Embedding Projector (TSV, zip)", lambda: projector_zip(projector, metadata),
                       file_name=f"{name}-projector.zip", mime="application/zip",
                       key=f"dl-{name}-tsv", on_click="ignore")


def layer_table(values: dict[str, Sequence[float]], layer_names: Sequence[str]) -> pd.DataFrame:
    return pd.DataFrame({"layer": list(layer_names), **{k: list(v) for k, v in values.items()}})


def matrix_table(m: np.ndarray, labels: Sequence[str]) -> pd.DataFrame:
    """A square map [n, n] as a table: a column per label, and each row's label (row_token)."""
    return pd.DataFrame(m, columns=labels).assign(row_token=labels)


def attention_arrays(model_id: str, maps: np.ndarray, labels: Sequence[str],
                     words: bool) -> dict[str, np.ndarray]:
    """Attention maps [L, H, n, n] as shown, under the names `ctxlens attention` (--words)
    gives them in its NPZ."""
    return {"word_attentions" if words else "attentions": maps,
            "word_labels" if words else "tokens": np.array(labels),
            "model": np.array(model_id), "layers": np.arange(1, len(maps) + 1, dtype=np.int64)}
