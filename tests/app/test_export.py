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


def test_arrays_npz_opens_without_pickle_and_keeps_labels_as_text():
    maps = np.random.default_rng(0).random((2, 3, 4, 4)).astype(np.float32)
    data = np.load(io.BytesIO(export.arrays_npz({"word_attentions": maps,
                                                 "word_labels": np.array(["[CLS]", "a", "b",
                                                                          "[SEP]"])})))
    assert np.array_equal(data["word_attentions"], maps)
    assert data["word_labels"].tolist() == ["[CLS]", "a", "b", "[SEP]"]


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


def _title_pixels(text: str) -> np.ndarray:
    from PIL import Image

    fig = go.Figure().update_layout(title=dict(text=text, font=dict(size=60)),
                                    margin=dict(t=120))
    png = export.figure_image(fig, "png", width=400, height=200, scale=1)
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"))[:110]


@pytest.mark.slow
@pytest.mark.parametrize("word", ["漢字", "😀🙂"])
def test_exported_png_draws_cjk_and_emoji_not_tofu(word):
    """A missing glyph is drawn as the same box whatever the character: text with no font in
    the machine (private-use code points) is the tofu reference. CJK and emoji must differ."""
    tofu = _title_pixels("\U000F0000\U000F0001")
    drawn = _title_pixels(word)
    assert (drawn < 128).any(), "nothing was drawn"
    assert not np.array_equal(drawn, tofu), f"{word!r} was drawn as tofu boxes"


def test_projector_metadata_keeps_quotation_marks_as_typed():
    """csv quoting wrapped the sentence in quotes and doubled its own, which the Embedding
    Projector shows as they are."""
    meta = pd.DataFrame({"sentence": ['The bank said: "No loans." Then it closed.', "It's 'fine'"],
                         "sense": ["a", "b"]})
    z = zipfile.ZipFile(io.BytesIO(export.projector_zip(np.zeros((2, 3)), meta)))
    rows = z.read("metadata.tsv").decode().strip().split("\n")
    assert rows[1] == 'The bank said: "No loans." Then it closed.\ta'
    assert rows[2] == "It's 'fine'\tb"


def test_npz_says_what_its_axes_are():
    """The clusters page's NPZ held vectors and two label arrays: no model, target, pooling or
    layer names, and a name ("-L2") that suggested one layer of the three it held."""
    vecs = np.zeros((3, 4, 5), np.float32)
    data = np.load(io.BytesIO(export.embeddings_npz(
        {"vectors": vecs}, _meta(4), info={"model": "elmo-brown", "target": "mouse",
                                           "layers": ["char CNN", "biLSTM 1", "biLSTM 2"],
                                           "axes": "layer, sentence, dim"})))
    assert data["layers"].tolist() == ["char CNN", "biLSTM 1", "biLSTM 2"]
    assert data["model"].tolist() == ["elmo-brown"] and data["axes"][0] == "layer, sentence, dim"
    assert data["vectors"].shape[0] == len(data["layers"])


def test_npz_info_may_not_name_a_vector_array():
    """The ELMo weights page's info named its layers "layers", as its vectors were called: the
    file held the names and lost the vectors."""
    meta = pd.DataFrame({"sentence": ["a", "b"]})
    with pytest.raises(ValueError, match=r"\['layers'\]"):
        export.embeddings_npz({"layers": np.ones((2, 2, 3))}, meta, info={"layers": ["x", "y"]})
    kept = np.load(io.BytesIO(export.embeddings_npz(
        {"vectors": np.ones((2, 2, 3))}, meta, info={"layers": ["x", "y"]})), allow_pickle=False)
    assert kept["vectors"].shape == (2, 2, 3) and list(kept["layers"]) == ["x", "y"]
