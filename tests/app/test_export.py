"""Export formats: Embedding Projector TSV, NPZ, standalone HTML, JSON, static images."""
import io
import json
import re
import zipfile

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from app import export


def _meta(n):
    return pd.DataFrame({"sentence": [f"s\t{i}" for i in range(n)], "sense": ["a", "b"] * (n // 2)})


def test_projector_zip_has_one_tsv_row_per_vector_and_a_header_in_metadata():
    vecs = np.arange(12, dtype=np.float32).reshape(4, 3)
    z = zipfile.ZipFile(io.BytesIO(export.projector_zip(vecs, _meta(4))))
    rows = z.read("vectors.tsv").decode().strip().split("\n")
    assert len(rows) == 4 and rows[1].split("\t") == ["3", "4", "5"]
    meta = z.read("metadata.tsv").decode().strip().split("\n")
    assert meta[0] == "sentence\tsense" and len(meta) == 5
    assert meta[1] == "s 0\ta"            # tabs inside a field would shift the columns


def test_npz_round_trips_vectors_and_metadata():
    vecs = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    data = np.load(io.BytesIO(export.embeddings_npz({"vectors": vecs}, _meta(4))))
    assert np.array_equal(data["vectors"], vecs)
    assert data["meta_sense"].tolist() == ["a", "b", "a", "b"]


def test_html_is_standalone_with_plotly_js_inline():
    html = export.figure_html(go.Figure(go.Bar(x=[1], y=[2]))).decode()
    assert "<html>" in html and len(html) > 1_000_000
    assert not re.search(r"<script[^>]+src=", html)      # nothing fetched: opens offline


def test_manifest_is_json_of_the_settings():
    s = {"models": {"gpt": "smollm2-135m"}, "layer": 3, "projection": "pca", "seed": 0}
    assert json.loads(export.manifest_json(s)) == s


@pytest.mark.slow
def test_static_images_are_valid_png_svg_and_pdf():
    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]))
    assert export.figure_image(fig, "png").startswith(b"\x89PNG\r\n\x1a\n")
    svg = export.figure_image(fig, "svg")
    assert b"<svg" in svg[:200]
    assert export.figure_image(fig, "pdf").startswith(b"%PDF")
